"""Where each launch stage starts in a mirrored log, and when: what the log views head their
sections with.

A log of a million lines is read at the speed of one regular expression over its bytes: only the
lines that may move the stage tracker (`may_move`) are taken apart, and a log that reached the last
stage is read no further. Each log keeps its `StageScan`, so a growing log is read once, as it grows.
A launch's stages are in its first lines: past SCAN_LIMIT bytes none are looked for, so a huge log
that never served costs one bounded read. Views call `read` in a worker thread, never on the event loop.
"""

from __future__ import annotations

import math
import re
import threading
from dataclasses import dataclass
from datetime import date
from pathlib import Path

from app.diagnose.lines import SGLANG_STAMP, logical_lines
from app.diagnose.stages import SERVING, StageTracker, may_move

BLOCK = 1 << 20
SCAN_LIMIT = 64 << 20  # bytes of a log read for its stages
STAMP_LOOKBACK = 64 * 1024  # how far before a stage's first line its time is looked for
END_LOOKBACK = 1 << 20  # how far from the end of a log its last time is looked for
_STAMP = re.compile(SGLANG_STAMP.encode())


@dataclass(frozen=True)
class StageMark:
    name: str
    line: int  # the stage's first line
    offset: int  # of that line
    at: float | None  # its time in seconds (see `stamp_seconds`); None when the log showed none yet


class StageScan:
    """The stages of one log, read as far as a viewer has asked."""

    def __init__(self) -> None:
        self._lock = threading.Lock()  # one reader at a time: readers share the position
        self.tracker = StageTracker()
        self.offset = 0  # read up to here: the start of a line
        self.line = 1  # the number of the line at `offset`
        self.marks: list[StageMark] = []

    def read(self, path: Path, end: int) -> list[StageMark]:
        """The stages that start before byte `end` of the log at `path` (the end of a line)."""
        with self._lock:
            if min(end, SCAN_LIMIT) > self.offset and self.tracker.index < SERVING:
                self._read(path, min(end, SCAN_LIMIT))
            return [mark for mark in self.marks if mark.offset < end]

    def _read(self, path: Path, end: int) -> None:
        with open(path, "rb") as f:
            f.seek(self.offset)
            while self.offset < end and self.tracker.index < SERVING:
                block = f.read(min(BLOCK, end - self.offset))
                cut = block.rfind(b"\n") + 1
                while not cut:  # a line longer than a block: read on to its end
                    more = f.read(min(BLOCK, end - self.offset - len(block)))
                    if not more:
                        return  # the line ends after `end`: it is read once it has
                    block += more
                    cut = block.rfind(b"\n") + 1
                self._read_block(block[:cut])
                self.offset += cut
                self.line += block.count(b"\n", 0, cut)
                f.seek(self.offset)

    def _read_block(self, block: bytes) -> None:
        counted, number, position = 0, self.line, 0
        while (found := may_move(self.tracker.index).search(block, position)) is not None:
            start = block.rfind(b"\n", 0, found.start()) + 1
            position = block.find(b"\n", found.end()) + 1  # the next line
            number += block.count(b"\n", counted, start)
            counted = start
            text = block[start : position - 1].decode("utf-8", "replace")
            for record in logical_lines(text, number):
                for name in self.tracker.see(record.text.strip())[0]:
                    at = stamp_seconds(block, start, position)
                    if at is None:  # a line with no time of its own (a bar): the last record's before it
                        at = stamp_seconds(block, max(0, start - STAMP_LOOKBACK), start)
                    self.marks.append(StageMark(name, number, self.offset + start, at))
            if self.tracker.index == SERVING:
                return


def stamp_seconds(data: bytes, start: int = 0, end: int | None = None) -> float | None:
    """The time of the last SGLang record prefix in data[start:end], in seconds: since year 1
    (in the log's own time zone), or of the day for a prefix with no date."""
    last = None
    for found in _STAMP.finditer(data, start, len(data) if end is None else end):
        last = found
    if last is None:
        return None
    text = last["time"].decode()
    day, _, clock = text.rpartition(" ")
    hours, minutes, seconds = clock.split(":")
    of_day = int(hours) * 3600 + int(minutes) * 60 + float(seconds)
    if not day:
        return of_day
    try:
        return date.fromisoformat(day).toordinal() * 86400 + of_day
    except ValueError:  # no such day
        return None


def last_stamp(path: Path, size: int) -> float | None:
    """The time of the last stamped line of a log, looked for in its last END_LOOKBACK bytes."""
    with open(path, "rb") as f:
        f.seek(max(0, size - END_LOOKBACK))
        return stamp_seconds(f.read(END_LOOKBACK))


def took(start: float | None, end: float | None) -> str:
    """How long a stage took, as its heading says it: "—" without the times of both ends."""
    if start is None or end is None:
        return "—"
    seconds = math.floor(end - start + 0.5)  # as log.js rounds
    if seconds < 0:  # times of day, across midnight
        seconds += 86400
    return f"{seconds} s" if seconds < 60 else f"{seconds // 60} min {seconds % 60:02d} s"
