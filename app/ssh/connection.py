"""One host's SSH connections: kept open, watched by keepalives, reconnected with backoff.

Every operation on a host goes through its HostConnection, which shares a few long-lived
asyncssh connections. OpenSSH allows only MaxSessions (10 by default) channels on one
connection, so when channels run short another connection to the same host is opened.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import logging
import posixpath
import shlex
import socket
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass
from datetime import datetime
from enum import StrEnum
from pathlib import Path
from typing import Any

import asyncssh

from app.db.models import utcnow
from app.errors import HostKeyRejected, HostUnavailable, RemoteCommandFailed, UploadVerifyFailed
from app.ssh.hosts import HostSpec

log = logging.getLogger(__name__)

MAX_CONNECTIONS_PER_HOST = 8
# How long an operation waits for a host whose first connection is still being made.
FIRST_CONNECT_WAIT = 1.5
BACKOFF_MAX = 30.0
KEEPALIVE_COUNT_MAX = 3

# Runs "$@" with stdin from /dev/null and sends it SIGTERM once the channel's stdin closes,
# which happens when the stream is left or the connection is lost.
STREAM_WRAPPER = (
    'exec 3<&0; "$@" </dev/null & child=$!; '
    '{ cat <&3; kill -TERM "$child"; } >/dev/null 2>&1 & watcher=$!; exec 3<&-; '
    'wait "$child"; status=$?; kill "$watcher" 2>/dev/null; exit "$status"'
)


class HostState(StrEnum):
    CONNECTING = "connecting"
    ONLINE = "online"
    OFFLINE = "offline"


@dataclass(frozen=True)
class HostStatus:
    state: HostState
    since: datetime
    last_error: str | None = None


@dataclass(frozen=True)
class RunResult:
    exit_status: int
    stdout: bytes
    stderr: bytes


@dataclass(frozen=True)
class SSHOptions:
    """Settings shared by every host's connections."""

    known_hosts: Path
    ssh_config: Path | None = None
    keepalive_interval: float = 10.0
    connect_timeout: float = 10.0


class _Client(asyncssh.SSHClient):
    """Remembers why the connection ended, so the host's state can say."""

    def __init__(self) -> None:
        self.lost_reason: str | None = None

    def connection_lost(self, exc: Exception | None) -> None:
        self.lost_reason = str(exc) if exc else "connection closed by the host"


@dataclass
class _Pooled:
    conn: asyncssh.SSHClientConnection
    client: _Client
    capacity: int
    in_use: int = 0

    @property
    def alive(self) -> bool:
        return self.client.lost_reason is None


