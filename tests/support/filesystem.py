"""A small filesystem to fill up, for the disk-full tests."""

from __future__ import annotations

import contextlib
import errno
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path

from tests.support.strict import require


@contextlib.contextmanager
def small_filesystem(mount_point: Path, size: str) -> Iterator[Path]:
    """A tmpfs of `size` (as mount takes it: "30m") at `mount_point`, for filling up. Needs root."""
    mount_point.mkdir(parents=True, exist_ok=True)
    mounted = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(mount_point)], check=False)
    require(mounted.returncode == 0, "cannot mount a tmpfs here (the disk-full tests need root)")
    try:
        yield mount_point
    finally:
        subprocess.run(["umount", "-l", str(mount_point)], check=False)


def fill(directory: Path, leave: int = 0) -> Path:
    """Writes a file until the filesystem has no more than `leave` bytes left; returns it."""
    filler = directory / "filler"
    with filler.open("wb", buffering=0) as f:
        for size in (1 << 20, 4096, 1):
            try:
                while shutil.disk_usage(directory).free - size >= leave:
                    f.write(b"\0" * size)
            except OSError as exc:
                assert exc.errno == errno.ENOSPC, exc
    return filler
