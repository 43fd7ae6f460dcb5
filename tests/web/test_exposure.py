"""Exposure beyond this machine: the Host header, the API docs behind a login, and refusals at start."""

from __future__ import annotations

import socket
from collections.abc import AsyncIterator, Callable
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from pathlib import Path

import pytest
from httpx import ASGITransport, AsyncClient
from pydantic import ValidationError

from app.config import Settings
from app.web.app import create_app
from tests.support.cli import run_cli
from tests.support.dashboard import AUTH, make_settings
from tests.support.web import log_in

Dashboard = Callable[..., AbstractAsyncContextManager[AsyncClient]]


@pytest.fixture
def dashboard(tmp_path: Path) -> Dashboard:
    """A client of a dashboard with no hosts, built with the given settings."""

    @asynccontextmanager
    async def open_client(base_url: str = "http://127.0.0.1:8000", **overrides: object) -> AsyncIterator[AsyncClient]:
        app = create_app(make_settings(tmp_path, [], **overrides))
        transport = ASGITransport(app=app)
        async with app.router.lifespan_context(app), AsyncClient(transport=transport, base_url=base_url) as client:
            yield client

    return open_client


async def test_a_host_not_allowed_is_refused_with_a_sentence(dashboard: Dashboard) -> None:
    async with dashboard(allowed_hosts="dash.example.com, gpu-ops.internal") as client:
        refused = await client.get("/api/health", headers={"Host": "attacker.example:8000"})
        assert refused.status_code == 400
        assert refused.json() == {
            "detail": "this dashboard does not answer to the host 'attacker.example:8000'; "
            "its LAUNCHDECK_ALLOWED_HOSTS setting names the hosts it answers to"
        }
        for host in ("dash.example.com", "DASH.example.com.:443", "gpu-ops.internal", "localhost:8000", "[::1]:8000"):
            assert (await client.get("/api/health", headers={"Host": host})).status_code == 200, host


async def test_on_loopback_any_host_is_answered_unless_the_setting_names_them(dashboard: Dashboard) -> None:
    async with dashboard() as client:
        assert (await client.get("/api/health", headers={"Host": "anything.example"})).status_code == 200


def test_bound_beyond_loopback_the_dashboard_answers_to_its_own_names_only() -> None:
    exposed = Settings(bind="0.0.0.0", public_url="https://launchdeck.example.com/")
    assert exposed.resolved_allowed_hosts() == {
        "localhost", "127.0.0.1", "::1", socket.gethostname().lower(), "launchdeck.example.com"
    }  # fmt: skip
    assert "10.1.2.3" in Settings(bind="10.1.2.3").resolved_allowed_hosts()  # type: ignore[operator]
    assert Settings(bind="127.0.0.1").resolved_allowed_hosts() is None
    assert Settings(bind="0.0.0.0", allowed_hosts="*").resolved_allowed_hosts() is None


async def test_the_api_docs_and_schema_need_a_login(dashboard: Dashboard) -> None:
    async with dashboard() as client:
        docs = await client.get("/api/docs")
        assert (docs.status_code, docs.headers["location"]) == (303, "/login?next=/api/docs")
        schema = await client.get("/api/openapi.json")
        assert schema.status_code == 401 and "Bearer" in schema.json()["detail"]
        assert (await client.get("/api/docs", headers={"Authorization": "Bearer guess"})).status_code == 401
        assert "/api/hosts" in (await client.get("/api/openapi.json", headers=AUTH)).json()["paths"]
        await log_in(client)
        assert "swagger-ui" in (await client.get("/api/docs")).text
        assert (await client.get("/api/openapi.json")).status_code == 200


async def test_a_setting_opens_the_api_docs(dashboard: Dashboard) -> None:
    async with dashboard(public_docs=True) as client:
        assert "swagger-ui" in (await client.get("/api/docs")).text
        assert "/api/hosts" in (await client.get("/api/openapi.json")).json()["paths"]


def test_serving_beyond_loopback_without_secure_cookies_is_refused_with_a_sentence(tmp_path: Path) -> None:
    env = {"LAUNCHDECK_DATA_DIR": str(tmp_path), "LAUNCHDECK_BIND": "0.0.0.0", "LAUNCHDECK_COOKIE_SECURE": "false"}
    result = run_cli("serve", env=env, timeout=60)
    assert result.returncode == 2
    assert result.stderr.strip() == (
        "launchdeck: refusing to listen on 0.0.0.0, beyond this machine, with LAUNCHDECK_COOKIE_SECURE off: the "
        "session cookie would travel in the clear; terminate TLS in front of the dashboard and leave "
        "LAUNCHDECK_COOKIE_SECURE on, or set LAUNCHDECK_BIND=127.0.0.1"
    )
    assert not (tmp_path / "launchdeck.db").exists()  # nothing started
    assert Settings(bind="0.0.0.0").exposure_problem() is None  # secure cookies: TLS is in front
    assert Settings(bind="127.0.0.1", cookie_secure=False).exposure_problem() is None


def test_a_short_token_is_refused_at_start_with_a_sentence(tmp_path: Path) -> None:
    result = run_cli(
        "serve", env={"LAUNCHDECK_DATA_DIR": str(tmp_path), "LAUNCHDECK_TOKEN": "hunter2-hunter2"}, timeout=60
    )
    assert result.returncode == 2
    assert "LAUNCHDECK_TOKEN: an access token needs at least 32 characters" in result.stderr
    assert "(this one has 15)" in result.stderr and "hunter2" not in result.stderr
    with pytest.raises(ValidationError):
        Settings(token="x" * 31)
    assert Settings(token="x" * 32).token is not None
