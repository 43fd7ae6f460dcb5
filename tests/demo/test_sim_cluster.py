"""The simulated hosts seen over SSH, as the dashboard sees them."""

from __future__ import annotations

import asyncio
import json
import socket
from collections.abc import Callable

from app.demo.cluster import SimCluster
from app.demo.hostlib import simgpu
from app.gpu.nvidia_smi import parse_query_gpu, read_gpu_memory
from app.launch import remote
from app.ssh import HostConnection, HostSpec
from tests.support.strict import require

Connect = Callable[..., HostConnection]

PYNVML_REPORT = """
import json, pynvml
pynvml.nvmlInit()
gpus = []
for i in range(pynvml.nvmlDeviceGetCount()):
    h = pynvml.nvmlDeviceGetHandleByIndex(i)
    m = pynvml.nvmlDeviceGetMemoryInfo(h, version=pynvml.nvmlMemory_v2)
    gpus.append({"name": pynvml.nvmlDeviceGetName(h), "total": m.total, "used": m.used, "reserved": m.reserved,
                 "pids": [p.pid for p in pynvml.nvmlDeviceGetComputeRunningProcesses(h)]})
print(json.dumps(gpus))
"""

BOOK_AND_HOLD = """
import os, time, simgpu
simgpu.book([1, 3], 30000, pid=os.getpid(), name="python3")
print("booked", flush=True)
time.sleep(60)
"""


async def test_nvidia_smi_and_pynvml_over_ssh_agree_with_the_state_file(
    connect: Connect, sim_specs: list[HostSpec], sim_cluster: SimCluster
) -> None:
    host = connect(sim_specs[1])
    await host.wait_online(10)
    state = simgpu.read(str(sim_cluster.hosts["rtxpro-01"].gpu_state_path))
    gpus = await read_gpu_memory(host)
    assert [(g.index, g.name, g.memory_total_mib) for g in gpus] == [
        (g["index"], g["name"], g["memory_total_mib"]) for g in state["gpus"]
    ]
    nvml = json.loads((await host.run(["python3", "-c", PYNVML_REPORT])).stdout)
    assert [g["total"] // 2**20 for g in nvml] == [g.memory_total_mib for g in gpus]
    assert [g["used"] // 2**20 for g in nvml] == [g.memory_used_mib for g in gpus]


async def test_a_remote_process_books_memory_until_it_exits(connect: Connect, sim_specs: list[HostSpec]) -> None:
    host = connect(sim_specs[1])
    await host.wait_online(10)
    async with host.stream(["python3", "-c", BOOK_AND_HOLD]) as process:
        assert await process.stdout.readline() == b"booked\n"
        busy = {g.index: g for g in await read_gpu_memory(host)}
        assert busy[1].memory_used_mib == busy[3].memory_used_mib == 30000
        assert busy[0].memory_used_mib == 0
        apps = await host.run(["nvidia-smi", "--query-compute-apps=pid,used_memory", "--format=csv,noheader,nounits"])
        assert len(apps.stdout.splitlines()) == 2
    for _ in range(50):
        idle = await read_gpu_memory(host)
        if all(g.memory_used_mib == 0 for g in idle):
            break
        await asyncio.sleep(0.1)
    else:
        raise AssertionError("the stopped process's memory was not released")


def test_query_gpu_parser_reads_real_formats() -> None:
    text = (
        "0, NVIDIA B200, 183359, 0, 182826\n"
        "1, NVIDIA RTX PRO 6000 Blackwell Server Edition, 97887, [N/A], [N/A]\n"
        "2, Some, GPU, With, Commas, 81559, 4, 81020\n"
    )
    gpus = parse_query_gpu(text)
    assert gpus[0].memory_free_mib == 182826
    assert gpus[1].name == "NVIDIA RTX PRO 6000 Blackwell Server Edition"
    assert gpus[1].memory_used_mib is None
    assert gpus[2].name == "Some, GPU, With, Commas" and gpus[2].memory_total_mib == 81559


async def test_hosts_hold_models_with_real_configs_and_sizes(connect: Connect, sim_specs: list[HostSpec]) -> None:
    host = connect(sim_specs[1])
    await host.wait_online(10)
    snapshot = ".cache/huggingface/hub/models--Qwen--Qwen3.6-27B/snapshots"
    revision = (await host.run(["cat", ".cache/huggingface/hub/models--Qwen--Qwen3.6-27B/refs/main"])).stdout
    folder = f"{snapshot}/{revision.decode().strip()}"
    config = json.loads((await host.run(["cat", f"{folder}/config.json"])).stdout)
    index = json.loads((await host.run(["cat", f"{folder}/model.safetensors.index.json"])).stdout)
    assert config["architectures"] == ["Qwen3_5ForConditionalGeneration"]
    assert config["text_config"]["layer_types"].count("full_attention") == 16
    assert index["metadata"]["total_size"] == 55_562_855_904
    assert len(set(index["weight_map"].values())) == 15 and len(index["weight_map"]) == 1199


# Listens on the port given on the host's loopback until it is stopped.
LISTEN = """
import socket, sys, time
server = socket.socket()
server.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
server.bind(("127.0.0.1", int(sys.argv[1])))
server.listen()
print("listening", flush=True)
time.sleep(60)
"""


async def test_each_host_has_a_loopback_of_its_own_as_separate_machines_do(
    connect: Connect, sim_specs: list[HostSpec], sim_cluster: SimCluster
) -> None:
    """A server on one host's port leaves that port free on the other, and this machine's too."""
    isolated = all(host.network is not None for host in sim_cluster.hosts.values())
    require(isolated, "this machine cannot make network namespaces (the simulated hosts share its loopback)")
    first, second = connect(sim_specs[0]), connect(sim_specs[1])
    await first.wait_online(10)
    await second.wait_online(10)
    port = 30000
    async with first.stream(["python3", "-c", LISTEN, str(port)]) as server:
        assert await server.stdout.readline() == b"listening\n"
        taken = await first.run(["python3", "-c", remote.PORT_FREE, str(port)], check=False)
        free = await second.run(["python3", "-c", remote.PORT_FREE, str(port)], check=False)
        assert (taken.exit_status, free.exit_status) == (1, 0), (taken.stdout, free.stdout)
        assert b"Address already in use" in taken.stdout
        with socket.socket() as here:  # nor is it taken on the machine the hosts run on
            here.bind(("127.0.0.1", port))
        listener = await first.forward_local_port(port)  # and a forward to it reaches that host's server
        try:
            _, writer = await asyncio.open_connection("127.0.0.1", listener.get_port())
            writer.close()
        finally:
            listener.close()
        with_second = await second.forward_local_port(port)
        try:
            reader, writer = await asyncio.open_connection("127.0.0.1", with_second.get_port())
            assert await reader.read() == b""  # nothing listens there on the second host
            writer.close()
        finally:
            with_second.close()
