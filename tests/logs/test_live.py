"""Live fan-out over a mirror file: viewers joining at any offset get every byte once, a viewer
that does not keep up is told what it skipped without slowing anyone, and the end arrives."""

from __future__ import annotations

import asyncio
import random
from pathlib import Path

from app.logs.live import Ended, Event, Fanout, Lines, Restarted, Skipped, tail
from app.logs.store import LogStore


def text_of(events: list[Event], store: LogStore, attempt_id: int) -> bytes:
    """What a viewer has seen, rebuilt from the lines of its events (each line + newline)."""
    log = store.get(attempt_id)
    out = b""
    for event in events:
        if isinstance(event, Lines):
            for batch in event.batches:
                out += b"".join(line.text + b"\n" for line in batch.lines)
                if batch.end == log.size and log.read(log.size - 1, 1) != b"\n":
                    out = out[:-1]
    return out


async def collect(fanout: Fanout, attempt_id: int, offset: int, **options: float) -> list[Event]:
    return [event async for event in fanout.follow(attempt_id, offset, **options)]  # type: ignore[arg-type]


async def test_viewers_joining_anywhere_get_each_line_once_and_the_end(tmp_path: Path) -> None:
    store = LogStore(tmp_path)
    fanout = Fanout(store)
    log = store.get(1)
    data = b"".join(b"[10:00:01 TP%d] line %d\n" % (n % 4, n) for n in range(20_000)) + b"unfinished last line"
    log.append(data[:100_000])
    early = asyncio.create_task(collect(fanout, 1, 0))
    middle = asyncio.create_task(collect(fanout, 1, data.index(b"line 3000\n") + len(b"line 3000\n")))
    await asyncio.sleep(0.01)
    rng = random.Random(5)
    position = 100_000
    while position < len(data):
        step = rng.choice((3, 500, 20_000))
        log.append(data[position : position + step])
        position += step
        await asyncio.sleep(0)
    late = asyncio.create_task(collect(fanout, 1, 0))
    await asyncio.sleep(0.01)
    log.finish(host_size=len(data), host_sha256=None, mirror_sha256=log.sha256())
    for task, start in ((early, 0), (middle, data.index(b"line 3000\n") + 10), (late, 0)):
        events = await asyncio.wait_for(task, 5)
        assert isinstance(events[-1], Ended) and events[-1].offset == len(data)
        assert text_of(events, store, 1) == data[start:]
        ends = [event.end for event in events if isinstance(event, Lines)]
        assert ends == sorted(ends) and ends[-1] == len(data)  # event ids only grow
    first = next(e for e in (await collect(fanout, 1, 0)) if isinstance(e, Lines)).batches[0].lines[0]
    assert (first.number, first.offset) == (1, 0)


async def test_a_viewer_that_falls_behind_is_told_what_it_skipped(tmp_path: Path) -> None:
    store = LogStore(tmp_path)
    fanout = Fanout(store)
    log = store.get(2)
    slow = fanout.follow(2, 0, lag_limit=50_000, pace=0)
    fast = fanout.follow(2, 0, pace=0)
    slow_first = asyncio.create_task(anext(slow))
    fast_events: list[Event] = []

    async def read_fast() -> None:
        async for event in fast:
            fast_events.append(event)

    reader = asyncio.create_task(read_fast())
    await asyncio.sleep(0.01)
    lines = [b"line %d %s\n" % (n, b"x" * 50) for n in range(10_000)]
    for n in range(0, 10_000, 100):
        log.append(b"".join(lines[n : n + 100]))
        await asyncio.sleep(0)
    assert isinstance(await slow_first, Lines)  # it took one event, then stopped reading
    skipped = await anext(slow)
    assert isinstance(skipped, Skipped) and skipped.lines > 5000
    after = await anext(slow)
    assert isinstance(after, Lines) and after.batches[0].lines[0].number == skipped.first_line + skipped.lines
    assert after.batches[0].start == skipped.end
    log.finish(host_size=log.size, host_sha256=None, mirror_sha256="")
    await asyncio.wait_for(reader, 5)
    assert text_of(fast_events, store, 2) == b"".join(lines)  # the fast viewer lost nothing
    await slow.aclose()
    assert fanout.viewers(2) == 0


async def test_a_viewer_far_behind_skips_ahead_and_a_restart_is_marked(tmp_path: Path) -> None:
    store = LogStore(tmp_path)
    log = store.get(3)
    log.append(b"old line\n" * 100_000)
    log.mark_restart("truncated")
    log.append(b"new line\n" * 10)
    log.finish(host_size=90, host_sha256=None, mirror_sha256="")
    events = await collect(Fanout(store), 3, 0, lag_limit=100_000)
    skipped = events[0]
    assert isinstance(skipped, Skipped) and skipped.first_line == 1 and skipped.end > 800_000
    restarted = next(e for e in events if isinstance(e, Restarted))
    assert (restarted.offset, restarted.reason) == (900_000, "truncated")
    assert text_of(events, store, 3).endswith(b"old line\n" + b"new line\n" * 10)


def test_the_live_tail_leaves_an_unfinished_line_to_the_stream(tmp_path: Path) -> None:
    log = LogStore(tmp_path).get(4)
    log.append(b"one\ntwo\nthr")
    lines, offset = tail(log, 10)
    assert [line.text for line in lines] == [b"one", b"two"] and offset == 8
    log.finish(host_size=11, host_sha256=None, mirror_sha256="")
    lines, offset = tail(log, 10)
    assert [line.text for line in lines] == [b"one", b"two", b"thr"] and offset == 11


async def test_a_restart_while_a_viewer_watches_is_marked_where_it_happened(tmp_path: Path) -> None:
    store = LogStore(tmp_path)
    log = store.get(5)
    log.append(b"before\n")
    watching = asyncio.create_task(collect(Fanout(store), 5, 0, pace=0))
    await asyncio.sleep(0.01)
    log.mark_restart("truncated")
    log.append(b"after\n")
    log.finish(host_size=6, host_sha256=None, mirror_sha256=None)
    events = await asyncio.wait_for(watching, 5)
    kinds = [type(event).__name__ for event in events]
    assert kinds == ["Lines", "Restarted", "Lines", "Ended"]
    assert events[1] == Restarted(7, "truncated")
