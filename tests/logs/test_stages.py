"""Where each launch stage starts in a mirrored log, read once as the log grows, and how long it took."""

from __future__ import annotations

import itertools
from pathlib import Path

from app.logs.stages import last_stamp, took
from app.logs.store import LogFile, LogStore
from tests.support.sglang_logs import STAGED_LOG


def test_each_stage_starts_at_its_first_line_with_that_lines_time(tmp_path: Path) -> None:
    log = LogFile(tmp_path, 1)
    log.append(STAGED_LOG)
    marks = log.stages.read(log.path, log.size)
    assert [(mark.name, mark.line) for mark in marks] == [
        ("args parsed", 1), ("weights loading", 2), ("weights loaded", 7), ("kv cache allocated", 8),
        ("cuda graph capture", 9),
    ]  # fmt: skip
    times = [mark.at for mark in marks] + [last_stamp(log.path, log.size)]
    assert [took(start, end) for start, end in itertools.pairwise(times)] == [
        "2 s",
        "5 s",
        "1 s",
        "1 s",
        "31 s",
    ]


def test_a_growing_log_gives_the_same_stages_as_read_at_once(tmp_path: Path) -> None:
    whole = LogFile(tmp_path, 1)
    whole.append(STAGED_LOG)
    growing = LogFile(tmp_path, 2)
    for line in STAGED_LOG.splitlines(keepends=True):
        growing.append(line)
        growing.stages.read(growing.path, growing.size)
    assert growing.stages.read(growing.path, growing.size) == whole.stages.read(whole.path, whole.size)
    halfway = whole.offset_of_line(8)  # a viewer that resumes earlier sees only the stages before it
    assert [mark.name for mark in whole.stages.read(whole.path, halfway)][-1] == "weights loaded"


def test_a_stage_line_without_its_own_time_takes_the_one_before_it(tmp_path: Path) -> None:
    log = LogFile(tmp_path, 1)
    log.append(b"[2026-01-01 10:00:00] server_args=ServerArgs(tp_size=1)\n")
    log.append(b"Loading safetensors checkpoint shards:   0% Completed | 0/4\n")
    marks = log.stages.read(log.path, log.size)
    assert [mark.name for mark in marks] == ["args parsed", "weights loading"] and marks[1].at == marks[0].at


def test_a_log_without_times_says_dash_for_how_long_a_stage_took() -> None:
    assert took(None, 5.0) == "—" and took(5.0, None) == "—"
    assert took(0, 59.4) == "59 s" and took(0, 61) == "1 min 01 s"
    assert took(86399, 1) == "2 s"  # times of day, across midnight


def test_a_complete_log_is_scanned_for_its_stages_once_however_often_it_is_reopened(tmp_path: Path) -> None:
    """A complete log nobody watches is dropped after each view and opened again for the next: its
    stage scan stays, so a page of a huge failed log does not read its first 64 MiB every time."""
    store = LogStore(tmp_path)
    log = store.get(1)
    log.append(STAGED_LOG)
    log.finish(host_size=log.size, host_sha256=None, mirror_sha256=None)
    first = log.stages.read(log.path, log.size)
    store.forget(1)
    reopened = store.get(1)
    assert reopened is not log and reopened.stages is log.stages
    assert reopened.stages.offset == log.size and reopened.stages.read(log.path, log.size) == first
