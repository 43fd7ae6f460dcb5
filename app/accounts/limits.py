"""Failed-login limits, per source address and per account, kept in the database so that every
replica of the dashboard holds the same locks: a guesser whose tries a load balancer spreads over
several replicas is locked as soon as on one.

A key (an address, or an account) may fail `free` times in `window` seconds; the last of those
locks it for `window` seconds, and every failure after a lock doubles the lock, up to `longest`.
A key's locks are forgotten after `forget` seconds without a failure, or at a successful login.
A locked key is refused before its credential is compared, so a guesser learns nothing and costs
almost nothing while it waits.

Failures from one address with no pause of a whole `window` between them form a burst: the audit
trail keeps one row per burst ("200 failed logins from 10.0.0.9 in 1.1 s"), not one per attempt.

The account is any string (today the access-token login uses a fixed one); `None` limits by
address alone, as for API tokens, which name no account.

Each key is a row of `login_limit`. `check` reads in a read session, so it never takes SQLite's
write lock. A failure or a refusal is a short unit of work of its own that locks the rows it
changes (FOR UPDATE on PostgreSQL, taken in one order so two cannot deadlock; SQLite's write lock),
so failures arriving at two replicas at once both count and a burst still gets one audit row.
Times are Unix seconds from each replica's clock, which should agree to a second or so.

A data dir too full for SQLite to write must not let guessing go unlimited: a failure that cannot
be written is counted in this process's memory instead, which `check` reads too."""

from __future__ import annotations

import logging
import math
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from sqlalchemy import ColumnElement, and_, delete, func, or_, select, update
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.ext.asyncio import AsyncSession

from app.db import Sessions
from app.db.models import AuditEvent, LoginLimit
from app.errors import DiskFull
from app.states import LimitedBy

log = logging.getLogger(__name__)

# Enough keys for every address of a large team; an attack from more addresses than this forgets
# the longest quiet, which costs it nothing it could not get by waiting.
MAX_KEYS = 10_000
NAME_LENGTH = 128  # of a key's name in the table; longer names are cut
PRUNED_AT_ONCE = 1000  # forgotten rows deleted by one failure, so that no failure waits long
UNSYNCHRONISED = {"synchronize_session": False}  # bulk deletes of rows this session has not loaded

Key = tuple[LimitedBy, str]


@dataclass
class Burst:
    """Failed logins from one address, for its one audit row."""

    address: str
    account: str | None
    first: float
    last: float
    failures: int = 0  # credentials compared and wrong
    refused: int = 0  # refused unread while locked

    @classmethod
    def of(cls, row: LoginLimit) -> Burst:
        assert row.burst_first is not None and row.burst_last is not None
        return cls(row.name, row.burst_account, row.burst_first, row.burst_last, row.burst_failures, row.burst_refused)

    @property
    def attempts(self) -> int:
        return self.failures + self.refused

    def summary(self) -> str:
        plural = "" if self.attempts == 1 else "s"
        line = f"{self.attempts} failed login{plural} from {self.address or '?'} in {self.last - self.first:.1f} s"
        return line + (f" ({self.refused} refused while locked)" if self.refused else "")


def _fresh(key: Key, now: float) -> dict[str, Any]:
    """The columns of a key's row before its first failure."""
    kind, name = key
    return {
        "kind": kind,
        "name": name,
        "recent": [],
        "strikes": 0,
        "locked_until": 0.0,
        "last_failure": 0.0,
        "last_at": now,
        "burst_failures": 0,
        "burst_refused": 0,
    }


def _rows_of(keys: Sequence[Key]) -> ColumnElement[bool]:
    return or_(*(and_(LoginLimit.kind == kind, LoginLimit.name == name) for kind, name in keys))


