"""Live logs across replicas (app.logs.replicas) when notifications go missing or come late: the
database restarting under the announcer and the listener, and a notification read after the log's
end. The whole path, on a real PostgreSQL that restarts, is tests/e2e/test_replicas_database.py."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import psycopg
import pytest

from app.logs.mirror import Mirrors
from app.logs.replicas import CHANNEL, LogAnnouncer, LogListener
from app.logs.store import LogFile, LogStore

URL = "postgresql://launchdeck@127.0.0.1:1/launchdeck"  # never connected to here


def watched(store: LogStore, attempt_id: int) -> list[tuple[int, bytes]]:
    """What a live viewer of the log on the listening process gets."""
    got: list[tuple[int, bytes]] = []
    store.get(attempt_id).watchers.add(lambda offset, data: got.append((offset, data)))
    return got


def test_a_notification_read_late_after_the_log_ended_brings_its_last_lines_too(tmp_path: Path) -> None:
    writer = LogFile(tmp_path, 1)  # the controller's mirror, on the shared data dir
    writer.append(b"line 1\n")
    notified = writer.size
    store = LogStore(tmp_path)
    got = watched(store, 1)
    writer.append(b"line 2\nTerminated\n")
    writer.finish(host_size=writer.size, host_sha256=None, mirror_sha256=None)
    LogListener(URL, store)._notified(f"1 {notified}")  # read only now
    assert b"".join(data for _, data in got) == b"line 2\nTerminated\n"
    assert store.get(1).meta.complete and store.get(1).size == writer.size
    assert got[-1] == (writer.size, b"")  # the end, after the last lines


async def test_a_listener_connected_again_takes_in_what_the_logs_it_holds_grew_meanwhile(tmp_path: Path) -> None:
    writer = LogFile(tmp_path, 1)
    writer.append(b"before\n")
    LogFile(tmp_path, 2).append(b"a log nobody here watches\n")
    store = LogStore(tmp_path)
    got = watched(store, 1)
    writer.append(b"while the database was away\n")  # announced to nobody
    await LogListener(URL, store)._catch_up()
    assert got == [(7, b"while the database was away\n")]
    assert not store.is_open(2)


class Connection:
    def __init__(self, fails: bool):
        self.fails = fails
        self.sent: list[tuple[Any, ...]] = []

    async def execute(self, query: str, params: tuple[Any, ...]) -> None:
        if self.fails:
            raise psycopg.OperationalError("server closed the connection unexpectedly")
        self.sent.append(params)


async def test_an_announcement_the_dead_connection_did_not_send_goes_out_on_the_next(tmp_path: Path) -> None:
    announcer = LogAnnouncer(URL, Mirrors(LogStore(tmp_path)))
    announcer.appended(1, 100)
    announcer.appended(2, 50)
    with pytest.raises(psycopg.OperationalError):
        await announcer._announce(Connection(fails=True))  # type: ignore[arg-type]
    announcer.appended(1, 120)  # grew meanwhile: the newer size goes
    alive = Connection(fails=False)
    assert announcer._wake.is_set()
    await announcer._announce(alive)  # type: ignore[arg-type]
    assert sorted(alive.sent) == [(CHANNEL, "1 120"), (CHANNEL, "2 50")]
