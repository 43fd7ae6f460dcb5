"""Single sign-on behind a proxy: who is let in by the proxy's header, and who is not."""

from __future__ import annotations

import asyncio
import logging
import subprocess
from collections.abc import AsyncIterator, Callable
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from pathlib import Path

import httpx
import pytest
from fastapi import FastAPI
from httpx import ASGITransport, AsyncClient
from sqlalchemy import select

from app.accounts import users
from app.config import Settings
from app.db.models import AuditEvent, User
from app.states import Role
from app.web.app import create_app
from tests.support.accounts import forget_failed_logins
from tests.support.cli import cli_argv, cli_env, run_cli
from tests.support.dashboard import make_settings
from tests.support.paths import ROOT
from tests.support.servers import free_port
from tests.support.waiting import until
from tests.support.web import csrf_from

PROXY = "10.0.0.5"
SIGN_ON = {
    "auth_proxy_header": "X-Forwarded-User",
    "auth_proxy_addresses": "127.0.0.1, 10.0.0.0/29",
    "allowed_hosts": "dash.example",
}

Dashboard = Callable[..., AbstractAsyncContextManager[FastAPI]]


@pytest.fixture
def dashboard(tmp_path: Path) -> Dashboard:
    """A running dashboard with no hosts, built with the given settings."""

    @asynccontextmanager
    async def open_app(**overrides: object) -> AsyncIterator[FastAPI]:
        app = create_app(make_settings(tmp_path, [], **overrides))
        async with app.router.lifespan_context(app):
            yield app

    return open_app


def client_from(app: FastAPI, address: str) -> AsyncClient:
    transport = ASGITransport(app=app, client=(address, 1234))
    return AsyncClient(transport=transport, base_url="http://127.0.0.1:8000")


async def test_the_proxy_names_a_new_person_who_gets_an_account_with_the_default_role(dashboard: Dashboard) -> None:
    async with dashboard(**SIGN_ON) as app, client_from(app, PROXY) as proxy:
        as_ann = {"X-Forwarded-User": "Ann"}
        page = await proxy.get("/hosts", headers=as_ann)
        assert page.status_code == 200 and 'aria-label="Main"' in page.text  # the logged-in menu
        assert (await proxy.get("/api/attempts", headers=as_ann)).status_code == 200

        launch = await proxy.get("/launch", headers=as_ann)
        assert launch.status_code == 403 and "this needs the operator role; ann has the viewer role" in launch.text
        api_launch = await proxy.post("/api/attempts", headers=as_ann, json={})
        assert api_launch.status_code == 403

        async with app.state.runtime.sessions.read() as db:
            ann = await users.get_user(db, "ann")
            events = (await db.scalars(select(AuditEvent))).all()
        assert (ann.role, ann.disabled_at) == (Role.VIEWER, None)
        assert [(e.actor, e.action, e.target, e.remote_addr, e.detail) for e in events] == [
            ("ann", "user-created", "ann", PROXY, {"by": "proxy", "role": "viewer"})
        ]


async def test_the_default_role_is_a_setting_and_a_role_given_later_holds(dashboard: Dashboard) -> None:
    async with dashboard(**SIGN_ON, auth_proxy_default_role="operator") as app, client_from(app, "127.0.0.1") as proxy:
        assert (await proxy.get("/launch", headers={"X-Forwarded-User": "bob"})).status_code == 200
        async with app.state.runtime.sessions.write() as db:
            await users.set_role(db, "bob", Role.VIEWER)
        assert (await proxy.get("/launch", headers={"X-Forwarded-User": "bob"})).status_code == 403


