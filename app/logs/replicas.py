"""Live logs across replicas: the controller that mirrors an attempt's log announces how far the
mirrored file has grown with PostgreSQL's NOTIFY; every process that streams logs LISTENs, and
takes the new bytes from the file itself, on the data dir the replicas share.

Only (attempt, size) travels, never the bytes: a notification is small whatever the log's pace,
the bytes are read once per process from storage every replica reads anyway (the full log view,
search and downloads read the same files), and a viewer's byte offsets (its Last-Event-ID) mean
the same on every replica. Announcements are coalesced per attempt to one per ANNOUNCE_EVERY
seconds; a lost notification only delays lines until the next one, since the size is absolute.
While the database is away (restarted, failed over) nothing travels: the announcer keeps what it
could not send and sends it once connected again, and the listener, connected again, takes in what
the logs its viewers watch grew meanwhile, since what was announced in between never reached it.
docs/deploy.md#replicas says why NOTIFY rather than NATS JetStream, and what it costs.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os

import psycopg
from sqlalchemy.engine import make_url

from app.backoff import Backoff
from app.logs.mirror import Mirrors
from app.logs.store import LogStore

log = logging.getLogger(__name__)

CHANNEL = "launchdeck_log"
ANNOUNCE_EVERY = 0.05  # seconds: the most a viewer on another replica waits beyond the mirror
RETRY = 1.0  # the longest wait before connecting again; the first is RETRY_MIN
RETRY_MIN = 0.1


def libpq_url(url: str) -> str:
    """The database URL as psycopg's own connect() takes it (no SQLAlchemy driver name)."""
    return make_url(url).set(drivername="postgresql").render_as_string(hide_password=False)


class LogAnnouncer:
    """A controller's side: every mirrored log's growth and end, as NOTIFY on CHANNEL."""

    def __init__(self, url: str, mirrors: Mirrors):
        self.url = libpq_url(url)
        self.mirrors = mirrors
        self._sizes: dict[int, int] = {}  # attempt -> its log's size, to announce
        self._wake = asyncio.Event()
        self._task: asyncio.Task[None] | None = None

    def start(self) -> None:
        self.mirrors.on_append = self.appended
        self._task = asyncio.create_task(self._announce_forever(), name="log-announcer")

    async def close(self) -> None:
        if self._task is not None:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)

    def appended(self, attempt_id: int, size: int) -> None:
        """The mirror's hook: the log grew to `size`, or ended there (its metadata says which)."""
        self._sizes[attempt_id] = size
        self._wake.set()

    async def _announce_forever(self) -> None:
        backoff = Backoff(RETRY_MIN, RETRY)
        while True:
            try:
                async with await psycopg.AsyncConnection.connect(self.url, autocommit=True) as connection:
                    backoff.reset()
                    while True:
                        await self._wake.wait()
                        self._wake.clear()
                        await self._announce(connection)
                        await asyncio.sleep(ANNOUNCE_EVERY)
            except asyncio.CancelledError:
                raise
            except (psycopg.Error, OSError) as exc:
                log.warning("live logs: cannot announce to other replicas (%s); retrying", exc)
                await asyncio.sleep(backoff.next())

    async def _announce(self, connection: psycopg.AsyncConnection[object]) -> None:
        """Sends what is due; what it could not send (the connection found dead, as after the
        database restarted while it idled) stays due, for the next connection: the last growth of a
        log, or its end, would otherwise reach the other replicas' viewers never."""
        due, self._sizes = self._sizes, {}
        try:
            for attempt_id, size in due.items():
                await connection.execute("SELECT pg_notify(%s, %s)", (CHANNEL, f"{attempt_id} {size}"))
        except BaseException:
            self._sizes = due | self._sizes  # a newer size, appended meanwhile, wins
            self._wake.set()
            raise


class LogListener:
    """A streaming process's side: each announcement brings the log's new bytes in from the shared
    file, for the live viewers this process serves."""

    def __init__(self, url: str, store: LogStore, *, own: Mirrors | None = None):
        self.url = libpq_url(url)
        self.store = store
        self.own = own  # this process's mirrors: a log it mirrors itself needs no announcement
        self._task: asyncio.Task[None] | None = None

    def start(self) -> None:
        self._task = asyncio.create_task(self._listen_forever(), name="log-listener")

    async def close(self) -> None:
        if self._task is not None:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)

    async def _listen_forever(self) -> None:
        backoff = Backoff(RETRY_MIN, RETRY)
        while True:
            try:
                async with await psycopg.AsyncConnection.connect(self.url, autocommit=True) as connection:
                    await connection.execute(f"LISTEN {CHANNEL}")
                    backoff.reset()
                    await self._catch_up()
                    async for notice in connection.notifies():
                        self._notified(notice.payload)
            except asyncio.CancelledError:
                raise
            except (psycopg.Error, OSError) as exc:
                log.warning("live logs: not listening to other replicas (%s); retrying", exc)
                await asyncio.sleep(backoff.next())
            except Exception:  # a defect: logged, and listening goes on, or every viewer here stalls
                log.exception("live logs: listening to other replicas failed; listening again")
                await asyncio.sleep(backoff.next())

    async def _catch_up(self) -> None:
        """Once listening (again): what was announced while this process was not (the database
        restarting) never comes, so each log held here (a live viewer's) takes in its shared file
        now; a log that grew or ended meanwhile would otherwise wait for its next announcement,
        which may never come."""
        for attempt_id in await asyncio.to_thread(self._mirrored_ids):
            if self.store.is_open(attempt_id):
                self._take(attempt_id, 0)

    def _mirrored_ids(self) -> list[int]:
        with contextlib.suppress(FileNotFoundError), os.scandir(self.store.directory) as entries:
            return [int(name) for entry in entries if (name := entry.name.removesuffix(".log")).isdigit()]
        return []

    def _notified(self, payload: str) -> None:
        try:
            attempt_id, size = (int(part) for part in payload.split())
        except ValueError:
            return
        try:
            self._take(attempt_id, size)
        except Exception:  # one log's trouble (a file half-written) costs that notification only
            log.exception("live logs: attempt %d's new bytes not taken in", attempt_id)

    def _take(self, attempt_id: int, size: int) -> None:
        """Brings the held log up to the shared file as it is now, at least `size`: a notification
        read late, once the mirror has written more and the log's end, would otherwise end its
        viewers at the notified size, short of the last lines."""
        if self.own is not None and self.own.get(attempt_id) is not None:
            return  # mirrored here: its viewers had the bytes as they were written
        if (log_file := self.store.held(attempt_id)) is not None:
            with contextlib.suppress(OSError):
                size = max(size, log_file.path.stat().st_size)
            with contextlib.suppress(ValueError):  # metadata unreadable: read again at the next one
                log_file.written_elsewhere(size)
