"""Which controller owns which host: leases in PostgreSQL, renewed by a heartbeat, with a fencing
token that grows with every change of owner.

Each controller beats every `lease_seconds / 3`: one transaction marks it alive, renews the leases
it holds, takes free or expired ones where it is among the least loaded, and gives hosts back to
a controller that holds fewer, so that hosts spread evenly across the live controllers. A controller may be
pinned to hosts by label (one controller per site); an unpinned one may own any host. Times are
the database's (`now()`), so controllers' clocks need not agree.

A controller that dies stops renewing: its leases expire and the others take them within
`lease_seconds` (plus a beat). One that stalls (SIGSTOP, a long pause) and wakes holds tokens that
are no longer current: every write it makes on a host's behalf runs `Fence.check` in the same
transaction, which refuses it (LeaseLost) unless the lease still names this controller with this
token and has not expired; the check takes a share lock on the lease row, so a takeover waits for
the write to commit, and a write never lands after a takeover. A writer that stalls inside its
transaction (SIGSTOP, a long pause) would hold that lock, and so its host, for as long as it stalls:
the check also tells the server to end the transaction, and the session, once it has sat idle for
`lease_seconds`, so the write is rolled back and the takeover goes on (a beat's own transaction,
which locks the rows it renews, is ended so too). A beat takes a host only if
no write holds its row, trying again at the next beat, so that one stalled writer never stalls
another controller's beat, and with it the renewal of that controller's own leases. Work outside
the database (a log mirror appending what its SSH reader took in while it stalled) asks `owns`,
which holds only while the last renewal is younger than `lease_seconds` by this process's own
clock (the database's expiry is later still): a controller that wakes knows before its next beat,
and that beat lets such lapsed leases go rather than renewing them. A controller that cannot
renew in time (the database away) drops its leases itself, before they can have expired.

On SQLite there is one process, which owns every host (`SoleOwner`): nothing to share or fence.
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
import math
import os
import secrets
import socket
import time
from collections.abc import Callable, Collection, Mapping
from dataclasses import dataclass
from datetime import timedelta

from sqlalchemy import and_, func, or_, select, text, update
from sqlalchemy.dialects.postgresql import insert
from sqlalchemy.exc import SQLAlchemyError
from sqlalchemy.ext.asyncio import AsyncSession

from app.backoff import Backoff
from app.db import Sessions
from app.db.models import Attempt, Controller, Host, HostLease
from app.errors import LaunchdeckError
from app.states import ACTIVE_STATUSES

log = logging.getLogger(__name__)

# A dead controller's hosts are taken within this and one beat (a third of it): 12 s.
LEASE_SECONDS = 9.0


class LeaseLost(LaunchdeckError):
    """This controller no longer owns the host: whatever it was about to write is another's now."""


def controller_id() -> str:
    """Unique per process, readable in the lease table: host name, pid and a few random bytes."""
    return f"{socket.gethostname()}:{os.getpid()}:{secrets.token_hex(3)}"


async def _end_if_stalled(session: AsyncSession, seconds: float) -> None:
    """Has the server end this transaction, rolled back, once it has sat idle for `seconds`: a
    process stalled inside it (SIGSTOP, a long pause) would otherwise hold the lease rows it locked,
    and so their hosts, for as long as it stalls."""
    idle_ms = str(max(1, round(seconds * 1000)))
    await session.execute(text("SELECT set_config('idle_in_transaction_session_timeout', :ms, true)"), {"ms": idle_ms})


@dataclass(frozen=True)
class Fence:
    """A lease as it was when a piece of work on the host began."""

    host: str
    owner: str
    token: int
    lease_seconds: float = LEASE_SECONDS  # the longest the write's transaction may sit idle holding the lease

    async def check(self, session: AsyncSession) -> None:
        """Raises LeaseLost unless the lease is still this one; run inside the write's transaction.

        The share lock it takes holds off a takeover until the write commits; should the writer
        stall before it does, the server ends its transaction after `lease_seconds` idle (rolling
        the write back), so a stalled controller keeps its host no longer than a dead one."""
        await _end_if_stalled(session, self.lease_seconds)
        query = (
            select(HostLease.host)
            .where(
                HostLease.host == self.host,
                HostLease.owner == self.owner,
                HostLease.token == self.token,
                HostLease.expires_at > func.now(),
            )
            .with_for_update(read=True)
        )
        if await session.scalar(query) is None:
            raise LeaseLost(f"{self.host}: lease {self.token} is no longer {self.owner}'s")


class Ownership:
    """Which hosts this process may act for, and the fence of each."""

    def owns(self, host: str) -> bool:
        raise NotImplementedError

    def fence(self, host: str) -> Fence | None:
        """The host's fence, or None where no fencing is needed (a sole owner)."""
        raise NotImplementedError