async def test_a_proxy_persons_form_posts_carry_the_csrf_token(dashboard: Dashboard) -> None:
    async with dashboard(**SIGN_ON) as app, client_from(app, PROXY) as proxy:
        as_fay = {"X-Forwarded-User": "fay"}
        page = await proxy.get("/hosts", headers=as_fay)
        forged = await proxy.post("/logout", headers=as_fay)
        assert forged.status_code == 403 and "CSRF check failed" in forged.text
        posted = await proxy.post("/logout", headers=as_fay, data={"csrf_token": csrf_from(page.text)})
        assert posted.status_code == 303


async def test_first_requests_at_once_make_one_account_and_all_get_in(dashboard: Dashboard) -> None:
    async with dashboard(**SIGN_ON) as app, client_from(app, PROXY) as proxy:
        pages = await asyncio.gather(*(proxy.get("/hosts", headers={"X-Forwarded-User": "cy"}) for _ in range(8)))
        assert [page.status_code for page in pages] == [200] * 8
        async with app.state.runtime.sessions.read() as db:
            assert len((await db.scalars(select(User).where(User.name == "cy"))).all()) == 1
            assert len((await db.scalars(select(AuditEvent))).all()) == 1


async def test_the_header_from_anyone_but_a_proxy_is_ignored_logged_once_and_counted(
    dashboard: Dashboard, caplog: pytest.LogCaptureFixture
) -> None:
    async with dashboard(**SIGN_ON) as app, client_from(app, "10.0.0.9") as stranger:
        with caplog.at_level(logging.WARNING, logger="app.accounts.proxy"):
            page = await stranger.get("/hosts", headers={"X-Forwarded-User": "ann"})
            assert (page.status_code, page.headers["location"]) == (303, "/login?next=/hosts")
            for _ in range(20):
                api = await stranger.get("/api/attempts", headers={"X-Forwarded-User": "ann"})
                assert api.status_code == 401 and "authentication required" in api.json()["detail"]
        assert [r.getMessage() for r in caplog.records] == [
            "ignored the X-Forwarded-User header from 10.0.0.9, which is not in LAUNCHDECK_AUTH_PROXY_ADDRESSES "
            "(more from it are counted, not logged)"
        ]
        assert app.state.runtime.ignored_headers.counts == {"10.0.0.9": 21}
        async with app.state.runtime.sessions.read() as db:
            assert await users.list_users(db) == []


async def test_a_rebinding_page_cannot_use_the_proxys_header(dashboard: Dashboard) -> None:
    """A page on evil.example whose name resolves to this machine sends its own Host: refused
    before the header is read, also on loopback."""
    async with dashboard(**SIGN_ON) as app, client_from(app, "127.0.0.1") as browser:
        rebound = {"Host": "evil.example", "X-Forwarded-User": "race1"}
        for path in ("/users", "/api/attempts"):
            answer = await browser.get(path, headers=rebound)
            assert answer.status_code == 400 and "does not answer to the host 'evil.example'" in answer.text
        named = await browser.get("/api/attempts", headers={"Host": "dash.example", "X-Forwarded-User": "race1"})
        assert named.status_code == 200
        async with app.state.runtime.sessions.read() as db:
            assert [user.name for user in await users.list_users(db)] == ["race1"]


async def test_forwarded_for_names_the_client_only_from_a_proxy(dashboard: Dashboard) -> None:
    """The login limits and the audit trail take X-Forwarded-For from the proxies in front; from
    anyone else it is ignored, so it neither hides a guesser nor names another address."""
    async with dashboard(auth_proxy_addresses="10.0.0.5") as app:
        async with client_from(app, "127.0.0.1") as direct:
            for n in range(6):
                status = await _wrong_login(direct, {"X-Forwarded-For": f"198.51.100.{n}"})
            assert status == 429  # the sixth: one address, whatever the header said
        await forget_failed_logins(app)  # the access-token login's account is locked too
        async with client_from(app, PROXY) as proxy:
            assert await _wrong_login(proxy, {"X-Forwarded-For": "203.0.113.7, 10.0.0.1"}) == 401
        async with app.state.runtime.sessions.read() as db:
            events = (await db.scalars(select(AuditEvent).order_by(AuditEvent.id))).all()
        assert [e.remote_addr for e in events] == ["127.0.0.1", "10.0.0.1"]  # the last hop the proxy saw


