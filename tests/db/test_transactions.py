"""No request holds the database while it waits on a host or a subprocess, and what an attempt
says stays what its host did, while 20 clients read and slow requests are in flight."""

from __future__ import annotations

import asyncio
import os
import shlex
import sqlite3
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from fastapi import FastAPI
from httpx import ASGITransport, AsyncClient
from sqlalchemy.engine import make_url

from app.demo.cluster import SimCluster
from tests.support.launching import launch, wait_for
from tests.support.waiting import until
from tests.support.web import log_in

# A line on which the pattern below backtracks for seconds before failing, and the pattern.
SLOW_LINE = "zz" + "ax" * 34 + "b"  # about 2 s of backtracking a line for GNU grep, 3 lines in all
SLOW_PATTERN = r"^zz(.*)(.*)(.*)\3\2\1x"
PROBE_WAIT_MS = 1000


def database_path(app: FastAPI) -> str:
    path = make_url(app.state.runtime.settings.resolved_database_url()).database
    assert path, "these tests run on a SQLite file"
    return path


def probe_write_lock(path: str, running: Callable[[], bool], deadline: float = 60.0) -> tuple[int, int]:
    """While `running()`, another connection takes the write lock and commits, again and again,
    waiting at most PROBE_WAIT_MS each time: (times it got the lock, times it was refused).

    The dashboard's own short writes (followers, GPU samples) take the lock too, for a few event
    loop turns each; a request that held it across its slow part would refuse it for seconds."""
    got = refused = 0
    connection = sqlite3.connect(path, timeout=0, isolation_level=None)
    connection.execute(f"PRAGMA busy_timeout={PROBE_WAIT_MS}")
    ends = time.monotonic() + deadline
    try:
        while (running() or got + refused == 0) and time.monotonic() < ends:
            try:
                connection.execute("BEGIN IMMEDIATE")
                connection.execute("COMMIT")
                got += 1
            except sqlite3.OperationalError as exc:
                assert "locked" in str(exc) or "busy" in str(exc), exc
                refused += 1
            time.sleep(0.02)
    finally:
        connection.close()
    return got, refused


def grep_running() -> bool:
    """Whether a grep child of this process runs (the only grep these tests start is the slow one)."""
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue
        name, _, rest = stat.partition(") ")
        if name.endswith("(grep") and int(rest.split()[1]) == os.getpid():
            return True
    return False


class Readers:
    """20 clients reading the API and the pages until stopped; every answer is kept."""

    def __init__(self, api: AsyncClient, pages: AsyncClient, paths: list[str], pages_paths: list[str]):
        self.api, self.pages = api, pages
        self.paths, self.page_paths = paths, pages_paths
        self.answers: list[tuple[str, int, str]] = []
        self.stopping = asyncio.Event()
        self.tasks: list[asyncio.Task[None]] = []

    async def __aenter__(self) -> Readers:
        self.tasks = [asyncio.create_task(self._read(n)) for n in range(20)]
        return self

    async def __aexit__(self, *_exc: object) -> None:
        self.stopping.set()
        await asyncio.gather(*self.tasks)

    async def _read(self, n: int) -> None:
        client, paths = (self.pages, self.page_paths) if n % 4 == 0 else (self.api, self.paths)
        while not self.stopping.is_set():
            for path in paths:
                response = await client.get(path)
                self.answers.append((path, response.status_code, response.text))
            await asyncio.sleep(0.05)

    def failures(self) -> list[tuple[str, int, str]]:
        return [(p, code, text[:200]) for p, code, text in self.answers if code >= 500 or "database is locked" in text]


