"""Two replicas' mirrors of one log on the shared data dir: the one whose host is no longer its
own (its controller woke from a stall past its lease) writes nothing more, the host's new owner
mirrors the log to its end, and an owner whose log another process wrote past takes those bytes in:
each byte once. A mirror whose lease lapsed only by its own clock, and was renewed after all,
reads on to the log's end."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Callable
from pathlib import Path

from app.demo.cluster import SimCluster
from app.logs.mirror import Mirrors, MirrorSource
from app.logs.store import LogFile, LogStore
from app.ssh import HostConnection, HostSpec
from tests.support.hosts import START_DETACHED
from tests.support.waiting import until

LINES = b"".join(b"[10:00:01 TP0] line %d of the host's log\n" % n for n in range(5000))


async def a_log_on_the_host(
    connect: Callable[..., HostConnection], spec: HostSpec, sim_cluster: SimCluster
) -> tuple[HostConnection, str, Path, int]:
    """A connection, and a log (its path there and its file here) whose process is a sleeper the
    test kills to end it: the test alone writes the log."""
    host = connect(spec)
    await host.wait_online(10)
    path = f"mirror-tests/{uuid.uuid4().hex}.log"
    local = sim_cluster.hosts[host.name].home / path
    local.parent.mkdir(parents=True, exist_ok=True)
    local.write_bytes(LINES)
    sleeper = await host.run(["sh", "-c", START_DETACHED, "sh", "sleep", "30"])
    return host, path, local, int(sleeper.stdout.split()[0])


async def test_a_mirror_whose_host_is_no_longer_its_own_writes_nothing_and_the_new_owner_s_completes_the_log(
    connect: Callable[..., HostConnection], sim_specs: list[HostSpec], sim_cluster: SimCluster, tmp_path: Path
) -> None:
    host, path, local, pid = await a_log_on_the_host(connect, sim_specs[0], sim_cluster)
    owned = True
    stalled, new_owner = Mirrors(LogStore(tmp_path / "logs")), Mirrors(LogStore(tmp_path / "logs"))
    mirror = stalled.start(1, MirrorSource(host, path, pid, None, owned=lambda: owned))
    try:
        await until(lambda: mirror.log.size == len(LINES), "the host's log in the mirror")
        owned = False  # its lease lapsed: the host's bytes still come
        with local.open("ab") as log:
            log.write(LINES)
        await asyncio.sleep(0.5)
        assert (tmp_path / "logs" / "1.log").read_bytes() == LINES
        assert not (tmp_path / "logs" / "1.json").exists()
        await stalled.let_go([host.name])  # its next beat did not renew the lease
        assert stalled.get(1) is None and not mirror.done.is_set()
        taken = new_owner.start(1, MirrorSource(host, path, pid, None))
        await until(lambda: taken.log.size == 2 * len(LINES), "the rest in the new owner's mirror")
        await host.run(["kill", str(pid)])
        await asyncio.wait_for(taken.done.wait(), 10)
    finally:
        await stalled.close()
        await new_owner.close()
    assert (tmp_path / "logs" / "1.log").read_bytes() == local.read_bytes() == 2 * LINES
    assert taken.log.meta.verification and taken.log.meta.verification["match"] is True


async def test_an_owner_whose_log_another_process_wrote_past_takes_those_bytes_in_and_goes_on(
    connect: Callable[..., HostConnection], sim_specs: list[HostSpec], sim_cluster: SimCluster, tmp_path: Path
) -> None:
    """The other process stalled between its last check and its write, past its lease: what it
    wrote is the host's bytes, where they belong."""
    host, path, local, pid = await a_log_on_the_host(connect, sim_specs[0], sim_cluster)
    mirrors = Mirrors(LogStore(tmp_path / "logs"))
    mirror = mirrors.start(1, MirrorSource(host, path, pid, None))
    try:
        await until(lambda: mirror.log.size == len(LINES), "the host's log in the mirror")
        with local.open("ab") as log:
            log.write(LINES)
        LogFile(tmp_path / "logs", 1).append(LINES)  # before the mirror gets them
        await until(lambda: mirror.log.size == 2 * len(LINES), "the mirror caught up")
        await host.run(["kill", str(pid)])
        await asyncio.wait_for(mirror.done.wait(), 10)
    finally:
        await mirrors.close()
    assert (tmp_path / "logs" / "1.log").read_bytes() == local.read_bytes() == 2 * LINES
    assert mirror.log.meta.segments == [] and mirror.connects >= 2  # it resumed at the end on disk
    assert mirror.log.meta.verification and mirror.log.meta.verification["match"] is True


async def test_a_mirror_whose_lease_lapsed_by_its_own_clock_and_was_renewed_reads_on_to_the_end(
    connect: Callable[..., HostConnection], sim_specs: list[HostSpec], sim_cluster: SimCluster, tmp_path: Path
) -> None:
    """The beat under way as the lease lapsed by this process's clock renewed it in the database in
    time: no lease changed hands, so nothing else would start this mirror again."""
    host, path, local, pid = await a_log_on_the_host(connect, sim_specs[0], sim_cluster)
    owned = True
    mirrors = Mirrors(LogStore(tmp_path / "logs"))
    mirror = mirrors.start(1, MirrorSource(host, path, pid, None, owned=lambda: owned))
    try:
        await until(lambda: mirror.log.size == len(LINES), "the host's log in the mirror")
        owned = False
        with local.open("ab") as log:
            log.write(LINES)
        await asyncio.sleep(0.5)
        assert mirror.log.size == len(LINES)  # nothing written while the lease is in doubt
        owned = True  # the beat's renewal came through
        await until(lambda: mirror.log.size == 2 * len(LINES), "the rest of the log after the renewal")
        await host.run(["kill", str(pid)])
        await asyncio.wait_for(mirror.done.wait(), 10)
    finally:
        await mirrors.close()
    assert (tmp_path / "logs" / "1.log").read_bytes() == local.read_bytes() == 2 * LINES
    assert mirror.log.meta.verification and mirror.log.meta.verification["match"] is True
