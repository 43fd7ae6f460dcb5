"""A full data dir: the dashboard's data dir on a real 8 MB tmpfs, filled to the last byte while
attempts run on the simulated hosts. Every write says why it failed in one sentence (507 for the
API, a banner on pages), logins and reads go on, the mirror pauses and resumes at exactly its
offset, and a server that exits meanwhile gets its status once there is room again."""

from __future__ import annotations

import asyncio
import contextlib
import errno
import re
import signal
import sqlite3
from collections.abc import AsyncIterator, Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from fastapi import FastAPI
from httpx import ASGITransport, AsyncClient, Response
from sqlalchemy.exc import OperationalError

from app.accounts import users
from app.demo.cluster import SimCluster
from app.demo.presets import seed_demo_presets
from app.disk import is_disk_full
from app.launch.record import Pace
from app.runtime import Runtime
from app.ssh import HostSpec
from app.states import Role
from app.web.app import create_app
from tests.support.accounts import PASSWORD, add_user, browser, log_in
from tests.support.dashboard import AUTH, TOKEN, make_settings
from tests.support.filesystem import fill, small_filesystem
from tests.support.hosts import end_every_attempt
from tests.support.servers import free_port
from tests.support.waiting import until
from tests.support.web import csrf_from

PRESET = "llama31-8b"


@dataclass
class Deck:
    """A running dashboard whose data dir can be filled up."""

    runtime: Runtime
    api: AsyncClient  # with the token
    browser: AsyncClient  # without: it logs in with the form
    data_dir: Path
    cluster: SimCluster
    app: FastAPI

    @property
    def sentence(self) -> str:
        return f"the data dir is full: 0 MB free on {self.data_dir}"

    async def fill(self) -> Path:
        """Fills the data dir's filesystem. SQLite's WAL keeps its size after a checkpoint, and
        what a failed transaction added to it, and takes new transactions there; so it is emptied
        first (once no writer of the app's holds it), and the next write needs room. Tests fill
        again before each write they expect to fail."""
        with contextlib.closing(sqlite3.connect(self.data_dir / "launchdeck.db", timeout=0)) as db:
            for _ in range(100):
                if db.execute("PRAGMA wal_checkpoint(TRUNCATE)").fetchone()[0] == 0:
                    break
                await asyncio.sleep(0.05)
            else:
                raise AssertionError("the WAL could not be emptied")
        return fill(self.data_dir.parent)

    async def launch(self, gpu: int) -> dict[str, Any]:
        """Launches the preset on the first host and waits until it is ready."""
        body = {"preset": PRESET, "host": self.host, "gpus": [gpu], "port": free_port()}
        response = await self.api.post("/api/attempts", json=body)
        assert response.status_code == 202, response.text
        return await self.attempt_when(response.json()["id"], lambda a: a["status"] == "ready")

    @property
    def host(self) -> str:
        return next(iter(self.runtime.ssh)).name

    async def attempt_when(self, attempt_id: int, condition: Callable[[dict[str, Any]], bool]) -> dict[str, Any]:
        async def check() -> dict[str, Any] | None:
            attempt: dict[str, Any] = (await self.api.get(f"/api/attempts/{attempt_id}")).json()
            return attempt if condition(attempt) else None

        return await until(check, f"attempt {attempt_id} not as expected")

    def host_log(self, attempt: dict[str, Any]) -> Path:
        return self.cluster.hosts[attempt["host"]].home / attempt["remote_dir"] / "server.log"

    async def log_in(self) -> int:
        form = await self.browser.get("/login")
        found = re.search(r'name="csrf_token" value="([^"]+)"', form.text)
        assert found, form.text[:300]
        answer = await self.browser.post("/login", data={"token": TOKEN, "next": "/hosts", "csrf_token": found[1]})
        return answer.status_code


@pytest.fixture
def small(tmp_path: Path) -> Iterator[Path]:
    with small_filesystem(tmp_path / "small", "8m") as mount_point:
        yield mount_point


@pytest.fixture
async def deck(tmp_path: Path, small: Path, sim_specs: list[HostSpec], sim_cluster: SimCluster) -> AsyncIterator[Deck]:
    app = create_app(make_settings(tmp_path, sim_specs[:1], data_dir=small / "data", disk_reserve_mb=1))
    async with app.router.lifespan_context(app):
        runtime: Runtime = app.state.runtime
        # Writes that fail are retried quickly, and a finished server's log is waited for briefly.
        runtime.attempts.pace = Pace(loading=0.1, serving=0.3, health_timeout=10, retry=0.2, retry_max=0.5, drain=1)
        for host in runtime.ssh:
            await host.wait_online(10)
        async with runtime.sessions.write() as session:
            await seed_demo_presets(session)
        transport = ASGITransport(app=app)
        async with (
            AsyncClient(transport=transport, base_url="http://testserver", headers=AUTH) as api,
            AsyncClient(transport=transport, base_url="http://testserver") as browser,
        ):
            yield Deck(runtime, api, browser, small / "data", sim_cluster, app)
            (small / "filler").unlink(missing_ok=True)
            await end_every_attempt(api, runtime.ssh, runtime.ssh.get)


