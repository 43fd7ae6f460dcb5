"""Mirrored logs on local disk: the bytes exactly as the host wrote them, a sparse line index
that makes any line of a 1 GB log as quick to reach as the first, and a small metadata file.

`<id>.log` only ever grows. `<id>.idx` holds (line number, byte offset) checkpoints, one every
INDEX_SPACING bytes, each at the start of a line; it trails the log and is rebuilt from the last
checkpoint whenever it is behind, so a crash between the two writes loses nothing. `<id>.json`
records where the host's file was truncated or replaced (the mirror keeps the old bytes and
carries on after a marker) and, once the log is complete, how its sha256 compared with the host's.

Each append is all or nothing. A full disk (ENOSPC, EDQUOT) can take part of a write: the file
then holds bytes the mirror never counted, the bytes its next read checks against the host
(`overlap_sha256`) are wrong, and the host's file looks replaced and is sent again. So a write
that fails cuts the log and the index back to where they were, forgets what it indexed, and
raises `DiskFull`; the caller sends the same bytes again later. The metadata is written to a
temporary file and renamed over the old one, and changes in memory only once that worked.
The sha256 that verification compares is always read back from the file, never kept while
appending, so a mirror that differs from the host's file on disk cannot be reported as a match.

Replicas share the data dir, one mirror writing each log. An append writes at the end this LogFile
counted, and only if the file still ends there: one that another process has written past (this
process stalled past its lease, and the host's new owner mirrors it now) is refused with LeaseLost,
so no byte lands twice; a writer stalled between that check and its write can only write the
host's same bytes over themselves.
"""

from __future__ import annotations

import bisect
import hashlib
import json
import os
from array import array
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from app.clock import utcnow
from app.disk import DataDir, is_disk_full
from app.leases import LeaseLost
from app.logs.stages import StageScan

INDEX_SPACING = 64 * 1024
STAGE_SCANS_KEPT = 1024  # logs whose stage starts are kept in memory, the latest viewed
READ_BLOCK = 64 * 1024
# The bytes before the mirrored offset that the host reader checks, so a file replaced while
# nobody watched is noticed even when it has grown past the old size.
OVERLAP = 4096

# Called with (offset, data) after each append, and with empty data once the log is complete.
Watcher = Callable[[int, bytes], None]


@dataclass(frozen=True)
class Line:
    number: int  # 1-based, as grep counts
    offset: int  # of the line's first byte
    text: bytes  # without its newline; cut short for a very long line
    length: int  # the whole line's length, without its newline

    @property
    def cut(self) -> int:
        """How many bytes of the line `text` leaves out."""
        return self.length - len(self.text)


@dataclass(frozen=True)
class Page:
    lines: list[Line]
    size: int
    total_lines: int

    @property
    def at_start(self) -> bool:
        return not self.lines or self.lines[0].number == 1

    @property
    def at_end(self) -> bool:
        return not self.lines or self.lines[-1].number >= self.total_lines


@dataclass
class Meta:
    segments: list[dict[str, Any]] = field(default_factory=list)  # where the host file restarted
    complete: bool = False
    verification: dict[str, Any] | None = None
    stopped: dict[str, Any] | None = None  # {"reason", "at"}: the mirror gave up before the end

    @property
    def segment_start(self) -> int:
        return self.segments[-1]["at"] if self.segments else 0


