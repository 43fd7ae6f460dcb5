"""The simulated SGLang on two nodes, launched by hand over SSH on two simulated RTX PRO hosts: the
ranks meet at node 0's dist-init address, each node books its share of the weights on its own
GPUs, only node 0 serves the API, and a node that never comes or goes away fails the other with
torch's and gloo's words, which launchdeck's diagnosis places."""

from __future__ import annotations

import re
import shlex
import uuid
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest

from app.demo.cluster import SimCluster
from app.demo.inventory import DEFAULT_HOSTS
from app.demo.presets import DEMO_PRESETS
from app.diagnose.analyze import diagnose
from app.gpu.nvidia_smi import read_gpu_memory
from app.ssh import HostConnection
from tests.support.dashboard import SIM_TIME_SCALE
from tests.support.servers import free_port
from tests.support.sim import READY, assert_catalogued, root_error
from tests.support.waiting import until

Connect = Callable[..., HostConnection]

ONE_HOST = next(preset for preset in DEMO_PRESETS if preset.name == "qwen3-235b-one-host")
TWO_NODES = next(preset for preset in DEMO_PRESETS if preset.name == "qwen3-235b-two-nodes")
STARTUP_S = 120  # both nodes load 470 GB of simulated weights; the machine may be busy
SHORT_DIST_TIMEOUT = ["--dist-timeout", "60"]  # 1.2 s at the tests' pace


@dataclass
class Node:
    """One node's server, started detached in its own session with its exit status kept."""

    host: HostConnection
    workdir: str
    pgid: int

    async def log(self) -> str:
        return (await self.host.run(["cat", f"{self.workdir}/server.log"])).stdout.decode()

    async def wait_for(self, text: str, timeout: float = STARTUP_S) -> str:
        async def logged() -> str | None:
            log = await self.log()
            return log if text in log else None

        return str(await until(logged, f"{text!r} in {self.host.name}'s log", timeout))

    async def exit_code(self, timeout: float = 30) -> int:
        async def written() -> str:
            result = await self.host.run(["cat", f"{self.workdir}/exit_code"], check=False)
            return result.stdout.decode().strip()

        return int(await until(written, f"the server on {self.host.name} to exit", timeout))

    async def kill(self) -> None:
        await self.host.run(["env", "kill", "-KILL", "--", f"-{self.pgid}"], check=False)


@dataclass
class Host:
    connection: HostConnection
    started: list[Node]

    async def start(self, args: list[str]) -> Node:
        workdir = f"attempts/{uuid.uuid4().hex}"
        command = shlex.join(["python3", "-m", "sglang.launch_server", *args])
        inner = f"{command} > server.log 2>&1; echo $? > exit_code"
        detached = f"setsid sh -c {shlex.quote(inner)} > /dev/null 2>&1 < /dev/null & echo $!"
        script = f"mkdir -p {workdir} && cd {workdir} && {detached}"
        result = await self.connection.run(["sh", "-c", script])
        node = Node(self.connection, workdir, int(result.stdout))
        self.started.append(node)
        return node

    async def run_to_exit(self, args: list[str]) -> tuple[int, str]:
        node = await self.start(args)
        return await node.exit_code(STARTUP_S), await node.log()

    async def used_mib(self) -> list[int]:
        return [gpu.memory_used_mib or 0 for gpu in await read_gpu_memory(self.connection)]

    async def gpus_free(self) -> bool:
        return not any(await self.used_mib())


