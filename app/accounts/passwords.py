"""Password hashes: argon2id (argon2-cffi) with its default parameters (RFC 9106's low-memory
choice: 64 MiB, 3 passes), a random salt per hash.

A hash is kept in argon2's own encoding (`$argon2id$v=19$m=…,t=…,p=…$salt$hash`), which names its
parameters, so stronger ones can come later without breaking the hashes already stored. Hashing
takes about 0.15 s on purpose: callers in the event loop run it in a thread."""

from __future__ import annotations

import secrets
from functools import cache

from argon2 import PasswordHasher
from argon2.exceptions import InvalidHashError, VerificationError

MAX_BYTES = 1024  # a longer "password" is refused, so nobody makes us hash megabytes
MIN_LENGTH = 8

_hasher = PasswordHasher()


def hash_password(password: str) -> str:
    return _hasher.hash(password)


def verify_password(password: str, stored: str) -> bool:
    """False for a wrong password and for a stored value that is no argon2 hash."""
    if len(password.encode()) > MAX_BYTES:
        return False
    try:
        return _hasher.verify(stored, password)
    except (VerificationError, InvalidHashError):
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
