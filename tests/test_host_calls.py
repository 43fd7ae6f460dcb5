"""Work on a host asked of its owner through PostgreSQL (app.host_calls): the owner alone carries a
call out, once, and its error comes back as the same class and sentence; a call nobody can take is
refused at once, and one nobody takes in time says so. A call whose claimer died is taken over by
the host's new owner, and done again only where doing it twice is safe."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from typing import Any

import pytest
from sqlalchemy import func, select

from app.db import Sessions
from app.db.models import HostCall
from app.errors import Conflict, HostError, HostUnavailable
from app.host_calls import LOOK_EVERY, TAKE_OVER_EVERY, HostCalls
from app.leases import LeaseKeeper
from tests import test_leases
from tests.test_leases import HOSTS, LEASE, keeper, settle

pytestmark = pytest.mark.postgres

sessions = test_leases.sessions  # the fixture: a database of its own on PostgreSQL


async def test_only_the_owner_carries_a_call_out_once_and_its_error_comes_back_as_raised(sessions: Sessions) -> None:
    first, second = keeper(sessions, "first"), keeper(sessions, "second")
    await settle(first, second)
    done: list[tuple[str, dict[str, Any]]] = []
    controllers = []
    for leases in (first, second):
        calls = HostCalls(sessions, leases)

        async def echo(payload: dict[str, Any], owner: str = leases.owner) -> dict[str, Any]:
            done.append((owner, payload))
            if payload.get("refuse"):
                raise Conflict(f"{payload['host']} is busy")
            return {"by": owner}

        calls.handle("echo", echo)
        leases.start()  # renewed: a slow run outlasts no lease
        calls.start()
        controllers.append(calls)
    web = HostCalls(sessions, controller=False)
    try:
        host = next(iter(first.held))
        assert not web.here(host) and controllers[0].here(host) and not controllers[1].here(host)
        answers = await asyncio.gather(*(web.on_host(host, "echo", {"n": n}, wait=10) for n in range(5)))
        assert answers == [{"by": "first"}] * 5
        assert sorted(payload["n"] for _, payload in done) == list(range(5))  # each once
        with pytest.raises(Conflict, match=f"^{host} is busy$"):
            await web.on_host(host, "echo", {"host": host, "refuse": True}, wait=10)
        async with sessions.read() as session:
            claimed = (
                await session.execute(select(HostCall.claimed_by, func.count()).group_by(HostCall.claimed_by))
            ).all()
        assert claimed == [("first", 6)]
    finally:
        for calls in controllers:
            await calls.close()
        await first.close()
        await second.close()


async def test_a_call_no_controller_can_take_is_refused_and_one_not_taken_in_time_says_so(sessions: Sessions) -> None:
    web = HostCalls(sessions, controller=False)
    host = next(iter(HOSTS))
    with pytest.raises(HostUnavailable, match="no controller owns it now"):
        await web.on_host(host, "echo", {}, wait=1)
    asleep = keeper(sessions, "asleep")
    await asleep.beat()  # it owns every host, and never looks for calls
    with pytest.raises(HostUnavailable, match=r"did not answer within 0.5 s; it is still carried out .* within 1.5 s"):
        await web.on_host(host, "echo", {}, wait=0.5, keep=2)


async def beat_until_killed(leases: LeaseKeeper) -> None:
    """The controller's heartbeat, as LeaseKeeper.start runs it; cancelled, as by kill -9, it
    hands nothing back: its leases run out."""
    while True:
        await leases.beat()
        await asyncio.sleep(LEASE / 3)


async def claimed_by_one_that_dies(sessions: Sessions, kind: str, done: list[str]) -> asyncio.Task[dict[str, Any]]:
    """Asks `kind` of the owner of a host ("first"), which claims it and dies before answering:
    its handler never returns, and neither its calls nor its heartbeat go on. The asker, waiting."""
    first = keeper(sessions, "first")
    await first.beat()  # it owns every host
    beating = asyncio.create_task(beat_until_killed(first))
    dying = HostCalls(sessions, first)
    started = asyncio.Event()

    async def hang(payload: dict[str, Any]) -> dict[str, Any]:
        done.append("first")
        started.set()
        await asyncio.Event().wait()
        raise AssertionError("never answers")

    dying.handle(kind, hang)
    web = HostCalls(sessions, controller=False)
    asking = asyncio.create_task(web.on_host(next(iter(HOSTS)), kind, {"attempt": 1}, wait=10, keep=20))
    while not started.is_set():
        await dying.serve()
        await asyncio.sleep(LOOK_EVERY)
    beating.cancel()
    await dying.close()
    await asyncio.gather(beating, return_exceptions=True)
    return asking


@contextlib.asynccontextmanager
async def new_owner(sessions: Sessions, kind: str, done: list[str]) -> AsyncIterator[None]:
    """A controller ("second") that takes the dead one's hosts as their leases run out, and carries
    out the calls there."""
    second = keeper(sessions, "second")
    calls = HostCalls(sessions, second)

    async def answer(payload: dict[str, Any]) -> dict[str, Any]:
        done.append("second")
        return {"by": "second"}

    calls.handle(kind, answer)
    second.start()
    calls.start()
    try:
        yield
    finally:
        await calls.close()
        await second.close()


async def test_a_stop_claimed_by_a_controller_that_died_is_carried_out_once_by_the_new_owner(
    sessions: Sessions,
) -> None:
    done: list[str] = []
    asking = await claimed_by_one_that_dies(sessions, "signal", done)
    async with new_owner(sessions, "signal", done):
        assert await asking == {"by": "second"}
        await asyncio.sleep(TAKE_OVER_EVERY + LOOK_EVERY)  # its later looks take nothing more
    assert done == ["first", "second"]
    async with sessions.read() as session:
        row = (await session.execute(select(HostCall.claimed_by, HostCall.error))).one()
    assert tuple(row) == ("second", None)


async def test_an_adoption_whose_controller_died_is_not_done_again_and_the_asker_is_told_to_look(
    sessions: Sessions,
) -> None:
    done: list[str] = []
    asking = await claimed_by_one_that_dies(sessions, "adopt", done)
    async with new_owner(sessions, "adopt", done):
        with pytest.raises(HostError) as raised:
            await asking
    assert type(raised.value) is HostError
    assert str(raised.value) == (
        f"{next(iter(HOSTS))}: the controller carrying out this adopt stopped before answering (it died or "
        "lost the host), so whether it happened is unknown: look at the host's page before asking again"
    )
    assert done == ["first"]


async def test_a_slow_call_of_a_controller_that_still_owns_its_host_is_not_taken_over(sessions: Sessions) -> None:
    first, second = keeper(sessions, "first"), keeper(sessions, "second")
    await settle(first, second)
    host = next(iter(first.held))
    done: list[str] = []
    started, release = asyncio.Event(), asyncio.Event()
    controllers = []
    for leases in (first, second):
        calls = HostCalls(sessions, leases)

        async def slow(payload: dict[str, Any], owner: str = leases.owner) -> dict[str, Any]:
            done.append(owner)
            started.set()
            await release.wait()
            return {"by": owner}

        calls.handle("signal", slow)
        leases.start()
        calls.start()
        controllers.append(calls)
    web = HostCalls(sessions, controller=False)
    try:
        asking = asyncio.create_task(web.on_host(host, "signal", {"attempt": 1}, wait=10, keep=20))
        await asyncio.wait_for(started.wait(), 5)
        await asyncio.sleep(3 * max(TAKE_OVER_EVERY, LEASE))  # lease renewed, looks for calls to take over
        assert host in first.held and done == ["first"]
        release.set()
        assert await asking == {"by": "first"}
    finally:
        for calls in controllers:
            await calls.close()
        await first.close()
        await second.close()
    assert done == ["first"]
