"""The replicas' database restarted under them: two controllers and a web process on a PostgreSQL
cluster of this test's own, an attempt serving with its log growing and viewers following it live
on the web process, and PostgreSQL stopped (fast shutdown, kept down past the lease time) or crashed
(every process of it SIGKILLed, started again half a second later, recovering from its WAL). The
log grows while the database is away and not after, until the viewers have it all: nothing later
announces it to the web process. Afterwards every status is still true, no viewer lost or got twice
a byte of the log, each host is owned again by a live controller, the web process answers again,
and a new launch works. The shared server on 5432 is never touched: the rest of the suite runs on it."""

from __future__ import annotations

import asyncio
import contextlib
import json
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import psycopg
import pytest

from tests.e2e.test_replicas import LEASE, launch_through_web, owners, pid_of, replicas_running, until
from tests.support.faults import AUTH, HostProcess, assert_status_is_true, process_alive
from tests.support.postgres import PrivatePostgres, private_postgres
from tests.support.servers import free_port
from tests.support.waiting import until as eventually

pytestmark = [pytest.mark.postgres, pytest.mark.faults]

VIEWERS = 12
WRITTEN_WHILE_DOWN = 0.3  # seconds of the outage the log grows in
# Seconds after the hosts are owned again by which every viewer has what was written meanwhile
# (0.2 to 0.7 s on a 2-core machine; the bound leaves room for a slower one).
CATCH_UP = 10.0


@pytest.fixture
def private(tmp_path: Path) -> Iterator[tuple[PrivatePostgres, str]]:
    """A PostgreSQL cluster of this test's own, and the URL of an empty database on it."""
    with private_postgres(tmp_path) as server:
        with psycopg.connect(server.admin_url, autocommit=True) as admin:
            admin.execute('CREATE DATABASE "launchdeck"')
        yield server, server.admin_url.rsplit("/", 1)[0] + "/launchdeck"


@dataclass
class Viewer:
    """One live-log viewer: the bytes it got, and every way the stream broke its promise."""

    received: bytearray = field(default_factory=bytearray)
    problems: list[str] = field(default_factory=list)
    streams: int = 0  # connections made: one more per resumption


async def view(client: httpx.AsyncClient, attempt_id: int, viewer: Viewer) -> None:
    """Follows the attempt's live log to its `end` as a browser's EventSource does: on a dropped
    stream it comes back with Last-Event-ID, the byte offset after the last text it got. Each event
    must start where the last one ended (nothing lost, nothing twice) and carry its end as its id."""
    last_id: str | None = None
    while True:
        try:
            headers = {"Last-Event-ID": last_id} if last_id is not None else {}
            url = f"/api/attempts/{attempt_id}/events"
            async with client.stream("GET", url, headers=headers, timeout=None) as response:
                if response.status_code != 200:
                    raise httpx.HTTPError(f"{response.status_code}")
                viewer.streams += 1
                event, event_id = "", None
                async for line in response.aiter_lines():
                    if line.startswith("event:"):
                        event = line.partition(":")[2].strip()
                    elif line.startswith("id:"):
                        event_id = line.partition(":")[2].strip()
                    elif line.startswith("data:"):
                        data = json.loads(line.partition(":")[2])
                        if event == "log":
                            text = data["text"].encode(errors="surrogateescape")
                            if data["offset"] != len(viewer.received):
                                viewer.problems.append(f"log at {data['offset']}, having {len(viewer.received)}")
                            else:
                                viewer.received += text
                            if event_id != str(data["offset"] + len(text)):
                                viewer.problems.append(f"id {event_id} after {data['offset']} + {len(text)}")
                            last_id = str(len(viewer.received))
                        elif event == "end":
                            return
                        else:
                            viewer.problems.append(f"{event}: {data}")
                    elif not line:
                        event, event_id = "", None
        except httpx.HTTPError:
            pass
        except Exception as exc:  # recorded, so that a failure names the viewer that stopped
            viewer.problems.append(f"the viewer stopped: {exc!r}")
            raise
        await asyncio.sleep(0.2)


@dataclass
class Answers:
    """The web process's answers about the attempt, polled throughout: (time, HTTP status), and
    each status that did not match what the host shows."""

    samples: list[tuple[float, int]] = field(default_factory=list)
    untrue: list[str] = field(default_factory=list)

    def first_ok(self, after: float) -> float | None:
        return next((at for at, status in self.samples if at >= after and status == 200), None)

    def failed(self, after: float) -> list[tuple[float, int]]:
        return [(at, status) for at, status in self.samples if at >= after and status != 200]


