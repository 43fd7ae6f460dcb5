"""The dashboard in this process: the token the tests use, settings for an app on given hosts with
an empty database at the latest schema, and the app started with its lifespan."""

from __future__ import annotations

import asyncio
import atexit
import contextlib
import functools
import shutil
import tempfile
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from fastapi import FastAPI

from app import db
from app.config import Settings
from app.ssh import HostSpec, render_hosts
from app.web.app import create_app
from app.web.pages import hosts as host_pages

TOKEN = "test-token-0123456789abcdef012345"
AUTH = {"Authorization": f"Bearer {TOKEN}"}
SIM_TIME_SCALE = 0.02  # simulated SGLang servers start in about a second


@functools.cache
def migrated_sqlite() -> Path:
    """An empty SQLite database at the latest schema, made once per run: migrating one from nothing
    takes a good part of a second, and most tests start the app on an empty database."""
    folder = Path(tempfile.mkdtemp(prefix="launchdeck-schema-"))
    atexit.register(shutil.rmtree, folder, ignore_errors=True)
    db.upgrade(f"sqlite:///{folder / 'launchdeck.db'}")
    return folder / "launchdeck.db"


def make_settings(tmp_path: Path, specs: list[HostSpec], **overrides: object) -> Settings:
    """Settings for an app on `specs`; its data dir starts with an empty database at the latest
    schema (a copy of migrated_sqlite(), which create_app finds up to date), unless the test gives
    a database of its own."""
    hosts_file = tmp_path / "hosts.toml"
    hosts_file.write_text(render_hosts(specs))
    values: dict[str, object] = {
        "data_dir": tmp_path / "data",
        "hosts_file": hosts_file,
        "token": TOKEN,
        "known_hosts": tmp_path / "known_hosts",
        "ssh_config": tmp_path / "no-ssh-config",
        "cookie_secure": False,
        **overrides,
    }
    settings = Settings(**values)  # type: ignore[arg-type]
    database = settings.data_dir / "launchdeck.db"
    if settings.database_url is None and not database.exists():
        settings.data_dir.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(migrated_sqlite(), database)
    return settings


@contextlib.asynccontextmanager
async def started_app(folder: Path, specs: list[HostSpec]) -> AsyncIterator[FastAPI]:
    """The app with its lifespan running on `specs`, its data under `folder`, once its hosts are
    online and their GPUs read."""
    with pytest.MonkeyPatch.context() as patch:
        # The in-process client (httpx's ASGITransport) hands a response over only once it has
        # ended: here the host list's event stream, which a browser keeps open for seconds, ends
        # after its first push instead of making each request that reads it wait those seconds.
        patch.setattr(host_pages, "STREAM_LIFETIME", 0.2)
        patch.setattr(host_pages, "MIN_PUSH_INTERVAL", 0.2)
        app = create_app(make_settings(folder, specs))
        async with app.router.lifespan_context(app):
            for host in app.state.runtime.ssh:
                await host.wait_online(10)
            for _ in range(100):  # the GPU probes' first readings
                if all(gpus.snapshot for gpus in app.state.runtime.gpus.hosts.values()):
                    break
                await asyncio.sleep(0.1)
            yield app
