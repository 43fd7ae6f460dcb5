"""Real servers for the tests: an OpenSSH sshd and a TCP relay that can go silent; a small
filesystem to fill up; and the processes left running under a directory."""

from __future__ import annotations

import asyncio
import contextlib
import errno
import inspect
import os
import shutil
import signal
import socket
import subprocess
import time
from collections.abc import Awaitable, Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import asyncssh
import pytest

from app.ssh.hostkeys import generate_key_file

STRICT = os.environ.get("LAUNCHDECK_TEST_STRICT") == "1"


async def until(check: Callable[[], Any | Awaitable[Any]], what: str, timeout: float = 30) -> Any:
    """Polls `check` (plain or async) until it returns something true, and returns that; a test that
    waits for something never waits forever: after `timeout` it fails, saying `what` it waited for."""
    deadline = time.monotonic() + timeout
    while True:
        result = check()
        if inspect.isawaitable(result):
            result = await result
        if result:
            return result
        if time.monotonic() > deadline:
            raise AssertionError(f"{what} (waited {timeout:g} s)")
        await asyncio.sleep(0.05)


def require(condition: bool, reason: str) -> None:
    """Skips when a component is missing, except in strict runs (CI), where that is a failure."""
    if not condition:
        if STRICT:
            pytest.fail(f"{reason} (LAUNCHDECK_TEST_STRICT=1: missing components fail the run)")
        pytest.skip(reason)


@contextlib.contextmanager
def small_filesystem(mount_point: Path, size: str) -> Iterator[Path]:
    """A tmpfs of `size` (as mount takes it: "30m") at `mount_point`, for filling up. Needs root."""
    mount_point.mkdir(parents=True, exist_ok=True)
    mounted = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(mount_point)], check=False)
    require(mounted.returncode == 0, "cannot mount a tmpfs here (the disk-full tests need root)")
    try:
        yield mount_point
    finally:
        subprocess.run(["umount", "-l", str(mount_point)], check=False)


def fill(directory: Path, leave: int = 0) -> Path:
    """Writes a file until the filesystem has no more than `leave` bytes left; returns it."""
    filler = directory / "filler"
    with filler.open("wb", buffering=0) as f:
        for size in (1 << 20, 4096, 1):
            try:
                while shutil.disk_usage(directory).free - size >= leave:
                    f.write(b"\0" * size)
            except OSError as exc:
                assert exc.errno == errno.ENOSPC, exc
    return filler


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def processes_under(directory: Path) -> list[str]:
    """Live processes whose cwd, command line or environment points into `directory`
    (the simulated hosts run every command in a home under it, with its GPU state file in the
    environment). Zombies are left out: they hold nothing and are gone once reaped."""
    marker = str(directory.resolve())
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        try:
            stat = (entry / "stat").read_bytes()
            if stat[stat.rindex(b")") + 2 :].split()[0] in (b"Z", b"X"):
                continue
            cmdline = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace").strip()
            environ = (entry / "environ").read_bytes().decode(errors="replace")
            cwd = os.readlink(entry / "cwd")
        except (OSError, ValueError):
            continue  # gone meanwhile, or a kernel thread
        if marker in cmdline or marker in environ or cwd == marker or cwd.startswith(marker + "/"):
            found.append(f"pid {entry.name} (cwd {cwd}): {cmdline}")
    return found