@pytest.fixture(scope="module")
async def two_hosts(tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[SimCluster]:
    """The two RTX PRO hosts (4 x 96 GB each), in a cluster of this module's own."""
    specs = [spec for spec in DEFAULT_HOSTS if spec.gpu_model == "rtx-pro-6000"]
    cluster = SimCluster(Path(tmp_path_factory.mktemp("multinode")), specs, time_scale=SIM_TIME_SCALE)
    await cluster.start()
    yield cluster
    await cluster.stop()


@pytest.fixture
async def hosts(two_hosts: SimCluster, connect: Connect) -> AsyncIterator[tuple[Host, Host]]:
    """rtxpro-01 and rtxpro-02, left with no server running and no memory booked."""
    pair = []
    for spec in two_hosts.specs:
        connection = connect(two_hosts.host_spec(spec))
        await connection.wait_online(10)
        pair.append(Host(connection, []))
    yield pair[0], pair[1]
    for host in pair:
        for node in host.started:
            await node.kill()
        await until(host.gpus_free, f"the GPUs of {host.connection.name} to be free", 15)


def node_args(rank: int, dist_init_addr: str, port: int, *extra: str) -> list[str]:
    return [
        "--model-path", TWO_NODES.model_path, *TWO_NODES.args, "--node-rank", str(rank),
        "--dist-init-addr", dist_init_addr, "--port", str(port), *extra,
    ]  # fmt: skip


async def get(host: Host, port: int, path: str) -> httpx.Response:
    """A GET to `port` on the host's own loopback, through its SSH connection."""
    listener = await host.connection.forward_local_port(port)
    try:
        async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{listener.get_port()}", timeout=10) as client:
            return await client.get(path)
    finally:
        listener.close()


def ranks_logging(log: str, text: str) -> set[str]:
    return {line.split("]", 1)[0].rsplit(" ", 1)[1] for line in log.splitlines() if text in line and " TP" in line}


async def test_two_nodes_meet_load_their_share_and_only_node_0_serves_the_api(hosts: tuple[Host, Host]) -> None:
    first, second = hosts
    port, init = free_port(), f"127.0.0.1:{free_port()}"
    node0 = await first.start(node_args(0, init, port))
    node1 = await second.start(node_args(1, init, port))
    log0 = await node0.wait_for(READY)
    log1 = await node1.wait_for(f"Dummy health check server started in background thread at 127.0.0.1:{port}")

    # TP ranks are numbered across nodes: node 1 of 2 with tp 8 runs TP4..TP7, each on its own host's GPUs
    assert ranks_logging(log0, "Load weight end.") == {"TP0", "TP1", "TP2", "TP3"}
    assert ranks_logging(log1, "Load weight end.") == {"TP4", "TP5", "TP6", "TP7"}
    assert "mem usage=54.85 GB." in log0 and "mem usage=54.85 GB." in log1  # 470 GB / 8 per GPU
    for host in hosts:
        assert all(used > 80_000 for used in await host.used_mib())
    assert READY not in log1 and "Uvicorn running" not in log1

    assert (await get(first, port, "/health")).status_code == 200
    info = (await get(first, port, "/get_server_info")).json()
    assert (info["tp_size"], info["nnodes"], info["node_rank"], info["dist_init_addr"]) == (8, 2, 0, init)
    # node 1 answers only SGLang's dummy health check
    assert (await get(second, port, "/health")).status_code == 200
    assert (await get(second, port, "/get_server_info")).status_code == 404
    assert_catalogued(log0)
    assert_catalogued(log1)


async def test_a_node_that_never_comes_fails_node_0_after_the_dist_timeout(hosts: tuple[Host, Host]) -> None:
    first, _ = hosts
    code, log = await first.run_to_exit(node_args(0, f"127.0.0.1:{free_port()}", free_port(), *SHORT_DIST_TIMEOUT))
    assert code == 137  # the main process SIGKILLs its own tree
    timed_out = "torch.distributed.DistStoreError: Timed out after 61 seconds waiting for clients. 4/8 clients joined."
    assert timed_out in log.splitlines()
    assert "Init torch distributed begin." in log and "Load weight begin." not in log
    assert "Received sigquit from a child process. It usually means the child failed." in log
    assert_catalogued(log)
    assert diagnose(log).failure_class == "nccl"
    assert await first.gpus_free()


async def test_a_node_whose_node_0_never_comes_times_out_connecting(hosts: tuple[Host, Host]) -> None:
    _, second = hosts
    init_port = free_port()
    code, log = await second.run_to_exit(node_args(1, f"127.0.0.1:{init_port}", free_port(), *SHORT_DIST_TIMEOUT))
    assert code == 137
    assert root_error(log) == (
        "torch.distributed.DistNetworkError: The client socket has timed out after 60000ms while trying to connect "
        f"to (127.0.0.1, {init_port})."
    )
    refused = f"[c10d] The client socket has failed to connect to [127.0.0.1]:{init_port} (errno: 111 - "
    assert refused + "Connection refused)." in log
    assert_catalogued(log)
    assert diagnose(log).failure_class == "nccl"


@pytest.mark.parametrize("killed", [1, 0])
async def test_a_node_that_goes_away_after_ready_takes_the_other_down(hosts: tuple[Host, Host], killed: int) -> None:
    port, init = free_port(), f"127.0.0.1:{free_port()}"
    nodes = [await host.start(node_args(rank, init, port)) for rank, host in enumerate(hosts)]
    await nodes[0].wait_for(READY)
    await nodes[1].wait_for("Dummy health check server started")
    survivor = nodes[1 - killed]

    await nodes[killed].kill()
    assert await survivor.exit_code() == 137
    log = await survivor.log()
    assert "Scheduler hit an exception: Traceback (most recent call last):" in log
    lost = [line for line in log.splitlines() if "Connection closed by peer [127.0.0.1]:" in line]
    assert lost and lost[0].startswith("RuntimeError: [/pytorch/third_party/gloo/gloo/transport/tcp/pair.cc:")
    assert_catalogued(log)
    assert diagnose(log).failure_class == "nccl"
    await until(hosts[1 - killed].gpus_free, "the survivor's GPU memory to be freed", 15)


async def test_the_235b_model_on_one_host_runs_out_of_memory_loading_weights(hosts: tuple[Host, Host]) -> None:
    first, _ = hosts
    code, log = await first.run_to_exit(["--model-path", ONE_HOST.model_path, *ONE_HOST.args])
    assert code == 137
    assert root_error(log).startswith("torch.OutOfMemoryError: CUDA out of memory. Tried to allocate")
    assert "Load weight begin." in log and "Load weight end." not in log
    assert diagnose(log).failure_class == "oom"


async def test_without_a_dist_init_address_each_node_waits_at_its_own_and_both_time_out(
    hosts: tuple[Host, Host],
) -> None:
    port = free_port()
    args = ["--model-path", TWO_NODES.model_path, *TWO_NODES.args, "--port", str(port), *SHORT_DIST_TIMEOUT]
    nodes = [await host.start([*args, "--node-rank", str(rank)]) for rank, host in enumerate(hosts)]
    assert [await node.exit_code() for node in nodes] == [137, 137]
    node0, node1 = [await node.log() for node in nodes]
    assert "DistStoreError: Timed out after 61 seconds waiting for clients. 4/8 clients joined." in node0
    assert re.search(r"DistNetworkError: The client socket has timed out after 60000ms .* \(127\.0\.0\.1, \d+\)", node1)


async def test_a_node_that_runs_out_of_memory_while_starting_takes_node_0_down(hosts: tuple[Host, Host]) -> None:
    port, init = free_port(), f"127.0.0.1:{free_port()}"
    node0 = await hosts[0].start(node_args(0, init, port))
    node1 = await hosts[1].start(node_args(1, init, port, "--mem-fraction-static", "0.995"))
    assert await node1.exit_code(STARTUP_S) == 137
    # The diagnosis, not the log's last exception line: node 1's ranks that did not run out of memory
    # may log node 0's lost link after the OOM (their link closes as node 0 goes down).
    found = diagnose(await node1.log())
    assert found.failure_class == "oom" and (found.root_error or "").startswith("torch.OutOfMemoryError: CUDA out")
    assert await node0.exit_code() == 137
    log = await node0.log()
    assert READY not in log and "Connection closed by peer [127.0.0.1]:" in log
    assert diagnose(log).failure_class == "nccl"
