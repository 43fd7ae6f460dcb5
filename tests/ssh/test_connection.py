"""The SSH layer against both kinds of real server: a simulated host and OpenSSH's sshd."""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import os
import re
import time
from collections.abc import Callable
from pathlib import Path

import asyncssh
import pytest

from app.config import Settings
from app.demo.cluster import SimCluster
from app.demo.inventory import SimHostSpec
from app.errors import CommandTimedOut, HostUnavailable, RemoteCommandFailed, UploadFailed
from app.ssh import HostConnection, HostSpec, HostState, SSHOptions
from app.ssh.connection import KEEPALIVE_COUNT_MAX
from tests.support.servers import OpenSSHServer, Relay, free_port

Connect = Callable[..., HostConnection]


async def online(connect: Connect, spec: HostSpec, **options: float) -> HostConnection:
    host = connect(spec, **options)
    await host.wait_online(10)
    return host


AWKWARD_ARGS = [
    "two words",
    "it's",
    '"double"',
    "$(touch /tmp/launchdeck-pwned)",
    "`id`",
    "a; rm -rf /",
    "line1\nline2",
    "$HOME",
    "*",
    "",
    "--flag=va lue",
    "tab\there",
    "ünïcödé",
]


async def test_awkward_arguments_arrive_literally(connect: Connect, target: HostSpec) -> None:
    host = await online(connect, target)
    script = "import sys, json; print(json.dumps(sys.argv[1:]))"
    result = await host.run(["python3", "-c", script, *AWKWARD_ARGS])
    assert result.stdout.decode().strip() == __import__("json").dumps(AWKWARD_ARGS)
    assert not Path("/tmp/launchdeck-pwned").exists()


async def test_failing_command_reports_exit_status_and_stderr(connect: Connect, target: HostSpec) -> None:
    host = await online(connect, target)
    with pytest.raises(RemoteCommandFailed) as failure:
        await host.run(["sh", "-c", "echo 'no such model' >&2; exit 3"])
    assert failure.value.exit_status == 3
    assert "no such model" in str(failure.value)
    unchecked = await host.run(["sh", "-c", "exit 4"], check=False)
    assert unchecked.exit_status == 4


async def test_input_is_passed_to_the_command(connect: Connect, target: HostSpec) -> None:
    host = await online(connect, target)
    result = await host.run(["wc", "-c"], input=b"x" * 100_000)
    assert result.stdout.split()[0] == b"100000"


async def test_upload_of_50_mb_is_verified_on_the_host(connect: Connect, target: HostSpec, tmp_path: Path) -> None:
    host = await online(connect, target)
    data = os.urandom(50 * 1024 * 1024)
    remote = str(tmp_path / "remote" / "weights.bin")
    digest = await host.upload(data, remote, mode=0o640)
    assert digest == __import__("hashlib").sha256(data).hexdigest()
    listing = await host.run(["sh", "-c", 'stat -c %s:%a "$1" && sha256sum "$1"', "sh", remote])
    size_mode, checksum = listing.stdout.decode().split("\n", 1)
    assert size_mode == f"{len(data)}:640"
    assert checksum.split()[0] == digest
    assert not Path(f"{remote}.partial").exists()


async def test_upload_to_a_place_that_cannot_be_written_names_the_path(
    connect: Connect, target: HostSpec, tmp_path: Path
) -> None:
    host = await online(connect, target)
    blocker = tmp_path / "not-a-directory"
    blocker.write_text("")
    with pytest.raises(UploadFailed, match=re.escape(f"cannot write {blocker}/launch.sh")):
        await host.upload(b"x", f"{blocker}/launch.sh")


async def test_upload_whose_checksum_differs_on_the_host_is_not_put_in_place(
    connect: Connect, sim_cluster: SimCluster, sim_specs: list[HostSpec], tmp_path: Path
) -> None:
    """A host whose disk corrupts what it is sent: the file never appears under its name."""
    sim = sim_cluster.hosts[sim_specs[0].name]
    liar = sim.bin_dir / "sha256sum"
    liar.write_text('#!/bin/sh\necho "0000000000000000000000000000000000000000000000000000000000000000  $2"\n')
    liar.chmod(0o755)
    host = await online(connect, sim_specs[0])
    target = tmp_path / "launch.sh"
    try:
        with pytest.raises(UploadFailed, match="sha256 on the host is 0000"):
            await host.upload(b"#!/bin/sh\n", str(target))
    finally:
        liar.unlink()
    assert not target.exists()
    assert not Path(f"{target}.partial").exists()


