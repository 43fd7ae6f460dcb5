"""The data dir's free space, and the one sentence every write that found it full says.

A full filesystem shows up in many shapes: OSError with ENOSPC or EDQUOT from a log append,
SQLite's "database or disk is full" from a commit, either wrapped by SQLAlchemy. `is_disk_full`
recognises them all, and `DataDir.full()` turns one into `DiskFull`, whose message ("the data dir
is full: N MB free on <path>") tells the user where room is needed; the web layer maps it to 507
by the errors table like any other domain error. Pages warn with the same sentence while the free
space is under a small reserve, or for a while after a write failed for want of room (a write can
fail with more than the reserve free, when it needed more).
"""

from __future__ import annotations

import errno
import os
import sqlite3
import time
from pathlib import Path

from app.errors import DiskFull, wrapped

FULL_ERRNOS = frozenset({errno.ENOSPC, errno.EDQUOT})
# How long pages keep warning after a write failed for want of room.
RECENT_SECONDS = 60.0


def is_disk_full(exc: BaseException) -> bool:
    """Whether `exc`, or what it wraps (SQLAlchemy's `orig`, a cause), says the disk is full."""
    return any(
        isinstance(error, DiskFull)
        or (isinstance(error, OSError) and error.errno in FULL_ERRNOS)
        or (
            isinstance(error, sqlite3.Error)
            and (getattr(error, "sqlite_errorcode", None) == sqlite3.SQLITE_FULL or "disk is full" in str(error))
        )
        for error in wrapped(exc)
    )


class DataDir:
    """The dashboard's data dir: how much room it has, and the sentence for when it has none."""

    def __init__(self, path: Path, *, reserve_mb: int = 0):
        self.path = path
        self.reserve_mb = reserve_mb
        self._full_at: float | None = None  # when a write last failed for want of room

    def free_mb(self) -> int:
        try:
            stat = os.statvfs(self.path)
        except OSError:
            return 0
        return stat.f_bavail * stat.f_frsize // (1 << 20)

    def sentence(self) -> str:
        return f"the data dir is full: {self.free_mb()} MB free on {self.path}"

    def full(self) -> DiskFull:
        """The error for a write that just failed for want of room (noted for the pages' warning)."""
        self._full_at = time.monotonic()
        return DiskFull(self.sentence())

    def warning(self) -> str | None:
        """The sentence while free space is under the reserve or a write failed for want of room
        lately; None otherwise."""
        recent = self._full_at is not None and time.monotonic() - self._full_at < RECENT_SECONDS
        if recent or self.free_mb() < self.reserve_mb:
            return self.sentence()
        return None
