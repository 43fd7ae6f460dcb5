"""Pieces every simulated SGLang process shares: logging, progress bars, pacing, teardown.

Formats follow SGLang's `configure_logger` and tqdm's default meter, because the dashboard's
log parser is tested against what these write.
"""

from __future__ import annotations

import contextlib
import ctypes
import logging
import os
import signal
import sys
import time

TIME_SCALE_ENV = "LAUNCHDECK_SIM_TIME_SCALE"
GiB = 1 << 30
MiB = 1 << 20


def time_scale() -> float:
    """How fast simulated time runs: 1.0 is roughly real time, 0.02 is fifty times faster."""
    try:
        return max(0.0, float(os.environ.get(TIME_SCALE_ENV, "1")))
    except ValueError:
        return 1.0


def pause(seconds: float) -> None:
    """Sleeps for `seconds` of simulated time."""
    if seconds > 0:
        time.sleep(seconds * time_scale())


def elapsed_since(tic: float) -> float:
    """Simulated seconds since `tic` (a `time.perf_counter()` reading)."""
    scale = time_scale()
    return (time.perf_counter() - tic) / scale if scale else 0.0


def configure_logger(log_level: str = "info", prefix: str = "") -> None:
    logging.basicConfig(
        level=getattr(logging, log_level.upper()),
        format=f"[%(asctime)s{prefix}] %(message)s",
        datefmt="%Y-%m-%d %H:%M:%S",
        stream=sys.stderr,
        force=True,
    )
    # A record written while the node is being killed (its stream already closed) is dropped, not
    # reported with logging's "--- Logging error ---" block, which no SGLang format has.
    logging.raiseExceptions = False


def rank_prefix(tp_size: int, tp_rank: int) -> str:
    """Scheduler log tag: none on a single GPU, as SGLang prints since late 2025."""
    return f" TP{tp_rank}" if tp_size > 1 else ""


def set_process_title(title: str) -> None:
    """What `ps -o comm` and `top` show; the full title is the process's argv[0]."""
    try:
        libc = ctypes.CDLL(None)
        libc.prctl(15, title.encode()[:15], 0, 0, 0)  # PR_SET_NAME
    except (OSError, AttributeError):
        pass


def _children(pid: int) -> list[int]:
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat", "rb") as f:
                stat = f.read()
        except OSError:
            continue
        if int(stat[stat.rindex(b")") + 2 :].split()[1]) == pid:
            found.append(int(entry))
    return found


def kill_process_tree(parent_pid: int, include_parent: bool = True) -> None:
    """SIGKILLs every descendant, then the parent itself, as SGLang does after a child failed."""
    pending = _children(parent_pid)
    while pending:
        pid = pending.pop()
        pending.extend(_children(pid))
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
    if include_parent:
        sys.stderr.flush()
        os.kill(parent_pid, signal.SIGKILL)


def format_interval(seconds: float) -> str:
    minutes, secs = divmod(int(seconds), 60)
    hours, minutes = divmod(minutes, 60)
    return f"{hours:d}:{minutes:02d}:{secs:02d}" if hours else f"{minutes:02d}:{secs:02d}"


class ProgressBar:
    """tqdm's default meter on a non-terminal stream (a 10-cell bar), redrawn with `\\r`.

    `newline_frames` ends every frame with a newline instead, as SGLang's shard-loading bar
    does with its own bar format.
    """

    BLOCKS = " ▏▎▍▌▋▊▉█"

    def __init__(self, desc: str, total: int, *, newline_frames: bool = False, step_seconds: float = 1.0):
        self.desc = desc
        self.total = total
        self.n = 0
        self.newline_frames = newline_frames
        self.step_seconds = step_seconds  # nominal seconds per step, for the rate shown

    def start(self) -> None:
        self._write(self._frame())

    def update(self, desc: str | None = None) -> None:
        self.n += 1
        if desc is not None:
            self.desc = desc
        self._write(self._frame())

    def close(self) -> None:
        if not self.newline_frames:
            self._write("\n", carriage=False)

    def _write(self, text: str, carriage: bool = True) -> None:
        sys.stderr.write(("\r" if carriage else "") + text)
        sys.stderr.flush()

    def _frame(self) -> str:
        percent = 100 * self.n / self.total if self.total else 100
        elapsed = self.n * self.step_seconds
        if self.n:
            rate = 1 / self.step_seconds
            remaining = format_interval((self.total - self.n) * self.step_seconds)
            rate_text = f"{rate:5.2f}it/s" if rate >= 1 else f"{1 / rate:5.2f}s/it"
        else:
            remaining, rate_text = "?", "?it/s"
        stats = f"{self.n}/{self.total} [{format_interval(elapsed)}<{remaining}, {rate_text}]"
        if self.newline_frames:
            return f"{self.desc}: {percent:3.0f}% Completed | {stats}\n"
        return f"{self.desc}: {percent:3.0f}%|{self._bar(percent / 100)}| {stats}"

    def _bar(self, fraction: float, width: int = 10) -> str:
        full, partial = divmod(int(fraction * width * 8), 8)
        if full >= width:
            return self.BLOCKS[-1] * width
        return self.BLOCKS[-1] * full + self.BLOCKS[partial] + " " * (width - full - 1)


def format_size(size: float) -> str:
    """torch's size wording in its out-of-memory message."""
    if size < MiB:
        return f"{size:.0f} bytes"
    if size < GiB:
        return f"{size / MiB:.2f} MiB"
    return f"{size / GiB:.2f} GiB"


class OutOfMemoryError(RuntimeError):
    """Stands for torch.OutOfMemoryError: tracebacks print it under torch's name."""


OutOfMemoryError.__module__ = "torch"