async def _wrong_login(client: AsyncClient, headers: dict[str, str]) -> int:
    form = await client.get("/login", headers=headers)
    data = {"token": "a-wrong-guess", "next": "/hosts", "csrf_token": csrf_from(form.text)}
    return (await client.post("/login", data=data, headers=headers)).status_code


async def test_a_disabled_account_is_refused_with_a_sentence(dashboard: Dashboard) -> None:
    async with dashboard(**SIGN_ON) as app, client_from(app, PROXY) as proxy:
        assert (await proxy.get("/hosts", headers={"X-Forwarded-User": "dee"})).status_code == 200
        async with app.state.runtime.sessions.write() as db:
            await users.set_disabled(db, "dee", True)
        page = await proxy.get("/hosts", headers={"X-Forwarded-User": "dee", "Accept": "text/html"})
        assert (
            page.status_code == 403 and "the account &#39;dee&#39; is disabled; ask an admin to enable it" in page.text
        )
        api = await proxy.get("/api/attempts", headers={"X-Forwarded-User": "dee"})
        assert (api.status_code, api.json()) == (
            403,
            {"detail": "the account 'dee' is disabled; ask an admin to enable it"},
        )


async def test_a_name_that_cannot_be_an_account_is_refused_with_a_sentence(dashboard: Dashboard) -> None:
    async with dashboard(**SIGN_ON) as app, client_from(app, PROXY) as proxy:
        for named in ("ann@example.com", "admin"):
            api = await proxy.get("/api/attempts", headers={"X-Forwarded-User": named})
            assert api.status_code == 403 and "cannot be a launchdeck user name" in api.json()["detail"]
        async with app.state.runtime.sessions.read() as db:
            assert await users.list_users(db) == []


async def test_with_the_mode_off_the_header_means_nothing(dashboard: Dashboard) -> None:
    async with dashboard() as app, client_from(app, "127.0.0.1") as client:
        page = await client.get("/hosts", headers={"X-Forwarded-User": "ann"})
        assert (page.status_code, page.headers["location"]) == (303, "/login?next=/hosts")
        assert (await client.get("/api/attempts", headers={"X-Forwarded-User": "ann"})).status_code == 401


async def test_a_proxy_account_has_no_password_that_logs_in(dashboard: Dashboard) -> None:
    async with dashboard(**SIGN_ON) as app, client_from(app, PROXY) as proxy:
        await proxy.get("/hosts", headers={"X-Forwarded-User": "eve"})
        async with app.state.runtime.sessions.read() as db:
            assert await users.authenticate(db, "eve", "") is None


async def test_served_the_proxy_is_its_own_peer_whatever_x_forwarded_for_says(tmp_path: Path) -> None:
    """uvicorn would otherwise take 127.0.0.1's X-Forwarded-For as the client's address."""
    port = free_port()
    env = cli_env(
        {
            "LAUNCHDECK_DATA_DIR": str(tmp_path),
            "LAUNCHDECK_PORT": str(port),
            "LAUNCHDECK_AUTH_PROXY_HEADER": "X-Forwarded-User",
            "LAUNCHDECK_AUTH_PROXY_ADDRESSES": "127.0.0.1",
            "LAUNCHDECK_ALLOWED_HOSTS": "127.0.0.1",
        }
    )
    command = cli_argv("serve")
    with subprocess.Popen(command, env=env, cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL) as server:
        try:
            async with AsyncClient(base_url=f"http://127.0.0.1:{port}") as proxy:

                async def answer() -> int | None:
                    try:
                        response = await proxy.get(
                            "/api/attempts", headers={"X-Forwarded-User": "gil", "X-Forwarded-For": "203.0.113.7"}
                        )
                    except httpx.TransportError:
                        return None
                    return response.status_code

                assert await until(answer, "the dashboard to answer", timeout=60) == 200
        finally:
            server.terminate()
            server.wait(timeout=30)