async def test_writes_on_a_full_data_dir_answer_507_with_the_sentence_and_reads_go_on(deck: Deck) -> None:
    attempt = await deck.launch(gpu=0)
    writes = {
        "preset create": ("/api/presets", {"name": "while-full", "model_path": "m"}),
        "launch": ("/api/attempts", {"preset": PRESET, "host": deck.host, "gpus": [1]}),
        "stop": (f"/api/attempts/{attempt['id']}/stop", None),
    }
    for what, (route, body) in writes.items():
        filler = await deck.fill()
        answer = await deck.api.post(route, json=body)
        assert (answer.status_code, answer.json()) == (507, {"detail": deck.sentence}), what
    for route in ("/api/attempts", "/api/presets", f"/api/attempts/{attempt['id']}", "/api/audit", "/api/hosts"):
        assert (await deck.api.get(route)).status_code == 200, route
    assert [a["id"] for a in (await deck.api.get("/api/attempts")).json()] == [attempt["id"]]  # nothing half-launched
    assert (await deck.api.get(f"/api/attempts/{attempt['id']}")).json()["status"] == "ready"  # and nothing stopped

    filler.unlink()
    assert (await deck.api.post("/api/presets", json={"name": "with-room", "model_path": "m"})).status_code == 201
    assert (await deck.api.post(f"/api/attempts/{attempt['id']}/stop")).status_code == 202
    await deck.attempt_when(attempt["id"], lambda a: a["status"] == "stopped")


async def test_every_page_shows_the_banner_and_a_write_from_a_page_gets_the_sentence(deck: Deck) -> None:
    assert "the data dir is full" not in (await deck.browser.get("/login")).text
    assert await deck.log_in() == 303  # a login is a row on the server, so it is made while there is room
    await deck.fill()
    for page in ("/hosts", "/presets", "/attempts", "/audit"):
        html = (await deck.browser.get(page)).text
        assert f'<p class="banner" id="disk-warning" role="alert">{deck.sentence}</p>' in html, page
    # A write from a page gets the sentence too, as a page.
    form = await deck.browser.get("/presets/new")
    csrf = re.search(r'name="csrf_token" value="([^"]+)"', form.text)
    assert csrf
    await deck.fill()
    answer = await deck.browser.post(
        "/presets",
        data={"name": "from-a-page", "model_path": "m", "csrf_token": csrf[1]},
        headers={"accept": "text/html"},
    )
    assert answer.status_code == 507 and deck.sentence in answer.text


async def test_new_logins_go_on_while_the_data_dir_is_full_and_are_kept_once_there_is_room(deck: Deck) -> None:
    await add_user(deck.app, "ann", Role.VIEWER)
    filler = await deck.fill()
    assert await deck.log_in() == 303  # with the access token
    assert _whoami("admin") in (await deck.browser.get("/account")).text
    async with browser(deck.app) as ann:
        await deck.fill()
        form = await ann.get("/login")
        wrong = await ann.post("/login", data={"name": "ann", "password": "not it", "csrf_token": csrf_from(form.text)})
        assert wrong.status_code == 401  # counted, though the count cannot be saved
        await deck.fill()
        csrf = await log_in(ann, name="ann", password=PASSWORD)  # a 303, then a page as ann
        assert _whoami("ann") in (await ann.get("/account")).text
        assert (await ann.post("/logout", data={"csrf_token": csrf})).status_code == 303
        assert _to_login_form(await ann.get("/hosts"))

    filler.unlink()

    async def listed() -> bool:  # in the table of logins, which only rows in the database reach
        return "this one" in (await deck.browser.get("/account")).text

    await until(listed, "the login was not written once there was room")


async def test_failed_logins_are_limited_while_the_data_dir_is_full(deck: Deck) -> None:
    """The limits live in the database; while it cannot be written they are counted in memory, so
    a full data dir does not open the door to guessing."""
    await add_user(deck.app, "ann", Role.VIEWER)
    async with browser(deck.app) as guesser:
        statuses = []
        for n in range(6):
            await deck.fill()
            form = await guesser.get("/login")
            fields = {"name": "ann", "password": f"guess {n}", "csrf_token": csrf_from(form.text)}
            statuses.append((await guesser.post("/login", data=fields)).status_code)
        assert statuses == [401] * 5 + [429]