async def poll(api: httpx.AsyncClient, attempt_id: int, host: HostProcess, answers: Answers) -> None:
    while True:
        started = time.monotonic()
        try:
            response = await api.get(f"/api/attempts/{attempt_id}", timeout=5)
            status = response.status_code
        except httpx.HTTPError:
            response, status = None, 0
        answers.samples.append((started, status))
        if response is not None and status == 200:
            try:
                assert_status_is_true(host, response.json())
            except AssertionError as exc:
                answers.untrue.append(f"{started:.1f}: {exc}")
        await asyncio.sleep(0.1)


async def write_lines(server_log: Path, stop: asyncio.Event, what: str, count: int = 1 << 30) -> int:
    """The server's log grows, one line each 10 ms, until `stop` or `count` lines."""
    n = 0
    while not stop.is_set() and n < count:
        with server_log.open("ab") as log:
            log.write(f"[restart check] {what} line {n}\n".encode())
        n += 1
        await asyncio.sleep(0.01)
    return n


async def launch_on(api: httpx.AsyncClient, host: str) -> int:
    body = {"preset": "llama31-8b", "host": host, "gpus": [1], "port": free_port()}
    launched = await api.post("/api/attempts", json=body)
    assert launched.status_code == 202, launched.text
    attempt_id = int(launched.json()["id"])

    async def ready() -> bool:
        return bool((await api.get(f"/api/attempts/{attempt_id}")).json()["status"] == "ready")

    await until(ready, 60, f"the launch on {host} after the restart did not get ready")
    return attempt_id


async def stop_attempt(api: httpx.AsyncClient, attempt_id: int) -> None:
    assert (await api.post(f"/api/attempts/{attempt_id}/stop")).status_code == 202

    async def stopped() -> bool:
        return bool((await api.get(f"/api/attempts/{attempt_id}")).json()["status"] == "stopped")

    await until(stopped, 30, f"the stop of attempt {attempt_id} was not followed to its end")


async def caught_up_with(
    whole: bytes, viewers: list[Viewer], mirror: Path, database: str, timeout: float, when: str
) -> None:
    """Every viewer has at least `whole`; if not in time, the failure says where the bytes stopped."""
    try:
        await eventually(lambda: all(len(v.received) >= len(whole) for v in viewers), "", timeout)
    except AssertionError:
        mirrored = mirror.stat().st_size if mirror.exists() else None
        have = sorted({len(v.received) for v in viewers})
        short = [(len(v.received), v.streams, v.problems[:3]) for v in viewers if len(v.received) < len(whole)]
        raise AssertionError(
            f"the viewers stopped short of {len(whole)} bytes{when} (waited {timeout:g} s): they have {have},"
            f" the mirror {mirrored}; leases {owners(database)}; (bytes, streams, problems) of those short: {short}"
        ) from None