async def test_slow_preflight_and_grep_block_no_one_and_every_attempt_ends_as_its_host_did(
    api: AsyncClient, running_app: FastAPI, sim_cluster: SimCluster
) -> None:
    runtime = running_app.state.runtime
    path = database_path(running_app)
    home = sim_cluster.hosts["rtxpro-01"].home
    marker, done = home / "slow-python.running", home / "slow-python.done"
    done.unlink(missing_ok=True)
    once = shlex.quote(str(done))
    wrapper = home / "slow-python"
    quoted = shlex.quote(str(marker))
    # The first question preflight asks of this python takes 8 s to answer.
    slow_once = f"[ -e {once} ] || {{ touch {quoted} {once}; sleep 8; rm -f {quoted}; }}"
    wrapper.write_text(f'#!/bin/sh\n{slow_once}\nexec python3 "$@"\n')
    wrapper.chmod(0o755)
    llama = (await api.get("/api/presets/llama31-8b")).json()["revision"]
    slow = {"name": "slow-python", "model_path": llama["model_path"], "args": llama["args"], "python": str(wrapper)}
    assert (await api.post("/api/presets", json=slow)).status_code == 201

    serving = await launch(api, "llama31-8b", "rtxpro-01", [0])
    doomed = await launch(api, "llama31-8b", "b200-01", [0])
    for attempt_id in (serving, doomed):
        assert (await wait_for(api, attempt_id, {"ready", "failed"}))["status"] == "ready"
    served = (await api.get(f"/api/attempts/{serving}")).json()
    host = runtime.ssh.get("rtxpro-01")
    log_file = f"{served['remote_dir']}/server.log"
    await host.run(["sh", "-c", 'printf "%s\\n%s\\n%s\\n" "$2" "$2" "$2" >> "$1"', "sh", log_file, SLOW_LINE])

    async with AsyncClient(transport=ASGITransport(app=running_app), base_url="http://testserver") as pages:
        await log_in(pages)
        api_paths = ["/api/presets", "/api/attempts", f"/api/attempts/{serving}", f"/api/attempts/{doomed}"]
        readers = Readers(api, pages, api_paths, ["/attempts", f"/attempts/{serving}", "/hosts"])
        async with readers:
            # A preflight whose python takes 8 s to answer, and meanwhile a launch, reads, and the
            # doomed attempt's server killed on its host.
            preflight = asyncio.create_task(
                api.post("/api/preflight", json={"preset": "slow-python", "host": "rtxpro-01", "gpus": [1]})
            )
            await until(marker.exists, "the slow statement to start")
            probe = asyncio.create_task(asyncio.to_thread(probe_write_lock, path, marker.exists))
            assert (await api.get("/api/presets")).status_code == 200
            assert (await api.get("/api/attempts")).status_code == 200
            stopped = await launch(api, "llama31-8b", "rtxpro-01", [2])
            assert marker.exists(), "reads and a launch answered only once the slow preflight had let go"
            got, refused = await probe
            assert got > refused, f"another writer got the lock {got} times and was refused {refused} times"
            doomed_pgid = (await api.get(f"/api/attempts/{doomed}")).json()["pgid"]
            await runtime.ssh.get("b200-01").run(["env", "kill", "-KILL", "--", f"-{doomed_pgid}"])
            assert (await preflight).status_code == 200

            # A grep that backtracks for seconds, and meanwhile a stop.
            await wait_for(api, stopped, {"loading", "ready"})
            grown = served["log_size"] + 3 * len(SLOW_LINE)
            await until(lambda: runtime.logs.get(serving).size >= grown, "the slow lines in the mirror")
            params = {"q": SLOW_PATTERN, "regex": "true", "flags": "false"}
            grep = asyncio.create_task(api.get(f"/api/attempts/{serving}/grep", params=params))
            await until(grep_running, "the grep to be running")
            probe = asyncio.create_task(asyncio.to_thread(probe_write_lock, path, grep_running))
            assert (await api.get("/api/attempts")).status_code == 200
            assert (await api.post(f"/api/attempts/{stopped}/stop")).status_code == 202
            assert grep_running(), "a read and a stop answered only once the slow grep had ended"
            got, refused = await probe
            assert got > refused, f"another writer got the lock {got} times and was refused {refused} times"
            assert (await grep).status_code != 500  # found, or stopped by a time limit

            finals = {
                attempt_id: await wait_for(api, attempt_id, statuses)
                for attempt_id, statuses in (
                    (doomed, {"failed", "lost"}),
                    (stopped, {"stopped", "failed", "lost"}),
                )
            }
    assert readers.failures() == []
    assert len(readers.answers) > 100
    assert finals[stopped]["status"] == "stopped"
    now = (await api.get(f"/api/attempts/{serving}")).json()
    assert (now["status"], now["tracking"]) == ("ready", "")


async def test_a_follower_that_cannot_write_says_so_and_resumes_without_failing_the_attempt(
    api: AsyncClient, running_app: FastAPI
) -> None:
    attempt_id = await launch(api, "llama31-8b", "rtxpro-01", [3])
    attempt = await wait_for(api, attempt_id, {"ready", "failed"})
    assert attempt["status"] == "ready"
    host = running_app.state.runtime.ssh.get("rtxpro-01")
    seen: list[dict[str, Any]] = []

    async def read() -> dict[str, Any]:
        answer: dict[str, Any] = (await api.get(f"/api/attempts/{attempt_id}")).json()
        seen.append(answer)
        return answer

    pages = AsyncClient(transport=ASGITransport(app=running_app), base_url="http://testserver")
    await log_in(pages)
    # Another connection holds the write lock longer than the dashboard's busy timeout, while the
    # server's log grows: the follower's write of it fails with "database is locked".
    blocker = sqlite3.connect(database_path(running_app), timeout=5, isolation_level=None)
    blocker.execute("BEGIN IMMEDIATE")  # after the dashboard's own short writes of the moment
    try:
        log_file = f"{attempt['remote_dir']}/server.log"
        await host.run(["sh", "-c", 'echo "a line while the database is locked" >> "$1"', "sh", log_file])
        for _ in range(600):
            if (await read())["tracking"]:
                break
            await asyncio.sleep(0.1)
        assert seen[-1]["tracking"] == "tracking interrupted: database is locked", seen[-1]
        assert "tracking interrupted: database is locked" in (await pages.get(f"/attempts/{attempt_id}")).text
    finally:
        blocker.execute("COMMIT")
        blocker.close()
        await pages.aclose()
    for _ in range(600):
        if not (answer := await read())["tracking"] and answer["log_size"] > attempt["log_size"]:
            break
        await asyncio.sleep(0.1)
    assert (seen[-1]["tracking"], seen[-1]["log_size"] > attempt["log_size"]) == ("", True), seen[-1]
    assert {answer["status"] for answer in seen} == {"ready"}
