"""A lost client leaves on a simulated host what it leaves on OpenSSH's sshd, which closes a session's
pipes and sends no signal (without a terminal): a benchmark and a GPU probe, streamed as the dashboard
streams them, end within a second or two; a command that neither reads nor writes, and a server
started with setsid, run on. The same test runs against both servers."""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import json
import os
import signal
import sys
import time
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import asyncssh
import pytest

from app.ssh import HostSpec
from tests.support.paths import ROOT
from tests.support.waiting import until

MARK = "LAUNCHDECK_TEST_SESSION"  # in the environment of what each session starts: TAG + its role

# Opens the sessions the dashboard opens, says so, then waits to be killed. argv: spec (JSON),
# known_hosts, TAG. A benchmark as the runner starts one (under `timeout`), a probe that keeps
# writing, a plain command that neither reads nor writes, and a server started with setsid.
CLIENT = r"""
import asyncio, contextlib, json, sys
from pathlib import Path
from app.ssh import HostConnection, HostSpec, SSHOptions
from tests.support.hosts import START_DETACHED

fields, known_hosts, tag = json.loads(sys.argv[1]), Path(sys.argv[2]), sys.argv[3]
spec = HostSpec(**fields | {"identity_files": tuple(fields["identity_files"]), "labels": ()})
mark = f"LAUNCHDECK_TEST_SESSION={tag}"

async def main():
    host = HostConnection(spec, SSHOptions(known_hosts=known_hosts, ssh_config=known_hosts.parent / "none"))
    host.start()
    await host.wait_online(10)
    async with contextlib.AsyncExitStack() as stack:
        bench = ["env", mark + "bench", "timeout", "-k", "10", "3600", "sleep", "300"]
        await stack.enter_async_context(host.stream(bench))
        probe = ["env", mark + "probe", "sh", "-c", "while sleep 0.1; do echo reading; done"]
        await (await stack.enter_async_context(host.stream(probe))).stdout.readline()
        plain = asyncio.create_task(host.run(["env", mark + "plain", "sleep", "300"], timeout=None))
        await host.run(["env", mark + "detached", "sh", "-c", START_DETACHED, "sh", "sleep", "300"])
        print("running", flush=True)
        await asyncio.sleep(600)

asyncio.run(main())
"""


@pytest.fixture
def tag() -> Iterator[str]:
    """A tag for the test's processes; whichever are left are killed after it."""
    tag = f"{os.getpid()}-{time.monotonic_ns()}-"
    yield tag
    for pids in tagged(tag).values():
        for pid in pids:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)


def tagged(tag: str) -> dict[str, list[int]]:
    """This machine's live processes whose MARK starts with `tag`, by their role (the rest of it)."""
    prefix = f"{MARK}={tag}".encode()
    found: dict[str, list[int]] = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_bytes()
            environ = (entry / "environ").read_bytes().split(b"\0")
        except OSError:
            continue
        if stat[stat.rindex(b")") + 2 :].split()[0] in (b"Z", b"X"):
            continue
        for variable in environ:
            if variable.startswith(prefix):
                found.setdefault(variable[len(prefix) :].decode(), []).append(int(entry.name))
    return found


async def settled(tag: str, roles: set[str], what: str) -> tuple[dict[str, list[int]], float]:
    """The roles still running once they are `roles`, and the seconds that took (at most 10)."""
    began = time.monotonic()
    with contextlib.suppress(AssertionError):
        await until(lambda: set(tagged(tag)) == roles, what, 10)
    return tagged(tag), time.monotonic() - began


async def test_a_killed_client_leaves_only_what_it_leaves_on_openssh(
    target: HostSpec, tag: str, tmp_path: Path
) -> None:
    known_hosts = tmp_path / "known_hosts"
    known_hosts.write_text(Path(target.known_hosts or os.devnull).read_text())
    client = await asyncio.create_subprocess_exec(
        sys.executable, "-c", CLIENT, json.dumps(dataclasses.asdict(target)), str(known_hosts), tag,
        cwd=ROOT, env=os.environ | {"PYTHONPATH": str(ROOT)}, stdout=asyncio.subprocess.PIPE,
    )  # fmt: skip
    try:
        assert client.stdout is not None
        assert await asyncio.wait_for(client.stdout.readline(), 30) == b"running\n"
        running, _ = await settled(tag, {"bench", "probe", "plain", "detached"}, "the client's commands to start")
    finally:
        client.kill()
        await client.wait()
    left, took = await settled(tag, {"plain", "detached"}, "the benchmark and the probe to end")
    print(f"\n{target.name}: {sum(map(len, running.values()))} processes ran; {took:.2f} s after the kill: {left}")
    assert set(left) == {"plain", "detached"}, left
    assert took <= 2


@contextlib.asynccontextmanager
async def connected(target: HostSpec) -> AsyncIterator[asyncssh.SSHClientConnection]:
    assert target.known_hosts
    async with asyncssh.connect(
        target.address or "127.0.0.1",
        target.port or 22,
        username=target.user or os.environ.get("USER", "root"),
        client_keys=list(target.identity_files),
        known_hosts=target.known_hosts,
        config=None,
    ) as conn:
        yield conn


async def test_a_closed_channel_ends_a_reader_and_a_writer_and_leaves_a_quiet_command(
    target: HostSpec, tag: str
) -> None:
    async with connected(target) as conn:
        commands = {
            "reader": "cat",
            "writer": "sh -c 'while sleep 0.1; do echo line; done'",
            "quiet": "sleep 300",
        }
        processes = [
            await conn.create_process(f"env {MARK}={tag}{role} {command}", encoding=None)
            for role, command in commands.items()
        ]
        await settled(tag, set(commands), "the commands to start")
        for process in processes:
            process.close()
        left, took = await settled(tag, {"quiet"}, "the reader and the writer to end")
    print(f"\n{target.name}: {took:.2f} s after the channels closed: {left}")
    assert set(left) == {"quiet"}, left
    assert took <= 2
