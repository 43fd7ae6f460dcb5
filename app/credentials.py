"""Secrets kept as files in the data dir (mode 0600), never in the database or the logs."""

from __future__ import annotations

import os
import secrets
from pathlib import Path

MIN_LENGTH = 16


def load_or_create(path: Path) -> str:
    """Reads the secret at `path`, creating a new random one the first time.

    An empty or truncated file (a crash while writing it) is replaced: a short secret is no secret.
    """
    try:
        value = path.read_text(encoding="utf-8").strip()
    except FileNotFoundError:
        value = ""
    if len(value) >= MIN_LENGTH:
        return value
    path.parent.mkdir(parents=True, exist_ok=True)
    value = secrets.token_urlsafe(32)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w", encoding="utf-8") as f:
        f.write(value + "\n")
    os.chmod(path, 0o600)
    return value
