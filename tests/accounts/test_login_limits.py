"""Failed logins are limited per address and per account, with Retry-After, and audited once per burst."""

from __future__ import annotations

from fastapi import FastAPI
from httpx import AsyncClient
from sqlalchemy import select

from app.accounts.limits import LoginLimiter
from app.db.models import AuditEvent
from tests.support.dashboard import AUTH, TOKEN
from tests.support.web import csrf_from


class Clock:
    """A clock the test moves by hand."""

    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


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


def test_the_account_is_locked_from_every_address_and_the_address_for_every_account() -> None:
    clock = Clock()
    limiter = LoginLimiter(clock=clock)
    for n in range(5):
        assert limiter.check(f"10.0.0.{n}", "alice") is None
        limiter.failed(f"10.0.0.{n}", "alice")
    assert limiter.check("10.0.0.99", "alice") == 60
    assert limiter.check("10.0.0.99", "bob") is None
    for _ in range(5):
        limiter.failed("10.0.0.7", "bob")
    assert limiter.check("10.0.0.7", "carol") == 60
    clock.now += 60
    assert limiter.check("10.0.0.7", "carol") is None


def test_a_right_login_clears_the_failures_before_it() -> None:
    limiter = LoginLimiter(clock=Clock())
    for _ in range(4):
        limiter.failed("10.0.0.1", "alice")
    limiter.succeeded("10.0.0.1", "alice")
    for _ in range(4):
        limiter.failed("10.0.0.1", "alice")
    assert limiter.check("10.0.0.1", "alice") is None


def test_five_failures_spread_over_more_than_a_minute_lock_nothing() -> None:
    clock = Clock()
    limiter = LoginLimiter(clock=clock)
    for _ in range(20):
        limiter.failed("10.0.0.1", "alice")
        clock.now += 15
        assert limiter.check("10.0.0.1", "alice") is None
