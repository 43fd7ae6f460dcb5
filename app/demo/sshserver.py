"""A simulated GPU host: a real SSH server on loopback that runs real shell commands and SFTP.

Commands run under /bin/sh in the host's home directory, with the simulated nvidia-smi,
pynvml and sglang first on PATH and PYTHONPATH, and the host's GPU state file named in the
environment. A bare host (python=False) has only this machine's programs on its PATH, no Python.
A channel that closes, or a connection that is lost, closes its command's pipes and sends no
signal, as sshd does for a session without a terminal: a command reading its input sees its end,
one writing output gets SIGPIPE, and one doing neither (a sleep, a server started with setsid)
runs on. Each host's commands, and the connections its clients forward, use a network of the
host's own where the machine allows it (see netns.py).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import posixpath
import shlex
import signal
import sys
from collections.abc import Awaitable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, cast

import asyncssh
from asyncssh.forward import SSHForwarder

from app.demo.hostlib import simgpu
from app.demo.netns import NetworkNamespace
from app.ssh.hostkeys import generate_key_file

log = logging.getLogger(__name__)

# Releases of the simulated SGLang offered beside the newest (which `python3` runs).
OLDER_SGLANG_RELEASES = ("0.5.10",)
SGLANG_VERSION_ENV = "LAUNCHDECK_SIM_SGLANG_VERSION"
CLUSTER_NETWORK_ENV = "LAUNCHDECK_SIM_CLUSTER_NETWORK"  # read by hostlib/sglang/srt/distributed.py


def write_release_interpreter(path: Path, release: str) -> None:
    """A Python whose simulated SGLang is `release`: the same interpreter with the release named in
    the environment, which the servers, schedulers and probes it starts inherit."""
    script = (
        "#!/bin/sh\n"
        f"{SGLANG_VERSION_ENV}={shlex.quote(release)}\n"
        f"export {SGLANG_VERSION_ENV}\n"
        f'exec {shlex.quote(sys.executable)} "$@"\n'
    )
    if not path.is_file() or path.is_symlink() or path.read_text() != script:
        path.unlink(missing_ok=True)
        path.write_text(script)
        path.chmod(0o755)


HOSTBIN = Path(__file__).resolve().parent / "hostbin"
HOSTLIB = Path(__file__).resolve().parent / "hostlib"
HANGUP_GRACE = 2.0


@dataclass
class SimHost:
    """The files of one simulated host and, once started, its SSH server."""

    name: str
    root: Path
    time_scale: float = 1.0  # how fast the simulated servers run: 1.0 is about real time
    nvml: bool = True  # False: the host's Python has no pynvml, as where nvidia-ml-py is not installed
    python: bool = True  # False: no Python on the PATH at all, only the system's programs (a bare host)
    isolated: bool = True  # a loopback of its own for its servers, where the machine allows it
    port: int = 0
    network: NetworkNamespace | None = None
    _server: asyncssh.SSHAcceptor | None = None
    _connections: set[asyncssh.SSHServerConnection] = field(default_factory=set)
    _process_groups: set[int] = field(default_factory=set)
    _sessions: set[asyncio.Task[None]] = field(default_factory=set)

    @property
    def home(self) -> Path:
        return self.root / "home"

    @property
    def host_key_path(self) -> Path:
        return self.root / "ssh_host_ed25519_key"

    @property
    def authorized_keys_path(self) -> Path:
        return self.home / ".ssh" / "authorized_keys"

    @property
    def gpu_state_path(self) -> Path:
        return self.root / "gpu-state.json"

    @property
    def bin_dir(self) -> Path:
        return self.root / "bin"

    @property
    def lib_without_nvml(self) -> Path:
        return self.root / "lib"

    def environment(self) -> dict[str, str]:
        """The commands' environment; with a network of the host's own, it names the network between
        the hosts (this process's, where the SSH servers listen) for multi-node rendezvous."""
        between_hosts = {CLUSTER_NETWORK_ENV: f"/proc/{os.getpid()}/ns/net"} if self.network is not None else {}
        return {
            **between_hosts,
            "HOME": str(self.home),
            "USER": os.environ.get("USER", "root"),
            "LOGNAME": os.environ.get("USER", "root"),
            "SHELL": "/bin/sh",
            "LANG": "C.UTF-8",
            "PATH": os.pathsep.join(
                [str(self.bin_dir), str(HOSTBIN), "/usr/local/bin", "/usr/bin", "/bin"]
                if self.python
                else [str(self.bin_dir)]
            ),
            "PYTHONPATH": str(HOSTLIB if self.nvml else self.lib_without_nvml),
            "PYTHONDONTWRITEBYTECODE": "1",
            simgpu.STATE_ENV: str(self.gpu_state_path),
            "LAUNCHDECK_SIM_HOST": self.name,
            "LAUNCHDECK_SIM_TIME_SCALE": str(self.time_scale),
        }

    def prepare(self, *, authorized_key: str) -> None:
        """Creates the host key, home with the one authorized client key, and on PATH a `python3`
        that is this interpreter with the newest simulated SGLang, beside interpreters for the
        older releases (`python3-sglang-0.5.10`), as a host with one environment per release."""
        self.authorized_keys_path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        self.authorized_keys_path.write_text(authorized_key.strip() + "\n")
        self.bin_dir.mkdir(parents=True, exist_ok=True)
        if not self.host_key_path.exists():
            generate_key_file(self.host_key_path)
        if not self.nvml:
            self.lib_without_nvml.mkdir(parents=True, exist_ok=True)
            for module in ("simgpu.py", "sglang"):
                link = self.lib_without_nvml / module
                if not link.is_symlink():
                    link.symlink_to(HOSTLIB / module)
        if not self.python:
            self._link_system_programs()
            return
        for name in ("python3", "python"):
            link = self.bin_dir / name
            if not link.is_symlink() or os.readlink(link) != sys.executable:
                link.unlink(missing_ok=True)
                link.symlink_to(sys.executable)
        for release in OLDER_SGLANG_RELEASES:
            write_release_interpreter(self.bin_dir / f"python3-sglang-{release}", release)

    def _link_system_programs(self) -> None:
        """A bare host's PATH: this machine's programs (sh, coreutils, procps...) except any Python."""
        for directory in ("/bin", "/usr/bin"):
            for entry in os.scandir(directory):
                link = self.bin_dir / entry.name
                if entry.name.startswith("python") or link.is_symlink() or not os.access(entry.path, os.X_OK):
                    continue
                link.symlink_to(entry.path)

    def public_host_key(self) -> str:
        return asyncssh.read_private_key(self.host_key_path).export_public_key().decode().strip()

    async def start(self, *, port: int = 0) -> None:
        if self.isolated and self.network is None:
            try:
                self.network = await asyncio.to_thread(
                    NetworkNamespace.held_by, self.root / "network.pid", self.environment()
                )
            except OSError as exc:
                log.warning("simulated host %s shares this machine's loopback: %s", self.name, exc)
        self._server = await asyncssh.create_server(
            lambda: _Server(self),
            "127.0.0.1",
            port,
            server_host_keys=[str(self.host_key_path)],
            authorized_client_keys=str(self.authorized_keys_path),
            process_factory=self._run_process,
            sftp_factory=_home_sftp_server(self.home),
            encoding=None,
            allow_scp=True,
        )
        self.port = self._server.sockets[0].getsockname()[1]

    async def stop(self) -> None:
        """Stops the server, hangs up every session and kills what the sessions started."""
        if self._server:
            self._server.close()
        self.drop_connections()
        for pgid in list(self._process_groups):
            _signal_group(pgid, signal.SIGKILL)
        self.kill_detached()
        if self._sessions:
            await asyncio.wait(self._sessions, timeout=HANGUP_GRACE)
        if self._server:
            await self._server.wait_closed()
        if self.network is not None:
            self.network.close()
            self.network = None

    def kill_detached(self) -> None:
        """Kills what sessions left running on their own (servers started with setsid), found by the
        host's GPU state path in their environment, as a host shutdown would."""
        kill_marked(f"{simgpu.STATE_ENV}={self.gpu_state_path}".encode())

    def drop_connections(self) -> None:
        """Closes every client connection at once, as a host restart would."""
        for conn in list(self._connections):
            conn.abort()
        self._connections.clear()

    async def _run_process(self, process: asyncssh.SSHServerProcess[bytes]) -> None:
        argv = ["/bin/sh", "-c", process.command] if process.command is not None else ["/bin/sh"]
        if self.network is not None:
            argv = self.network.command(argv)
        transport, child = await _start_command(argv, cwd=self.home, env=self.environment())
        self._process_groups.add(child.pid)
        session = asyncio.current_task()
        assert session is not None
        self._sessions.add(session)
        try:
            await _relay(process, child, transport)
        finally:
            self._process_groups.discard(child.pid)
            self._sessions.discard(session)


class _Server(asyncssh.SSHServer):
    def __init__(self, host: SimHost):
        self._host = host

    def connection_made(self, conn: asyncssh.SSHServerConnection) -> None:
        self._host._connections.add(conn)
        self._conn = conn

    def connection_lost(self, exc: Exception | None) -> None:
        self._host._connections.discard(self._conn)

    def connection_requested(
        self, dest_host: str, dest_port: int, orig_host: str, orig_port: int
    ) -> bool | Awaitable[asyncssh.SSHTCPSession[bytes]]:
        """Local port forwards, to the host's own loopback only."""
        if dest_host not in ("127.0.0.1", "localhost", "::1"):
            return False
        network = self._host.network
        return True if network is None else _forward_inside(network, dest_port)


async def _forward_inside(network: NetworkNamespace, port: int) -> asyncssh.SSHTCPSession[bytes]:
    """A forwarded connection to the port on the host's own loopback, as sshd on it would open."""
    try:
        sock = await asyncio.to_thread(network.connect, port)
    except OSError as exc:
        raise asyncssh.ChannelOpenError(asyncssh.OPEN_CONNECT_FAILED, str(exc)) from None
    _, peer = await asyncio.get_running_loop().create_connection(SSHForwarder, sock=sock)
    return cast(asyncssh.SSHTCPSession[bytes], SSHForwarder(peer))  # as asyncssh's own forwarding does


def _home_sftp_server(home: Path) -> type[asyncssh.SFTPServer]:
    home_bytes = os.fsencode(home)

    class HomeSFTPServer(asyncssh.SFTPServer):
        """Relative paths start in the host's home, as with OpenSSH's sftp-server."""

        def map_path(self, path: bytes) -> bytes:
            return path if path.startswith(b"/") else posixpath.join(home_bytes, path)

    return HomeSFTPServer


async def _start_command(
    argv: list[str], *, cwd: Path, env: dict[str, str]
) -> tuple[asyncio.SubprocessTransport, asyncio.subprocess.Process]:
    """`argv` in a session of its own (sshd's setsid), and the transport whose pipes a hangup closes:
    create_subprocess_exec's own steps, keeping the transport it hides."""
    loop = asyncio.get_running_loop()
    transport, protocol = await loop.subprocess_exec(
        lambda: asyncio.subprocess.SubprocessStreamProtocol(limit=2**16, loop=loop),
        *argv,
        cwd=cwd,
        env=env,
        stdin=asyncio.subprocess.PIPE,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
        start_new_session=True,
    )
    return transport, asyncio.subprocess.Process(transport, protocol, loop)


def _hang_up(transport: asyncio.SubprocessTransport) -> None:
    """Closes the command's ends of the channel, as sshd does when a session's channel or
    connection goes: its input ends, and its output has no reader."""
    for fd in (0, 1, 2):
        pipe = transport.get_pipe_transport(fd)
        if pipe is None or pipe.is_closing():
            continue
        if isinstance(pipe, asyncio.WriteTransport):
            pipe.abort()  # input the command never read is dropped, not waited for
        else:
            pipe.close()


async def _relay(
    process: asyncssh.SSHServerProcess[bytes],
    child: asyncio.subprocess.Process,
    transport: asyncio.SubprocessTransport,
) -> None:
    """Copies bytes between the channel and the command until both are done; passes signals on.
    A hangup closes the command's pipes; the session then lasts as long as the command."""
    assert child.stdin and child.stdout and child.stderr

    async def feed_stdin() -> None:
        assert child.stdin
        while True:
            try:
                data = await process.stdin.read(65536)
            except asyncssh.SignalReceived as exc:
                _signal_group(child.pid, getattr(signal, f"SIG{exc.signal}", signal.SIGTERM))
                continue
            except (asyncssh.BreakReceived, asyncssh.TerminalSizeChanged):
                continue
            if not data:
                break
            child.stdin.write(data)
            with contextlib.suppress(ConnectionError):
                await child.stdin.drain()
        child.stdin.close()

    async def copy(source: asyncio.StreamReader, sink: asyncssh.SSHWriter[bytes]) -> None:
        while data := await source.read(65536):
            with contextlib.suppress(OSError, asyncssh.Error):
                sink.write(data)
                await sink.drain()

    stdin_task = asyncio.create_task(feed_stdin())
    output = asyncio.gather(copy(child.stdout, process.stdout), copy(child.stderr, process.stderr))
    hangup = asyncio.create_task(process.wait_closed())
    finished = asyncio.create_task(child.wait())
    try:
        await asyncio.wait({hangup, finished}, return_when=asyncio.FIRST_COMPLETED)
        if hangup.done():
            _hang_up(transport)
        returncode = await finished
        # A grandchild may hold the pipes after the command ends: its output goes on until the channel does.
        output_or_hangup: set[asyncio.Future[Any]] = {output, hangup}
        await asyncio.wait(output_or_hangup, return_when=asyncio.FIRST_COMPLETED)
    finally:
        _hang_up(transport)
        for task in (output, stdin_task, hangup, finished):
            task.cancel()
        await asyncio.gather(output, stdin_task, hangup, finished, return_exceptions=True)
    with contextlib.suppress(OSError, asyncssh.Error):
        if returncode < 0:
            process.exit_with_signal(signal.Signals(-returncode).name.removeprefix("SIG"))
        else:
            process.exit(returncode)


def _signal_group(pgid: int, signum: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pgid, signum)


def kill_marked(marker: bytes) -> None:
    """SIGKILLs every process (but this one) with `marker` (NAME=value) in its environment."""
    for entry in os.listdir("/proc"):
        if not entry.isdigit() or int(entry) == os.getpid():
            continue
        try:
            with open(f"/proc/{entry}/environ", "rb") as f:
                environ = f.read().split(b"\0")
        except OSError:
            continue
        if marker in environ:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(int(entry), signal.SIGKILL)
