"""The log mirror against a simulated host over real SSH: exact bytes through connection drops,
truncation and replacement of the host's file, and a dashboard that stops and resumes."""

from __future__ import annotations

import asyncio
import hashlib
import uuid
from collections.abc import Callable
from pathlib import Path

import pytest

from app.demo.cluster import SimCluster
from app.logs.mirror import Mirrors, MirrorSource
from app.logs.store import LogStore
from app.ssh import HostConnection, HostSpec
from tests.support.hosts import LOG_WRITER, START_DETACHED
from tests.support.waiting import until


@pytest.fixture
async def host(connect: Callable[..., HostConnection], sim_specs: list[HostSpec]) -> HostConnection:
    # Reconnect at once: the tests drop the connection many times in a few seconds.
    connection = connect(sim_specs[0], reconnect_backoff_max=0.05)
    await connection.wait_online(10)
    return connection


async def start_writer(host: HostConnection, path: str, rate: int, count: int) -> int:
    await host.run(["mkdir", "-p", str(Path(path).parent)])
    result = await host.run(
        ["sh", "-c", START_DETACHED, "sh", "python3", "-c", LOG_WRITER, path, str(rate), str(count)]
    )
    return int(result.stdout.split()[0])


def host_file(sim_cluster: SimCluster, host: HostConnection, path: str) -> Path:
    return sim_cluster.hosts[host.name].home / path


async def test_mirror_is_byte_exact_through_twenty_connection_drops(
    host: HostConnection, sim_cluster: SimCluster, tmp_path: Path
) -> None:
    """Each drop comes once the mirror has resumed from the last and mirrored more; the writer
    outlasts all twenty drops however slow the machine is, and is ended after them."""
    path = f"mirror-tests/{uuid.uuid4().hex}.log"
    pid = await start_writer(host, path, rate=4000, count=2_000_000)
    mirrors = Mirrors(LogStore(tmp_path / "logs"))
    mirror = mirrors.start(1, MirrorSource(host, path, pid, None))
    try:
        await until(lambda: mirror.log.size > 0, "the mirror started", 30)
        for _ in range(20):
            connects, size = mirror.connects, mirror.log.size
            sim_cluster.hosts[host.name].drop_connections()
            await until(lambda c=connects: mirror.connects > c, "the mirror resumed", 30)
            await until(lambda s=size: mirror.log.size > s, "the mirror got more of the log", 30)
        await host.run(["kill", str(pid)], check=False)
        await asyncio.wait_for(mirror.done.wait(), 60)
    finally:
        await mirrors.close()
    assert mirror.connects >= 21
    expected = host_file(sim_cluster, host, path).read_bytes()
    mirrored = (tmp_path / "logs" / "1.log").read_bytes()
    assert len(mirrored) == len(expected) and mirrored == expected
    verification = mirror.log.meta.verification
    assert verification is not None and verification["match"] is True
    assert verification["host_sha256"] == hashlib.sha256(expected).hexdigest()
    assert mirror.log.total_lines == expected.count(b"\n") > 200 and mirror.log.meta.segments == []


async def test_truncation_on_the_host_is_marked_and_mirroring_goes_on(
    host: HostConnection, sim_cluster: SimCluster, tmp_path: Path
) -> None:
    path = f"mirror-tests/{uuid.uuid4().hex}.log"
    pid = await start_writer(host, path, rate=2000, count=6000)
    mirrors = Mirrors(LogStore(tmp_path / "logs"))
    mirror = mirrors.start(1, MirrorSource(host, path, pid, None))
    try:
        await until(lambda: mirror.log.size >= 200_000, "200 kB in the mirror")
        await host.run(["truncate", "-s", "0", path])
        await asyncio.wait_for(mirror.done.wait(), 30)
    finally:
        await mirrors.close()
    (segment,) = mirror.log.meta.segments
    assert segment["reason"] == "truncated"
    mirrored = (tmp_path / "logs" / "1.log").read_bytes()
    assert mirrored[segment["at"] :] == host_file(sim_cluster, host, path).read_bytes()
    assert mirrored[:200_000].startswith(b"[2026-01-05 10:00:01 TP0] line 0 written")
    assert mirror.log.meta.verification and mirror.log.meta.verification["match"] is True


async def test_a_restarted_mirror_resumes_and_notices_a_replaced_file(
    host: HostConnection, sim_cluster: SimCluster, tmp_path: Path
) -> None:
    path = f"mirror-tests/{uuid.uuid4().hex}.log"
    local = host_file(sim_cluster, host, path)
    local.parent.mkdir(parents=True, exist_ok=True)
    local.write_bytes(b"first life\n" * 1000)
    sleeper = await host.run(["sh", "-c", START_DETACHED, "sh", "sleep", "30"])
    source = MirrorSource(host, path, int(sleeper.stdout.split()[0]), None)
    mirrors = Mirrors(LogStore(tmp_path / "logs"))
    mirror = mirrors.start(1, source)
    await until(lambda: mirror.log.size >= 11_000, "the first file in the mirror")
    await mirrors.close()  # the dashboard stops
    local.write_bytes(b"second life, longer than the first\n" * 1000)  # replaced while nobody watched
    mirrors = Mirrors(LogStore(tmp_path / "logs"))
    mirror = mirrors.start(1, source)
    try:
        await until(lambda: mirror.log.size >= 11_000 + 35_000, "the second file in the mirror")
    finally:
        await host.run(["kill", str(source.pid)])
        await asyncio.wait_for(mirror.done.wait(), 10)
        await mirrors.close()
    assert [s["reason"] for s in mirror.log.meta.segments] == ["replaced"]
    assert (tmp_path / "logs" / "1.log").read_bytes() == b"first life\n" * 1000 + local.read_bytes()


async def test_verification_reads_the_mirror_from_disk_so_a_corrupted_byte_is_no_match(
    host: HostConnection, sim_cluster: SimCluster, tmp_path: Path
) -> None:
    path = f"mirror-tests/{uuid.uuid4().hex}.log"
    pid = await start_writer(host, path, rate=2000, count=4000)
    mirrors = Mirrors(LogStore(tmp_path / "logs"))
    mirror = mirrors.start(1, MirrorSource(host, path, pid, None))
    try:
        await until(lambda: mirror.log.size >= 10_000, "10 kB in the mirror")
        with (tmp_path / "logs" / "1.log").open("r+b") as mirrored:  # one bit flips on the dashboard's disk
            mirrored.seek(100)
            byte = mirrored.read(1)[0]
            mirrored.seek(100)
            mirrored.write(bytes([byte ^ 1]))
        await asyncio.wait_for(mirror.done.wait(), 30)
    finally:
        await mirrors.close()
    expected = host_file(sim_cluster, host, path).read_bytes()
    verification = mirror.log.meta.verification
    assert verification is not None and verification["host_size"] == len(expected) == mirror.log.size
    assert verification["host_sha256"] == hashlib.sha256(expected).hexdigest()
    assert verification["mirror_sha256"] == hashlib.sha256((tmp_path / "logs" / "1.log").read_bytes()).hexdigest()
    assert verification["match"] is False
