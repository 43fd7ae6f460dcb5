"""Liveness and readiness, as a load balancer or a container's health check reads them."""

from __future__ import annotations

from pathlib import Path

import psycopg
import pytest
from httpx import ASGITransport, AsyncClient

from app.ssh import HostSpec
from app.web.app import create_app
from tests.support.dashboard import make_settings
from tests.support.postgres import POSTGRES_ADMIN_URL


async def test_ready_names_the_hosts_online_and_needs_no_login(app_client: AsyncClient) -> None:
    response = await app_client.get("/readyz")
    assert response.status_code == 200
    assert response.json() == {"status": "ready", "hosts": 3, "hosts_online": 3, "problems": []}


@pytest.mark.postgres
@pytest.mark.parametrize("database_url", ["postgresql"], indirect=True)  # a database that can be shut
async def test_not_ready_while_the_database_refuses_and_ready_again_after(
    tmp_path: Path, sim_specs: list[HostSpec], database_url: str
) -> None:
    name = database_url.rsplit("/", 1)[1]
    app = create_app(make_settings(tmp_path, sim_specs, database_url=database_url))
    async with app.router.lifespan_context(app):
        client = AsyncClient(transport=ASGITransport(app=app), base_url="http://testserver")
        assert (await client.get("/readyz")).status_code == 200
        with psycopg.connect(POSTGRES_ADMIN_URL, autocommit=True) as admin:
            admin.execute(f'ALTER DATABASE "{name}" ALLOW_CONNECTIONS false')
            admin.execute("SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = %s", [name])
        away = await client.get("/readyz")
        assert away.status_code == 503
        assert away.json()["status"] == "not ready"
        assert away.json()["problems"] == ["the database does not answer: OperationalError"]
        assert (await client.get("/api/health")).status_code == 200  # alive all the same
        with psycopg.connect(POSTGRES_ADMIN_URL, autocommit=True) as admin:
            admin.execute(f'ALTER DATABASE "{name}" ALLOW_CONNECTIONS true')
        assert (await client.get("/readyz")).status_code == 200


async def test_not_ready_once_the_ssh_connections_are_no_longer_kept(tmp_path: Path, sim_specs: list[HostSpec]) -> None:
    app = create_app(make_settings(tmp_path, sim_specs))
    async with app.router.lifespan_context(app):
        client = AsyncClient(transport=ASGITransport(app=app), base_url="http://testserver")
        await app.state.runtime.ssh.close()
        response = await client.get("/readyz")
        assert response.status_code == 503
        assert response.json()["problems"] == [
            "SSH connections are not supervised for " + ", ".join(spec.name for spec in sim_specs)
        ]
