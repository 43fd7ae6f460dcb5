"""Processes for the fault tests: simulated hosts and a dashboard, each a real `launchdeck`
process that a test can kill, freeze, stop and start again.

Every simulated host runs alone (`launchdeck demo --hosts-only --host NAME`), so killing one
host's SSH server leaves the other hosts, and the servers launched on the killed one (started
with setsid, as on a real host), running. The dashboard is `launchdeck serve` on a loopback
port, with the hosts file those processes wrote.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import re
import signal
import subprocess
import time
from collections.abc import AsyncIterator, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx

from tests.support.cli import cli_argv, cli_env
from tests.support.servers import free_port
from tests.support.waiting import wait_until

TOKEN = "fault-token-0123456789abcdef0123456789"
AUTH = {"Authorization": f"Bearer {TOKEN}"}
HOSTS = "fa-b200:b200:4,fa-rtx:rtx-pro-6000:4"
KEEPALIVE = 1.0  # seconds between the dashboard's SSH keepalives: a frozen host is offline in ~3 s


@dataclass
class Process:
    """A launchdeck command whose output goes to a file, started again with the same arguments."""

    argv: list[str]
    env: dict[str, str]
    output: Path
    popen: subprocess.Popen[bytes] | None = None

    def spawn(self) -> None:
        self.output.parent.mkdir(parents=True, exist_ok=True)
        with self.output.open("ab") as out:
            # Its own process group, so that whatever it leaves behind can be ended with it.
            self.popen = subprocess.Popen(
                cli_argv(*self.argv),
                env=self.env,
                stdout=out,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )

    @property
    def pid(self) -> int:
        assert self.popen is not None
        return self.popen.pid

    def send(self, signum: int) -> None:
        assert self.popen is not None
        with contextlib.suppress(ProcessLookupError):
            os.kill(self.popen.pid, signum)

    def kill(self) -> None:
        """SIGKILL, as a crash or the OOM killer: nothing gets to clean up."""
        self.send(signal.SIGKILL)
        assert self.popen is not None
        self.popen.wait(10)

    def stop(self) -> None:
        if self.popen is None or self.popen.poll() is not None:
            return
        self.send(signal.SIGCONT)  # a frozen process cannot act on SIGTERM
        self.send(signal.SIGTERM)
        try:
            self.popen.wait(15)
        except subprocess.TimeoutExpired:
            self.kill()
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.popen.pid, signal.SIGKILL)  # a child it left running (a search, say)

    def tail(self, lines: int = 40) -> str:
        text = self.output.read_text(errors="replace") if self.output.exists() else ""
        return "\n".join(text.splitlines()[-lines:])


@dataclass
class HostProcess(Process):
    """One simulated host's SSH server in its own process."""

    name: str = ""
    cluster: Path = Path()
    port: int = 0
    _seen: int = 0

    @classmethod
    def create(cls, cluster: Path, name: str, time_scale: float) -> HostProcess:
        env = cli_env({"LAUNCHDECK_DEMO_HOSTS": HOSTS, "LAUNCHDECK_DEMO_TIME_SCALE": str(time_scale)}, clean=True)
        argv = ["demo", "--hosts-only", "--dir", str(cluster), "--host", name]
        return cls(argv, env, cluster / f"{name}.out", name=name, cluster=cluster)

    @property
    def home(self) -> Path:
        return self.cluster / "hosts" / self.name / "home"

    def start(self) -> None:
        """Starts the host (on the port the hosts file gives it, once it has one) and waits until
        it listens."""
        self.spawn()
        self.wait_listening()

    def spawn(self) -> None:
        self._seen = len(self.output.read_bytes()) if self.output.exists() else 0
        super().spawn()

    def wait_listening(self) -> None:
        seen = self._seen

        def ready() -> bool:
            assert self.popen is not None
            if self.popen.poll() is not None:
                raise AssertionError(f"host {self.name} exited: {self.tail()}")
            return b"hosts file:" in self.output.read_bytes()[seen:]

        wait_until(ready, 60, f"host {self.name} did not start listening")
        for line in self.output.read_text(errors="replace")[seen:].splitlines():
            if line.startswith(f"simulated host {self.name}:"):
                self.port = int(line.rsplit(":", 1)[1])


