"""The merged log of a multi-node attempt: its parts' logs, whole lines, in the order they
arrived, each line tagged with its node (`[node1 rtxpro-02] `).

The merged log is an ordinary LogFile in the store, under the parent attempt's id, so whatever
reads a log (paging, grep, the live view, the diagnosis) reads it unchanged. A LogMerger is its
only writer. The parts' logs are written by their own mirrors (over SSH from each node, or from
files on a Slurm login node) and only read here, from the store, after each append: a part's
watcher merely notes which part grew and up to where, so a merged write that fails (a full data
dir) never reaches a part's mirror, and is tried again with the same bytes.

API, for any multi-node launcher:

    merger = mirrors.merge(parent_id, [MergePart(part_id, node_tag(0, "host-a")), ...])

starts the merger unless it runs already (exactly one per parent, like a mirror); `merger.done`
is set once every part's log has ended (complete, or given up) and all of it is merged, and the
merged log is then marked complete. `merger.end_of_attempt()` is what the parent's record calls
when it ends, as for a mirror; the merger ends by its parts' logs, not by that.

Resuming after a restart needs no state of its own: every line of the merged log starts with a
part's tag, so how many lines of each part it holds is counted from the merged log itself, and
each part resumes after exactly that many of its lines: no duplicates, no gaps, whatever moment
the dashboard was stopped at. A part's unfinished last line waits for its newline, or for the
end of its log (it is then merged with a newline added).
"""

from __future__ import annotations

import asyncio
import logging
from collections import deque
from dataclasses import dataclass

from app.errors import DiskFull
from app.logs.store import LogFile, Watcher

log = logging.getLogger(__name__)

DISK_FULL_RETRY = 1.0
READ_PIECE = 4 << 20  # bytes of a part's log merged in one step


def node_tag(node_rank: int, host: str) -> str:
    """The tag that starts each of a node's lines in the merged log."""
    return f"[node{node_rank} {host}] "


@dataclass(frozen=True)
class MergePart:
    attempt_id: int  # whose log (in the same store) is merged
    tag: str  # node_tag(...)


class LogMerger:
    def __init__(self, log_file: LogFile, parts: list[tuple[MergePart, LogFile]]):
        self.log = log_file
        self.parts = parts
        self.done = asyncio.Event()
        self.error: str | None = None  # why merging is paused (the data dir is full)
        self.consumed = [0] * len(parts)  # bytes of each part's log merged so far
        self._arrivals: deque[tuple[int, int]] = deque()  # (part, its log's size then), in order
        self._news = asyncio.Event()
        self._watchers = [self._watcher(i) for i in range(len(parts))]

    @property
    def note(self) -> str:
        return f"log merge paused: {self.error}" if self.error else ""

    def end_of_attempt(self) -> None:
        """The parent ended; the merge goes on until every part's log has."""

    def _watcher(self, index: int) -> Watcher:
        def watch(offset: int, data: bytes) -> None:
            self._arrivals.append((index, offset + len(data)))
            self._news.set()

        return watch

    async def run(self) -> None:
        if self.log.meta.complete:
            self.done.set()
            return
        for (_, part_log), watcher in zip(self.parts, self._watchers, strict=True):
            part_log.watchers.add(watcher)
        try:
            await asyncio.to_thread(self._resume_offsets)
            # What the parts hold now, in rank order (the order it arrived in is not known).
            self._arrivals.extendleft(reversed([(i, part_log.size) for i, (_, part_log) in enumerate(self.parts)]))
            while True:
                while self._arrivals:
                    index, until = self._arrivals[0]
                    if not await self._merge_until(index, until):
                        continue  # the data dir was full: the same step again
                    self._arrivals.popleft()
                if self._all_ended():
                    self.log.finish(
                        host_size=self.log.size, host_sha256=None, mirror_sha256=None, merged=len(self.parts)
                    )
                    self.done.set()
                    return
                self._news.clear()
                if not self._arrivals:
                    await self._news.wait()
        finally:
            for (_, part_log), watcher in zip(self.parts, self._watchers, strict=True):
                part_log.watchers.discard(watcher)

    def _all_ended(self) -> bool:
        return all(
            (part_log.meta.complete or part_log.meta.stopped) and self.consumed[i] >= part_log.size
            for i, (_, part_log) in enumerate(self.parts)
        )

    async def _merge_until(self, index: int, until: int) -> bool:
        """Appends part `index`'s whole lines up to byte `until` (and its unfinished last line, once
        its log has ended). False when the data dir is full: nothing was appended."""
        part, part_log = self.parts[index]
        ended = part_log.meta.complete or part_log.meta.stopped
        until = part_log.size if ended else min(until, part_log.size)
        tag = part.tag.encode()
        while self.consumed[index] < until:
            start = self.consumed[index]
            data = part_log.read(start, min(READ_PIECE, until - start))
            if b"\n" not in data and start + len(data) < until:  # a line longer than a piece
                data = part_log.read(start, until - start)
            taken = data.rfind(b"\n") + 1
            if not taken:
                if not ended:
                    return True  # the line is not finished yet
                taken, data = len(data), data + b"\n"  # the log's unfinished last line
            lines = data[: max(taken, data.rfind(b"\n") + 1)]
            tagged = tag + lines[:-1].replace(b"\n", b"\n" + tag) + b"\n"
            try:
                self.log.append(tagged)
            except DiskFull as exc:
                self.error = str(exc)
                log.warning(
                    "attempt %d: log merge paused: %s",
                    self.log.attempt_id,
                    exc,
                    extra={"attempt_id": self.log.attempt_id},
                )
                await asyncio.sleep(DISK_FULL_RETRY)
                return False
            self.error = None
            self.consumed[index] = start + taken
        return True

    def _resume_offsets(self) -> None:
        """Counts each part's lines in the merged log so far, and resumes each part after them."""
        tags = [b"\n" + part.tag.encode() for part, _ in self.parts]
        counts = [0] * len(tags)
        carry = b"\n"  # the merged log's first line starts as if after a newline
        offset = 0
        while offset < self.log.size:
            block = self.log.read(offset, 1 << 20)
            if not block:
                break
            text = carry + block
            for i, tag in enumerate(tags):  # those wholly in the carry were counted before
                counts[i] += text.count(tag) - carry.count(tag)
            longest = max(len(tag) for tag in tags) - 1
            carry = text[-longest:]
            offset += len(block)
        for i, (_, part_log) in enumerate(self.parts):
            self.consumed[i] = part_log.offset_of_line(counts[i] + 1) if counts[i] else 0
