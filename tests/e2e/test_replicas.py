"""Several dashboard processes on one PostgreSQL database: two controllers share the simulated hosts
through leases, a web process hands its launches to the controller that owns their host, and a
controller killed with SIGKILL has its hosts (and their attempts) taken by the other."""

from __future__ import annotations

import asyncio
import contextlib
import json
import signal
import subprocess
import time
from collections.abc import AsyncIterator
from pathlib import Path

import httpx
import psycopg
import pytest

from app.demo.presets import DEMO_PRESETS
from tests.support.cli import run_cli
from tests.support.faults import (
    AUTH,
    Dashboard,
    HostProcess,
    assert_status_is_true,
    follow_events,
    process_alive,
)
from tests.support.haproxy import HAPROXY, start_haproxy
from tests.support.servers import free_port
from tests.support.strict import require

pytestmark = [pytest.mark.postgres, pytest.mark.faults]

TIME_SCALE = 0.05
LEASE = 3.0  # seconds: a dead controller's hosts are taken within this and a beat


def replica(tmp_path: Path, database: str, role: str, name: str, **settings: str) -> Dashboard:
    """`launchdeck serve --role ROLE`; the replicas share the data dir (the mirrored logs) and the database."""
    url = database.replace("postgresql://", "postgresql+psycopg://")
    server = Dashboard.create(
        tmp_path / "data",
        tmp_path / "cluster" / "hosts.toml",
        output=tmp_path / f"{name}.out",
        database_url=url,
        lease_seconds=str(LEASE),
        **settings,
    )
    server.argv = ["serve", "--role", role]
    return server


def owners(database: str) -> dict[str, tuple[str, int]]:
    """Each host's current lease holder and token, as the database has them."""
    with psycopg.connect(database) as connection:
        rows = connection.execute("select host, owner, token from host_lease where expires_at > now()").fetchall()
    return {host: (owner, token) for host, owner, token in rows}


def pid_of(owner: str) -> int:
    return int(owner.split(":")[1])


def owner_and_other(database: str, controllers: list[Dashboard], host: str) -> tuple[Dashboard, Dashboard]:
    """The controller that holds the host's lease now, and the other one."""
    owner = next(server for server in controllers if server.pid == pid_of(owners(database)[host][0]))
    return owner, next(server for server in controllers if server is not owner)


async def taken_over(database: str, host: str, survivor: Dashboard) -> None:
    """Waits until `survivor` holds the host's lease (a few lease times at most)."""

    async def taken() -> bool:
        holder = owners(database).get(host)
        return holder is not None and pid_of(holder[0]) == survivor.pid

    await until(taken, 4 * LEASE, f"the survivor did not take {host}: {owners(database)}")


