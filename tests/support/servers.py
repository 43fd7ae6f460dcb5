"""Real servers for the tests: a free loopback port, an OpenSSH sshd, and a TCP relay that can
go silent."""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import os
import shutil
import signal
import socket
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

import asyncssh

from app.ssh.hostkeys import generate_key_file
from tests.support.strict import require


def _own_ports() -> range:
    """This test process's share of the ports above the kernel's ephemeral range: a port handed out
    here is one no outgoing connection takes as its own before the server binds it, and no other
    pytest worker hands out."""
    try:
        high = int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[1])
    except (OSError, IndexError, ValueError):
        return range(0)
    worker = os.environ.get("PYTEST_XDIST_WORKER", "gw0").removeprefix("gw")
    count = int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1"))
    index = int(worker) if worker.isdigit() else 0
    share = (65535 - high) // max(count, 1)
    return range(high + 1 + index * share, high + 1 + (index + 1) * share) if share >= 100 else range(0)


_OWN_PORTS = _own_ports()
_next_port = itertools.count()


def free_port() -> int:
    """A loopback port free now, for a server a test starts in a moment."""
    for _ in range(len(_OWN_PORTS)):
        port = _OWN_PORTS[next(_next_port) % len(_OWN_PORTS)]
        with socket.socket() as sock:
            try:
                sock.bind(("127.0.0.1", port))
            except OSError:  # in use, or lingering after a test's server
                continue
            return port
    with socket.socket() as sock:  # no range of its own here: the kernel's choice
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


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
