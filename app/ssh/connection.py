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
import time
from collections.abc import AsyncIterator, Awaitable, Sequence
from dataclasses import dataclass
from datetime import datetime
from enum import StrEnum
from pathlib import Path
from typing import Any, TypeVar

import asyncssh

from app.backoff import Backoff
from app.clock import utcnow
from app.errors import CommandTimedOut, HostKeyRejected, HostUnavailable, RemoteCommandFailed, UploadFailed
from app.ssh.hostkeys import describe_rejection, known_keys, record_host_key
from app.ssh.hosts import HostSpec

log = logging.getLogger(__name__)

Channel = TypeVar("Channel", asyncssh.SSHClientProcess[bytes], asyncssh.SFTPClient)

MAX_CONNECTIONS_PER_HOST = 8
# How long an operation waits for a host whose first connection is still being made.
FIRST_CONNECT_WAIT = 1.0
# A connection that lasted less than this did not prove the host healthy: keep backing off.
STABLE_AFTER = 30.0
# asyncssh drops the connection after this many unanswered keepalives plus one, so with the
# default 5 s interval a silently dead host is offline within 15 s, well inside the 30 s promised.
KEEPALIVE_COUNT_MAX = 2
CLOSE_TIMEOUT = 2.0
# How long a channel given up on (its caller cancelled, or its command timed out) still counts
# against its connection's sessions while the host keeps it: sshd ends a session only once its
# command has ended, whatever the client closed.
ABANDONED_HOLD = 60.0

