"""Failed logins are limited per address and per account, with Retry-After, and audited once per
burst; the limits live in the database (SQLite and PostgreSQL), bounded."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import pytest
from fastapi import FastAPI
from httpx import AsyncClient
from sqlalchemy import select

from app import db
from app.accounts.limits import LoginLimiter
from app.db import Sessions
from app.db.models import AuditEvent, LoginLimit
from tests.support.accounts import Clock
from tests.support.dashboard import AUTH, TOKEN
from tests.support.web import csrf_from


def limited(app: FastAPI) -> Clock:
    clock = Clock()
    app.state.runtime.login_limits = LoginLimiter(clock=clock)
    return clock


async def failed_logins(app: FastAPI) -> list[AuditEvent]:
    async with app.state.runtime.sessions.read() as session:
        return list(
            await session.scalars(select(AuditEvent).where(AuditEvent.action == "login-failed").order_by(AuditEvent.id))
        )


async def post_login(client: AsyncClient, token: str) -> tuple[int, str, str | None]:
    form = await client.get("/login")
    answer = await client.post("/login", data={"token": token, "next": "/hosts", "csrf_token": csrf_from(form.text)})
    return answer.status_code, answer.text, answer.headers.get("retry-after")


async def test_the_form_refuses_after_five_failures_even_the_right_token_until_the_backoff_ends(
    app_client: AsyncClient, running_app: FastAPI
) -> None:
    clock = limited(running_app)
    for n in range(5):
        assert (await post_login(app_client, f"guess-{n}"))[0] == 401
    status, page, retry_after = await post_login(app_client, TOKEN)
    assert (status, retry_after) == (429, "60")
    assert "Too many failed logins: try again in 60 s." in page and 'name="token"' in page
    clock.now += 59
    status, _, retry_after = await post_login(app_client, TOKEN)
    assert (status, retry_after) == (429, "1")
    clock.now += 1
    assert (await post_login(app_client, TOKEN))[0] == 303
    assert (await app_client.get("/hosts")).status_code == 200


async def test_each_failure_after_a_lock_doubles_it(app_client: AsyncClient, running_app: FastAPI) -> None:
    clock = limited(running_app)
    for n in range(5):
        await post_login(app_client, f"guess-{n}")
    for expected in ("60", "120", "240"):
        status, _, retry_after = await post_login(app_client, "guess")
        assert (status, retry_after) == (429, expected)
        clock.now += int(expected)
        assert (await post_login(app_client, "guess"))[0] == 401  # compared again, and wrong: a longer lock
    assert (await post_login(app_client, TOKEN))[:3:2] == (429, "480")


async def test_a_burst_of_wrong_logins_leaves_one_audit_row(app_client: AsyncClient, running_app: FastAPI) -> None:
    clock = limited(running_app)
    statuses = []
    for n in range(40):
        statuses.append((await post_login(app_client, f"guess-{n}"))[0])
        clock.now += 0.1
    assert (statuses.count(401), statuses.count(429)) == (5, 35)
    [row] = await failed_logins(running_app)
    assert row.detail["summary"] == "40 failed logins from 127.0.0.1 in 3.9 s (35 refused while locked)"
    assert (row.actor, row.remote_addr, row.target) == ("admin", "127.0.0.1", "admin")  # the token logs in as admin
    clock.now += 3600  # a later burst is a row of its own
    assert (await post_login(app_client, "guess"))[0] == 401
    summaries = [row.detail["summary"] for row in await failed_logins(running_app)]
    assert summaries[1:] == ["1 failed login from 127.0.0.1 in 0.0 s"]


async def test_the_api_refuses_wrong_tokens_from_a_locked_address_but_serves_the_right_one(
    app_client: AsyncClient, running_app: FastAPI
) -> None:
    """The lock slows guessing; a right token is no guess, so the team's scripts behind the same
    address go on while it lasts."""
    clock = limited(running_app)
    for n in range(5):
        answer = await app_client.get("/api/hosts", headers={"Authorization": f"Bearer guess-{n}"})
        assert answer.status_code == 401
    answer = await app_client.get("/api/hosts", headers={"Authorization": "Bearer guess-5"})
    assert answer.status_code == 429 and answer.headers["retry-after"] == "60"
    assert answer.json() == {"detail": "Too many failed logins: try again in 60 s."}
    assert (await app_client.get("/api/hosts", headers=AUTH)).status_code == 200
    clock.now += 60
    assert (await app_client.get("/api/hosts", headers={"Authorization": "Bearer guess-6"})).status_code == 401


@pytest.fixture
async def store(database_url: str) -> AsyncIterator[Sessions]:
    """Where the limits live: a fresh database of each kind."""
    db.upgrade(database_url)
    engine = db.create_engine(database_url)
    yield Sessions.of(engine)
    await engine.dispose()


async def limit_rows(store: Sessions) -> list[str]:
    async with store.read() as session:
        return list(await session.scalars(select(LoginLimit.name).order_by(LoginLimit.last_at)))


async def test_the_account_is_locked_from_every_address_and_the_address_for_every_account(store: Sessions) -> None:
    clock = Clock()
    limiter = LoginLimiter(clock=clock)
    for n in range(5):
        assert await limiter.check(store, f"10.0.0.{n}", "alice") is None
        await limiter.failed(store, f"10.0.0.{n}", "alice")
    assert await limiter.check(store, "10.0.0.99", "alice") == 60
    assert await limiter.check(store, "10.0.0.99", "bob") is None
    for _ in range(5):
        await limiter.failed(store, "10.0.0.7", "bob")
    assert await limiter.check(store, "10.0.0.7", "carol") == 60
    clock.now += 60
    assert await limiter.check(store, "10.0.0.7", "carol") is None


async def test_a_right_login_clears_the_failures_before_it(store: Sessions) -> None:
    limiter = LoginLimiter(clock=Clock())
    for _ in range(4):
        await limiter.failed(store, "10.0.0.1", "alice")
    await limiter.succeeded(store, "10.0.0.1", "alice")
    for _ in range(4):
        await limiter.failed(store, "10.0.0.1", "alice")
    assert await limiter.check(store, "10.0.0.1", "alice") is None


async def test_five_failures_spread_over_more_than_a_minute_lock_nothing(store: Sessions) -> None:
    clock = Clock()
    limiter = LoginLimiter(clock=clock)
    for _ in range(20):
        await limiter.failed(store, "10.0.0.1", "alice")
        clock.now += 15
        assert await limiter.check(store, "10.0.0.1", "alice") is None


async def test_failures_arriving_at_once_all_count_and_leave_one_audit_row(store: Sessions) -> None:
    """As from replicas behind a load balancer: each failure locks its rows, so none is lost and
    the burst's audit row is added once."""
    limiter = LoginLimiter(clock=Clock())
    await asyncio.gather(*(limiter.failed(store, "10.0.0.9", "alice") for _ in range(20)))
    async with store.read() as session:
        [row] = (await session.scalars(select(AuditEvent).where(AuditEvent.action == "login-failed"))).all()
    assert row.detail["summary"] == "20 failed logins from 10.0.0.9 in 0.0 s"
    assert await limiter.check(store, "10.0.0.8", "alice") == 900  # 5 to lock, 15 doublings: the longest
    assert await limiter.check(store, "10.0.0.9", "bob") == 900


async def test_the_table_keeps_the_newest_keys_and_forgets_quiet_ones(store: Sessions) -> None:
    clock = Clock()
    limiter = LoginLimiter(clock=clock, max_keys=10)
    for n in range(30):
        await limiter.failed(store, f"10.0.1.{n}")
        clock.now += 1
    assert await limit_rows(store) == [f"10.0.1.{n}" for n in range(20, 30)]
    clock.now += 3600  # a quiet hour: what those keys held counts for nothing any more
    await limiter.failed(store, "10.0.2.1", "alice")
    assert sorted(await limit_rows(store)) == ["10.0.2.1", "alice"]
