"""The mirror file and its sparse line index: every way of reaching a line agrees with a plain
split of the bytes, however the bytes arrived, after a crash that left the index behind, and
after an append that a full disk refused half-way; an append that another process's mirror got
ahead of writes nothing."""

from __future__ import annotations

import hashlib
import random
from pathlib import Path

import pytest

from app.errors import DiskFull
from app.leases import LeaseLost
from app.logs.store import INDEX_SPACING, LogFile
from tests.support.filesystem import fill, small_filesystem


def random_log(seed: int, size: int) -> bytes:
    rng = random.Random(seed)
    lines = []
    while sum(map(len, lines)) < size:
        kind = rng.random()
        if kind < 0.05:
            lines.append(b"")
        elif kind < 0.07:
            lines.append(b"y" * rng.randrange(INDEX_SPACING, 3 * INDEX_SPACING))  # longer than the spacing
        else:
            lines.append(b"[10:00:01 TP0] line " + bytes(rng.randrange(32, 127) for _ in range(rng.randrange(0, 300))))
    data = b"\n".join(lines)
    return data if seed % 2 else data + b"\n"  # with and without an unfinished last line


def append_in_chunks(log: LogFile, data: bytes, seed: int) -> None:
    rng = random.Random(seed)
    position = 0
    while position < len(data):
        step = rng.choice((1, 7, 100, 4096, 70_000, 300_000))
        log.append(data[position : position + step])
        position += step


def expected_lines(data: bytes) -> list[tuple[int, bytes]]:
    """(offset, text) of every line, as grep -n numbers them."""
    result, offset = [], 0
    for text in data.split(b"\n"):
        result.append((offset, text))
        offset += len(text) + 1
    return result[:-1] if data.endswith(b"\n") or not data else result


@pytest.mark.parametrize("seed", [1, 2, 3, 4])
def test_every_line_is_found_by_number_and_by_offset(tmp_path: Path, seed: int) -> None:
    data = random_log(seed, 1_500_000)
    log = LogFile(tmp_path, 7)
    append_in_chunks(log, data, seed)
    lines = expected_lines(data)
    assert log.size == len(data) and log.total_lines == len(lines)
    assert len(log.checkpoints) > 10  # the index is really sparse, and really used
    rng = random.Random(seed)
    for number in [1, 2, len(lines), *rng.sample(range(1, len(lines) + 1), 200)]:
        offset, text = lines[number - 1]
        assert log.offset_of_line(number) == offset
        assert log.line_at(offset + rng.randrange(0, len(text) + 1)) == (number, offset)
        (line,) = log.lines(number, 1, max_line=1 << 20).lines
        assert (line.number, line.offset, line.text, line.length) == (number, offset, text, len(text))
    page = log.lines(len(lines) - 10, 500, max_line=100)
    assert [line.number for line in page.lines] == list(range(len(lines) - 10, len(lines) + 1)) and page.at_end
    assert all(line.text == lines[line.number - 1][1][:100] for line in page.lines)
    assert [line.number for line in log.last_lines(3).lines] == [len(lines) - 2, len(lines) - 1, len(lines)]
    assert log.offset_of_line(len(lines) + 5) == len(data)


def test_a_crash_that_left_the_index_behind_loses_nothing(tmp_path: Path) -> None:
    data = random_log(6, 800_000)
    log = LogFile(tmp_path, 1)
    log.append(data)
    index = log.index_path.read_bytes()
    log.index_path.write_bytes(index[: len(index) // 2])  # as if the dashboard died between the two writes
    reopened = LogFile(tmp_path, 1)
    assert reopened.checkpoints == log.checkpoints and reopened.total_lines == log.total_lines
    log.index_path.unlink()
    assert LogFile(tmp_path, 1).checkpoints == log.checkpoints


def test_a_log_that_does_not_exist_reads_as_empty(tmp_path: Path) -> None:
    log = LogFile(tmp_path, 3)
    assert (log.size, log.total_lines, log.read(0, 10), log.lines(1, 10).lines) == (0, 0, b"", [])
    assert log.line_at(0) == (1, 0) and log.last_lines(5).lines == []


def test_an_append_to_a_log_another_process_has_written_past_writes_nothing(tmp_path: Path) -> None:
    """A controller woken from a stall past its lease, whose host's new owner mirrors the log now:
    what it still holds of the host's bytes must not land a second time."""
    first, more = random_log(3, 200_000), random_log(5, 300_000)
    stalled = LogFile(tmp_path, 1)
    stalled.append(first)
    new_owner = LogFile(tmp_path, 1)
    new_owner.append(more)
    before = (stalled.path.read_bytes(), stalled.index_path.read_bytes())
    with pytest.raises(LeaseLost, match=f"{len(first) + len(more)} bytes on disk, {len(first)} written here"):
        stalled.append(more)
    assert (stalled.path.read_bytes(), stalled.index_path.read_bytes()) == before
    assert (stalled.size, stalled.total_lines) == (len(first), len(expected_lines(first)))
    new_owner.append(b"the last line\n")  # the owner goes on where it was
    reopened = LogFile(tmp_path, 1)
    assert reopened.path.read_bytes() == first + more + b"the last line\n"
    assert reopened.checkpoints == new_owner.checkpoints and reopened.total_lines == new_owner.total_lines


def test_an_append_the_disk_has_no_room_for_leaves_the_log_as_it_was_and_is_sent_again(tmp_path: Path) -> None:
    with small_filesystem(tmp_path / "small", "2m") as small:
        first, more = random_log(7, 300_000), random_log(9, 400_000)
        log = LogFile(small, 1)
        log.append(first)
        before = (log.path.read_bytes(), log.index_path.read_bytes(), log.meta_path.exists())
        filler = fill(small, leave=64 * 1024)  # room for part of the next append: the disk takes some of it
        with pytest.raises(DiskFull, match=f"^the data dir is full: 0 MB free on {small}$"):
            log.append(more)
        assert (log.path.read_bytes(), log.index_path.read_bytes(), log.meta_path.exists()) == before
        assert (log.size, log.host_offset, log.total_lines) == (len(first), len(first), len(expected_lines(first)))
        fill(small)
        with pytest.raises(DiskFull):
            log.mark_restart("replaced")
        assert log.meta.segments == [] and sorted(p.name for p in small.iterdir()) == ["1.idx", "1.log", "filler"]

        filler.unlink()  # room again: the same bytes are sent again, and land once
        log.append(more)
        assert log.path.read_bytes() == first + more
        assert log.segment_sha256() == hashlib.sha256(first + more).hexdigest()
        lines = expected_lines(first + more)
        reopened = LogFile(small, 1)
        assert reopened.checkpoints == log.checkpoints and reopened.total_lines == log.total_lines == len(lines)
        for number in (1, len(lines) // 2, len(lines)):
            assert reopened.offset_of_line(number) == lines[number - 1][0]


def test_a_log_whose_index_is_behind_opens_and_reads_on_a_full_disk(tmp_path: Path) -> None:
    with small_filesystem(tmp_path / "small", "2m") as small:
        data = random_log(6, 800_000)
        log = LogFile(small, 1)
        log.append(data)
        log.index_path.write_bytes(b"")  # as if the dashboard died between the two writes
        fill(small)
        reopened = LogFile(small, 1)
        assert reopened.checkpoints == log.checkpoints and reopened.total_lines == log.total_lines
        assert reopened.index_path.read_bytes() == b""  # it could not be written, and nothing half was
        lines = expected_lines(data)
        assert reopened.offset_of_line(len(lines)) == lines[-1][0]
