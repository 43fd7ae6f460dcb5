"""Fixtures of the tests with several dashboard processes: a database of their own on the shared
PostgreSQL, and two simulated hosts."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path

import psycopg
import pytest

from tests.support.faults import HostProcess, hosts_running
from tests.support.postgres import POSTGRES_ADMIN_URL, postgres_available
from tests.support.strict import require

TIME_SCALE = 0.05


@pytest.fixture
def database(tmp_path: Path) -> Iterator[str]:
    require(postgres_available(), f"PostgreSQL is not reachable at {POSTGRES_ADMIN_URL}")
    name = f"launchdeck_test_{uuid.uuid4().hex[:12]}"
    with psycopg.connect(POSTGRES_ADMIN_URL, autocommit=True) as admin:
        admin.execute(f'CREATE DATABASE "{name}"')
    try:
        yield POSTGRES_ADMIN_URL.rsplit("/", 1)[0] + f"/{name}"
    finally:
        with psycopg.connect(POSTGRES_ADMIN_URL, autocommit=True) as admin:
            admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[dict[str, HostProcess]]:
    with hosts_running(tmp_path / "cluster", ("fa-b200", "fa-rtx"), TIME_SCALE) as hosts:
        yield hosts
