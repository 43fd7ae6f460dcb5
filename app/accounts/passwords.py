"""Password hashes: scrypt from the standard library, with a random salt per hash.

A hash is kept as `scrypt$<log2 n>$<r>$<p>$<salt>$<key>` (base64), so stronger parameters can
come later without breaking the hashes already stored. Hashing takes about 50 ms on purpose:
callers in the event loop run it in a thread."""

from __future__ import annotations

import base64
import hashlib
import hmac
import secrets
from functools import cache

LOG2_N, R, P = 14, 8, 1  # 16 MiB of memory per hash
KEY_BYTES = 32
MAX_BYTES = 1024  # a longer "password" is refused, so nobody makes us hash megabytes
MIN_LENGTH = 8


def _b64(raw: bytes) -> str:
    return base64.b64encode(raw).decode()


def _derive(password: str, salt: bytes, log2_n: int, r: int, p: int) -> bytes:
    n = 1 << log2_n
    return hashlib.scrypt(password.encode(), salt=salt, n=n, r=r, p=p, maxmem=256 * n * r, dklen=KEY_BYTES)


def hash_password(password: str) -> str:
    salt = secrets.token_bytes(16)
    return f"scrypt${LOG2_N}${R}${P}${_b64(salt)}${_b64(_derive(password, salt, LOG2_N, R, P))}"


def verify_password(password: str, stored: str) -> bool:
    """False for a wrong password and for a stored value that is no hash of ours."""
    try:
        scheme, log2_n, r, p, salt, key = stored.split("$")
        if scheme != "scrypt" or len(password.encode()) > MAX_BYTES:
            return False
        derived = _derive(password, base64.b64decode(salt), int(log2_n), int(r), int(p))
        return hmac.compare_digest(derived, base64.b64decode(key))
    except ValueError:
        return False


@cache
def dummy_hash() -> str:
    """Checked against when a user name is unknown, so a wrong name takes as long as a wrong password."""
    return hash_password(secrets.token_urlsafe(16))


def password_problem(password: str) -> str | None:
    """Why a new password will not do (None when it will)."""
    if len(password) < MIN_LENGTH:
        return f"a password has at least {MIN_LENGTH} characters"
    if len(password.encode()) > MAX_BYTES:
        return f"a password has at most {MAX_BYTES} bytes"
    return None
