"""Live fan-out: the complete lines the mirror appends, to any number of viewers.

One Broadcaster per log cuts what the mirror appends into batches of complete lines, once, and
every viewer gets a reference to the same batch, with a cache for however the viewer renders it
(so 200 viewers cost one rendering). A viewer's queue is bounded: a viewer more than `lag_limit`
bytes behind loses its queue and is told how many lines it skipped, so it never slows the mirror
or the other viewers. A viewer that arrives, or comes back, at an older offset first catches up
from the mirror file.
"""

from __future__ import annotations

import asyncio
from collections import deque
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any

from app.logs.store import Line, LogFile, LogStore

MAX_LINE = 64 * 1024  # bytes of one line a viewer gets; the full log and the download have all
LAG_LIMIT = 4 << 20
CATCH_UP_LINES = 2000  # per batch read from the file
PACE = 0.03  # the least time between two deliveries to one viewer: batches coalesce meanwhile


@dataclass
class Batch:
    start: int
    end: int  # just after the last line's newline: the viewer's next offset
    lines: list[Line]
    log: LogFile  # whose offsets these are: a viewer's text is read from it, never from another copy
    cache: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class Lines:
    batches: list[Batch]

    @property
    def end(self) -> int:
        return self.batches[-1].end


@dataclass(frozen=True)
class Skipped:
    start: int
    end: int
    first_line: int
    lines: int


@dataclass(frozen=True)
class Restarted:
    """The host's file was truncated or replaced at this offset of the mirror."""

    offset: int
    reason: str


@dataclass(frozen=True)
class Ended:
    offset: int


Event = Lines | Skipped | Restarted | Ended


class _Subscriber:
    def __init__(self, lag_limit: int):
        self.lag_limit = lag_limit
        self.queue: deque[Batch] = deque()
        self.queued = 0
        self.skipped_from: Line | None = None
        self.wake = asyncio.Event()

    def push(self, batch: Batch) -> None:
        size = batch.end - batch.start
        if self.queue and self.queued + size > self.lag_limit:
            self.skipped_from = self.skipped_from or self.queue[0].lines[0]
            self.queue.clear()
            self.queued = 0
        self.queue.append(batch)
        self.queued += size
        self.wake.set()

    def take(self) -> tuple[Line | None, list[Batch]]:
        skipped_from, batches = self.skipped_from, list(self.queue)
        self.skipped_from, self.queued = None, 0
        self.queue.clear()
        self.wake.clear()
        return skipped_from, batches


class _Broadcaster:
    def __init__(self, log: LogFile):
        self.log = log
        self.subscribers: set[_Subscriber] = set()
        self.number, self.end = log.line_at(log.size)  # the unfinished last line, if any
        self.pending = log.read(self.end, min(log.size - self.end, MAX_LINE))
        self.pending_length = log.size - self.end
        self.ended = False
        if log.meta.complete:
            self._finish()
        log.watchers.add(self._appended)

    def close(self) -> None:
        self.log.watchers.discard(self._appended)

    def _appended(self, offset: int, data: bytes) -> None:
        if not data:
            self._finish()
            return
        last = data.rfind(b"\n")
        if last < 0:
            self._extend(data)
            return
        pieces = data[:last].split(b"\n")
        lines, position = [], self.end
        self._extend(pieces[0])
        pieces[0] = b""
        for i, piece in enumerate(pieces):
            length = self.pending_length + len(piece) if i == 0 else len(piece)
            text = self.pending if i == 0 else piece[:MAX_LINE]
            lines.append(Line(self.number, position, text, length))
            position += length + 1
            self.number += 1
        self.pending, self.pending_length = data[last + 1 : last + 1 + MAX_LINE], len(data) - last - 1
        self._publish(Batch(self.end, position, lines, self.log))

    def _extend(self, data: bytes) -> None:
        room = MAX_LINE - len(self.pending)
        if room > 0:
            self.pending += data[:room]
        self.pending_length += len(data)

    def _finish(self) -> None:
        if self.pending_length:
            line = Line(self.number, self.end, self.pending, self.pending_length)
            self.pending, self.pending_length = b"", 0
            self.number += 1
            self._publish(Batch(self.end, line.offset + line.length, [line], self.log))
        self.ended = True
        for subscriber in self.subscribers:
            subscriber.wake.set()

    def _publish(self, batch: Batch) -> None:
        self.end = batch.end
        for subscriber in self.subscribers:
            subscriber.push(batch)


