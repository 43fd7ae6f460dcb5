"""Secrets kept as files in the data dir (mode 0600), never in the database or the logs."""

from __future__ import annotations

import os
import secrets
from pathlib import Path

MIN_LENGTH = 16


def load_or_create(path: Path) -> str:
    """Reads the secret at `path`, creating a new random one the first time.

    Replicas starting together on one data dir get one secret: the new one is written to a file of
    its own and linked into place, which fails for all but the first, who then read the winner's.
    An empty or truncated file (a crash while writing it) is replaced: a short secret is no secret.
    """
    try:
        found: str | None = path.read_text(encoding="utf-8").strip()
    except FileNotFoundError:
        found = None
    if found is not None and len(found) >= MIN_LENGTH:
        return found
    path.parent.mkdir(parents=True, exist_ok=True)
    value, partial = secrets.token_urlsafe(32), path.with_name(f".{path.name}.{secrets.token_hex(6)}")
    fd = os.open(partial, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(value + "\n")
            f.flush()
            os.fsync(f.fileno())
        if found is None:
            try:
                os.link(partial, path)
            except FileExistsError:  # another replica's came first
                return load_or_create(path)
        else:
            os.replace(partial, path)
    finally:
        partial.unlink(missing_ok=True)
    return value