class HostConnection:
    def __init__(self, spec: HostSpec, options: SSHOptions):
        self.spec = spec
        self.options = options
        self._status = HostStatus(HostState.CONNECTING, utcnow())
        self._pool: list[_Pooled] = []
        self._slot_freed = asyncio.Condition()
        self._state_changed = asyncio.Event()
        self._opening = 0
        self._supervisor: asyncio.Task[None] | None = None

    @property
    def name(self) -> str:
        return self.spec.name

    @property
    def status(self) -> HostStatus:
        return self._status

    @property
    def known_hosts(self) -> Path:
        return Path(self.spec.known_hosts).expanduser() if self.spec.known_hosts else self.options.known_hosts

    def start(self) -> None:
        self._supervisor = asyncio.create_task(self._supervise(), name=f"ssh-supervisor:{self.name}")

    async def close(self) -> None:
        if self._supervisor:
            self._supervisor.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._supervisor
        for pooled in self._pool:
            pooled.conn.close()
        for pooled in self._pool:
            await pooled.conn.wait_closed()
        self._pool.clear()

    async def wait_online(self, timeout: float) -> None:
        """Waits until the host is online; raises TimeoutError after `timeout` seconds."""
        async with asyncio.timeout(timeout):
            while self._status.state is not HostState.ONLINE:
                await self._next_state()

    async def _next_state(self) -> None:
        self._state_changed.clear()
        await self._state_changed.wait()

    # Operations

    async def run(
        self, argv: Sequence[str], *, input: bytes | None = None, timeout: float | None = 60, check: bool = True
    ) -> RunResult:
        """Runs argv on the host; every element arrives as one literal argument."""
        command = shlex.join(argv)
        async with self._channel() as conn:
            try:
                completed = await conn.run(command, input=input, encoding=None, timeout=timeout, check=False)
            except asyncssh.TimeoutError:
                raise HostUnavailable(self.name, f"`{_short(command)}` did not finish within {timeout} s") from None
        result = RunResult(
            exit_status=completed.exit_status if completed.exit_status is not None else -1,
            stdout=_as_bytes(completed.stdout),
            stderr=_as_bytes(completed.stderr),
        )
        if check and result.exit_status != 0:
            raise RemoteCommandFailed(
                self.name, _short(command), result.exit_status, result.stderr.decode(errors="replace")
            )
        return result

    async def upload(self, data: bytes, path: str, *, mode: int = 0o600) -> str:
        """Writes `data` to `path` over SFTP, checks its sha256 on the host, then moves it into place.

        Returns the sha256. The file appears under its name only once verified.
        """
        expected = hashlib.sha256(data).hexdigest()
        partial = f"{path}.partial"
        async with self._channel() as conn, conn.start_sftp_client() as sftp:
            directory = posixpath.dirname(path)
            if directory:
                await sftp.makedirs(directory, exist_ok=True)
            async with sftp.open(partial, "wb", asyncssh.SFTPAttrs(permissions=mode)) as remote_file:
                await remote_file.write(data)
        found = (await self.run(["sha256sum", "--", partial])).stdout.split(maxsplit=1)
        actual = found[0].decode() if found else ""
        if actual != expected:
            await self.run(["rm", "-f", "--", partial], check=False)
            raise UploadVerifyFailed(self.name, f"{path}: sha256 on the host is {actual or 'missing'}, sent {expected}")
        await self.run(["mv", "-f", "--", partial, path])
        return expected

    @contextlib.asynccontextmanager
    async def stream(self, argv: Sequence[str]) -> AsyncIterator[asyncssh.SSHClientProcess[bytes]]:
        """Starts a long-running command; its stdout and stderr are read from the process.

        Leaving the context stops the remote command: a small shell wrapper on the host
        terminates it when the channel's input ends (SSH signal requests are not dependable:
        OpenSSH refuses them in some configurations).
        """
        async with self._channel() as conn:
            process = await conn.create_process(shlex.join(["sh", "-c", STREAM_WRAPPER, "sh", *argv]), encoding=None)
            try:
                yield process
            finally:
                with contextlib.suppress(OSError, asyncssh.Error):
                    process.stdin.write_eof()
                process.close()
                with contextlib.suppress(OSError, asyncssh.Error):
                    await process.wait_closed()

    async def forward_local_port(self, remote_port: int, remote_host: str = "127.0.0.1") -> asyncssh.SSHListener:
        """Listens on a free loopback port here and forwards it to remote_host:remote_port on the host.

        The caller closes the returned listener; `listener.get_port()` is the local port.
        """
        pooled = await self._primary()
        try:
            return await pooled.conn.forward_local_port("127.0.0.1", 0, remote_host, remote_port)
        except (OSError, asyncssh.Error) as exc:
            raise HostUnavailable(self.name, f"cannot forward port {remote_port}: {exc}") from None

    # Connection pool

    async def _primary(self) -> _Pooled:
        await self._ensure_usable()
        for pooled in self._pool:
            if pooled.alive:
                return pooled
        raise HostUnavailable(self.name, "not connected")

    async def _ensure_usable(self) -> None:
        if self._status.state is HostState.CONNECTING:
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(FIRST_CONNECT_WAIT):
                    while self._status.state is HostState.CONNECTING:
                        await self._next_state()
        if self._status.state is not HostState.ONLINE:
            since = self._status.since.strftime("%H:%M:%S UTC")
            reason = self._status.last_error or "still connecting"
            raise HostUnavailable(self.name, f"{self._status.state} since {since}: {reason}")

    @contextlib.asynccontextmanager
    async def _channel(self) -> AsyncIterator[asyncssh.SSHClientConnection]:
        """Holds one channel slot on a pooled connection for the duration of the block."""
        await self._ensure_usable()
        pooled = await self._acquire_slot()
        try:
            yield pooled.conn
        except asyncssh.ChannelOpenError as exc:
            # The server allows fewer sessions than assumed: remember its real limit.
            pooled.capacity = max(1, pooled.in_use - 1)
            raise HostUnavailable(self.name, f"the host refused a new channel: {exc.reason}") from None
        except (OSError, asyncssh.Error) as exc:
            raise HostUnavailable(self.name, _describe(exc)) from None
        finally:
            pooled.in_use -= 1
            async with self._slot_freed:
                self._slot_freed.notify()

    async def _acquire_slot(self) -> _Pooled:
        async with self._slot_freed:
            while True:
                self._pool = [p for p in self._pool if p.alive]
                for pooled in self._pool:
                    if pooled.in_use < pooled.capacity:
                        pooled.in_use += 1
                        return pooled
                if self._status.state is not HostState.ONLINE:
                    raise HostUnavailable(self.name, self._status.last_error or "connection lost")
                if len(self._pool) + self._opening < MAX_CONNECTIONS_PER_HOST:
                    break
                # Wake now and then: a host that went offline frees no slots.
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self._slot_freed.wait(), 1.0)
        self._opening += 1
        try:
            pooled = await self._connect()
        finally:
            self._opening -= 1
        async with self._slot_freed:
            self._pool.append(pooled)
            pooled.in_use += 1
            self._slot_freed.notify_all()
        return pooled

    async def _supervise(self) -> None:
        """Keeps the first connection up; the host's state follows it."""
        backoff = 0.0
        while True:
            try:
                pooled = await self._connect()
            except HostKeyRejected as exc:
                self._set_status(HostState.OFFLINE, str(exc).removeprefix(f"{self.name}: "))
                backoff = BACKOFF_MAX
            except HostUnavailable as exc:
                self._set_status(HostState.OFFLINE, str(exc).removeprefix(f"{self.name}: "))
                backoff = min(max(2 * backoff, 1.0), BACKOFF_MAX)
            except Exception as exc:  # a bug must not stop the host from ever reconnecting
                log.exception("%s: unexpected error while connecting", self.name)
                self._set_status(HostState.OFFLINE, f"unexpected error: {exc!r}")
                backoff = BACKOFF_MAX
            else:
                backoff = 0.0
                self._pool.insert(0, pooled)
                self._set_status(HostState.ONLINE)
                await pooled.conn.wait_closed()
                reason = pooled.client.lost_reason or "connection closed"
                log.warning("%s: connection lost: %s", self.name, reason)
                self._set_status(HostState.OFFLINE, reason)
                for other in self._pool:
                    other.conn.close()
                self._pool.clear()
            await asyncio.sleep(backoff)

    def _set_status(self, state: HostState, error: str | None = None) -> None:
        since = self._status.since if state is self._status.state else utcnow()
        self._status = HostStatus(state, since, error)
        self._state_changed.set()

    async def _connect(self) -> _Pooled:
        spec = self.spec
        host = spec.address or spec.name
        kwargs: dict[str, Any] = {}
        if spec.port:
            kwargs["port"] = spec.port
        if spec.user:
            kwargs["username"] = spec.user
        if spec.identity_files:
            kwargs["client_keys"] = list(spec.identity_files)
        if self.options.ssh_config and self.options.ssh_config.expanduser().exists():
            kwargs["config"] = [str(self.options.ssh_config.expanduser())]
        client = _Client()
        try:
            if spec.trust_on_first_use:
                await self._learn_host_key(host, spec.port or 22)
            # A missing known_hosts file trusts nothing (asyncssh would fail to open it).
            known_hosts = str(self.known_hosts) if self.known_hosts.exists() else asyncssh.import_known_hosts("")
            conn = await asyncssh.connect(
                host,
                known_hosts=known_hosts,
                client_factory=lambda: client,
                connect_timeout=self.options.connect_timeout,
                keepalive_interval=self.options.keepalive_interval,
                keepalive_count_max=KEEPALIVE_COUNT_MAX,
                compression_algs=None,
                **kwargs,
            )
        except asyncssh.HostKeyNotVerifiable:
            raise HostKeyRejected(self.name, self._host_key_problem(host, spec.port)) from None
        except (OSError, asyncssh.Error) as exc:
            raise HostUnavailable(self.name, _describe(exc, host, spec.port)) from None
        return _Pooled(conn, client, capacity=spec.max_sessions)

    def _known_keys(self, host: str, port: int | None) -> list[Any]:
        if not self.known_hosts.exists():
            return []
        addr = _resolve(host)
        return list(asyncssh.read_known_hosts(str(self.known_hosts)).match(host, addr, port)[0])

    def _host_key_problem(self, host: str, port: int | None) -> str:
        if self._known_keys(host, port):
            return (
                f"host key does not match the one in {self.known_hosts}: refusing to connect "
                "(if the host was reinstalled, remove its old line from known_hosts)"
            )
        return f"host key is not in {self.known_hosts}: add it (ssh-keyscan) or set trust_on_first_use for this host"

    async def _learn_host_key(self, host: str, port: int) -> None:
        """Trust on first use: records the key of a host known_hosts has never seen."""
        if self._known_keys(host, port):
            return
        async with asyncio.timeout(self.options.connect_timeout):
            key = await asyncssh.get_server_host_key(host, port)
        if key is None:
            return
        pattern = host if port == 22 else f"[{host}]:{port}"
        self.known_hosts.parent.mkdir(parents=True, exist_ok=True)
        with self.known_hosts.open("a", encoding="utf-8") as f:
            f.write(f"{pattern} {key.export_public_key().decode().strip()}\n")
        log.warning("%s: trusted host key %s on first use", self.name, key.get_fingerprint())


def _resolve(host: str) -> str:
    try:
        return str(socket.getaddrinfo(host, None)[0][4][0])
    except OSError:
        return host


def _describe(exc: BaseException, host: str | None = None, port: int | None = None) -> str:
    """A sentence for the user about why a connection or channel failed."""
    where = f"{host}:{port or 22}" if host else "the host"
    if isinstance(exc, asyncssh.PermissionDenied):
        return "authentication failed: the host accepted none of the offered keys"
    if isinstance(exc, ConnectionRefusedError):
        return f"connection refused by {where}"
    if isinstance(exc, socket.gaierror):
        return f"cannot resolve {host}: {exc.strerror}"
    if isinstance(exc, TimeoutError):
        return f"no answer from {where} (timed out)"
    if isinstance(exc, asyncssh.Error):
        return exc.reason or type(exc).__name__
    return str(exc) or type(exc).__name__


def _as_bytes(value: bytes | str | None) -> bytes:
    if value is None:
        return b""
    return value.encode() if isinstance(value, str) else bytes(value)


def _short(command: str, limit: int = 120) -> str:
    return command if len(command) <= limit else command[: limit - 1] + "…"