# Runs "$@" in its own process group with stdin from /dev/null, and terminates that group once
# the channel's stdin closes, which happens when the stream is left or the connection is lost
# (the watcher ignores the hangup that may come with it).
# (SSH signal requests are not dependable: OpenSSH refuses them in some configurations.)
STREAM_WRAPPER = (
    'exec 3<&0; setsid -w "$@" </dev/null & child=$!; '
    '{ trap "" HUP; cat <&3; env kill -TERM -- "-$child" || kill -TERM "$child"; } >/dev/null 2>&1 & '
    "watcher=$!; exec 3<&-; "
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
    keepalive_interval: float = 5.0
    connect_timeout: float = 10.0
    # The longest wait between reconnection attempts to a host that is down or keeps dropping.
    # Short, so that a host is online within seconds of its return however long it was away: an
    # attempt at a host that is down costs one refused or unanswered connection.
    reconnect_backoff_max: float = 2.0


class _Client(asyncssh.SSHClient):
    """Remembers why the connection ended, and trusts a never-seen host key if the host allows it."""

    def __init__(self, known_hosts: Path, trust_on_first_use: bool):
        self.known_hosts = known_hosts
        self.trust_on_first_use = trust_on_first_use
        self.lost_reason: str | None = None
        self.refused_key_of: tuple[str, str, int] | None = None

    def connection_lost(self, exc: Exception | None) -> None:
        self.lost_reason = str(exc) if exc else "connection closed by the host"

    def validate_host_public_key(self, host: str, addr: str, port: int, key: asyncssh.SSHKey) -> bool:
        """Called by asyncssh for a key known_hosts does not list; a key that differs is never accepted."""
        if self.trust_on_first_use and not known_keys(self.known_hosts, host, addr, port):
            record_host_key(self.known_hosts, host, port, key)
            return True
        self.refused_key_of = (host, addr, port)
        return False


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
        self.connects = 0  # connections the supervisor made: 1, plus one per reconnection
        self._pool: list[_Pooled] = []
        self._slot_freed = asyncio.Condition()
        self._state_changed = asyncio.Event()
        self._opening = False
        self._closed = False
        self._observed = False  # its state is another process's (observe): nothing is run from here
        self._supervisor: asyncio.Task[None] | None = None
        self._closing: set[asyncio.Task[None]] = set()  # channels whose opener was cancelled

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
        """Connects and keeps connected, until `close`; a closed connection may be started again
        (a controller that owns the host again)."""
        self._closed, self._observed = False, False
        self._status = HostStatus(HostState.CONNECTING, utcnow())
        self._supervisor = asyncio.create_task(self._supervise(), name=f"ssh-supervisor:{self.name}")

    def observe(self, status: HostStatus) -> None:
        """Shows the state another process's connection has (app.host_views); this process makes
        none to the host until started."""
        if self.supervised:
            return
        self._observed = True
        self._status = status
        self._state_changed.set()

    @property
    def supervised(self) -> bool:
        """Whether the task that keeps this host connected runs (it ends only at close)."""
        return self._supervisor is not None and not self._supervisor.done()

    async def close(self) -> None:
        self._closed = True
        for task in [self._supervisor, *self._closing]:
            if task:
                task.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await task
        pool, self._pool = self._pool, []
        for pooled in pool:
            pooled.conn.close()
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(CLOSE_TIMEOUT):
                await asyncio.gather(*(pooled.conn.wait_closed() for pooled in pool))
        self._set_status(HostState.OFFLINE, "closed")

    async def wait_online(self, timeout: float) -> None:
        """Waits until the host is online; raises TimeoutError after `timeout` seconds."""
        async with asyncio.timeout(timeout):
            while self._status.state is not HostState.ONLINE:
                await self._next_state()

    # Operations

    async def run(
        self, argv: Sequence[str], *, input: bytes | None = None, timeout: float | None = 60, check: bool = True
    ) -> RunResult:
        """Runs argv on the host; every element arrives as one literal argument."""
        command = shlex.join(argv)
        async with self._channel() as pooled:
            process = await self._open(pooled, pooled.conn.create_process(command, input=input, encoding=None))
            try:
                completed = await process.wait(check=False, timeout=timeout)
            except BaseException as exc:  # timed out or cancelled: the command may run on
                self._hold_until_closed(pooled, _done(process))
                if isinstance(exc, asyncssh.TimeoutError):
                    raise CommandTimedOut(self.name, f"`{_short(command)}` did not finish within {timeout} s") from None
                raise
            process.close()
        if completed.exit_status is None and completed.exit_signal is None:
            # The channel closed with its connection: that the command ended is all we know, and a
            # caller reading its output would take a cut answer for the host's.
            said = f"`{_short(command)}`: the connection closed before the host said how it ended"
            raise HostUnavailable(self.name, said)
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
        try:
            async with self._channel() as pooled, await self._open(pooled, pooled.conn.start_sftp_client()) as sftp:
                directory = posixpath.dirname(path)
                if directory:
                    await sftp.makedirs(directory, exist_ok=True)
                async with sftp.open(partial, "wb", asyncssh.SFTPAttrs(permissions=mode)) as remote_file:
                    await remote_file.write(data)
        except asyncssh.SFTPError as exc:
            raise UploadFailed(self.name, f"cannot write {path}: {exc.reason}") from None
        found = (await self.run(["sha256sum", "--", partial])).stdout.split(maxsplit=1)
        actual = found[0].decode() if found else ""
        if actual != expected:
            await self.run(["rm", "-f", "--", partial], check=False)
            raise UploadFailed(self.name, f"{path}: sha256 on the host is {actual or 'missing'}, sent {expected}")
        await self.run(["mv", "-f", "--", partial, path])
        return expected

    @contextlib.asynccontextmanager
    async def stream(self, argv: Sequence[str]) -> AsyncIterator[asyncssh.SSHClientProcess[bytes]]:
        """Starts a long-running command; its stdout and stderr are read from the process.

        Leaving the context stops the remote command and closes its channel.
        """
        async with self._channel() as pooled:
            command = shlex.join(["sh", "-c", STREAM_WRAPPER, "sh", *argv])
            process = await self._open(pooled, pooled.conn.create_process(command, encoding=None))
            try:
                yield process
            finally:
                with contextlib.suppress(OSError, asyncssh.Error):
                    process.stdin.write_eof()
                process.close()

    async def forward_local_port(self, remote_port: int, remote_host: str = "127.0.0.1") -> asyncssh.SSHListener:
        """Listens on a free loopback port here and forwards it to remote_host:remote_port on the host.

        The caller closes the returned listener; `listener.get_port()` is the local port.
        """
        await self._ensure_usable()
        pooled = next((p for p in self._pool if p.alive), None)
        if pooled is None:
            raise HostUnavailable(self.name, "not connected")
        try:
            return await pooled.conn.forward_local_port("127.0.0.1", 0, remote_host, remote_port)
        except (OSError, asyncssh.Error) as exc:
            raise HostUnavailable(self.name, f"cannot forward port {remote_port}: {exc}") from None

    # Connection pool

    async def _next_state(self) -> None:
        self._state_changed.clear()
        await self._state_changed.wait()

    async def _ensure_usable(self) -> None:
        if self._observed:
            raise HostUnavailable(self.name, "this process does not connect to it: the controller that owns it does")
        if self._status.state is HostState.CONNECTING:
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(FIRST_CONNECT_WAIT):
                    while self._status.state is HostState.CONNECTING:
                        await self._next_state()
        if self._status.state is not HostState.ONLINE:
            since = self._status.since.strftime("%H:%M:%S UTC")
            reason = self._status.last_error or "first connection not made yet"
            raise HostUnavailable(self.name, f"{self._status.state} since {since}: {reason}")

    @contextlib.asynccontextmanager
    async def _channel(self) -> AsyncIterator[_Pooled]:
        """Holds one channel slot on a pooled connection for the duration of the block."""
        await self._ensure_usable()
        pooled = await self._acquire_slot()
        try:
            yield pooled
        except asyncssh.ChannelOpenError as exc:
            if pooled.alive:
                # The server allows fewer sessions than assumed: remember its real limit.
                pooled.capacity = max(1, pooled.in_use - 1)
            raise HostUnavailable(self.name, f"the host refused a new channel: {exc.reason}") from None
        except asyncssh.DisconnectError as exc:
            raise HostUnavailable(self.name, _describe(exc)) from None
        except ConnectionError as exc:
            raise HostUnavailable(self.name, _describe(exc)) from None
        finally:
            await self._release_slot(pooled)

    async def _release_slot(self, pooled: _Pooled) -> None:
        pooled.in_use -= 1
        async with self._slot_freed:
            self._slot_freed.notify()

    async def _open(self, pooled: _Pooled, opening: Awaitable[Channel]) -> Channel:
        """Opens a channel on `pooled`; a caller cancelled meanwhile returns at once, and the
        channel is closed for it in the background.

        asyncssh forgets a channel whose open was cancelled before the host confirmed it, while the
        host keeps it open: each such channel would hold one of the connection's MaxSessions until
        the connection ends."""
        open_task = asyncio.ensure_future(opening)
        try:
            return await asyncio.shield(open_task)
        except asyncio.CancelledError:
            self._hold_until_closed(pooled, open_task)
            raise

    def _hold_until_closed(self, pooled: _Pooled, channel: asyncio.Future[Channel]) -> None:
        """Closes a channel given up on (once open) in the background, holding a slot of its own on
        `pooled` until the host has closed it too (or ABANDONED_HOLD): the pool never counts as
        free a session the host still keeps, as sshd does while the channel's command runs."""
        pooled.in_use += 1
        closing = asyncio.create_task(self._close_when_open(pooled, channel), name=f"ssh-close:{self.name}")
        self._closing.add(closing)
        closing.add_done_callback(self._closing.discard)

    async def _close_when_open(self, pooled: _Pooled, open_task: asyncio.Future[Channel]) -> None:
        def close(opened: asyncio.Future[Channel]) -> None:
            if opened.cancelled() or opened.exception() is not None:
                return
            channel = opened.result()
            if isinstance(channel, asyncssh.SFTPClient):
                channel.exit()
            else:
                channel.close()

        open_task.add_done_callback(close)  # however late the host confirms
        try:
            with contextlib.suppress(Exception):  # refused, lost, or no answer: nothing to wait for
                async with asyncio.timeout(ABANDONED_HOLD):
                    await (await asyncio.shield(open_task)).wait_closed()
        finally:
            await self._release_slot(pooled)

    async def _acquire_slot(self) -> _Pooled:
        """A connection with a free channel; opens one more (one at a time) when all are busy."""
        async with self._slot_freed:
            while True:
                self._pool = [p for p in self._pool if p.alive]
                for pooled in self._pool:
                    if pooled.in_use < pooled.capacity:
                        pooled.in_use += 1
                        return pooled
                if self._status.state is not HostState.ONLINE or self._closed:
                    raise HostUnavailable(self.name, self._status.last_error or "connection lost")
                if not self._opening and len(self._pool) < MAX_CONNECTIONS_PER_HOST:
                    self._opening = True
                    break
                # Wake now and then: a host that went offline frees no slots.
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self._slot_freed.wait(), 1.0)
        try:
            pooled = await self._connect()
        finally:
            async with self._slot_freed:
                self._opening = False
                self._slot_freed.notify_all()
        async with self._slot_freed:
            if self._closed:
                pooled.conn.close()
                raise HostUnavailable(self.name, "closed")
            self._pool.append(pooled)
            pooled.in_use += 1
        return pooled

    async def _supervise(self) -> None:
        """Keeps the first connection up; the host's state follows it."""
        backoff = Backoff(1.0, self.options.reconnect_backoff_max)
        while True:
            try:
                pooled = await self._connect()
            except HostUnavailable as exc:
                self._set_status(HostState.OFFLINE, str(exc).removeprefix(f"{self.name}: "))
                if isinstance(exc, HostKeyRejected):
                    backoff.to_cap()
            except Exception as exc:  # a bug must not stop the host from ever reconnecting
                log.exception("%s: unexpected error while connecting", self.name, extra={"host": self.name})
                self._set_status(HostState.OFFLINE, f"unexpected error: {exc!r}")
                backoff.to_cap()
            else:
                self._pool.insert(0, pooled)
                self.connects += 1
                self._set_status(HostState.ONLINE)
                connected_at = time.monotonic()
                await pooled.conn.wait_closed()
                reason = pooled.client.lost_reason or "connection closed"
                log.warning("%s: connection lost: %s", self.name, reason, extra={"host": self.name})
                self._set_status(HostState.OFFLINE, reason)
                if time.monotonic() - connected_at >= STABLE_AFTER:
                    backoff.reset()
            # Never at once, even after a stable connection: every host that a network blip cut
            # off would come back at the same moment.
            await asyncio.sleep(backoff.next())

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
        config = self.options.ssh_config.expanduser() if self.options.ssh_config else None
        client = _Client(self.known_hosts, spec.trust_on_first_use)
        # A missing known_hosts file trusts nothing (asyncssh would fail to open it).
        known_hosts = str(self.known_hosts) if self.known_hosts.exists() else asyncssh.import_known_hosts("")
        try:
            conn = await asyncssh.connect(
                host,
                known_hosts=known_hosts,
                config=[str(config)] if config and config.exists() else [],
                client_factory=lambda: client,
                connect_timeout=self.options.connect_timeout,
                keepalive_interval=self.options.keepalive_interval,
                keepalive_count_max=KEEPALIVE_COUNT_MAX,
                compression_algs=None,
                **kwargs,
            )
        except asyncssh.HostKeyNotVerifiable:
            where = client.refused_key_of or (host, host, spec.port or 22)
            raise HostKeyRejected(self.name, describe_rejection(self.known_hosts, *where)) from None
        except (OSError, asyncssh.Error) as exc:
            raise HostUnavailable(self.name, _describe(exc, host, spec.port)) from None
        return _Pooled(conn, client, capacity=spec.max_sessions)


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


def _done(channel: Channel) -> asyncio.Future[Channel]:
    """An open channel as a finished open, for `_hold_until_closed`."""
    opened: asyncio.Future[Channel] = asyncio.get_running_loop().create_future()
    opened.set_result(channel)
    return opened


def _as_bytes(value: bytes | str | None) -> bytes:
    if value is None:
        return b""
    return value.encode() if isinstance(value, str) else bytes(value)


def _short(command: str, limit: int = 120) -> str:
    return command if len(command) <= limit else command[: limit - 1] + "…"