async def test_stream_delivers_output_as_it_is_written(connect: Connect, target: HostSpec) -> None:
    host = await online(connect, target)
    argv = ["python3", "-u", "-c", "import time\nfor i in range(3):\n    print(i, flush=True); time.sleep(0.3)"]
    arrivals = []
    async with host.stream(argv) as process:
        while line := await process.stdout.readline():
            arrivals.append((line, time.monotonic()))
    assert [line for line, _ in arrivals] == [b"0\n", b"1\n", b"2\n"]
    assert arrivals[-1][1] - arrivals[0][1] > 0.4, "lines were buffered until the end"


async def test_leaving_a_stream_stops_the_remote_command(connect: Connect, target: HostSpec, tmp_path: Path) -> None:
    host = await online(connect, target)
    marker = f"launchdeck-stream-{os.getpid()}-{time.monotonic_ns()}"
    async with host.stream(["sh", "-c", f"while :; do echo {marker}; sleep 0.1; done"]) as process:
        assert marker.encode() in await process.stdout.readline()
    # Up to 15 s: on a machine running the suite's other worker, the hangup and the checks queue.
    for _ in range(150):
        # The bracket keeps the pattern from matching the shell that runs pgrep.
        if (await host.run(["pgrep", "-f", f"ech[o] {marker}"], check=False)).exit_status != 0:
            break
        await asyncio.sleep(0.1)
    else:
        pytest.fail("the remote loop outlived its stream by 15 s")


@pytest.mark.openssh
async def test_thirty_concurrent_streams_to_one_openssh_host(connect: Connect, openssh_spec: HostSpec) -> None:
    """OpenSSH allows 10 sessions per connection; the 30 streams need more connections."""
    host = await online(connect, openssh_spec)
    release = asyncio.Event()
    started = 0

    async def one_stream(n: int) -> bytes:
        nonlocal started
        async with host.stream(["sh", "-c", f"echo stream-{n}; exec sleep 30"]) as process:
            line = await process.stdout.readline()
            started += 1
            await release.wait()
            return bytes(line)

    tasks = [asyncio.create_task(one_stream(n)) for n in range(30)]
    async with asyncio.timeout(30):
        while started < 30:
            await asyncio.sleep(0.05)
    release.set()
    lines = await asyncio.gather(*tasks)
    assert sorted(lines) == sorted(f"stream-{n}\n".encode() for n in range(30))


# Answers one connection on the host's own loopback with "pong:" and the line it got.
PONG = """
import socket
server = socket.socket()
server.bind(("127.0.0.1", 0))
server.listen()
print(server.getsockname()[1], flush=True)
peer, _ = server.accept()
peer.sendall(b"pong:" + peer.makefile("rb").readline())
peer.close()
"""


async def test_local_port_forward_reaches_a_server_on_the_host(connect: Connect, target: HostSpec) -> None:
    host = await online(connect, target)
    async with host.stream(["python3", "-c", PONG]) as server:
        remote_port = int(await server.stdout.readline())
        listener = await host.forward_local_port(remote_port)
        try:
            reader, writer = await asyncio.open_connection("127.0.0.1", listener.get_port())
            writer.write(b"ping\n")
            assert await reader.read() == b"pong:ping\n"
            writer.close()
        finally:
            listener.close()


async def test_reconnects_after_the_server_drops_the_connection(
    connect: Connect, target: HostSpec, request: pytest.FixtureRequest
) -> None:
    host = await online(connect, target)
    online_since = host.status.since
    if target.name == "openssh":
        server: OpenSSHServer = request.getfixturevalue("openssh")
        server.drop_connections()
    else:
        request.getfixturevalue("sim_cluster").hosts[target.name].drop_connections()
    async with asyncio.timeout(10):
        while not (host.status.state is HostState.ONLINE and host.status.since > online_since):
            await asyncio.sleep(0.02)
    assert (await host.run(["echo", "back"])).stdout == b"back\n"


async def test_a_command_cut_off_by_a_dropped_connection_fails_rather_than_answering_empty(
    connect: Connect, target: HostSpec, request: pytest.FixtureRequest
) -> None:
    """The channel closes with the connection and no exit status: no answer, not an empty one. A
    follower's probe read as empty output says "the server's process is gone" of a live server."""
    host = await online(connect, target)
    command = asyncio.create_task(host.run(["sh", "-c", "echo started; sleep 5"], check=False))
    await asyncio.sleep(0.5)
    if target.name == "openssh":
        server: OpenSSHServer = request.getfixturevalue("openssh")
        server.drop_connections()
    else:
        request.getfixturevalue("sim_cluster").hosts[target.name].drop_connections()
    with pytest.raises(HostUnavailable, match="before the host said how it ended"):
        await asyncio.wait_for(command, 5)


async def test_host_key_mismatch_is_refused(connect: Connect, target: HostSpec, tmp_path: Path) -> None:
    impostor = asyncssh.generate_private_key("ssh-ed25519").export_public_key().decode().strip()
    known_hosts = tmp_path / "mismatch_known_hosts"
    known_hosts.write_text(f"[127.0.0.1]:{target.port} {impostor}\n")
    host = connect(dataclasses.replace(target, known_hosts=str(known_hosts)))
    await wait_offline(host)
    assert "does not match" in (host.status.last_error or "")
    started = time.monotonic()
    with pytest.raises(HostUnavailable, match="does not match"):
        await host.run(["true"])
    assert time.monotonic() - started < 2


