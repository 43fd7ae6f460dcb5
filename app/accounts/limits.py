"""Failed-login limits, per source address and per account, kept in memory.

A key (an address, or an account) may fail `free` times in `window` seconds; the last of those
locks it for `window` seconds, and every failure after a lock doubles the lock, up to `longest`.
A key's locks are forgotten after `forget` seconds without a failure, or at a successful login.
A locked key is refused before its credential is compared, so a guesser learns nothing and costs
almost nothing while it waits.

Failures from one address with no pause of a whole `window` between them form a burst: the audit
trail keeps one row per burst ("200 failed logins from 10.0.0.9 in 1.1 s"), not one per attempt.

The account is any string (today the access-token login uses a fixed one); `None` limits by
address alone, as for API tokens, which name no account.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from dataclasses import dataclass

# Enough keys for every address of a large team; an attack from more addresses than this forgets
# the oldest, which costs it nothing it could not get by waiting.
MAX_KEYS = 10_000


@dataclass
class Burst:
    """Failed logins from one address, for its one audit row."""

    address: str
    account: str | None
    first: float
    last: float
    failures: int = 0  # credentials compared and wrong
    refused: int = 0  # refused unread while locked
    record_id: int | None = None  # the audit row, once written

    @property
    def attempts(self) -> int:
        return self.failures + self.refused

    def summary(self) -> str:
        plural = "" if self.attempts == 1 else "s"
        line = f"{self.attempts} failed login{plural} from {self.address or '?'} in {self.last - self.first:.1f} s"
        return line + (f" ({self.refused} refused while locked)" if self.refused else "")


@dataclass
class _Record:
    recent: list[float]  # failure times within the window
    strikes: int = 0  # locks so far
    locked_until: float = 0.0
    last_failure: float = 0.0


class LoginLimiter:
    """`check` before comparing a credential; then `failed` or `succeeded`."""

    def __init__(
        self,
        *,
        free: int = 5,
        window: float = 60.0,
        longest: float = 900.0,
        forget: float = 3600.0,
        clock: Callable[[], float] = time.monotonic,
    ):
        self.free = free
        self.window = window
        self.longest = longest
        self.forget = forget
        self.clock = clock
        self._records: dict[tuple[str, str], _Record] = {}
        self._bursts: dict[str, Burst] = {}

    def check(self, address: str, account: str | None = None) -> int | None:
        """Seconds to wait (for Retry-After) when the address or the account is locked, else None."""
        now = self.clock()
        wait = max((record.locked_until - now for record in self._records_of(address, account)), default=0.0)
        return math.ceil(wait) if wait > 0 else None

    def refused(self, address: str, account: str | None = None) -> Burst:
        """Counts an attempt that `check` refused into the address's burst."""
        burst = self._burst(address, account, self.clock())
        burst.refused += 1
        return burst

    def failed(self, address: str, account: str | None = None) -> Burst:
        """Counts a wrong credential against the address and the account; locks either that
        failed too often. Returns the address's burst, to audit."""
        now = self.clock()
        for key in self._keys(address, account):
            record = self._records.pop(key, None) or _Record(recent=[])
            if now - record.last_failure > self.forget:
                record.strikes = 0
            record.recent = [t for t in record.recent if now - t < self.window] + [now]
            record.last_failure = now
            if record.strikes or len(record.recent) >= self.free:
                record.locked_until = now + min(self.longest, self.window * 2**record.strikes)
                record.strikes += 1
                record.recent = []
            self._records[key] = record  # last in order: the oldest are the first dropped
        burst = self._burst(address, account, now)
        burst.failures += 1
        self._prune()
        return burst

    def succeeded(self, address: str, account: str | None = None) -> None:
        """A right credential: the address and the account start afresh."""
        for key in self._keys(address, account):
            self._records.pop(key, None)
        self._bursts.pop(address, None)

    def _keys(self, address: str, account: str | None) -> list[tuple[str, str]]:
        return [("address", address)] + ([("account", account)] if account is not None else [])

    def _records_of(self, address: str, account: str | None) -> list[_Record]:
        return [record for key in self._keys(address, account) if (record := self._records.get(key))]

    def _burst(self, address: str, account: str | None, now: float) -> Burst:
        burst = self._bursts.pop(address, None)
        if burst is None or now - burst.last >= self.window:
            burst = Burst(address=address, account=account, first=now, last=now)
        burst.last = now
        self._bursts[address] = burst
        return burst

    def _prune(self) -> None:
        while len(self._records) > MAX_KEYS:
            del self._records[next(iter(self._records))]
        while len(self._bursts) > MAX_KEYS:
            del self._bursts[next(iter(self._bursts))]