async def until(check: object, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if await check():  # type: ignore[operator]
            return
        await asyncio.sleep(0.1)
    raise AssertionError(what)


async def start_replicas(tmp_path: Path, database: str, **settings: str) -> tuple[list[Dashboard], Dashboard]:
    """Two controllers and a web process, started one by one; back once the controllers share the hosts."""
    controllers = [replica(tmp_path, database, "controller", f"controller-{n}", **settings) for n in (1, 2)]
    web = replica(tmp_path, database, "web", "web", **settings)
    try:
        for server in (*controllers, web):
            server.start()

        async def split() -> bool:
            held = owners(database)
            return len(held) == 2 and {pid_of(owner) for owner, _ in held.values()} == {c.pid for c in controllers}

        await until(split, 30, f"the two controllers did not share the hosts: {owners(database)}")
    except BaseException:
        for server in (*controllers, web):
            server.stop()
        raise
    return controllers, web


@contextlib.asynccontextmanager
async def replicas_running(
    tmp_path: Path, database: str, **settings: str
) -> AsyncIterator[tuple[list[Dashboard], Dashboard]]:
    """`start_replicas`, each stopped when the block ends."""
    controllers, web = await start_replicas(tmp_path, database, **settings)
    try:
        yield controllers, web
    finally:
        for server in (*controllers, web):
            server.stop()


async def launch_through_web(api: httpx.AsyncClient) -> int:
    """llama31-8b on fa-b200, asked of the web process: the controller that owns the host starts it."""
    for preset in DEMO_PRESETS:
        assert (await api.post("/api/presets", json=vars(preset))).status_code == 201
    body = {"preset": "llama31-8b", "host": "fa-b200", "gpus": [0], "port": free_port()}
    launched = await api.post("/api/attempts", json=body)
    assert launched.status_code == 202, launched.text
    attempt_id = int(launched.json()["id"])

    async def ready() -> bool:
        return bool((await api.get(f"/api/attempts/{attempt_id}")).json()["status"] == "ready")

    await until(ready, 60, "the launch handed to the host's controller did not get ready")
    return attempt_id


async def test_a_controller_killed_while_serving_has_its_host_and_attempt_taken_by_the_other(
    tmp_path: Path, database: str, cluster: dict[str, HostProcess]
) -> None:
    async with (
        replicas_running(tmp_path, database) as (controllers, web),
        httpx.AsyncClient(base_url=web.url, headers=AUTH, timeout=30) as api,
    ):
        attempt_id = await launch_through_web(api)

        async def status(wanted: str) -> bool:
            return bool((await api.get(f"/api/attempts/{attempt_id}")).json()["status"] == wanted)

        # A viewer of the live log on the web process, which mirrors nothing itself.
        received = bytearray()
        viewer = asyncio.create_task(follow_events(api, attempt_id, received))
        token = owners(database)["fa-b200"][1]
        victim, survivor = owner_and_other(database, controllers, "fa-b200")
        killed = time.monotonic()
        victim.kill()

        await taken_over(database, "fa-b200", survivor)
        took = time.monotonic() - killed
        assert took <= LEASE + LEASE / 3 + 2, took
        assert owners(database)["fa-b200"][1] == token + 1  # a new fencing token
        shown = {row["host"]: row for row in (await api.get("/api/leases")).json()}
        assert pid_of(shown["fa-b200"]["owner"]) == survivor.pid and shown["fa-b200"]["token"] == token + 1
        assert shown["fa-b200"]["held"] is True and set(shown) == {"fa-b200", "fa-rtx"}
        attempt = (await api.get(f"/api/attempts/{attempt_id}")).json()
        assert_status_is_true(cluster["fa-b200"], attempt)
        server_pid = attempt["pid"]

        # Stopped through the web process, followed to its end by the controller that owns it now.
        assert (await api.post(f"/api/attempts/{attempt_id}/stop")).status_code == 202
        await until(lambda: status("stopped"), 30, "the stop was not followed to its end")
        assert not process_alive(server_pid)
        launches = list((cluster["fa-b200"].home / ".launchdeck" / "attempts").iterdir())
        assert len(launches) == 1, launches  # started once, by one controller
        attempt = (await api.get(f"/api/attempts/{attempt_id}")).json()
        assert_status_is_true(cluster["fa-b200"], attempt)
        # The viewer got the whole log, each byte once, across the controller's death.
        await asyncio.wait_for(viewer, 30)
        assert bytes(received) == (cluster["fa-b200"].home / attempt["remote_dir"] / "server.log").read_bytes()


async def test_a_controller_frozen_past_its_lease_wakes_to_find_its_host_taken_and_writes_nothing(
    tmp_path: Path, database: str, cluster: dict[str, HostProcess]
) -> None:
    async with (
        replicas_running(tmp_path, database) as (controllers, web),
        httpx.AsyncClient(base_url=web.url, headers=AUTH, timeout=30) as api,
    ):
        attempt_id = await launch_through_web(api)
        attempt = (await api.get(f"/api/attempts/{attempt_id}")).json()
        server_log = cluster["fa-b200"].home / attempt["remote_dir"] / "server.log"
        token = owners(database)["fa-b200"][1]
        frozen, survivor = owner_and_other(database, controllers, "fa-b200")
        frozen.send(signal.SIGSTOP)
        # The log grows while it is frozen, a piece at a time as a server writes it: its SSH reader
        # has many whole pieces in its socket when it wakes, the survivor mirrors them too.
        for n in range(0, 2000, 20):
            with server_log.open("ab") as log:
                log.write(b"".join(f"[frozen check] line {m} of 2000 {'.' * 70}\n".encode() for m in range(n, n + 20)))
            await asyncio.sleep(0.02)

        await taken_over(database, "fa-b200", survivor)
        frozen.send(signal.SIGCONT)

        # Woken, it learns at its next beat (or its next write, refused) that the host is not its own.
        async def let_go() -> bool:
            return "fa-b200" in frozen.tail(400) and "given up ['fa-b200']" in frozen.tail(400)

        await until(let_go, 4 * LEASE, f"the woken controller did not let go:\n{frozen.tail()}")
        # The frozen one took nothing back under its old token: the host is the survivor's, or (the
        # hosts spreading again a beat later) the woken one's under a token taken anew.
        holder, fencing = owners(database)["fa-b200"]
        assert (pid_of(holder), fencing) in {(survivor.pid, token + 1), (frozen.pid, token + 2)}
        attempt = (await api.get(f"/api/attempts/{attempt_id}")).json()
        assert_status_is_true(cluster["fa-b200"], attempt)
        assert (await api.post(f"/api/attempts/{attempt_id}/stop")).status_code == 202

        async def stopped() -> bool:
            return bool((await api.get(f"/api/attempts/{attempt_id}")).json()["status"] == "stopped")

        try:
            await until(stopped, 30, "the host's owner did not follow the stop to its end")
        except AssertionError as exc:
            raise AssertionError(f"{exc}\nwoken:\n{frozen.tail()}\nsurvivor:\n{survivor.tail()}") from None

        # The shared mirror holds the host's log once: the woken controller appended nothing to it.
        meta = tmp_path / "data" / "logs" / f"{attempt_id}.json"

        async def complete() -> bool:
            return meta.exists() and bool(json.loads(meta.read_text())["complete"])

        await until(complete, 30, "the survivor did not complete the log")
        mirrored, written = (tmp_path / "data" / "logs" / f"{attempt_id}.log").read_bytes(), server_log.read_bytes()
        assert mirrored == written, f"{len(mirrored)} bytes mirrored of the host's {len(written)}"
        assert json.loads(meta.read_text())["verification"]["match"] is True


def test_a_role_of_several_processes_on_sqlite_is_refused_with_a_sentence(tmp_path: Path) -> None:
    for role in ("web", "controller"):
        result = run_cli("serve", "--role", role, env={"LAUNCHDECK_DATA_DIR": str(tmp_path)}, timeout=60)
        assert result.returncode == 2
        assert result.stderr.strip() == (
            f"launchdeck: --role {role} is one of several processes, which share one PostgreSQL database "
            "(LAUNCHDECK_DATABASE_URL=postgresql://...); SQLite is one process's: run `launchdeck serve` alone"
        )
        assert not (tmp_path / "launchdeck.db").exists()  # nothing started


VIEWERS = 100  # of one live log, behind the load balancer, half of them on the web process killed


def load_balancer(tmp_path: Path, webs: list[Dashboard]) -> tuple[subprocess.Popen[bytes], str]:
    """Debian's haproxy in front of the web processes, round robin, each checked at /readyz."""
    port = free_port()
    backends, output = [web.port for web in webs], tmp_path / "haproxy.out"
    process = start_haproxy(tmp_path, port, backends, output=output, checks="inter 300ms fall 2 rise 2")
    return process, f"http://127.0.0.1:{port}"


async def test_viewers_behind_a_load_balancer_lose_no_byte_when_a_web_process_dies(
    tmp_path: Path, database: str, cluster: dict[str, HostProcess]
) -> None:
    require(HAPROXY.exists(), "haproxy is not installed (apt-get install haproxy)")
    controller = replica(tmp_path, database, "controller", "controller")
    webs = [replica(tmp_path, database, "web", f"web-{n}") for n in (1, 2)]
    balancer = None
    try:
        for server in (controller, *webs):
            server.start()
        balancer, url = load_balancer(tmp_path, webs)
        # A connection per viewer, and one more for the requests made beside them.
        pool = httpx.Limits(max_connections=VIEWERS + 10)
        async with httpx.AsyncClient(base_url=url, headers=AUTH, timeout=30, limits=pool) as api:

            async def balanced() -> bool:
                with contextlib.suppress(httpx.HTTPError):
                    return (await api.get("/readyz")).status_code == 200
                return False

            await until(balanced, 30, "haproxy did not answer")
            attempt_id = await launch_through_web(api)
            attempt = (await api.get(f"/api/attempts/{attempt_id}")).json()
            server_log = cluster["fa-b200"].home / attempt["remote_dir"] / "server.log"
            viewers = [bytearray() for _ in range(VIEWERS)]
            streams = [asyncio.create_task(follow_events(api, attempt_id, received)) for received in viewers]

            async def write_lines(count: int) -> None:  # the server's log grows while the viewers watch
                for n in range(count):
                    with server_log.open("ab") as log:
                        log.write(f"[viewer check] line {n} of {count}\n".encode())
                    await asyncio.sleep(0.01)

            writing = asyncio.create_task(write_lines(400))
            await asyncio.sleep(1.0)
            webs[0].kill()  # half the viewers lose their stream mid-line and come back through haproxy
            await writing
            assert (await api.post(f"/api/attempts/{attempt_id}/stop")).status_code == 202
            await asyncio.wait_for(asyncio.gather(*streams), 60)
        whole = server_log.read_bytes()
        assert b"line 399 of 400" in whole
        assert all(bytes(received) == whole for received in viewers), [len(r) for r in viewers]
    finally:
        if balancer is not None:
            balancer.terminate()
            balancer.wait(10)
        for server in (controller, *webs):
            server.stop()


async def test_one_process_on_sqlite_shows_no_leases(api: httpx.AsyncClient) -> None:
    """It owns every host itself: nothing to share, so no lease is taken."""
    assert (await api.get("/api/hosts")).status_code == 200
    assert (await api.get("/api/leases")).json() == []