async def test_unknown_host_key_is_refused_without_trust_on_first_use(
    connect: Connect, target: HostSpec, tmp_path: Path
) -> None:
    host = connect(dataclasses.replace(target, known_hosts=str(tmp_path / "empty_known_hosts")))
    await wait_offline(host)
    assert "not in" in (host.status.last_error or "") and "trust_on_first_use" in (host.status.last_error or "")


async def test_trust_on_first_use_records_the_key_then_checks_it(
    connect: Connect, target: HostSpec, tmp_path: Path
) -> None:
    known_hosts = tmp_path / "tofu_known_hosts"
    host = await online(connect, dataclasses.replace(target, known_hosts=str(known_hosts), trust_on_first_use=True))
    recorded = known_hosts.read_text()
    assert recorded.startswith(f"[127.0.0.1]:{target.port} ssh-ed25519 ")
    await host.close()
    again = await online(connect, dataclasses.replace(target, known_hosts=str(known_hosts), trust_on_first_use=True))
    assert known_hosts.read_text() == recorded
    assert (await again.run(["echo", "ok"])).stdout == b"ok\n"


async def test_wrong_client_key_says_authentication_failed(connect: Connect, target: HostSpec, tmp_path: Path) -> None:
    stranger = tmp_path / "stranger_key"
    asyncssh.generate_private_key("ssh-ed25519").write_private_key(stranger)
    host = connect(dataclasses.replace(target, identity_files=(str(stranger),)))
    await wait_offline(host)
    assert "authentication failed" in (host.status.last_error or "")


async def test_refused_connection_answers_fast_with_the_reason(connect: Connect, target: HostSpec) -> None:
    host = connect(dataclasses.replace(target, port=free_port()))
    started = time.monotonic()
    with pytest.raises(HostUnavailable, match="connection refused"):
        await host.run(["true"])
    assert time.monotonic() - started < 2


async def test_unknown_host_name_is_offline_with_reason(connect: Connect, target: HostSpec) -> None:
    host = connect(dataclasses.replace(target, address="no-such-host.invalid"))
    await wait_offline(host)
    assert "cannot resolve no-such-host.invalid" in (host.status.last_error or "")


async def test_silent_host_goes_offline_by_keepalive_and_comes_back(connect: Connect, target: HostSpec) -> None:
    relay = Relay(target.port or 22)
    await relay.start()
    try:
        known_hosts = Path(target.known_hosts or "")
        relayed_known = known_hosts.with_name(f"relay_{relay.port}_known_hosts")
        key = known_hosts.read_text().splitlines()[0].split(" ", 1)[1]
        relayed_known.write_text(f"[127.0.0.1]:{relay.port} {key}\n")
        spec = dataclasses.replace(target, port=relay.port, known_hosts=str(relayed_known))
        host = await online(connect, spec, keepalive_interval=0.3, connect_timeout=1.0)
        relay.silent = True
        started = time.monotonic()
        await wait_offline(host, timeout=10)
        assert time.monotonic() - started < 3, "3 missed keepalives should take about 1 s"
        with pytest.raises(HostUnavailable):
            await host.run(["true"])
        relay.silent = False
        await host.wait_online(15)
        assert (await host.run(["echo", "alive"])).stdout == b"alive\n"
    finally:
        await relay.close()


async def wait_offline(host: HostConnection, timeout: float = 10) -> None:
    async with asyncio.timeout(timeout):
        while host.status.state is not HostState.OFFLINE:
            await asyncio.sleep(0.02)


@pytest.mark.openssh
async def test_ssh_config_alias_supplies_address_port_user_and_key(
    connect: Connect, openssh: OpenSSHServer, openssh_spec: HostSpec, tmp_path: Path
) -> None:
    config = tmp_path / "ssh_config"
    config.write_text(
        "Host gpu-alias\n"
        "  HostName 127.0.0.1\n"
        f"  Port {openssh.port}\n"
        f"  User {openssh_spec.user}\n"
        f"  IdentityFile {openssh.client_key_path}\n"
    )
    host = HostConnection(
        HostSpec(name="gpu-alias", known_hosts=openssh_spec.known_hosts),
        SSHOptions(known_hosts=tmp_path / "unused", ssh_config=config),
    )
    host.start()
    try:
        await host.wait_online(10)
        assert (await host.run(["echo", "via-alias"])).stdout == b"via-alias\n"
    finally:
        await host.close()


