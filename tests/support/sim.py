"""The simulated SGLang launched by hand over SSH on a simulated host, as a launcher would start
it: the models the demo serves, the line that says a server is ready, and what a log is checked
against (its last exception line, SGLang's real formats)."""

from __future__ import annotations

import asyncio
import dataclasses
import re
import shlex
import uuid
from dataclasses import dataclass, field

from app.gpu.nvidia_smi import read_gpu_memory
from app.ssh import HostConnection
from tests.support.sglang_formats import template_for

LLAMA = "meta-llama/Llama-3.1-8B-Instruct"
QWEN = "Qwen/Qwen3.6-27B"
READY = "The server is fired up and ready to roll!"
SGLANG_0_5_10 = "python3-sglang-0.5.10"
# The demo's sweep over the MTP draft on the newest release, at --max-concurrency 8: (steps, topk, draft tokens).
DEMO_GRID = [(1, 1, 2), (2, 1, 3), (2, 4, 5), (3, 1, 4), (3, 4, 4), (4, 1, 5)]


@dataclass
class Server:
    """A simulated server started detached in its own session, as a launcher would start it."""

    host: HostConnection
    workdir: str
    pgid: int
    pid: int = 0  # its own: the group's id where it leads its group

    async def log(self) -> str:
        return (await self.host.run(["cat", f"{self.workdir}/server.log"])).stdout.decode()

    async def wait_for(self, text: str, timeout: float = 30) -> str:
        for _ in range(int(timeout * 10)):
            log = await self.log()
            if text in log:
                return log
            await asyncio.sleep(0.1)
        raise AssertionError(f"{text!r} did not appear; log ends:\n{log[-3000:]}")

    async def processes(self) -> list[str]:
        """The group's live processes; exited ones that no init has reaped yet do not count."""
        result = await self.host.run(["ps", "-o", "stat=,args=", "-g", str(self.pgid)], check=False)
        rows = [line.strip().split(None, 1) for line in result.stdout.decode().splitlines()]
        return [row[1] for row in rows if not row[0].startswith("Z")]

    async def signal_group(self, name: str) -> None:
        await self.host.run(["env", "kill", f"-{name}", "--", f"-{self.pgid}"], check=False)


@dataclass
class Launcher:
    host: HostConnection
    started: list[Server] = field(default_factory=list)
    python: str = "python3"  # the host's newest SGLang; SGLANG_0_5_10 names the older one

    def on(self, python: str) -> Launcher:
        """The same host's launcher with another Python (and so another SGLang release)."""
        return dataclasses.replace(self, python=python)

    def command(self, args: list[str], env: dict[str, str]) -> str:
        return shlex.join(
            ["env", *(f"{k}={v}" for k, v in env.items()), self.python, "-m", "sglang.launch_server", *args]
        )

    async def run_to_exit(self, args: list[str], env: dict[str, str] | None = None) -> tuple[int, str]:
        workdir = f"attempts/{uuid.uuid4().hex}"
        script = f"mkdir -p {workdir} && cd {workdir} && {self.command(args, env or {})} > server.log 2>&1; echo $?"
        result = await self.host.run(["sh", "-c", script], timeout=60)
        log = (await self.host.run(["cat", f"{workdir}/server.log"])).stdout.decode()
        return int(result.stdout), log

    async def start(
        self,
        args: list[str],
        env: dict[str, str] | None = None,
        *,
        own_group: bool = True,
        output: str = "server.log",
        beside: str = "",
    ) -> Server:
        """The server with its output in `output` (in its working directory), in a session of its own,
        or (`own_group` False) as `nohup ... &` leaves it: in the group of the shell that started it,
        with the command `beside` (started first, by the same shell) if one is given."""
        workdir = f"attempts/{uuid.uuid4().hex}"
        command = self.command(args, env or {})
        start = "setsid" if own_group else "nohup"
        first = f"{beside} > /dev/null 2>&1 < /dev/null & " if beside else ""
        script = f"mkdir -p {workdir} && cd {workdir} && {first}{start} {command} > {output} 2>&1 < /dev/null & echo $!"
        result = await self.host.run(["sh", "-c", script])
        pid = int(result.stdout)
        pgid = pid if own_group else int((await self.host.run(["ps", "-o", "pgid=", "-p", str(pid)])).stdout)
        server = Server(self.host, workdir, pgid, pid)
        self.started.append(server)
        return server

    async def used_mib(self) -> list[int]:
        return [gpu.memory_used_mib or 0 for gpu in await read_gpu_memory(self.host)]

    async def wait_until_gpus_free(self, timeout: float = 10) -> None:
        for _ in range(int(timeout * 10)):
            if not any(await self.used_mib()):
                return
            await asyncio.sleep(0.1)
        raise AssertionError(f"GPU memory still booked: {await self.used_mib()}")


def root_error(log: str) -> str:
    """The last exception line of the log (the simulated tracebacks end in their root cause)."""
    lines = [line for line in log.splitlines() if re.match(r"[\w.]*(?:Error|Exception): ", line)]
    return lines[-1] if lines else ""


def assert_catalogued(log: str) -> None:
    """Every line written matches a template of SGLang's real formats (traceback source lines aside)."""
    unmatched, previous = [], ""
    # A progress bar redrawn with \r leaves no newline, so the next record can start mid-line.
    lines = re.split(r"\r|\n|(?<=.)(?=\[\d{4}-\d\d-\d\d \d\d:\d\d:\d\d[] ])", log)
    for line in lines:
        is_source = line.startswith("    ") and previous.startswith("  File ")
        is_caret = bool(line.strip()) and set(line.strip()) <= set("^~")
        if line and not is_source and not is_caret and template_for(line) is None:
            unmatched.append(line)
        previous = line if line.startswith("  File ") else previous if is_caret else ""
    assert unmatched == []