@pytest.mark.parametrize(
    ("crash", "down"),
    [pytest.param(False, 2 * LEASE, id="stopped-past-the-lease"), pytest.param(True, 0.5, id="crashed")],
)
async def test_the_replicas_ride_out_a_restart_of_postgresql(
    tmp_path: Path, private: tuple[PrivatePostgres, str], cluster: dict[str, HostProcess], crash: bool, down: float
) -> None:
    postgres, database = private
    began = time.monotonic()
    tasks: list[asyncio.Task[Any]] = []
    async with replicas_running(tmp_path, database) as (controllers, web):
        pids = {server.pid for server in controllers}
        try:
            async with httpx.AsyncClient(base_url=web.url, headers=AUTH, timeout=30) as api:
                attempt_id = await launch_through_web(api)
                attempt = (await api.get(f"/api/attempts/{attempt_id}")).json()
                host = cluster["fa-b200"]
                server_log = host.home / attempt["remote_dir"] / "server.log"
                viewers = [Viewer() for _ in range(VIEWERS)]
                tasks += [asyncio.create_task(view(api, attempt_id, viewer)) for viewer in viewers]
                answers = Answers()
                polling = asyncio.create_task(poll(api, attempt_id, host, answers))
                tasks.append(polling)
                stop_writing = asyncio.Event()
                writing = asyncio.create_task(write_lines(server_log, stop_writing, "before and during"))

                await eventually(lambda: all(v.received for v in viewers), "the viewers got nothing", 30)
                await asyncio.sleep(1.0)
                before = owners(database)
                went_down = time.monotonic()
                restarting = asyncio.create_task(asyncio.to_thread(postgres.restart, crash=crash, down=down))
                # The log stops growing while the database is away: what it grew by meanwhile must reach
                # the viewers all the same, with no later growth to announce it.
                await asyncio.sleep(WRITTEN_WHILE_DOWN)
                stop_writing.set()
                lines = await writing
                whole = server_log.read_bytes()
                await restarting
                back = time.monotonic()

                # The web process answers again, and each host is owned again by a live controller.
                answered = await eventually(lambda: answers.first_ok(back), "the web process did not answer again", 30)

                async def leased() -> bool:
                    rows = (await api.get("/api/leases")).json()
                    return {row["host"] for row in rows if row["held"] and pid_of(row["owner"]) in pids} == {
                        "fa-b200",
                        "fa-rtx",
                    }

                await until(leased, 6 * LEASE, f"the hosts were not owned again: {owners(database)}")
                leased_at = time.monotonic()
                assert {pid_of(owner) for owner, _ in owners(database).values()} <= pids
                assert [server.popen.poll() for server in (*controllers, web) if server.popen] == [None] * 3

                # Every viewer gets every byte written up to now (within a reconnection and a lease beat,
                # not with the log's next growth, which may never come), then what is written after, live.
                mirror = tmp_path / "data" / "logs" / f"{attempt_id}.log"
                await caught_up_with(whole, viewers, mirror, database, CATCH_UP, "")
                caught_up = time.monotonic()
                after = await write_lines(server_log, asyncio.Event(), "after", 100)
                whole = server_log.read_bytes()
                await caught_up_with(whole, viewers, mirror, database, 30, " after the restart")

                # A launch after the restart works, once the hosts are spread again (the first controller
                # back from the outage takes them all, the others being stale, and hands half back a beat
                # later: in between a host is nobody's and a launch on it is refused).
                async def spread() -> bool:
                    rows = (await api.get("/api/leases")).json()
                    return sorted(pid_of(row["owner"]) for row in rows if row["held"]) == sorted(pids)

                await until(spread, 6 * LEASE, f"the hosts were not spread again: {owners(database)}")
                relaunch = time.monotonic()
                other = await launch_on(api, "fa-rtx")
                relaunched = time.monotonic()
                assert_status_is_true(cluster["fa-rtx"], (await api.get(f"/api/attempts/{other}")).json())
                assert_status_is_true(host, (await api.get(f"/api/attempts/{attempt_id}")).json())
                assert answers.untrue == [], answers.untrue

                # Stopped, each followed to its end; the viewers got the whole log, each byte once.
                polling.cancel()  # a stopped server is "ready" until its controller sees it end
                server_pid = attempt["pid"]
                await stop_attempt(api, attempt_id)
                await stop_attempt(api, other)
                assert not process_alive(server_pid)
                await asyncio.wait_for(asyncio.gather(*tasks[:VIEWERS]), 30)
                whole = server_log.read_bytes()
                assert f"[restart check] before and during line {lines - 1}\n".encode() in whole
                assert f"[restart check] after line {after - 1}\n".encode() in whole
                assert answers.untrue == [], answers.untrue
                late = [(round(at - answered, 2), status) for at, status in answers.failed(answered)]
                assert late == [], f"the web process failed again after answering: {late}"
                # The mirror (the controllers' copy on the shared data dir, which the web process reads)
                # is the host's log, and each viewer got it, each byte once.
                assert [v.problems for v in viewers if v.problems] == []
                mirrored = mirror.read_bytes()
                verification = json.loads(mirror.with_suffix(".json").read_text())["verification"]
                assert verification["match"] is True, verification
                assert mirrored == whole
                assert all(bytes(viewer.received) == whole for viewer in viewers), [len(v.received) for v in viewers]
                outage = sorted({status for at, status in answers.samples if went_down <= at < back})
                once_back = [status for at, status in answers.samples if back <= at < answered]
                # While the database is away the web process says so (503), never an error of its own.
                assert set(outage) | set(once_back) <= {200, 503}, (outage, once_back)
                print(
                    f"\nsetup {went_down - began:.1f} s; down {back - went_down:.2f} s (web answered {outage});"
                    f" web answered {answered - back:.2f} s after (before: {once_back}), hosts owned again"
                    f" {leased_at - back:.2f} s after,"
                    f" viewers caught up {caught_up - back:.2f} s after; relaunch {relaunched - relaunch:.1f} s;"
                    f" all {time.monotonic() - began:.1f} s; {lines}+{after} lines; at most"
                    f" {max(v.streams for v in viewers)} streams per viewer; leases before {before},"
                    f" after {owners(database)}"
                )
        finally:
            for task in tasks:
                task.cancel()
            with contextlib.suppress(BaseException):
                await asyncio.gather(*tasks, return_exceptions=True)