@dataclass
class OpenSSHServer:
    """A real sshd on a loopback port, with its own host key and one authorized client key."""

    root: Path
    port: int
    host_key: asyncssh.SSHKey
    client_key_path: Path
    process: subprocess.Popen[bytes] | None = None

    @property
    def known_hosts_line(self) -> str:
        return f"[127.0.0.1]:{self.port} {self.host_key.export_public_key().decode().strip()}\n"

    @classmethod
    def create(cls, root: Path) -> OpenSSHServer:
        sshd = shutil.which("sshd") or "/usr/sbin/sshd"
        require(Path(sshd).exists(), "OpenSSH sshd is not installed (apt-get install openssh-server)")
        root.mkdir(parents=True, exist_ok=True)
        host_key = generate_key_file(root / "ssh_host_ed25519_key")
        client_key_path = root / "client_key"
        generate_key_file(client_key_path)
        (root / "authorized_keys").write_text(Path(f"{client_key_path}.pub").read_text())
        server = cls(root, free_port(), host_key, client_key_path)
        (root / "sshd_config").write_text(
            "\n".join(
                [
                    f"Port {server.port}",
                    "ListenAddress 127.0.0.1",
                    f"HostKey {root / 'ssh_host_ed25519_key'}",
                    f"AuthorizedKeysFile {root / 'authorized_keys'}",
                    f"PidFile {root / 'sshd.pid'}",
                    "StrictModes no",
                    "UsePAM no",
                    "PasswordAuthentication no",
                    "KbdInteractiveAuthentication no",
                    "PermitRootLogin prohibit-password",
                    "Subsystem sftp internal-sftp",
                    "LogLevel ERROR",
                ]
            )
            + "\n"
        )
        Path("/run/sshd").mkdir(exist_ok=True)
        return server

    def start(self) -> None:
        sshd = shutil.which("sshd") or "/usr/sbin/sshd"
        with open(self.root / "sshd.log", "ab") as log:
            self.process = subprocess.Popen([sshd, "-D", "-e", "-f", str(self.root / "sshd_config")], stderr=log)
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", self.port), 0.2):
                return
            if self.process.poll() is not None:
                raise RuntimeError(f"sshd exited: {(self.root / 'sshd.log').read_text()}")
            time.sleep(0.05)
        raise RuntimeError("sshd did not start listening")

    def drop_connections(self) -> None:
        """Kills the per-connection sshd processes; the listener stays, as after a network blip."""
        assert self.process
        subprocess.run(["pkill", "-KILL", "-P", str(self.process.pid)], check=False)

    def stop(self) -> None:
        if self.process and self.process.poll() is None:
            self.drop_connections()
            self.process.send_signal(signal.SIGTERM)
            self.process.wait(5)


class Relay:
    """A loopback TCP relay to a target port that can stop forwarding without closing anything,
    which is how a host that silently died looks from the network."""

    def __init__(self, target_port: int):
        self.target_port = target_port
        self.silent = False
        self.port = 0
        self._server: asyncio.Server | None = None
        self._tasks: set[asyncio.Task[None]] = set()
        self._writers: list[asyncio.StreamWriter] = []

    async def start(self, port: int = 0) -> None:
        self._server = await asyncio.start_server(self._handle, "127.0.0.1", port)
        self.port = self._server.sockets[0].getsockname()[1]

    async def close(self) -> None:
        if self._server:
            self._server.close()
            await self._server.wait_closed()
        for task in list(self._tasks):
            task.cancel()
        for writer in self._writers:
            writer.close()
            with contextlib.suppress(OSError):
                await writer.wait_closed()

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            up_reader, up_writer = await asyncio.open_connection("127.0.0.1", self.target_port)
        except OSError:
            writer.close()
            return
        self._writers += [writer, up_writer]
        for source, sink in ((reader, up_writer), (up_reader, writer)):
            task = asyncio.create_task(self._pump(source, sink))
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)

    async def _pump(self, source: asyncio.StreamReader, sink: asyncio.StreamWriter) -> None:
        with contextlib.suppress(OSError):
            while data := await source.read(65536):
                if self.silent:
                    continue
                sink.write(data)
                await sink.drain()
        sink.close()


# Appends numbered lines to a log at a steady rate, as a busy server does; runs on a simulated host.
# argv: path, lines per second, line count. Line 100 holds invalid UTF-8, line 200 is 1 MB long.
LOG_WRITER = r"""
import sys, time
path, rate, count = sys.argv[1], float(sys.argv[2]), int(sys.argv[3])
batch = max(1, int(rate / 200))
started = time.monotonic()
with open(path, "ab", buffering=0) as f:
    for first in range(0, count, batch):
        lines = []
        for n in range(first, min(first + batch, count)):
            if n == 100:
                lines.append(b"line 100 \xff\xfe invalid \xc3( utf-8\n")
            elif n == 200:
                lines.append(b"line 200 " + b"x" * (1 << 20) + b"\n")
            else:
                lines.append(b"[2026-01-05 10:00:01 TP0] line %d written at %.6f\n" % (n, time.time()))
        f.write(b"".join(lines))
        delay = started + (first + batch) / rate - time.monotonic()
        if delay > 0:
            time.sleep(delay)
"""

# $@: a command. Starts it detached in its own session on the host and prints its pid.
START_DETACHED = 'setsid "$@" > /dev/null 2>&1 < /dev/null & echo $!'
