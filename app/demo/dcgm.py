"""Each simulated host's dcgm-exporter, as a site runs one on every GPU node: a process of its own
(hostbin/dcgm-exporter, reading the host's GPU state through the simulated NVML), listening on this
machine's loopback, where the dashboard or a Prometheus scrapes it as it would a node's address."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import re
import sys

from app.demo.sshserver import HOSTBIN, HOSTLIB, SimHost

log = logging.getLogger(__name__)

LISTENING = re.compile(rb'msg="Listening on" address=[^\s:]*:(\d+)')
START_TIMEOUT = 10.0


class SimDcgmExporter:
    def __init__(self, host: SimHost, *, collect_interval: float = 1.0):
        self.host = host
        self.collect_interval = collect_interval  # dcgm-exporter's -c; the real default is 30 s
        self.port = 0
        self._process: asyncio.subprocess.Process | None = None
        self._drain: asyncio.Task[None] | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/metrics"

    async def start(self, port: int = 0) -> None:
        """Starts the exporter on `port` (a free one for 0) and waits until it listens."""
        environment = self.host.environment() | {"NODE_NAME": self.host.name, "PYTHONPATH": str(HOSTLIB)}
        self._process = await asyncio.create_subprocess_exec(
            sys.executable, str(HOSTBIN / "dcgm-exporter"),
            "--address", f"127.0.0.1:{port}", "--collect-interval", str(round(self.collect_interval * 1000)),
            env=environment, stdin=asyncio.subprocess.DEVNULL, stdout=asyncio.subprocess.DEVNULL,
            stderr=asyncio.subprocess.PIPE, start_new_session=True,
        )  # fmt: skip
        assert self._process.stderr is not None
        said = b""
        try:
            async with asyncio.timeout(START_TIMEOUT):
                while not (found := LISTENING.search(said)):
                    line = await self._process.stderr.readline()
                    if not line:
                        raise OSError(f"{self.host.name}'s dcgm-exporter exited: {said.decode(errors='replace')}")
                    said += line
        except BaseException:
            await self.stop()
            raise
        self.port = int(found.group(1))
        self._drain = asyncio.create_task(self._log(self._process.stderr), name=f"dcgm-exporter-{self.host.name}")

    async def stop(self) -> None:
        process, self._process = self._process, None
        if process is not None and process.returncode is None:
            process.terminate()
            try:
                await asyncio.wait_for(process.wait(), 5)
            except TimeoutError:
                process.kill()
                await process.wait()
        if self._drain is not None:
            self._drain.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._drain

    async def _log(self, stderr: asyncio.StreamReader) -> None:
        """What the exporter says after it started (nothing, unless it fails), so its pipe never fills."""
        while line := await stderr.readline():
            log.warning("%s's dcgm-exporter: %s", self.host.name, line.decode(errors="replace").rstrip())