class LoginLimiter:
    """`check` before comparing a credential; then `failed` or `succeeded` (or `refused`, when
    `check` said to wait). Each takes the dashboard's sessions and runs its own unit of work."""

    def __init__(
        self,
        *,
        free: int = 5,
        window: float = 60.0,
        longest: float = 900.0,
        forget: float = 3600.0,
        max_keys: int = MAX_KEYS,
        clock: Callable[[], float] = time.time,
    ):
        self.free = free
        self.window = window
        self.longest = longest
        self.forget = forget
        self.max_keys = max_keys
        self.clock = clock
        self._held: dict[Key, LoginLimit] = {}  # failures the database could not take (a full disk)

    async def check(self, sessions: Sessions, address: str, account: str | None = None) -> int | None:
        """Seconds to wait (for Retry-After) when the address or the account is locked, else None."""
        keys = self._keys(address, account)
        async with sessions.read() as session:
            locks = list(await session.scalars(select(LoginLimit.locked_until).where(_rows_of(keys))))
        locks += [row.locked_until for key in keys if (row := self._held.get(key))]
        wait = max(locks, default=0.0) - self.clock()
        return math.ceil(wait) if wait > 0 else None

    async def refused(
        self, sessions: Sessions, address: str, account: str | None = None, *, audit: bool = True
    ) -> Burst:
        """Counts an attempt that `check` refused into the address's burst (and its audit row)."""
        return await self._count(sessions, address, account, failure=False, audit=audit)

    async def failed(
        self, sessions: Sessions, address: str, account: str | None = None, *, audit: bool = True
    ) -> Burst:
        """Counts a wrong credential against the address and the account, locking either that
        failed too often, and into the address's burst (and its audit row)."""
        return await self._count(sessions, address, account, failure=True, audit=audit)

    async def succeeded(self, sessions: Sessions, address: str, account: str | None = None) -> None:
        """A right credential: the address and the account start afresh. Only a key with
        failures to forget costs a write."""
        keys = self._keys(address, account)
        for key in keys:
            self._held.pop(key, None)
        async with sessions.read() as session:
            if await session.scalar(select(func.count()).select_from(LoginLimit).where(_rows_of(keys))) == 0:
                return
        try:
            async with sessions.write() as session:
                await session.execute(delete(LoginLimit).where(_rows_of(keys)))
                await session.commit()
        except DiskFull as exc:
            log.warning("login limits: failures before a right login not forgotten: %s", exc)

    def _keys(self, address: str, account: str | None) -> list[Key]:
        keys = [(LimitedBy.ADDRESS, address[:NAME_LENGTH])]
        return keys + ([(LimitedBy.ACCOUNT, account[:NAME_LENGTH])] if account is not None else [])

    async def _count(
        self, sessions: Sessions, address: str, account: str | None, *, failure: bool, audit: bool
    ) -> Burst:
        keys = self._keys(address, account) if failure else self._keys(address, None)
        now = self.clock()
        try:
            async with sessions.write() as session:
                rows, added = await self._lock(session, keys, now)
                burst = self._apply(rows, keys, account, now, failure=failure)
                await session.flush()
                if audit:
                    await _record(session, rows[keys[0]], burst)
                if added:
                    await self._prune(session, now)
                await session.commit()
        except DiskFull as exc:
            burst = self._count_in_memory(keys, account, now, failure=failure)
            log.warning("login limits: %s counted in memory only, not audited: %s", burst.summary(), exc)
        return burst

    def _count_in_memory(self, keys: list[Key], account: str | None, now: float, *, failure: bool) -> Burst:
        held = {key: self._held.pop(key) if key in self._held else LoginLimit(**_fresh(key, now)) for key in keys}
        burst = self._apply(held, keys, account, now, failure=failure)
        self._held.update(held)  # last in order: the oldest are the first dropped
        while len(self._held) > self.max_keys:
            del self._held[next(iter(self._held))]
        return burst

    async def _lock(self, session: AsyncSession, keys: list[Key], now: float) -> tuple[dict[Key, LoginLimit], bool]:
        """The keys' rows, made where missing and locked until the unit of work ends; and whether
        any was made. Rows are made and locked in one order (by kind, then name) so that two units
        of work sharing a key wait for each other rather than deadlock."""
        ordered = sorted(keys)
        insert = postgresql.insert if session.get_bind().dialect.name == "postgresql" else sqlite.insert
        added = False
        while True:
            made = await session.execute(
                insert(LoginLimit).values([_fresh(key, now) for key in ordered]).on_conflict_do_nothing()
            )
            added |= bool(made.rowcount)  # type: ignore[attr-defined]
            found = await session.scalars(
                select(LoginLimit)
                .where(_rows_of(ordered))
                .order_by(LoginLimit.kind, LoginLimit.name)
                .with_for_update()
                .execution_options(populate_existing=True)
            )
            rows = {(row.kind, row.name): row for row in found}
            if len(rows) == len(keys):
                return rows, added
            # Another replica's prune deleted a row between the two statements: made again, it is ours.

    def _apply(
        self, rows: dict[Key, LoginLimit], keys: list[Key], account: str | None, now: float, *, failure: bool
    ) -> Burst:
        """The policy itself, on the rows (from the table, or held in memory)."""
        for key in keys:
            row = rows[key]
            row.last_at = now
            if not failure:
                continue
            if now - row.last_failure > self.forget:
                row.strikes = 0
            recent = [t for t in row.recent if now - t < self.window] + [now]
            row.last_failure = now
            if row.strikes or len(recent) >= self.free:
                row.locked_until = now + min(self.longest, self.window * 2 ** min(row.strikes, 32))
                row.strikes += 1
                recent = []
            row.recent = recent  # a new list: the JSON column sees the change
        burst = rows[keys[0]]  # the address's
        if burst.burst_last is None or now - burst.burst_last >= self.window:
            burst.burst_account, burst.burst_first, burst.burst_audit_id = account, now, None
            burst.burst_failures = burst.burst_refused = 0
        burst.burst_last = now
        if failure:
            burst.burst_failures += 1
        else:
            burst.burst_refused += 1
        return Burst.of(burst)

    async def _prune(self, session: AsyncSession, now: float) -> None:
        """Keeps the table bounded: rows quiet for `forget` count for nothing, and beyond
        `max_keys` the longest quiet go. Rows that another unit of work holds are skipped, never
        waited for (SQLite has no row locks, and its write lock is this unit's already)."""

        def quietest(limit: int, *conditions: ColumnElement[bool]) -> ColumnElement[bool]:
            ids = select(LoginLimit.id).where(*conditions).order_by(LoginLimit.last_at).limit(limit)
            return LoginLimit.id.in_(ids.with_for_update(skip_locked=True).scalar_subquery())

        forgotten = quietest(PRUNED_AT_ONCE, LoginLimit.last_at < now - self.forget)
        await session.execute(delete(LoginLimit).where(forgotten), execution_options=UNSYNCHRONISED)
        excess = (await session.scalar(select(func.count()).select_from(LoginLimit)) or 0) - self.max_keys
        if excess > 0:
            await session.execute(delete(LoginLimit).where(quietest(excess)), execution_options=UNSYNCHRONISED)


async def _record(session: AsyncSession, row: LoginLimit, burst: Burst) -> None:
    """One audit row per burst of failed logins: the first failure adds it, later ones bring its
    counts up to date, so an attack of any length leaves one row. The address's row is locked, so
    two replicas cannot both add one."""
    detail = {
        "summary": burst.summary(),
        "failures": burst.failures,
        "refused": burst.refused,
        "seconds": round(burst.last - burst.first, 1),
    }
    if row.burst_audit_id is not None:
        await session.execute(update(AuditEvent).where(AuditEvent.id == row.burst_audit_id).values(detail=detail))
        return
    event = AuditEvent(
        actor=burst.account or "anonymous",  # the account tried: whose login is under attack
        action="login-failed",
        target=burst.account or "",
        remote_addr=burst.address[:64],
        detail=detail,
    )
    session.add(event)
    await session.flush()
    row.burst_audit_id = event.id