@pytest.mark.openssh
async def test_keys_from_ssh_agent_are_used(
    connect: Connect, openssh: OpenSSHServer, openssh_spec: HostSpec, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    agent_socket = tmp_path / "agent.sock"
    agent = await asyncio.create_subprocess_exec("ssh-agent", "-D", "-a", str(agent_socket))
    try:
        for _ in range(100):
            if agent_socket.exists():
                break
            await asyncio.sleep(0.02)
        monkeypatch.setenv("SSH_AUTH_SOCK", str(agent_socket))
        add = await asyncio.create_subprocess_exec("ssh-add", "-q", str(openssh.client_key_path))
        assert await add.wait() == 0
        monkeypatch.setenv("HOME", str(tmp_path))  # no default keys in ~/.ssh to fall back on
        host = await online(connect, dataclasses.replace(openssh_spec, identity_files=()))
        assert (await host.run(["echo", "via-agent"])).stdout == b"via-agent\n"
    finally:
        agent.terminate()
        await agent.wait()


async def test_host_that_was_down_comes_back_by_itself(connect: Connect, tmp_path: Path) -> None:
    cluster = SimCluster(tmp_path / "flaky", [SimHostSpec("flaky-01", "b200", 1)])
    [spec] = await cluster.start()
    sim = cluster.hosts["flaky-01"]
    try:
        host = await online(connect, spec)
        await sim.stop()
        await wait_offline(host)
        with pytest.raises(HostUnavailable, match="offline since"):
            await host.run(["true"])
        await asyncio.sleep(2)  # a few failed reconnects, so the backoff has grown
        await sim.start(port=spec.port or 0)
        await host.wait_online(15)
        assert (await host.run(["echo", "back"])).stdout == b"back\n"
    finally:
        await cluster.stop()


async def test_trust_on_first_use_never_replaces_a_known_key(
    connect: Connect, target: HostSpec, tmp_path: Path
) -> None:
    impostor = asyncssh.generate_private_key("ssh-ed25519").export_public_key().decode().strip()
    known_hosts = tmp_path / "tofu_changed_known_hosts"
    known_hosts.write_text(f"[127.0.0.1]:{target.port} {impostor}\n")
    host = connect(dataclasses.replace(target, known_hosts=str(known_hosts), trust_on_first_use=True))
    await wait_offline(host)
    assert "does not match" in (host.status.last_error or "")
    assert known_hosts.read_text() == f"[127.0.0.1]:{target.port} {impostor}\n"


@pytest.mark.openssh
async def test_timed_out_commands_do_not_use_up_the_hosts_sessions(connect: Connect, openssh_spec: HostSpec) -> None:
    """OpenSSH allows 10 sessions per connection and keeps each until its command ends, whatever the
    client closed: 30 commands given up on while they run (timed out, or their caller cancelled)
    hold sessions for seconds, and the next command still finds one."""
    host = await online(connect, openssh_spec)
    for _ in range(15):
        with pytest.raises(CommandTimedOut, match=r"did not finish within 0\.2 s"):
            await host.run(["sleep", "4"], timeout=0.2)
    for _ in range(15):
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(host.run(["sleep", "4"]), 0.2)
    assert (await host.run(["echo", "still-usable"])).stdout == b"still-usable\n"


@pytest.mark.openssh
async def test_commands_cancelled_while_their_channel_opens_leave_no_session_behind(
    connect: Connect, openssh_spec: HostSpec
) -> None:
    """A caller that gives up (a closed page, a timeout around the call) before the host confirmed
    the channel: 12 of them, more than OpenSSH's 10 sessions, and the connection still serves."""
    host = await online(connect, openssh_spec)
    for _ in range(12):
        command = asyncio.create_task(host.run(["true"]))
        await asyncio.sleep(0)  # it runs to its first wait: the host's answer to the channel's open
        command.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await command
    assert (await host.run(["echo", "still-usable"])).stdout == b"still-usable\n"


async def test_reconnect_attempts_back_off_while_the_host_refuses(connect: Connect) -> None:
    """A host that accepts TCP and hangs up at once (a restarting sshd) is not hammered."""
    attempts = 0

    async def hang_up(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        nonlocal attempts
        attempts += 1
        writer.close()

    server = await asyncio.start_server(hang_up, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    try:
        host = connect(HostSpec(name="restarting", address="127.0.0.1", port=port))
        await asyncio.sleep(4)
        assert host.status.state is HostState.OFFLINE
        assert 2 <= attempts <= 4, f"{attempts} attempts in 4 s; backoff 1, 2, 4 s allows 3"
    finally:
        server.close()


def test_default_keepalive_finds_a_dead_host_within_30_seconds() -> None:
    """asyncssh gives up after KEEPALIVE_COUNT_MAX + 1 unanswered keepalives."""
    assert (KEEPALIVE_COUNT_MAX + 1) * Settings().ssh_keepalive_interval <= 30