@contextlib.contextmanager
def hosts_running(cluster: Path, names: Sequence[str], time_scale: float) -> Iterator[dict[str, HostProcess]]:
    """The simulated hosts `names`, each in its own process and listening; stopped on leaving."""
    hosts = {name: HostProcess.create(cluster, name, time_scale) for name in names}
    try:
        for host in hosts.values():
            host.spawn()
        for host in hosts.values():
            host.wait_listening()
        yield hosts
    finally:
        for host in hosts.values():
            host.stop()


@dataclass
class Dashboard(Process):
    """`launchdeck serve` against the simulated hosts' hosts file (or `launchdeck demo`)."""

    port: int = 0
    data_dir: Path = Path()

    @classmethod
    def create(cls, data_dir: Path, hosts_file: Path, output: Path | None = None, **settings: str) -> Dashboard:
        port = free_port()
        env = cli_env(
            {
                "LAUNCHDECK_DATA_DIR": str(data_dir),
                "LAUNCHDECK_HOSTS_FILE": str(hosts_file),
                "LAUNCHDECK_TOKEN": TOKEN,
                "LAUNCHDECK_PORT": str(port),
                "LAUNCHDECK_KNOWN_HOSTS": str(data_dir / "known_hosts"),
                "LAUNCHDECK_SSH_CONFIG": str(data_dir / "no-ssh-config"),
                "LAUNCHDECK_SSH_KEEPALIVE_INTERVAL": str(KEEPALIVE),
                "LAUNCHDECK_SSH_CONNECT_TIMEOUT": "3",
                "LAUNCHDECK_STOP_GRACE_SECONDS": "1",
                "LAUNCHDECK_COOKIE_SECURE": "false",
                **{f"LAUNCHDECK_{key.upper()}": value for key, value in settings.items()},
            },
            clean=True,
        )
        data_dir.mkdir(parents=True, exist_ok=True)
        output = output or data_dir.parent / "dashboard.out"
        return cls(["serve"], env, output, port=port, data_dir=data_dir)

    @classmethod
    def demo(cls, data_dir: Path, time_scale: float) -> Dashboard:
        """`launchdeck demo`: its simulated hosts (under `data_dir`/demo) and the dashboard in one process."""
        port = free_port()
        env = cli_env(
            {
                "LAUNCHDECK_DATA_DIR": str(data_dir),
                "LAUNCHDECK_TOKEN": TOKEN,
                "LAUNCHDECK_PORT": str(port),
                "LAUNCHDECK_DEMO_TIME_SCALE": str(time_scale),
                "LAUNCHDECK_COOKIE_SECURE": "false",
            },
            clean=True,
        )
        data_dir.mkdir(parents=True, exist_ok=True)
        return cls(["demo"], env, data_dir.parent / "demo.out", port=port, data_dir=data_dir)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self) -> None:
        """Starts the dashboard and waits until it answers and every host is online."""
        self.spawn()

        def online() -> bool:
            assert self.popen is not None
            if self.popen.poll() is not None:
                raise AssertionError(f"the dashboard exited: {self.tail()}")
            try:
                hosts = httpx.get(f"{self.url}/api/hosts", headers=AUTH, timeout=2).json()
            except (httpx.HTTPError, ValueError):
                return False
            return all(host["state"] == "online" for host in hosts)

        wait_until(online, 60, "the dashboard did not start with every host online", interval=0.2)


def process_alive(pid: int | None) -> bool:
    """The simulated hosts are local processes: their servers' pids are this machine's."""
    try:
        with open(f"/proc/{pid}/stat") as stat:
            return stat.read().rpartition(")")[2].split()[0] != "Z"
    except (OSError, TypeError):
        return False