class LogFile:
    """One attempt's mirror. Appends come from its single reader; any number of readers page it."""

    def __init__(self, directory: Path, attempt_id: int, data_dir: DataDir | None = None):
        self.attempt_id = attempt_id
        self.data_dir = data_dir or DataDir(directory)  # named when the disk is full
        self.path = directory / f"{attempt_id}.log"
        self.index_path = directory / f"{attempt_id}.idx"
        self.meta_path = directory / f"{attempt_id}.json"
        self.meta = Meta()
        if self.meta_path.exists():
            self.meta = Meta(**json.loads(self.meta_path.read_text()))
        # Flat (line, offset) pairs; line is 0-based here: the number of newlines before offset.
        self.checkpoints = array("Q", [0, 0])
        if self.index_path.exists():
            self.checkpoints.frombytes(self.index_path.read_bytes())
        self.size = self.path.stat().st_size if self.path.exists() else 0
        while len(self.checkpoints) > 2 and self.checkpoints[-1] > self.size:
            del self.checkpoints[-2:]
        self.newlines = self.checkpoints[-2]
        self._next_checkpoint = self.checkpoints[-1] + INDEX_SPACING
        self._new_checkpoints = array("Q")
        self._ends_with_newline = self.checkpoints[-1] > 0
        self.watchers: set[Watcher] = set()
        self.stages = StageScan()  # where the launch stages start, read as far as a view asked
        self._catch_up_index()

    @property
    def exists(self) -> bool:
        return self.path.exists()

    @property
    def host_offset(self) -> int:
        """How far into the host's current file the mirror has read."""
        return self.size - self.meta.segment_start

    @property
    def total_lines(self) -> int:
        return self.newlines + (1 if self.size and not self._ends_with_newline else 0)

    def overlap_sha256(self) -> tuple[int, str]:
        """The length and sha256 of the mirror's last bytes from the host's current file."""
        length = min(OVERLAP, self.host_offset)
        return length, hashlib.sha256(self.read(self.size - length, length)).hexdigest()

    # Writing (the mirror)

    def append(self, data: bytes) -> None:
        """Adds `data` to the log and its index, entirely or (raising) not at all; LeaseLost where
        another process has written the file past what this one counted."""
        if not data:
            return
        start, state = self.size, (self.newlines, self._next_checkpoint, self._ends_with_newline)
        index_size = self.index_path.stat().st_size if self.index_path.exists() else 0
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            fd = os.open(self.path, os.O_WRONLY | os.O_CREAT, 0o666)
            try:
                if (on_disk := os.fstat(fd).st_size) != start:
                    raise LeaseLost(
                        f"{self.path}: {on_disk} bytes on disk, {start} written here: another process writes it"
                    )
                written = 0
                while written < len(data):  # at the counted end, not O_APPEND: see the module's docstring
                    written += os.pwrite(fd, data[written:], start + written)
            finally:
                os.close(fd)
            self._index(start, data)
            self._flush_index()
        except OSError as exc:
            for path, size in ((self.path, start), (self.index_path, index_size)):
                if path.exists():
                    os.truncate(path, size)
            # What was indexed reaches self.checkpoints only once the index file has it.
            self.size, (self.newlines, self._next_checkpoint, self._ends_with_newline) = start, state
            self._new_checkpoints = array("Q")
            self._raise_if_full(exc)
            raise
        for watcher in list(self.watchers):
            watcher(start, data)

    def written_elsewhere(self, size: int) -> None:
        """Takes in what another process's mirror appended to this log on the shared data dir, up
        to `size` (its own index checkpoints, written there, are read back), and its restarts and
        end: watchers (live viewers) get the new bytes as from a mirror of this process's own."""
        if self.path.exists() and size > self.size:
            with open(self.path, "rb") as f:
                f.seek(self.size)
                data = f.read(size - self.size)
            start = self.size
            self._index(start, data)
            self._new_checkpoints = array("Q")  # the writer keeps the index file: its checkpoints are read
            self._read_new_checkpoints()
            for watcher in list(self.watchers):
                watcher(start, data)
        if self.meta_path.exists():
            meta = Meta(**json.loads(self.meta_path.read_text()))
            self.meta.segments.extend(meta.segments[len(self.meta.segments) :])  # in place, as mark_restart
            if meta.complete and not self.meta.complete and self.size >= size:
                if (whole := self.path.stat().st_size) > self.size:  # the end was written after `size` was sent
                    self.written_elsewhere(whole)
                    return
                self.meta.complete, self.meta.verification = True, meta.verification
                for watcher in list(self.watchers):
                    watcher(self.size, b"")

    def _read_new_checkpoints(self) -> None:
        if not self.index_path.exists():
            return
        with open(self.index_path, "rb") as f:
            f.seek((len(self.checkpoints) - 2) * 8)  # the file lacks the leading (0, 0)
            more = f.read()
        found = array("Q")
        found.frombytes(more[: len(more) // 16 * 16])
        for i in range(0, len(found), 2):
            if found[i + 1] > self.size:
                break
            self.checkpoints.extend(found[i : i + 2])

    def mark_restart(self, reason: str) -> None:
        """The host's file was truncated or replaced: what follows starts at its offset 0."""
        segment = {"at": self.size, "reason": reason, "time": utcnow().isoformat()}
        self._save_meta(replace(self.meta, segments=[*self.meta.segments, segment]))
        self.meta.segments.append(segment)  # in place: live viewers hold this very list

    def finish(
        self, *, host_size: int, host_sha256: str | None, mirror_sha256: str | None, merged: int | None = None
    ) -> None:
        """Records the end of the log and whether the mirror matches the host's file byte for byte
        (`mirror_sha256` is `segment_sha256()`, read from the file); watchers get an empty append.
        A merged log (app.logs.merge) has no host file: `merged` says of how many nodes' logs."""
        verification = {
            **({"merged": merged} if merged else {}),
            "host_size": host_size,
            "host_sha256": host_sha256,
            "mirror_sha256": mirror_sha256,
            "match": host_sha256 is not None and host_sha256 == mirror_sha256 and host_size == self.host_offset,
            "at": utcnow().isoformat(),
        }
        self._save_meta(replace(self.meta, complete=True, verification=verification))
        self.meta.complete, self.meta.verification = True, verification
        for watcher in list(self.watchers):
            watcher(self.size, b"")

    def mirror_stopped(self, reason: str | None) -> None:
        """Records that the mirror gave up before the log's end, and why (None: it runs again)."""
        stopped = {"reason": reason, "at": utcnow().isoformat()} if reason else None
        self._save_meta(replace(self.meta, stopped=stopped))
        self.meta.stopped = stopped

    def segment_sha256(self) -> str:
        """The sha256 of the bytes on disk from the host's current file (the current segment):
        what verification compares with the host's file. Reads the file; run it in a thread."""
        return self.sha256(self.meta.segment_start)

    def sha256(self, start: int = 0) -> str:
        """The sha256 of the log file from `start` to its end as it is on disk."""
        digest = hashlib.sha256()
        if not self.path.exists():
            return digest.hexdigest()
        with open(self.path, "rb") as f:
            f.seek(start)
            while block := f.read(1 << 20):
                digest.update(block)
        return digest.hexdigest()

    def _index(self, start: int, data: bytes) -> None:
        end, counted = start + len(data), 0  # newlines in data[:counted] are in self.newlines
        while self._next_checkpoint < end:
            newline = data.find(b"\n", max(self._next_checkpoint - start, counted))
            if newline < 0:
                break
            self.newlines += data.count(b"\n", counted, newline + 1)
            counted = newline + 1
            self._new_checkpoints.extend((self.newlines, start + counted))
            self._next_checkpoint = start + counted + INDEX_SPACING
        self.newlines += data.count(b"\n", counted)
        self._ends_with_newline = data.endswith(b"\n")
        self.size = end

    def _flush_index(self) -> None:
        if self._new_checkpoints:
            with open(self.index_path, "ab") as f:
                f.write(self._new_checkpoints.tobytes())
            self.checkpoints.extend(self._new_checkpoints)
            self._new_checkpoints = array("Q")

    def _catch_up_index(self) -> None:
        """Indexes what the log holds beyond the last checkpoint (after a crash, or an old log)."""
        scanned = self.checkpoints[-1]
        self.size, self.newlines = scanned, self.checkpoints[-2]
        if not self.path.exists():
            return
        with open(self.path, "rb") as f:
            f.seek(scanned)
            while block := f.read(1 << 20):
                self._index(self.size, block)
                index_size = self.index_path.stat().st_size if self.index_path.exists() else 0
                try:
                    self._flush_index()
                except OSError:  # no room: the log stays readable, its index catches up on disk later
                    if self.index_path.exists():
                        os.truncate(self.index_path, index_size)
                    self.checkpoints.extend(self._new_checkpoints)
                    self._new_checkpoints = array("Q")

    def _save_meta(self, meta: Meta) -> None:
        """Writes `meta` in place of the old metadata file; the caller changes `self.meta` once
        that worked, so on failure both stay as they were."""
        partial = self.meta_path.with_suffix(".json.partial")
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            partial.write_text(json.dumps(meta.__dict__))
            os.replace(partial, self.meta_path)
        except OSError as exc:
            partial.unlink(missing_ok=True)
            self._raise_if_full(exc)
            raise

    def _raise_if_full(self, exc: OSError) -> None:
        if is_disk_full(exc):
            raise self.data_dir.full() from exc

    # Reading

    def read(self, offset: int, limit: int) -> bytes:
        """Exactly the bytes at [offset, offset + limit), cut at the end of the log."""
        if offset < 0 or limit <= 0 or offset >= self.size:
            return b""
        with open(self.path, "rb") as f:
            f.seek(offset)
            return f.read(min(limit, self.size - offset))

    def line_at(self, offset: int) -> tuple[int, int]:
        """The 1-based number and the start offset of the line that holds byte `offset`."""
        offset = max(0, min(offset, self.size))
        if not offset:
            return 1, 0
        i = bisect.bisect_right(self.checkpoints[1::2], offset) - 1
        newlines, position = self.checkpoints[2 * i], self.checkpoints[2 * i + 1]
        line_start = position
        with open(self.path, "rb") as f:
            f.seek(position)
            while position < offset:
                block = f.read(min(READ_BLOCK, offset - position))
                if not block:
                    break
                newlines += block.count(b"\n")
                last = block.rfind(b"\n")
                if last >= 0:
                    line_start = position + last + 1
                position += len(block)
        return newlines + 1, line_start

    def offset_of_line(self, number: int) -> int:
        """Where line `number` (1-based) starts; the end of the log for a line past the last."""
        target = max(number, 1) - 1
        if not target or not self.size:
            return 0
        i = bisect.bisect_right(self.checkpoints[0::2], target) - 1
        newlines, position = self.checkpoints[2 * i], self.checkpoints[2 * i + 1]
        with open(self.path, "rb") as f:
            f.seek(position)
            while newlines < target:
                block = f.read(READ_BLOCK)
                if not block:
                    return self.size
                found = -1
                for _ in range(target - newlines):
                    found = block.find(b"\n", found + 1)
                    if found < 0:
                        break
                    newlines += 1
                if found >= 0 and newlines == target:
                    return position + found + 1
                position += len(block)
        return position

    def lines(self, number: int, count: int, max_line: int = 64 * 1024) -> Page:
        """`count` lines from line `number`; each line's text is cut at `max_line` bytes."""
        offset = self.offset_of_line(number)
        return Page(self.lines_from(offset, max(number, 1), count, max_line=max_line), self.size, self.total_lines)

    def last_lines(self, count: int, max_line: int = 64 * 1024) -> Page:
        return self.lines(max(self.total_lines - count + 1, 1), count, max_line)

    def lines_from(
        self, offset: int, number: int, count: int, *, end: int | None = None, max_line: int = 64 * 1024
    ) -> list[Line]:
        """Up to `count` lines from `offset` (the start of line `number`), stopping at `end`."""
        result: list[Line] = []
        end = self.size if end is None else min(end, self.size)
        with open(self.path, "rb") if self.path.exists() else open(os.devnull, "rb") as f:
            f.seek(offset)
            while len(result) < count and offset < end:
                text = f.readline(max_line)
                if not text:
                    break
                consumed, newline = len(text), text.endswith(b"\n")
                if newline:
                    text = text[:-1]
                else:  # longer than max_line, or the log's unfinished last line: find its end
                    while chunk := f.readline(READ_BLOCK):
                        consumed += len(chunk)
                        if newline := chunk.endswith(b"\n"):
                            break
                result.append(Line(number, offset, text, consumed - newline))
                offset += consumed
                number += 1
        return result


class LogStore:
    """Every attempt's mirrored log under `<data_dir>/logs`; the open ones are kept in memory."""

    def __init__(self, directory: Path, data_dir: DataDir | None = None):
        self.directory = directory
        self.data_dir = data_dir or DataDir(directory)
        self._open: dict[int, LogFile] = {}
        # Where each log's stages start outlives the LogFile, which a complete log drops after
        # every view (`forget`): read once per log, not once per page.
        self._stage_scans: OrderedDict[int, StageScan] = OrderedDict()

    def get(self, attempt_id: int) -> LogFile:
        log = self._open.get(attempt_id)
        if log is None:
            log = self._open[attempt_id] = LogFile(self.directory, attempt_id, self.data_dir)
            log.stages = self._stage_scan(attempt_id)
        return log

    def _stage_scan(self, attempt_id: int) -> StageScan:
        scan = self._stage_scans.pop(attempt_id, None) or StageScan()
        self._stage_scans[attempt_id] = scan  # the newest last
        if len(self._stage_scans) > STAGE_SCANS_KEPT:
            self._stage_scans.popitem(last=False)
        return scan

    def is_complete(self, attempt_id: int) -> bool:
        """Whether a log was mirrored to its end, from its small metadata file alone."""
        log = self._open.get(attempt_id)
        if log is not None:
            return log.meta.complete
        meta = self.directory / f"{attempt_id}.json"
        return meta.exists() and bool(json.loads(meta.read_text()).get("complete"))

    def forget(self, attempt_id: int) -> None:
        """Drops a complete log nobody watches from memory; it opens again from disk when asked
        for. An incomplete one stays while its mirror may append to this very object."""
        log = self._open.get(attempt_id)
        if log is not None and (log.meta.complete or log.meta.stopped) and not log.watchers:
            del self._open[attempt_id]

    def paths(self, attempt_ids: list[int]) -> dict[int, Path]:
        return {attempt_id: self.directory / f"{attempt_id}.log" for attempt_id in attempt_ids}

    def is_open(self, attempt_id: int) -> bool:
        """Whether the attempt's log is held in memory."""
        return attempt_id in self._open

    def held(self, attempt_id: int) -> LogFile | None:
        """The attempt's log if it is held in memory (someone reads or watches it), else None."""
        return self._open.get(attempt_id)


class LogLoan:
    """The logs one piece of work (a request) takes from the store: `give_back` forgets each, so
    a complete log nobody watches leaves memory again when the work is done."""

    def __init__(self, store: LogStore):
        self.store = store
        self._borrowed: set[int] = set()

    def get(self, attempt_id: int) -> LogFile:
        self._borrowed.add(attempt_id)
        return self.store.get(attempt_id)

    def give_back(self) -> None:
        for attempt_id in self._borrowed:
            self.store.forget(attempt_id)
        self._borrowed.clear()