async def test_a_login_begun_while_the_data_dir_was_full_ends_with_a_new_password_or_a_disabled_account(
    deck: Deck,
) -> None:
    for name in ("ann", "bob"):
        await add_user(deck.app, name, Role.VIEWER)
    async with browser(deck.app) as ann, browser(deck.app) as bob:
        filler = await deck.fill()
        await log_in(ann, name="ann", password=PASSWORD)
        await deck.fill()
        await log_in(bob, name="bob", password=PASSWORD)
        filler.unlink()
        # As `launchdeck users` does it from another process, with no request in between.
        async with deck.runtime.sessions.write() as session:
            await users.set_password(session, "ann", "a new password for ann")
            await users.set_disabled(session, "bob", True)
        assert _to_login_form(await ann.get("/hosts"))
        assert _to_login_form(await bob.get("/hosts"))
        async with deck.runtime.sessions.write() as session:
            await users.set_disabled(session, "bob", False)
        assert _to_login_form(await bob.get("/hosts"))  # enabling the account again does not bring it back


async def test_the_mirror_pauses_on_a_full_data_dir_and_resumes_exactly_at_its_offset(deck: Deck) -> None:
    attempt = await deck.launch(gpu=2)
    host_log = deck.host_log(attempt)
    mirror_file = deck.data_dir / "logs" / f"{attempt['id']}.log"
    await until(lambda: _same(mirror_file, host_log), "the mirror did not catch up")
    assert await deck.log_in() == 303  # while there is room to keep the login
    filler = await deck.fill()
    with host_log.open("ab") as log:
        for n in range(20_000):  # about 1 MB, with no room for it on the dashboard
            log.write(b"[2026-01-05 10:00:01] line %d written while the data dir was full\n" % n)
    paused = f"log mirror paused: {deck.sentence}"
    seen = await deck.attempt_when(attempt["id"], lambda a: a["log_mirror"] == paused)
    assert seen["status"] == "ready"
    page = (await deck.browser.get(f"/attempts/{attempt['id']}")).text
    assert f'<p class="notice tracking" id="attempt-mirror">{paused}</p>' in page
    assert mirror_file.stat().st_size < host_log.stat().st_size

    filler.unlink()
    await until(lambda: _same(mirror_file, host_log), "the mirror did not resume")
    assert (await deck.api.get(f"/api/attempts/{attempt['id']}")).json()["log_mirror"] == ""
    host = deck.runtime.ssh.get(attempt["host"])
    await host.run(["env", "kill", f"-{signal.SIGKILL}", "--", f"-{attempt['pgid']}"], check=False)
    await deck.attempt_when(attempt["id"], lambda a: a["status"] in ("failed", "lost"))
    log = deck.runtime.logs.get(attempt["id"])
    await until(lambda: log.meta.complete, "the mirror did not finish")
    assert log.meta.segments == []  # no false "replaced" or "truncated"
    assert mirror_file.read_bytes() == host_log.read_bytes()  # nothing copied twice, nothing lost
    assert log.meta.verification is not None and log.meta.verification["match"] is True


async def test_a_server_that_exits_while_the_data_dir_is_full_gets_its_status_once_there_is_room(
    deck: Deck,
) -> None:
    attempt = await deck.launch(gpu=3)
    filler = await deck.fill()
    host = deck.runtime.ssh.get(attempt["host"])
    await host.run(["env", "kill", f"-{signal.SIGKILL}", "--", f"-{attempt['pgid']}"], check=False)
    interrupted = await deck.attempt_when(
        attempt["id"], lambda a: a["tracking"] == f"tracking interrupted: {deck.sentence}"
    )
    assert interrupted["status"] == "ready"  # what the host said last; the note says why it is not newer
    filler.unlink()
    ended = await deck.attempt_when(attempt["id"], lambda a: a["status"] not in ("ready", "unhealthy"))
    assert ended["status"] in ("failed", "lost") and ended["ended_at"] is not None
    await deck.attempt_when(attempt["id"], lambda a: a["tracking"] == "")


def _whoami(name: str) -> str:
    return f'<p id="whoami"><strong>{name}</strong>'


def _to_login_form(answer: Response) -> bool:
    return answer.status_code == 303 and answer.headers["location"].startswith("/login")


def _same(mirror: Path, host_log: Path) -> bool:
    return mirror.exists() and mirror.read_bytes() == host_log.read_bytes()


def test_every_shape_of_a_full_disk_is_recognised_and_nothing_else() -> None:
    full_sqlite = sqlite3.OperationalError("database or disk is full")
    wrapped = OperationalError("INSERT INTO presets ...", {}, full_sqlite)
    assert all(
        is_disk_full(exc)
        for exc in (OSError(errno.ENOSPC, "No space left on device"), OSError(errno.EDQUOT, "Disk quota exceeded"))
    )
    assert is_disk_full(full_sqlite) and is_disk_full(wrapped)
    chained = RuntimeError("writing the index failed")
    chained.__cause__ = OSError(errno.ENOSPC, "No space left on device")
    assert is_disk_full(chained)
    locked = OperationalError("INSERT", {}, sqlite3.OperationalError("database is locked"))
    assert not any(is_disk_full(exc) for exc in (locked, OSError(errno.EIO, "I/O error"), ValueError("full")))