class Fanout:
    """Owned by the app's lifespan: the broadcasters of the logs someone is watching."""

    def __init__(self, store: LogStore):
        self.store = store
        self._broadcasters: dict[int, _Broadcaster] = {}

    def viewers(self, attempt_id: int) -> int:
        broadcaster = self._broadcasters.get(attempt_id)
        return len(broadcaster.subscribers) if broadcaster else 0

    def all_viewers(self) -> int:
        """Live-log streams open now, over every attempt."""
        return sum(len(broadcaster.subscribers) for broadcaster in self._broadcasters.values())

    async def follow(
        self, attempt_id: int, offset: int, *, lag_limit: int = LAG_LIMIT, pace: float = PACE
    ) -> AsyncIterator[Event]:
        """The log from `offset` on, live, until it is complete (then Ended)."""
        log = self.store.get(attempt_id)
        if offset > log.size and log.path.exists():
            # A viewer back from another replica, ahead of what this one took in: take in the
            # shared file first, or it would be sent again what it has.
            log.written_elsewhere(log.path.stat().st_size)
        broadcaster = self._broadcasters.get(attempt_id)
        if broadcaster is None:
            broadcaster = self._broadcasters[attempt_id] = _Broadcaster(log)
        subscriber = _Subscriber(lag_limit)
        broadcaster.subscribers.add(subscriber)
        try:
            async for event in self._follow(log, broadcaster, subscriber, offset, pace):
                yield event
        finally:
            broadcaster.subscribers.discard(subscriber)
            if not broadcaster.subscribers:
                broadcaster.close()
                del self._broadcasters[attempt_id]
                self.store.forget(attempt_id)

    async def _follow(
        self, log: LogFile, broadcaster: _Broadcaster, subscriber: _Subscriber, offset: int, pace: float
    ) -> AsyncIterator[Event]:
        live_from = broadcaster.end  # everything after comes through the subscriber
        offset = max(0, min(offset, live_from))
        restarts = _Restarts(log, offset)
        number, _ = log.line_at(offset)
        if live_from - offset > subscriber.lag_limit:
            later, start = log.line_at(live_from - subscriber.lag_limit // 2)
            yield Skipped(offset, start, number, later - number)
            offset, number = start, later
        while offset < live_from:
            lines = log.lines_from(offset, number, CATCH_UP_LINES, end=live_from, max_line=MAX_LINE)
            batch = Batch(offset, min(lines[-1].offset + lines[-1].length + 1, log.size), lines, log)
            for event in restarts.before(Lines([batch])):
                yield event
            offset, number = batch.end, lines[-1].number + 1
        while True:
            skipped_from, batches = subscriber.take()
            batches = [batch for batch in batches if batch.end > offset]
            if skipped_from is not None and batches:
                first = batches[0].lines[0]
                yield Skipped(
                    skipped_from.offset, first.offset, skipped_from.number, first.number - skipped_from.number
                )
            if batches:
                for event in restarts.before(Lines(batches)):
                    yield event
                offset = batches[-1].end
                await asyncio.sleep(pace)
            elif broadcaster.ended:
                yield Ended(log.size)
                return
            else:
                await subscriber.wake.wait()


class _Restarts:
    """The host's restarts of its log that a viewer has not been told of yet; the mirror may
    record more while the viewer watches."""

    def __init__(self, log: LogFile, offset: int):
        self.segments = log.meta.segments  # the mirror appends to this very list
        self.told = sum(1 for segment in self.segments if segment["at"] <= offset)

    def before(self, lines: Lines) -> list[Event]:
        """The lines, preceded by a marker for each restart inside them."""
        events: list[Event] = []
        while self.told < len(self.segments) and self.segments[self.told]["at"] <= lines.end:
            segment = self.segments[self.told]
            events.append(Restarted(segment["at"], segment["reason"]))
            self.told += 1
        events.append(lines)
        return events


def tail(log: LogFile, count: int) -> tuple[list[Line], int]:
    """The last `count` lines and the offset after them, where a live stream goes on. An unfinished
    last line is left to the stream, which sends it once it is complete."""
    lines = log.last_lines(count + 1, MAX_LINE).lines
    if lines and lines[-1].offset + lines[-1].length == log.size and not log.meta.complete:
        lines.pop()
    lines = lines[-count:]
    return lines, min(lines[-1].offset + lines[-1].length + 1, log.size) if lines else 0
