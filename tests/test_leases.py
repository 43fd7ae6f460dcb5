"""Host leases on a real PostgreSQL: controllers share the hosts, a dead one's are taken within the
lease time, and a stalled one that wakes is fenced off every host it no longer owns."""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import AsyncIterator

import psycopg
import pytest
from sqlalchemy import select, update
from sqlalchemy.exc import DBAPIError

from app import db
from app.db import Sessions
from app.db.models import Attempt, Controller, Host, HostLease, Preset, PresetRevision
from app.leases import LeaseKeeper, LeaseLost, lease_table
from app.states import AttemptStatus
from tests.support.postgres import POSTGRES_ADMIN_URL, postgres_available
from tests.support.strict import require

pytestmark = pytest.mark.postgres

HOSTS = {f"b200-{n:02}": {"b200", "site-a" if n <= 3 else "site-b"} for n in range(1, 7)}
LEASE = 1.0


@pytest.fixture
async def sessions() -> AsyncIterator[Sessions]:
    require(postgres_available(), f"PostgreSQL is not reachable at {POSTGRES_ADMIN_URL}")
    name = f"launchdeck_test_{uuid.uuid4().hex[:12]}"
    with psycopg.connect(POSTGRES_ADMIN_URL, autocommit=True) as admin:
        admin.execute(f'CREATE DATABASE "{name}"')
    url = POSTGRES_ADMIN_URL.rsplit("/", 1)[0].replace("postgresql://", "postgresql+psycopg://") + f"/{name}"
    try:
        db.upgrade(url)
        engine = db.create_engine(url)
        yield Sessions.of(engine)
        await engine.dispose()
    finally:
        with psycopg.connect(POSTGRES_ADMIN_URL, autocommit=True) as admin:
            admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


def keeper(sessions: Sessions, owner: str, **options: object) -> LeaseKeeper:
    return LeaseKeeper(sessions, HOSTS, owner=owner, lease_seconds=LEASE, **options)  # type: ignore[arg-type]


async def settle(*keepers: LeaseKeeper, beats: int = 4) -> None:
    for _ in range(beats):
        for one in keepers:
            await one.beat()


async def test_two_controllers_split_the_hosts_and_every_host_has_one_owner(sessions: Sessions) -> None:
    first, second = keeper(sessions, "first"), keeper(sessions, "second")
    beat = await first.beat()
    assert sorted(beat.gained) == sorted(HOSTS) and all(token == 1 for token in beat.gained.values())
    await settle(first, second)
    assert len(first.held) == len(second.held) == 3
    assert not set(first.held) & set(second.held)
    async with sessions.read() as session:
        table = {row["host"]: row for row in await lease_table(session)}
    for host in HOSTS:
        holder = first if host in first.held else second
        assert table[host]["owner"] == holder.owner and table[host]["token"] == holder.held[host]
        assert table[host]["held"] is True
    # The hosts that changed hands carry a new token: the first owner's is no longer current.
    moved = set(second.held)
    assert all(second.held[host] == 2 for host in moved)


async def test_hosts_spread_to_a_new_controller_are_the_idle_ones(sessions: Sessions) -> None:
    """A controller that joins (or comes back after a failover) is given hosts where nothing runs:
    a server's follower, mirror and live log stay where they are."""
    first = keeper(sessions, "first")
    await first.beat()
    busy = sorted(sorted(HOSTS, key=first._order, reverse=True)[:3])  # those its own order gives back first
    async with sessions.write.begin() as session:
        revision = PresetRevision(preset=Preset(name="served"), number=1, model_path="m")
        for host in busy:
            session.add(Attempt(host=Host(name=host), revision=revision, status=AttemptStatus.READY))
        session.add(Host(name=sorted(set(HOSTS) - set(busy))[0]))  # known, but nothing runs on it
    second = keeper(sessions, "second")
    await settle(second, first)
    assert sorted(first.held) == busy and sorted(second.held) == sorted(set(HOSTS) - set(busy))


async def test_a_dead_controller_s_hosts_are_taken_within_the_lease_time(sessions: Sessions) -> None:
    first, second = keeper(sessions, "first"), keeper(sessions, "second")
    await settle(first, second)
    orphaned = dict(first.held)
    died = time.monotonic()  # `first` beats no more
    while set(orphaned) - set(second.held):
        await second.beat()
        await asyncio.sleep(LEASE / 3)
        assert time.monotonic() - died < LEASE + LEASE / 3 + 1.0, second.held
    assert sorted(second.held) == sorted(HOSTS)
    assert all(second.held[host] == orphaned[host] + 1 for host in orphaned)


async def test_a_stalled_controller_that_wakes_writes_nothing_with_its_old_token(sessions: Sessions) -> None:
    first, second = keeper(sessions, "first"), keeper(sessions, "second")
    await first.beat()
    host = sorted(first.held)[0]
    stale = first.fence(host)
    assert stale is not None
    async with sessions.write.begin() as session:
        await stale.check(session)  # current: the write may go ahead
    await asyncio.sleep(LEASE + 0.1)  # `first` stalls past its lease
    await settle(second, beats=2)
    assert second.held[host] == stale.token + 1
    with pytest.raises(LeaseLost, match=f"{host}: lease 1 is no longer first's"):
        async with sessions.write.begin() as session:
            await stale.check(session)
            await session.execute(update(Attempt).values(error="written by a stale controller"))
    # Its own next beat finds it lost the host, and says so.
    beat = await first.beat()
    assert host in beat.lost and host not in first.held
    async with sessions.read() as session:
        assert await session.scalar(select(Attempt.id).where(Attempt.error != "")) is None