class SoleOwner(Ownership):
    """One process owns every host: SQLite, or a single controller that shares with nobody."""

    def owns(self, host: str) -> bool:
        return True

    def fence(self, host: str) -> Fence | None:
        return None


@dataclass
class Beat:
    """What one beat changed: hosts taken (with their new token) and hosts given up or lost."""

    gained: dict[str, int]
    lost: list[str]


class LeaseKeeper(Ownership):
    def __init__(
        self,
        sessions: Sessions,
        hosts: Mapping[str, Collection[str]],  # every host this installation knows, with its labels
        *,
        owner: str | None = None,
        pins: Collection[str] = (),
        lease_seconds: float = LEASE_SECONDS,
    ):
        self.sessions = sessions
        self.hosts = {name: frozenset(labels) for name, labels in hosts.items()}
        self.owner = owner or controller_id()
        self.pins = frozenset(pins)
        self.lease_seconds = lease_seconds
        self.held: dict[str, int] = {}  # host -> token
        self._renewed_at = -math.inf  # monotonic time of the last beat that renewed every lease
        self.on_change: Callable[[Beat], None] = lambda beat: None
        self._task: asyncio.Task[None] | None = None

    def owns(self, host: str) -> bool:
        """Held, and renewed less than `lease_seconds` ago by this process's monotonic clock: the
        renewal's expiry in the database, counted from its transaction, is later still."""
        return host in self.held and time.monotonic() - self._renewed_at < self.lease_seconds

    def fence(self, host: str) -> Fence | None:
        token = self.held.get(host)
        if token is None:
            raise LeaseLost(f"{host}: not owned by {self.owner}")
        return Fence(host, self.owner, token, self.lease_seconds)

    def eligible(self, host: str, pins: Collection[str]) -> bool:
        return not pins or bool(self.hosts.get(host, frozenset()) & frozenset(pins))

    def start(self) -> None:
        self._task = asyncio.create_task(self._beat_forever(), name="leases")

    async def close(self) -> None:
        """Stops beating and hands every lease back, so that others take them at once."""
        if self._task is not None:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)
        if self.held:
            try:
                async with self.sessions.write.begin() as session:
                    await _end_if_stalled(session, self.lease_seconds)
                    await session.execute(
                        update(HostLease)
                        .where(HostLease.owner == self.owner, HostLease.host.in_(list(self.held)))
                        .values(expires_at=func.now() - timedelta(seconds=1))
                    )
                    await session.execute(
                        update(Controller)
                        .where(Controller.id == self.owner)
                        .values(heartbeat_at=func.now() - timedelta(days=1))
                    )
            except SQLAlchemyError as exc:
                log.warning("leases: not handed back (they expire instead): %s", exc)
        self._lose(list(self.held))

    async def _beat_forever(self) -> None:
        backoff = Backoff(self.lease_seconds / 6, self.lease_seconds / 3)
        while True:
            try:
                self.on_change(await self.beat())
                backoff.reset()
                await asyncio.sleep(self.lease_seconds / 3)
            except asyncio.CancelledError:
                raise
            except Exception as exc:  # the database away: keep trying, but never act on stale leases
                log.warning("leases: heartbeat failed: %s", exc)
                if self.held and time.monotonic() - self._renewed_at > self.lease_seconds * 2 / 3:
                    self.on_change(Beat({}, self._lose(list(self.held))))
                await asyncio.sleep(backoff.next())

    async def beat(self) -> Beat:
        """One heartbeat: alive, renew, take free hosts, give back to the less loaded; in one transaction.

        A free host is taken by a controller that holds no more than any other live controller
        that may own it, or by any that may own it once it has stayed free for a beat; a held
        host is given back (one where nothing runs first) where another controller that may own it
        holds two fewer. Hosts so spread evenly, and pins (which controllers may own which host)
        leave none unowned."""
        started = time.monotonic()
        # Leases that lapsed by this clock (the process stalled) are not renewed, even where the
        # database has not expired them yet: `owns` has stopped their work, so they are let go of.
        renewing = self.held if started - self._renewed_at < self.lease_seconds else {}
        lease = timedelta(seconds=self.lease_seconds)
        mine = sorted((h for h in self.hosts if self.eligible(h, self.pins)), key=self._order)
        async with self.sessions.write.begin() as session:
            # Its renewals lock its lease rows until it commits: a stall here must not keep them.
            await _end_if_stalled(session, self.lease_seconds)
            await session.execute(
                insert(Controller)
                .values(id=self.owner, pins=sorted(self.pins), started_at=func.now(), heartbeat_at=func.now())
                .on_conflict_do_update(
                    index_elements=["id"], set_={"heartbeat_at": func.now(), "pins": sorted(self.pins)}
                )
            )
            # Only the rows missing: an insert that meets a row another beat is renewing waits for
            # that beat to commit, and a controller stalled inside its beat would stall this one.
            listed = set(await session.scalars(select(HostLease.host).where(HostLease.host.in_(mine))))
            if missing := [host for host in mine if host not in listed]:
                await session.execute(
                    insert(HostLease)
                    .values([{"host": host, "owner": "", "token": 0, "expires_at": func.now()} for host in missing])
                    .on_conflict_do_nothing(index_elements=["host"])
                )
            live = {
                row.id: frozenset(row.pins)
                for row in await session.execute(
                    select(Controller.id, Controller.pins).where(Controller.heartbeat_at > func.now() - lease)
                )
            }
            kept: dict[str, int] = {}
            if renewing:
                renewed = await session.execute(
                    update(HostLease)
                    .where(
                        or_(*(and_(HostLease.host == h, HostLease.token == t) for h, t in renewing.items())),
                        HostLease.owner == self.owner,
                        HostLease.expires_at > func.now(),
                    )
                    .values(expires_at=func.now() + lease)
                    .returning(HostLease.host, HostLease.token)
                )
                kept = {host: token for host, token in renewed}
            leases = await session.execute(
                select(
                    HostLease.host,
                    HostLease.owner,
                    HostLease.expires_at > func.now(),
                    HostLease.expires_at < func.now() - lease / 3,
                )
            )
            counts = dict.fromkeys(live, 0)
            free, long_free = set(), set()
            for host, owner, held, stale in leases:
                if held and owner in counts and owner != self.owner:
                    counts[owner] += 1
                elif not held:
                    free.add(host)
                    if stale:
                        long_free.add(host)
            counts[self.owner] = len(kept)

            def others(host: str) -> list[str]:
                return [c for c, pins in live.items() if c != self.owner and self.eligible(host, pins)]

            gained: dict[str, int] = {}
            for host in mine:
                rivals = others(host)
                least = min((counts[c] for c in rivals), default=counts[self.owner])
                if host not in free or (counts[self.owner] > least and host not in long_free):
                    continue
                # SKIP LOCKED: a row a fenced write holds (its writer perhaps stalled) is not waited
                # for, which would stall this whole beat, renewals included; it is tried next beat.
                unheld = select(HostLease.host).where(HostLease.host == host).with_for_update(skip_locked=True)
                taken = await session.execute(
                    update(HostLease)
                    .where(HostLease.host.in_(unheld), HostLease.expires_at <= func.now())
                    .values(owner=self.owner, token=HostLease.token + 1, expires_at=func.now() + lease)
                    .returning(HostLease.token)
                )
                if (token := taken.scalar()) is not None:
                    gained[host] = token
                    counts[self.owner] += 1
            surplus: list[str] = []
            for host in await self._give_back_order(session, kept):
                rivals = others(host)
                if (
                    rivals
                    and (lighter := min(rivals, key=counts.__getitem__))
                    and counts[lighter] < counts[self.owner] - 1
                ):
                    surplus.append(host)
                    counts[self.owner] -= 1
                    counts[lighter] += 1
            if surplus:
                await session.execute(
                    update(HostLease)
                    .where(HostLease.owner == self.owner, HostLease.host.in_(surplus))
                    .values(expires_at=func.now() - timedelta(seconds=1))
                )
        lost = [host for host in self.held if host not in kept or host in surplus]
        self.held = {host: token for host, token in kept.items() if host not in surplus} | gained
        self._renewed_at = started
        return Beat(gained, lost)

    async def _give_back_order(self, session: AsyncSession, kept: Collection[str]) -> list[str]:
        """The hosts this controller would give back first: those where nothing runs, so that a
        spreading moves no follower, mirror or live log that need not move; then its own order."""
        busy = set(
            await session.scalars(
                select(Host.name)
                .join(Attempt, Attempt.host_id == Host.id)
                .where(Host.name.in_(kept), Attempt.status.in_(ACTIVE_STATUSES))
                .distinct()
            )
        )
        return sorted(sorted(kept, key=self._order, reverse=True), key=busy.__contains__)

    def _lose(self, hosts: list[str]) -> list[str]:
        for host in hosts:
            self.held.pop(host, None)
        return hosts

    def _order(self, host: str) -> str:
        """Each controller's own order of the hosts: controllers starting together take different ones."""
        return hashlib.sha256(f"{self.owner}/{host}".encode()).hexdigest()


async def lease_table(session: AsyncSession) -> list[dict[str, object]]:
    """The lease table as the status page and the docs show it."""
    rows = await session.execute(
        select(
            HostLease.host,
            HostLease.owner,
            HostLease.token,
            HostLease.expires_at,
            (HostLease.expires_at > func.now()).label("held"),
        ).order_by(HostLease.host)
    )
    return [dict(row._mapping) for row in rows]