def assert_status_is_true(host: HostProcess, attempt: dict[str, Any]) -> None:
    """What the attempt says against what its host shows (the pid file and exit status its
    launch script wrote): a live server is ready, a dead one is not, and the exit status is
    the one recorded."""
    directory = host.home / attempt["remote_dir"]
    where = f"attempt {attempt['id']} ({attempt['status']}: {attempt['error']!r})"
    pid_file, exit_file = directory / "pid", directory / "exit_code"
    pid = int(pid_file.read_text().split()[0]) if pid_file.exists() else None
    if pid is not None:
        assert attempt["pid"] == pid, f"{where}: its server's pid on {host.name} is {pid}"
    if process_alive(pid):
        assert attempt["status"] == "ready", f"{where}: its server runs on {host.name}"
    else:
        assert attempt["status"] in ("failed", "stopped", "lost"), f"{where}: no server of it runs on {host.name}"
    if exit_file.exists():
        assert attempt["exit_code"] == int(exit_file.read_text()), where


async def form_login(browser: httpx.AsyncClient) -> httpx.Response:
    """A browser login: the form, then the token."""
    form = await browser.get("/login")
    found = re.search(r'name="csrf_token" value="([^"]+)"', form.text)
    assert found, form.text[:500]
    return await browser.post("/login", data={"token": TOKEN, "next": "/hosts", "csrf_token": found[1]})


@dataclass
class Sample:
    at: float
    route: str
    seconds: float
    status: int  # 0: no answer


@dataclass
class Watch:
    """Polls routes continuously, recording every request's latency and every host's state."""

    client: httpx.AsyncClient
    routes: list[str]
    samples: list[Sample] = field(default_factory=list)
    states: list[tuple[float, str, str]] = field(default_factory=list)  # (time, host, state)

    async def run(self) -> None:
        while True:
            for route in self.routes:
                started = time.monotonic()
                try:
                    response = await self.client.get(route, timeout=30)
                    status = response.status_code
                except httpx.HTTPError:
                    response, status = None, 0
                self.samples.append(Sample(started, route, time.monotonic() - started, status))
                if response is not None and route == "/api/hosts" and status == 200:
                    self.states += [(started, host["name"], host["state"]) for host in response.json()]
            await asyncio.sleep(0.05)

    def first_state(self, host: str, state: str, after: float) -> float | None:
        return next((at for at, name, seen in self.states if name == host and seen == state and at >= after), None)

    def slowest(self, since: float = 0.0) -> Sample:
        return max((s for s in self.samples if s.at >= since), key=lambda s: s.seconds)

    def failures(self) -> list[Sample]:
        return [s for s in self.samples if s.status == 0 or s.status >= 500]


@contextlib.asynccontextmanager
async def watching(client: httpx.AsyncClient, routes: list[str]) -> AsyncIterator[Watch]:
    watch = Watch(client, routes)
    task = asyncio.create_task(watch.run())
    try:
        yield watch
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task


async def follow_events(client: httpx.AsyncClient, attempt_id: int, received: bytearray) -> None:
    """Reads the attempt's live log (SSE) into `received`, resuming at its last offset whenever the
    stream drops, until the `end` event; keeps the exact bytes (lone surrogates are raw bytes)."""
    import json

    while True:
        try:
            params = {"offset": len(received)}
            async with client.stream("GET", f"/api/attempts/{attempt_id}/events", params=params, timeout=None) as r:
                event = ""
                async for line in r.aiter_lines():
                    if line.startswith("event:"):
                        event = line.partition(":")[2].strip()
                    elif line.startswith("data:") and event == "log":
                        data = json.loads(line.partition(":")[2])
                        if data["offset"] == len(received):
                            received += data["text"].encode(errors="surrogateescape")
                    elif line.startswith("data:") and event == "end":
                        return
        except httpx.HTTPError:
            pass
        await asyncio.sleep(0.2)