async def test_a_controller_that_wakes_past_its_lease_knows_before_its_next_beat_and_lets_go(
    sessions: Sessions,
) -> None:
    """What it does outside the database (a log mirror's appends) asks `owns`, which its own clock
    answers: nothing needs to reach the database first."""
    first = keeper(sessions, "first")
    await first.beat()
    host = sorted(first.held)[0]
    assert first.owns(host)
    first._renewed_at -= LEASE  # as if it stalled (SIGSTOP) for its lease time after the beat
    assert host in first.held and not first.owns(host)
    beat = await first.beat()  # the database has not expired the leases yet: let go all the same
    assert sorted(beat.lost) == sorted(HOSTS) and not first.held and not first.owns(host)
    await asyncio.sleep(LEASE)
    beat = await first.beat()  # taken afresh once free, with a new token: its work starts again
    assert beat.gained[host] == 2 and first.owns(host)


async def test_a_fenced_write_holds_off_a_takeover_until_it_commits(sessions: Sessions) -> None:
    first, second = keeper(sessions, "first"), keeper(sessions, "second")
    await first.beat()
    host = sorted(first.held)[0]
    fence = first.fence(host)
    assert fence is not None
    await asyncio.sleep(LEASE / 2)
    async with sessions.write.begin() as session:
        await fence.check(session)
        await asyncio.sleep(LEASE / 2 + 0.2)  # expired meanwhile, but the row is share-locked by this write
        beat = await asyncio.wait_for(second.beat(), LEASE / 3)  # not held up by the write...
        assert host not in beat.gained and host not in second.held  # ...nor taking its host under it
        await session.execute(update(Attempt).values(error="written under the lease"))
    beat = await second.beat()
    assert host in beat.gained


async def test_a_controller_stalled_inside_a_fenced_write_holds_its_host_no_longer_than_its_lease(
    sessions: Sessions,
) -> None:
    """It holds the lease row (SIGSTOP, a pause) in a transaction that never ends by itself: the
    other controllers' beats go on, renewals included, and the server ends the stalled transaction
    after the lease time, its write rolled back, so that its host is taken as a dead controller's."""
    stalled, other = keeper(sessions, "stalled"), keeper(sessions, "other")
    await settle(stalled, other)
    host = sorted(stalled.held)[0]
    own = dict(other.held)
    fence = stalled.fence(host)
    assert fence is not None
    session = sessions.write()
    await session.begin()
    await fence.check(session)
    await session.execute(update(Controller).where(Controller.id == "stalled").values(pins=["written while stalled"]))
    stalled_at = time.monotonic()  # ...and it stalls, its transaction open
    while host not in other.held:
        beat = await asyncio.wait_for(other.beat(), LEASE / 3)
        assert not set(own) & set(beat.lost), beat  # its own hosts renewed all along
        assert time.monotonic() - stalled_at < 2 * LEASE + LEASE / 3, other.held
        await asyncio.sleep(LEASE / 6)
    assert other.held[host] == fence.token + 1
    with pytest.raises(DBAPIError, match="idle-in-transaction timeout"):
        await session.commit()  # woken: its transaction was ended for it
    await session.close()
    async with sessions.read() as check:
        assert await check.scalar(select(Controller.pins).where(Controller.id == "stalled")) == []


async def test_a_controller_stalled_inside_its_beat_holds_its_hosts_no_longer_than_its_lease(
    sessions: Sessions, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Its renewal has locked its lease rows when it stalls, before its beat commits: the other
    controller takes its hosts as a dead one's, the stalled beat rolled back by the server."""
    stalled, other = keeper(sessions, "stalled"), keeper(sessions, "other")
    await settle(stalled, other)
    hosts = set(stalled.held)
    inside, never = asyncio.Event(), asyncio.Event()

    async def stall(*args: object) -> list[str]:  # a step of the beat after the renewal, in its transaction
        inside.set()
        await never.wait()
        return []

    monkeypatch.setattr(stalled, "_give_back_order", stall)
    beat = asyncio.create_task(stalled.beat())
    await asyncio.wait_for(inside.wait(), LEASE)
    stalled_at = time.monotonic()
    while not hosts <= set(other.held):
        await asyncio.wait_for(other.beat(), LEASE / 3)
        assert time.monotonic() - stalled_at < 2 * LEASE + LEASE / 3, other.held
        await asyncio.sleep(LEASE / 6)
    never.set()
    with pytest.raises(DBAPIError, match="idle-in-transaction timeout"):
        await beat  # woken: its transaction was ended for it


async def test_a_controller_pinned_to_a_site_owns_only_its_hosts(sessions: Sessions) -> None:
    site_a, anywhere = keeper(sessions, "site-a", pins={"site-a"}), keeper(sessions, "anywhere")
    await settle(site_a, anywhere)
    assert set(site_a.held) <= {host for host, labels in HOSTS.items() if "site-a" in labels}
    assert set(site_a.held) | set(anywhere.held) == set(HOSTS)
    assert not set(site_a.held) & set(anywhere.held)


async def test_a_controller_that_stops_hands_its_hosts_back_at_once(sessions: Sessions) -> None:
    first, second = keeper(sessions, "first"), keeper(sessions, "second")
    await settle(first, second)
    await first.close()
    assert not first.held
    await second.beat()  # one beat, no waiting for the lease to run out
    assert sorted(second.held) == sorted(HOSTS)
    async with sessions.read() as session:
        owners = set((await session.scalars(select(HostLease.owner))).all())
    assert owners == {"second"}
