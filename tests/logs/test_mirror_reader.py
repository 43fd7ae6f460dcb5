"""The host side of the log mirror: the reader a constant script starts with a Python found on the
host, or the POSIX shell reader on a host without one. Both through a log that grows, is truncated
and is replaced, and through a dashboard restart; and a mirror that stops retrying once its
attempt has ended and its reader gets nowhere, but not while the attempt runs."""

from __future__ import annotations

import asyncio
import dataclasses
import hashlib
import os
import uuid
from collections.abc import AsyncIterator, Callable
from pathlib import Path

import pytest

from app.demo.cluster import SimCluster
from app.demo.inventory import SimHostSpec
from app.logs.mirror import LogMirror, Mirrors, MirrorSource
from app.logs.store import LogStore
from app.ssh import HostConnection, HostSpec
from tests.support.hosts import START_DETACHED
from tests.support.servers import free_port
from tests.support.waiting import until


@pytest.fixture(scope="module")
async def bare_cluster(tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[SimCluster]:
    """One simulated host with no Python on its PATH, only the system's programs."""
    cluster = SimCluster(tmp_path_factory.mktemp("bare"), [SimHostSpec("bare-01", "b200", 1, python=False)])
    await cluster.start()
    yield cluster
    await cluster.stop()


@dataclasses.dataclass
class Host:
    reader: str  # python or shell
    connection: HostConnection
    home: Path  # the host's home on this machine: the tests write its log files directly

    def file(self, path: str) -> Path:
        return self.home / path


@pytest.fixture(params=["python", "shell"])
async def host(
    request: pytest.FixtureRequest,
    connect: Callable[..., HostConnection],
    sim_cluster: SimCluster,
    sim_specs: list[HostSpec],
    bare_cluster: SimCluster,
) -> Host:
    """A host whose reader is the Python one, and a host where it is the shell one."""
    cluster, spec = (sim_cluster, sim_specs[0]) if request.param == "python" else (bare_cluster, None)
    spec = spec or bare_cluster.host_spec(bare_cluster.specs[0])
    connection = connect(spec, reconnect_backoff_max=0.05)
    await connection.wait_online(10)
    found = await connection.run(["sh", "-c", "command -v python3 || command -v python"], check=False)
    assert (found.exit_status == 0) == (request.param == "python"), found
    return Host(request.param, connection, cluster.hosts[spec.name].home)


async def start_process(host: Host) -> int:
    """A process that stands for the server: the log ends once it has exited."""
    result = await host.connection.run(["sh", "-c", START_DETACHED, "sh", "sleep", "120"])
    return int(result.stdout.split()[0])


def new_log(host: Host) -> tuple[str, Path]:
    path = f"mirror-tests/{uuid.uuid4().hex}.log"
    local = host.file(path)
    local.parent.mkdir(parents=True, exist_ok=True)
    return path, local


def append(path: Path, data: bytes) -> None:
    with open(path, "ab") as f:
        f.write(data)


# Bytes that a text-minded reader would get wrong: NUL, invalid UTF-8, CR, a line with no end.
AWKWARD = b"nul \x00 here\r\ninvalid \xff\xfe\xc3( utf-8\n" + bytes(range(256)) + b"no newline at the end"


async def test_each_reader_is_byte_exact_through_growth_truncation_and_replacement(host: Host, tmp_path: Path) -> None:
    path, local = new_log(host)
    pid = await start_process(host)
    mirrors = Mirrors(LogStore(tmp_path / "logs"))
    mirror = mirrors.start(1, MirrorSource(host.connection, path, pid, None))
    first = b"".join(b"[2026-01-05 10:00:01 TP0] line %d\n" % n for n in range(2000))
    big = os.urandom(3 << 20)  # more than one chunk of a reader
    try:
        for part in (first, AWKWARD, big, b"\n"):
            append(local, part)
            await until(lambda: mirror.log.size == local.stat().st_size, "the growing log")
        with open(local, "r+b") as f:
            f.truncate(0)
        await until(lambda: len(mirror.log.meta.segments) == 1, "the truncation")
        second = b"after the truncation\n" * 500 + AWKWARD
        append(local, second)
        await until(lambda: mirror.log.host_offset == len(second), "the truncated log")
        replacement = local.with_name("replacement")
        replacement.write_bytes(b"a new file under the old name\n")
        replacement.replace(local)
        await until(lambda: len(mirror.log.meta.segments) == 2, "the replacement")
        append(local, AWKWARD)
        await host.connection.run(["kill", str(pid)])
        await asyncio.wait_for(mirror.done.wait(), 20)
    finally:
        await mirrors.close()
    grown = first + AWKWARD + big + b"\n"
    final = local.read_bytes()
    assert final == b"a new file under the old name\n" + AWKWARD
    assert (tmp_path / "logs" / "1.log").read_bytes() == grown + second + final
    segments = mirror.log.meta.segments
    assert [(s["reason"], s["at"]) for s in segments] == [
        ("truncated", len(grown)),
        ("replaced", len(grown) + len(second)),
    ]
    verification = mirror.log.meta.verification
    assert verification is not None and verification["match"] is True
    assert (verification["host_size"], verification["host_sha256"]) == (len(final), hashlib.sha256(final).hexdigest())


async def test_each_reader_resumes_at_its_offset_and_notices_a_file_replaced_meanwhile(
    host: Host, tmp_path: Path
) -> None:
    path, local = new_log(host)
    local.write_bytes(b"first life\n" * 1000)
    source = MirrorSource(host.connection, path, await start_process(host), None)
    mirrors = Mirrors(LogStore(tmp_path / "logs"))
    mirror = mirrors.start(1, source)
    await until(lambda: mirror.log.size == 11_000, "the first life")
    await mirrors.close()  # the dashboard stops; the file grows meanwhile, and goes on growing after
    append(local, b"still the first life\n" * 10)
    mirrors = Mirrors(LogStore(tmp_path / "logs"))
    mirror = mirrors.start(1, source)
    await until(lambda: mirror.log.size == 11_210, "the rest of the first life")
    await mirrors.close()
    local.write_bytes(b"second life, longer than the first\n" * 1000)  # replaced while nobody watched
    mirrors = Mirrors(LogStore(tmp_path / "logs"))
    mirror = mirrors.start(1, source)
    try:
        await until(lambda: mirror.log.size == 11_210 + 35_000, "the second life")
    finally:
        await host.connection.run(["kill", str(source.pid)])
        await asyncio.wait_for(mirror.done.wait(), 20)
        await mirrors.close()
    assert [s["reason"] for s in mirror.log.meta.segments] == ["replaced"]
    expected = b"first life\n" * 1000 + b"still the first life\n" * 10 + local.read_bytes()
    assert (tmp_path / "logs" / "1.log").read_bytes() == expected
    assert mirror.log.meta.verification and mirror.log.meta.verification["match"] is True


async def failing_mirror(host: Host, tmp_path: Path, pid: int) -> tuple[Mirrors, LogMirror, Path]:
    """A mirror whose reader cannot read the log: the log's path is a directory."""
    path, local = new_log(host)
    local.mkdir()
    mirrors = Mirrors(LogStore(tmp_path / "logs"), retry_max=0.05, give_up_after=3)
    return mirrors, mirrors.start(1, MirrorSource(host.connection, path, pid, None)), local


async def test_a_mirror_whose_reader_keeps_failing_gives_up_once_its_attempt_has_ended(
    host: Host, tmp_path: Path
) -> None:
    ended = await start_process(host)
    await host.connection.run(["kill", str(ended)])
    mirrors, mirror, local = await failing_mirror(host, tmp_path, ended)
    try:
        await until(lambda: mirror.connects >= 2, "the reader to fail")
        mirror.end_of_attempt()
        await asyncio.wait_for(mirror.done.wait(), 20)
        await until(lambda: mirrors.get(1) is None, "the mirror to be forgotten")
    finally:
        await mirrors.close()
    stopped = mirror.log.meta.stopped
    assert stopped is not None and not mirror.log.meta.complete
    assert stopped["reason"].startswith("gave up after 3 tries without progress after the attempt ended: ")
    path = local.relative_to(host.home)
    said = {"python": f"IsADirectoryError: [Errno 21] Is a directory: '{path}'", "shell": f"{path}: not a regular file"}
    assert stopped["reason"].endswith(said[host.reader])  # the last line the reader wrote
    again = LogStore(tmp_path / "logs").get(1)  # recorded, as a restarted dashboard finds it
    assert again.meta.stopped == stopped


async def test_a_running_attempts_mirror_keeps_retrying_and_catches_up(host: Host, tmp_path: Path) -> None:
    pid = await start_process(host)
    mirrors, mirror, local = await failing_mirror(host, tmp_path, pid)
    try:
        await until(lambda: mirror.connects > 3 * mirror.give_up_after, "many failed reads")
        assert mirrors.get(1) is mirror and not mirror.done.is_set() and mirror.error
        local.rmdir()
        local.write_bytes(b"the log, at last\n")
        await host.connection.run(["kill", str(pid)])
        await asyncio.wait_for(mirror.done.wait(), 20)
    finally:
        await mirrors.close()
    assert mirror.log.meta.stopped is None and mirror.error is None
    assert (tmp_path / "logs" / "1.log").read_bytes() == b"the log, at last\n"
    assert mirror.log.meta.verification and mirror.log.meta.verification["match"] is True


async def test_an_ended_attempts_mirror_gives_up_on_a_host_that_stays_away(
    connect: Callable[..., HostConnection], sim_specs: list[HostSpec], tmp_path: Path
) -> None:
    gone = connect(dataclasses.replace(sim_specs[0], port=free_port()), connect_timeout=0.5)
    mirrors = Mirrors(LogStore(tmp_path / "logs"), retry_max=0.05, give_up_after=3)
    mirror = mirrors.start(1, MirrorSource(gone, "server.log", 1, None))
    mirror.end_of_attempt()
    try:
        await asyncio.wait_for(mirror.done.wait(), 20)
    finally:
        await mirrors.close()
    assert mirrors.get(1) is None and mirror.connects == 0
    stopped = mirror.log.meta.stopped
    assert stopped is not None and "tries without progress" in stopped["reason"]
    assert f"{gone.name}: offline (" in stopped["reason"]
