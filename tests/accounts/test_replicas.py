"""Two dashboards on one database, as replicas behind a load balancer: failed logins on one lock the
login on the other, and a setup link either printed works on either, once. On SQLite (two
processes of one host) and on PostgreSQL."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from contextlib import AsyncExitStack, asynccontextmanager
from pathlib import Path

from fastapi import FastAPI
from httpx import AsyncClient
from sqlalchemy import select

from app.accounts.limits import LoginLimiter
from app.accounts.setup import SetupLink
from app.db.models import AuditEvent, SetupLinkDigest, User
from app.states import Role, ServerRole
from app.web.app import create_app
from tests.support.accounts import PASSWORD, Clock, add_user, browser
from tests.support.dashboard import make_settings
from tests.support.web import csrf_from


@asynccontextmanager
async def replicas(folder: Path, database_url: str, *links: SetupLink | None) -> AsyncIterator[tuple[FastAPI, FastAPI]]:
    """Two web replicas on `database_url`, each with a data dir of its own and, if given, the setup
    link its start printed."""
    async with AsyncExitStack() as stack:
        apps = []
        for name, link in zip(("one", "two"), links or (None, None), strict=True):
            (folder / name).mkdir()
            settings = make_settings(folder / name, [], database_url=database_url)
            app = create_app(settings, setup_link=link, roles=frozenset({ServerRole.WEB}))
            await stack.enter_async_context(app.router.lifespan_context(app))
            apps.append(app)
        yield apps[0], apps[1]


async def post_login(client: AsyncClient, name: str, password: str) -> tuple[int, str, str | None]:
    form = await client.get("/login")
    fields = {"name": name, "password": password, "next": "/hosts", "csrf_token": csrf_from(form.text)}
    answer = await client.post("/login", data=fields)
    return answer.status_code, answer.text, answer.headers.get("retry-after")


async def test_failed_logins_on_one_replica_lock_the_login_on_the_other(tmp_path: Path, database_url: str) -> None:
    async with replicas(tmp_path, database_url) as (one, two), browser(one) as first, browser(two) as second:
        await add_user(one, "ann", Role.OPERATOR)
        clock = Clock(time.time())  # one stopped clock: the lock's seconds cannot tick between requests
        for app in (one, two):
            app.state.runtime.login_limits = LoginLimiter(clock=clock)
        for n in range(5):
            assert (await post_login(first, "ann", f"guess-{n}"))[0] == 401
        status, page, retry_after = await post_login(second, "ann", PASSWORD)  # the right one, refused unread
        assert (status, retry_after) == (429, "60")
        assert "Too many failed logins: try again in 60 s." in page
        async with two.state.runtime.sessions.read() as session:
            [row] = (await session.scalars(select(AuditEvent).where(AuditEvent.action == "login-failed"))).all()
        assert (row.detail["failures"], row.detail["refused"]) == (5, 1)
        assert row.detail["summary"].startswith("6 failed logins from 127.0.0.1 in ")


async def open_form(client: AsyncClient, secret: str) -> tuple[int, str]:
    form = await client.get(f"/setup/{secret}")
    return form.status_code, csrf_from(form.text) if form.status_code == 200 else ""


async def create_admin(client: AsyncClient, secret: str, name: str, csrf: str) -> int:
    fields = {"name": name, "password": PASSWORD, "again": PASSWORD, "csrf_token": csrf}
    return (await client.post(f"/setup/{secret}", data=fields)).status_code


async def test_a_setup_link_printed_by_either_replica_works_once_on_either(tmp_path: Path, database_url: str) -> None:
    (link_one, secret_one), (link_two, secret_two) = SetupLink.issue(), SetupLink.issue()
    async with replicas(tmp_path, database_url, link_one, link_two) as (one, two):
        async with one.state.runtime.sessions.read() as session:
            kept = [(row.digest, row.expires_at.isoformat()) for row in await session.scalars(select(SetupLinkDigest))]
        assert len(kept) == 2 and not any(secret in str(kept) for secret in (secret_one, secret_two))
        async with browser(two) as ada:
            status, csrf = await open_form(ada, secret_one)  # printed by the first replica
            assert status == 200
            assert await create_admin(ada, secret_one, "ada", csrf) == 303
        async with browser(one) as eve, browser(two) as mallory:
            for client in (eve, mallory):
                for secret in (secret_one, secret_two):
                    assert (await open_form(client, secret))[0] == 404
            csrf = csrf_from((await eve.get("/login")).text)
            assert await create_admin(eve, secret_two, "eve", csrf) == 404
        async with one.state.runtime.sessions.read() as session:
            assert list(await session.scalars(select(User.name))) == ["ada"]


async def test_one_link_sent_to_both_replicas_at_once_makes_one_admin(tmp_path: Path, database_url: str) -> None:
    link, secret = SetupLink.issue()
    async with replicas(tmp_path, database_url, link, None) as (one, two):
        async with browser(one) as ada, browser(two) as bob:
            forms = [await open_form(ada, secret), await open_form(bob, secret)]
            assert [status for status, _ in forms] == [200, 200]
            answers = await asyncio.gather(
                create_admin(ada, secret, "ada", forms[0][1]), create_admin(bob, secret, "bob", forms[1][1])
            )
        assert sorted(answers) == [303, 404]
        async with two.state.runtime.sessions.read() as session:
            assert len((await session.scalars(select(User))).all()) == 1
