"""Domain errors: one hierarchy, raised by the domain packages, turned into HTTP only in app/web.

LaunchdeckError
├── NotFound            a named thing does not exist                      (HTTP 404)
├── AccessRefused       the person is known but may not come in; the message says why (HTTP 403)
│   └── HostNotAllowed  the person may launch only on hosts with other labels
├── InvalidInput        a value a user gave is wrong; the message says which (HTTP 422)
│   ├── InvalidPattern  a search pattern grep cannot use, with grep's reason    (HTTP 400)
│   ├── SearchTooSlow   a search ran out of time; it carries what it found  (HTTP 422)
│   └── SearchOutOfMemory a search pattern needs more memory than a search may use (HTTP 422)
├── Conflict            the request does not fit the state it finds (a benchmark of an attempt
│                       that is not ready, a stop of a sweep that ended)          (HTTP 409)
├── LaunchRefused       a guard stopped a launch before any attempt was recorded; `details` says why
│   ├── PreflightBlocked  a blocking preflight check failed and no override reason was given (HTTP 422)
│   └── FailedBefore      the same configuration failed before and the launch did not confirm (HTTP 409)
├── SearchBusy          as many searches run as may run at once; try again    (HTTP 503)
├── DatabaseUnavailable the database cannot be reached or migrated           (HTTP 503)
├── DiskFull            the data dir's filesystem has no room for a write   (HTTP 507)
└── HostError           something about a GPU host                        (HTTP 502)
    ├── HostUnavailable     not connected now; the message says why and since when (HTTP 503)
    │   └── HostKeyRejected its host key is unknown or does not match known_hosts
    ├── RemoteCommandFailed a command on the host exited non-zero
    ├── CommandTimedOut     a command on the host did not finish in time
    └── UploadFailed        a file could not be written, or its sha256 on the host differs
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any


class LaunchdeckError(Exception):
    """Base of every error whose message is meant for the user."""


class NotFound(LaunchdeckError):
    pass


class AccessRefused(LaunchdeckError):
    pass


class HostNotAllowed(AccessRefused):
    pass


class InvalidInput(LaunchdeckError):
    pass


class InvalidPattern(InvalidInput):
    pass


class SearchTooSlow(InvalidInput):
    def __init__(self, message: str, partial: object):
        super().__init__(message)
        self.partial = partial  # the searching function's own result, as far as it got


class SearchOutOfMemory(InvalidInput):
    pass


class Conflict(LaunchdeckError):
    """The request does not fit the state it finds: a benchmark of an attempt that is not ready,
    a second one while one runs."""


class LaunchRefused(LaunchdeckError):
    """`details` is the machine-readable why (JSON-safe, with "guard" naming the guard); `preflight`
    the checks that were run, for a form to show again."""

    def __init__(self, message: str, details: dict[str, Any], preflight: Any = None):
        super().__init__(message)
        self.details = details
        self.preflight = preflight


class PreflightBlocked(LaunchRefused):
    pass


class FailedBefore(LaunchRefused):
    pass


class SearchBusy(LaunchdeckError):
    pass


class DatabaseUnavailable(LaunchdeckError):
    pass


class DiskFull(LaunchdeckError):
    """ENOSPC or EDQUOT (or SQLite's "database or disk is full") under the data dir; the message
    says how much room is left where (see app/disk.py)."""


class HostError(LaunchdeckError):
    def __init__(self, host: str, message: str):
        super().__init__(f"{host}: {message}")
        self.host = host


class HostUnavailable(HostError):
    pass


class HostKeyRejected(HostUnavailable):
    pass


class RemoteCommandFailed(HostError):
    def __init__(self, host: str, command: str, exit_status: int | None, stderr: str):
        detail = stderr.strip().splitlines()[-1] if stderr.strip() else "no output on stderr"
        super().__init__(host, f"`{command}` exited with {exit_status}: {detail}")
        self.exit_status = exit_status
        self.stderr = stderr


class CommandTimedOut(HostError):
    pass


class UploadFailed(HostError):
    pass


def wrapped(exc: BaseException) -> Iterator[BaseException]:
    """`exc` and every exception it wraps: SQLAlchemy's `orig`, its cause, its context."""
    seen: set[int] = set()
    pending: list[BaseException | None] = [exc]
    while pending:
        current = pending.pop()
        if current is None or id(current) in seen:
            continue
        seen.add(id(current))
        yield current
        orig = getattr(current, "orig", None)
        pending += [orig if isinstance(orig, BaseException) else None, current.__cause__, current.__context__]
