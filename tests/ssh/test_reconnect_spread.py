"""Many hosts cut off by one network blip come back spread out, not all at the same moment."""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
from collections.abc import Callable
from pathlib import Path

from app.ssh import HostConnection, HostSpec, HostState

Connect = Callable[..., HostConnection]
HOSTS = 200
WINDOW = 0.05
# The first wait after a drop is then between 1 s and 3 s: 2 s to spread 200 reconnections over,
# so that a pause of the event loop (a garbage collection) bunches few of them.
BACKOFF_MAX = 4.0


class Bastion:
    """A loopback jump host in front of one SSH server. It notes when each connection arrives, and
    can cut every connection at once and hold new ones until it forwards again: the arrivals then
    are the reconnection attempts themselves, not what the handshakes' load makes of them."""

    def __init__(self, target_port: int):
        self.target_port = target_port
        self.port = 0
        self.arrivals: list[float] = []
        self._server: asyncio.Server | None = None
        self._writers: list[asyncio.StreamWriter] = []
        self._tasks: set[asyncio.Task[None]] = set()
        self._forwarding = asyncio.Event()
        self._forwarding.set()

    async def start(self) -> None:
        # A backlog above the listen default of 100, so that the kernel does not spread out
        # connections that arrive together.
        self._server = await asyncio.start_server(self._forward, "127.0.0.1", 0, backlog=1024)
        self.port = self._server.sockets[0].getsockname()[1]

    def cut(self) -> None:
        """Drops every connection through it, and holds the ones that arrive next."""
        self._forwarding.clear()
        for writer in self._writers:
            writer.transport.abort()
        self._writers.clear()

    def forward_again(self) -> None:
        self._forwarding.set()

    async def close(self) -> None:
        if self._server:
            self._server.close()
        self.cut()
        for task in list(self._tasks):
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        if self._server:
            await self._server.wait_closed()

    async def _forward(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.arrivals.append(asyncio.get_running_loop().time())
        handler = asyncio.current_task()
        assert handler is not None
        self._tasks.add(handler)
        try:
            await self._forwarding.wait()
        finally:
            self._tasks.discard(handler)
        up_reader, up_writer = await asyncio.open_connection("127.0.0.1", self.target_port)
        self._writers += [writer, up_writer]
        for source, sink in ((reader, up_writer), (up_reader, writer)):
            task = asyncio.create_task(self._pump(source, sink))
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)

    @staticmethod
    async def _pump(source: asyncio.StreamReader, sink: asyncio.StreamWriter) -> None:
        with contextlib.suppress(OSError):
            while data := await source.read(65536):
                sink.write(data)
                await sink.drain()
        sink.close()


def most_in_one_window(times: list[float], window: float) -> int:
    times = sorted(times)
    return max(sum(1 for later in times[i:] if later - start < window) for i, start in enumerate(times))


async def test_hosts_cut_off_together_do_not_reconnect_in_lockstep(
    connect: Connect, sim_specs: list[HostSpec], tmp_path: Path
) -> None:
    target = sim_specs[0]
    bastion = Bastion(target.port or 22)
    await bastion.start()
    try:
        key = Path(target.known_hosts or "").read_text().splitlines()[0].split(" ", 1)[1]
        known_hosts = tmp_path / "bastion_known_hosts"
        known_hosts.write_text(f"[127.0.0.1]:{bastion.port} {key}\n")
        specs = [
            dataclasses.replace(target, name=f"node-{i:03}", port=bastion.port, known_hosts=str(known_hosts))
            for i in range(HOSTS)
        ]
        hosts = [connect(spec, reconnect_backoff_max=BACKOFF_MAX) for spec in specs]
        await asyncio.gather(*(host.wait_online(30) for host in hosts))
        online_since = {host.name: host.status.since for host in hosts}

        cut_at = asyncio.get_running_loop().time()
        bastion.arrivals.clear()
        bastion.cut()
        async with asyncio.timeout(10):
            while len(bastion.arrivals) < HOSTS:
                await asyncio.sleep(0.05)
        retries = [arrived - cut_at for arrived in bastion.arrivals]
        bastion.forward_again()
        async with asyncio.timeout(30):
            while not all(h.status.state is HostState.ONLINE and h.status.since > online_since[h.name] for h in hosts):
                await asyncio.sleep(0.05)
        assert len(bastion.arrivals) == HOSTS  # one reconnection each: none failed and tried again

        retries.sort()
        middle = retries[HOSTS * 9 // 10] - retries[HOSTS // 10]  # where 80% of them fall
        crowd = most_in_one_window(retries, WINDOW)
        seen = (
            f"first retries {retries[0]:.3f}-{retries[-1]:.3f} s after the cut, 80% within {middle:.3f} s, "
            f"at most {crowd} in {WINDOW} s"
        )
        assert retries[0] >= 1.0, seen  # no host is tried again sooner than the minimum wait
        assert middle > 1.0, seen  # 1.6 s expected of the 2 s range; lockstep keeps them within a few ms
        # 5 expected in any 50 ms, lockstep brings all 200 in one; a loaded machine that stalls this
        # event loop for a moment stamps the arrivals queued meanwhile together (70 seen in CI's suite).
        assert crowd <= HOSTS // 2, seen
    finally:
        await bastion.close()