def test_the_header_without_proxy_addresses_is_refused_at_start(tmp_path: Path) -> None:
    env = {"LAUNCHDECK_DATA_DIR": str(tmp_path), "LAUNCHDECK_AUTH_PROXY_HEADER": "X-Forwarded-User"}
    result = run_cli("serve", env=env, timeout=60)
    assert result.returncode == 2
    assert result.stderr.strip() == (
        "launchdeck: refusing to start with LAUNCHDECK_AUTH_PROXY_HEADER=X-Forwarded-User but no "
        "LAUNCHDECK_AUTH_PROXY_ADDRESSES: anyone could name themselves in that header; set it to the address of "
        "the proxy in front (e.g. 127.0.0.1), or unset the header"
    )
    bad = run_cli("serve", env={**env, "LAUNCHDECK_AUTH_PROXY_ADDRESSES": "127.0.0.1, proxy.internal"}, timeout=60)
    assert bad.returncode == 2
    assert "LAUNCHDECK_AUTH_PROXY_ADDRESSES: 'proxy.internal' is no IP address or network" in bad.stderr
    for hosts in (None, "*"):
        more = {"LAUNCHDECK_AUTH_PROXY_ADDRESSES": "127.0.0.1"} | ({"LAUNCHDECK_ALLOWED_HOSTS": hosts} if hosts else {})
        unbound = run_cli("serve", env=env | more, timeout=60)
        assert unbound.returncode == 2
        assert unbound.stderr.strip() == (
            "launchdeck: refusing to start with LAUNCHDECK_AUTH_PROXY_HEADER=X-Forwarded-User but no "
            "LAUNCHDECK_ALLOWED_HOSTS (or `*`): a page of any site whose name resolves to this machine could then act "
            "as the person the proxy names; set it to the names people open the dashboard by, e.g. "
            "launchdeck.example.com"
        )


def test_serving_beyond_loopback_with_no_accounts_and_no_sign_on_is_refused(tmp_path: Path) -> None:
    port = free_port()  # the port is checked before the accounts are
    env = {"LAUNCHDECK_DATA_DIR": str(tmp_path), "LAUNCHDECK_BIND": "0.0.0.0", "LAUNCHDECK_PORT": str(port)}
    result = run_cli("serve", env=env, timeout=60)
    assert result.returncode == 2
    assert result.stderr.strip().splitlines()[-1] == (
        "launchdeck: refusing to listen on 0.0.0.0, beyond this machine, with no accounts: everyone would log in "
        "with the one access token; add one with `launchdeck users add NAME --role admin` or "
        "LAUNCHDECK_ADMIN_PASSWORD_FILE, or set LAUNCHDECK_AUTH_PROXY_HEADER for single sign-on behind a proxy, "
        "or set LAUNCHDECK_BIND=127.0.0.1"
    )
    exposed = Settings(bind="0.0.0.0")
    assert exposed.accounts_problem(accounts=1) is None
    assert Settings(bind="0.0.0.0", **SIGN_ON).accounts_problem(accounts=0) is None  # type: ignore[arg-type]
    assert Settings(bind="127.0.0.1").accounts_problem(accounts=0) is None  # the demo's token-only login


async def test_a_person_who_signs_on_through_the_proxy_is_offered_no_password_on_their_account_page(
    dashboard: Dashboard,
) -> None:
    async with dashboard(**SIGN_ON) as app, client_from(app, PROXY) as proxy:
        page = await proxy.get("/account", headers={"X-Forwarded-User": "ann"})
        assert page.status_code == 200 and "<strong>ann</strong>, role <strong>viewer</strong>" in page.text
        assert "your account has no password here" in page.text and "Change your password" not in page.text
