"""The simulated nvidia-smi and pynvml, run as a simulated host runs them.

Expected outputs quoted from real tools come from captures of nvidia-smi 590.48.01 on an
H200 (github.com/utkuozdemir/nvidia_gpu_exporter, internal/captures) and from the messages
that nvidia-smi prints in public bug reports.
"""

from __future__ import annotations

import dataclasses
import json
import os
import queue
import re
import signal
import subprocess
import sys
import textwrap
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pynvml as real_pynvml
import pytest

from app.demo.hostlib import pynvml as sim_pynvml
from app.demo.hostlib import simgpu
from app.demo.inventory import SimHostSpec, gpu_entries
from tests.support.paths import HOSTBIN, HOSTLIB

NVIDIA_SMI = HOSTBIN / "nvidia-smi"
MiB = 1024 * 1024

LOST_GPU_1 = (
    "Unable to determine the device handle for GPU0000:28:00.0: GPU is lost.  Reboot the system to recover this GPU\n"
)

# An idle H200 as `nvidia-smi` 590.48.01 drew it, from its second line on (the first is the date).
REAL_H200_TABLE = """\
+-----------------------------------------------------------------------------------------+
| NVIDIA-SMI 590.48.01              Driver Version: 590.48.01      CUDA Version: 13.1     |
+-----------------------------------------+------------------------+----------------------+
| GPU  Name                 Persistence-M | Bus-Id          Disp.A | Volatile Uncorr. ECC |
| Fan  Temp   Perf          Pwr:Usage/Cap |           Memory-Usage | GPU-Util  Compute M. |
|                                         |                        |               MIG M. |
|=========================================+========================+======================|
|   0  NVIDIA H200                    On  |   00000000:83:00.0 Off |                    0 |
| N/A   28C    P0             77W /  700W |       0MiB / 143771MiB |      0%      Default |
|                                         |                        |             Disabled |
+-----------------------------------------+------------------------+----------------------+

+-----------------------------------------------------------------------------------------+
| Processes:                                                                              |
|  GPU   GI   CI              PID   Type   Process name                        GPU Memory |
|        ID   ID                                                               Usage      |
|=========================================================================================|
|  No running processes found                                                             |
+-----------------------------------------------------------------------------------------+
"""
# A process row of the same capture, under load.
REAL_PROCESS_ROW = "|    0   N/A  N/A           10291      C   /root/tools/memhog                     2566MiB |"


def write_state(path: Path, gpus: list[dict[str, Any]], **versions: str) -> Path:
    simgpu.write_new(str(path), simgpu.new_state(gpus, **versions))
    return path


@pytest.fixture
def state(tmp_path: Path) -> Path:
    """A host with two B200s."""
    return write_state(tmp_path / "gpu-state.json", gpu_entries(SimHostSpec("b200-01", "b200", 2)))


@pytest.fixture
def h200(tmp_path: Path) -> Path:
    """A host whose one GPU reads like the idle H200 of the real capture."""
    gpu = {
        "index": 0,
        "name": "NVIDIA H200",
        "uuid": "GPU-00000000-0000-0000-0000-000000000000",
        "serial": "0000000000000",
        "pci_bus_id": "00000000:83:00.0",
        "memory_total_mib": 143771,
        "reserved_mib": 614,
        "power_limit_w": 700,
        "idle_power_w": 77.71,
        "temperature_c": 28,
    }
    return write_state(tmp_path / "gpu-state.json", [gpu], driver_version="590.48.01", cuda_version="13.1")


@pytest.fixture
def sleeper() -> Iterator[subprocess.Popen[bytes]]:
    """A live process to book GPU memory for."""
    process = subprocess.Popen(["sleep", "60"])
    yield process
    process.kill()
    process.wait()


def host_env(state: Path) -> dict[str, str]:
    """The environment of a simulated host: its python3, hostlib on PYTHONPATH, its state file."""
    return {
        "PATH": os.pathsep.join([str(Path(sys.executable).parent), "/usr/bin", "/bin"]),
        "PYTHONPATH": str(HOSTLIB),
        "PYTHONDONTWRITEBYTECODE": "1",
        "LANG": "C.UTF-8",
        simgpu.STATE_ENV: str(state),
    }


def smi(state: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(NVIDIA_SMI), *args], env=host_env(state), capture_output=True, text=True, timeout=10, check=False
    )


def nvml(state: Path, script: str) -> Any:
    """Runs `script` with the host's `pynvml` and returns what it prints as JSON."""
    result = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(script)],
        env=host_env(state),
        capture_output=True,
        text=True,
        timeout=10,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout)


def mark_lost(state: Path, index: int) -> None:
    data = json.loads(state.read_text())
    data["gpus"][index]["fallen_off_bus"] = True
    state.write_text(json.dumps(data))


def uuid_of(state: Path, index: int) -> str:
    return str(simgpu.read(str(state))["gpus"][index]["uuid"])


class LineReader:
    """Lines of a running process's stdout, each waited for with a timeout."""

    def __init__(self, process: subprocess.Popen[str]):
        self.lines: queue.Queue[str] = queue.Queue()
        self.thread = threading.Thread(target=self._pump, args=(process,), daemon=True)
        self.thread.start()

    def _pump(self, process: subprocess.Popen[str]) -> None:
        assert process.stdout is not None
        for line in process.stdout:
            self.lines.put(line)

    def next(self) -> str:
        return self.lines.get(timeout=5)


def test_query_gpu_nounits_reports_booked_memory(state: Path, sleeper: subprocess.Popen[bytes]) -> None:
    simgpu.book([1], 4096, pid=sleeper.pid, name="python3", path=str(state))

    result = smi(
        state, "--query-gpu=index,memory.total,memory.reserved,memory.used,memory.free", "--format=csv,noheader,nounits"
    )

    assert result.returncode == 0
    assert result.stdout == "0, 183359, 533, 0, 182826\n1, 183359, 533, 4096, 178730\n"


def test_booking_is_a_compute_app_until_its_process_exits(state: Path, sleeper: subprocess.Popen[bytes]) -> None:
    simgpu.book([0, 1], 2048, pid=sleeper.pid, name="python3", path=str(state))
    query = ("--query-compute-apps=pid,process_name,used_memory,gpu_bus_id,gpu_uuid", "--format=csv")

    booked = smi(state, *query)
    sleeper.kill()
    sleeper.wait()
    released = smi(state, *query)

    header = "pid, process_name, used_gpu_memory [MiB], gpu_bus_id, gpu_uuid\n"
    assert booked.stdout == header + "".join(
        f"{sleeper.pid}, python3, 2048 MiB, {bus}, {uuid_of(state, index)}\n"
        for index, bus in enumerate(["00000000:18:00.0", "00000000:28:00.0"])
    )
    assert released.stdout == header
    assert smi(state, "--query-gpu=memory.used", "--format=csv,noheader").stdout == "0 MiB\n0 MiB\n"


def test_compute_capability_is_the_gpu_models_for_nvidia_smi_and_nvml(state: Path) -> None:
    """The simulated SGLang picks kernels and defaults by it, as the real one does."""
    result = smi(state, "--query-gpu=name,compute_cap", "--format=csv,noheader")
    assert result.stdout == "NVIDIA B200, 10.0\nNVIDIA B200, 10.0\n"
    script = """
        import json, pynvml
        pynvml.nvmlInit()
        print(json.dumps(pynvml.nvmlDeviceGetCudaComputeCapability(pynvml.nvmlDeviceGetHandleByIndex(1))))
    """
    assert nvml(state, script) == [10, 0]


def test_no_compute_apps_prints_nothing_without_header(state: Path) -> None:
    result = smi(state, "--query-compute-apps=pid,used_gpu_memory", "--format=csv,noheader")

    assert (result.returncode, result.stdout) == (0, "")


def test_query_gpu_matches_a_real_h200_byte_for_byte(h200: Path) -> None:
    fields = (
        "driver_version,count,name,serial,uuid,pci.bus_id,index,memory.total,memory.reserved,memory.used,"
        "utilization.gpu,utilization.memory,temperature.gpu,power.draw,power.limit,enforced.power.limit"
    )

    result = smi(h200, f"--query-gpu={fields}", "--format=csv")

    assert result.stdout == (
        "driver_version, count, name, serial, uuid, pci.bus_id, index, memory.total [MiB], "
        "memory.reserved [MiB], memory.used [MiB], utilization.gpu [%], utilization.memory [%], "
        "temperature.gpu, power.draw [W], power.limit [W], enforced.power.limit [W]\n"
        "590.48.01, 1, NVIDIA H200, 0000000000000, GPU-00000000-0000-0000-0000-000000000000, "
        "00000000:83:00.0, 0, 143771 MiB, 614 MiB, 0 MiB, 0 %, 0 %, 28, 77.71 W, 700.00 W, 700.00 W\n"
    )


def test_aliases_are_headed_by_their_canonical_names(state: Path) -> None:
    result = smi(state, "--query-gpu=gpu_name,gpu_bus_id,gpu_uuid,gpu_serial", "--format=csv", "-i", "0")

    assert result.stdout.splitlines()[0] == "name, pci.bus_id, uuid, serial"
    assert result.stdout.splitlines()[1].startswith("NVIDIA B200, 00000000:18:00.0, GPU-")


def test_format_options_combine_in_any_order(state: Path) -> None:
    query = "--query-gpu=memory.used,power.draw,utilization.gpu"

    assert smi(state, query, "--format=csv,noheader,nounits").stdout == "0, 140.00, 0\n0, 140.00, 0\n"
    assert smi(state, query, "--format=nounits,csv,noheader").stdout == "0, 140.00, 0\n0, 140.00, 0\n"
    assert smi(state, query, "--format=csv,nounits").stdout == (
        "memory.used [MiB], power.draw [W], utilization.gpu [%]\n0, 140.00, 0\n0, 140.00, 0\n"
    )


def test_busy_gpu_draws_more_power_and_shows_load(state: Path, sleeper: subprocess.Popen[bytes]) -> None:
    simgpu.book([1], 91413, pid=sleeper.pid, name="python3", path=str(state))

    result = smi(state, "--query-gpu=utilization.gpu,power.draw,temperature.gpu", "--format=csv,noheader,nounits")

    idle, busy = (line.split(", ") for line in result.stdout.splitlines())
    assert idle == ["0", "140.00", "31"]
    assert int(busy[0]) == 50
    assert float(busy[1]) > 140
    assert int(busy[2]) > 32


def test_id_selects_gpus_by_index_uuid_and_bus_id(state: Path) -> None:
    query = ("--query-gpu=index", "--format=csv,noheader")

    assert smi(state, *query, "-i", "1").stdout == "1\n"
    assert smi(state, *query, "--id=0,1").stdout == "0\n1\n"
    assert smi(state, *query, "--id", uuid_of(state, 1)).stdout == "1\n"
    assert smi(state, *query, "-i", "00000000:28:00.0").stdout == "1\n"


def test_unknown_id_finds_no_devices(state: Path) -> None:
    result = smi(state, "--query-gpu=index", "--format=csv", "-i", "7")

    assert (result.returncode, result.stdout) == (6, "No devices were found\n")


def test_list_gpus_names_each_gpu_with_its_uuid(state: Path) -> None:
    result = smi(state, "-L")

    assert result.stdout == "".join(f"GPU {i}: NVIDIA B200 (UUID: {uuid_of(state, i)})\n" for i in range(2))


def test_unknown_field_is_refused_like_nvidia_smi(state: Path) -> None:
    gpu = smi(state, "--query-gpu=index,cuda_version", "--format=csv")
    app = smi(state, "--query-compute-apps=pid,memory.used", "--format=csv")

    assert (gpu.returncode, gpu.stdout) == (2, 'Field "cuda_version" is not a valid field to query.\n\n')
    assert (app.returncode, app.stdout) == (2, 'Field "memory.used" is not a valid field to query.\n\n')


@pytest.mark.parametrize("option", ["--bogus", "-lms100", "-x"])
def test_unrecognized_option_is_refused(state: Path, option: str) -> None:
    result = smi(state, option)

    assert result.returncode == 2
    assert result.stdout == f"ERROR: Option {option} is not recognized. Please run 'nvidia-smi -h' for help.\n\n"


@pytest.mark.parametrize(
    "args",
    [
        ["--format=csv"],
        ["--query-gpu=index"],
        ["--query-gpu=index", "--format=noheader"],
        ["-L", "--query-gpu=index", "--format=csv"],
    ],
)
def test_selective_query_needs_exactly_a_csv_format(state: Path, args: list[str]) -> None:
    result = smi(state, *args)

    assert result.returncode == 2
    assert result.stdout == "Invalid combination of input arguments. Please run 'nvidia-smi -h' for help.\n\n"


@pytest.mark.parametrize("args", [[], ["-L"], ["--query-gpu=index", "--format=csv"]])
def test_missing_state_file_means_no_driver(tmp_path: Path, args: list[str]) -> None:
    result = smi(tmp_path / "absent.json", *args)

    assert result.returncode == 9
    assert result.stdout.startswith(
        "NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver. "
        "Make sure that the latest NVIDIA driver is installed and running.\n"
    )


def test_gpu_off_the_bus_is_reported_in_its_place(state: Path) -> None:
    mark_lost(state, 1)

    query = smi(state, "--query-gpu=index,memory.used", "--format=csv,noheader")
    table = smi(state)
    listing = smi(state, "-L")

    assert (query.returncode, query.stdout) == (15, "0, 0 MiB\n" + LOST_GPU_1)
    assert (table.returncode, table.stdout) == (15, LOST_GPU_1)
    assert listing.returncode == 15
    assert listing.stdout.endswith(LOST_GPU_1)
    assert smi(state, "-L", "-i", "0").returncode == 0


def test_summary_table_matches_a_real_h200_byte_for_byte(h200: Path) -> None:
    result = smi(h200)

    date, _, table = result.stdout.partition("\n")
    assert result.returncode == 0
    assert re.fullmatch(r"\w{3} \w{3} [ \d]\d \d\d:\d\d:\d\d \d{4} {7}", date)
    assert table == REAL_H200_TABLE


def test_summary_table_shows_booked_memory_and_its_process(state: Path, sleeper: subprocess.Popen[bytes]) -> None:
    simgpu.book([1], 150000, pid=sleeper.pid, name="python3", path=str(state))

    lines = smi(state).stdout.splitlines()

    assert lines[2] == "| NVIDIA-SMI 580.95.05              Driver Version: 580.95.05      CUDA Version: 13.0     |"
    assert lines[8] == "|   0  NVIDIA B200                    On  |   00000000:18:00.0 Off |                    0 |"
    assert lines[9].startswith("| N/A   31C    P0            140W / 1000W |       0MiB / 183359MiB |      0%")
    assert lines[12] == "|   1  NVIDIA B200                    On  |   00000000:28:00.0 Off |                    0 |"
    assert "|  150000MiB / 183359MiB |" in lines[13]
    process_rows = [line for line in lines if re.match(r"\|\s+1\s+N/A\s+N/A", line)]
    assert len(process_rows) == 1
    assert process_rows[0].split() == ["|", "1", "N/A", "N/A", str(sleeper.pid), "C", "python3", "150000MiB", "|"]
    assert column_anchors(process_rows[0]) == column_anchors(REAL_PROCESS_ROW)
    assert "No running processes found" not in smi(state).stdout
    assert all(len(line) == 91 for line in lines[1:] if line)


def column_anchors(row: str) -> list[int]:
    """Where a process row's right-aligned columns end, and where its process name starts."""
    spans = [match.span() for match in re.finditer(r"\S+", row)]
    return [end for _, end in spans[:6]] + [spans[6][0], spans[7][1], spans[8][1]]


def test_summary_table_shortens_long_names_as_nvidia_smi_does(tmp_path: Path, sleeper: subprocess.Popen[bytes]) -> None:
    state = write_state(tmp_path / "gpu-state.json", gpu_entries(SimHostSpec("rtxpro-01", "rtx-pro-6000", 1)))
    simgpu.book(
        [0], 1000, pid=sleeper.pid, name="/opt/venvs/sglang/bin/python3 -m sglang.launch_server", path=str(state)
    )

    lines = smi(state).stdout.splitlines()

    assert lines[8] == "|   0  NVIDIA RTX PRO 6000 Blac...    On  |   00000000:18:00.0 Off |                    0 |"
    assert lines[-2].endswith("   ...thon3 -m sglang.launch_server       1000MiB |")


def test_loop_ms_repeats_with_fresh_readings_until_sigterm(state: Path, sleeper: subprocess.Popen[bytes]) -> None:
    with subprocess.Popen(
        [str(NVIDIA_SMI), "-lms", "50", "--query-gpu=index,memory.used", "--format=csv,nounits"],
        env=host_env(state),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    ) as process:
        reader = LineReader(process)
        try:
            lines = [reader.next() for _ in range(5)]
            simgpu.book([0], 777, pid=sleeper.pid, name="python3", path=str(state))
            while (line := reader.next()) != "0, 777\n":
                lines.append(line)
            process.send_signal(signal.SIGTERM)
            returncode = process.wait(timeout=5)
        finally:
            process.kill()
            process.wait()
            reader.thread.join(timeout=5)
        assert process.stderr is not None
        errors = process.stderr.read()

    assert lines[:5] == ["index, memory.used [MiB]\n", "0, 0\n", "1, 0\n", "0, 0\n", "1, 0\n"]
    assert lines.count("index, memory.used [MiB]\n") == 1
    assert (returncode, errors) == (0, "")


def test_loop_stops_quietly_when_its_reader_goes(state: Path) -> None:
    with subprocess.Popen(
        [str(NVIDIA_SMI), "--loop-ms=20", "--query-gpu=index", "--format=csv,noheader"],
        env=host_env(state),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    ) as process:
        assert process.stdout is not None and process.stderr is not None
        first = process.stdout.readline()
        process.stdout.close()
        returncode = process.wait(timeout=5)
        errors = process.stderr.read()

    assert (first, returncode, errors) == ("0\n", 0, "")


def test_nvml_memory_v1_counts_reserved_as_used_and_v2_apart(state: Path, sleeper: subprocess.Popen[bytes]) -> None:
    simgpu.book([0], 1000, pid=sleeper.pid, name="python3", path=str(state))

    memory = nvml(
        state,
        """
        import json, pynvml
        pynvml.nvmlInit()
        handle = pynvml.nvmlDeviceGetHandleByIndex(0)
        v1 = pynvml.nvmlDeviceGetMemoryInfo(handle)
        v2 = pynvml.nvmlDeviceGetMemoryInfo(handle, version=pynvml.nvmlMemory_v2)
        print(json.dumps({"v1": [v1.total, v1.free, v1.used],
                          "v2": [v2.version, v2.total, v2.reserved, v2.free, v2.used]}))
    """,
    )

    total, reserved, booked = 183359 * MiB, 533 * MiB, 1000 * MiB
    assert memory["v1"] == [total, total - reserved - booked, reserved + booked]
    assert memory["v2"] == [real_pynvml.nvmlMemory_v2, total, reserved, total - reserved - booked, booked]


def test_nvml_reads_bookings_live_through_one_handle(state: Path) -> None:
    seen = nvml(
        state,
        """
        import json, os, pynvml, simgpu, time
        pynvml.nvmlInit()
        handle = pynvml.nvmlDeviceGetHandleByIndex(1)
        def look():
            processes = pynvml.nvmlDeviceGetComputeRunningProcesses_v3(handle)
            used = pynvml.nvmlDeviceGetMemoryInfo(handle, pynvml.nvmlMemory_v2).used
            return [used, [[p.pid, p.usedGpuMemory, p.gpuInstanceId, p.computeInstanceId] for p in processes]]
        before = look()
        simgpu.book([1], 512, pid=os.getpid(), name="python3")
        time.sleep(pynvml.CACHE_SECONDS + 0.05)  # past the simulated driver's read cache
        print(json.dumps({"before": before, "after": look(), "pid": os.getpid(),
                          "graphics": pynvml.nvmlDeviceGetGraphicsRunningProcesses(handle)}))
    """,
    )

    assert seen["before"] == [0, []]
    assert seen["after"] == [512 * MiB, [[seen["pid"], 512 * MiB, 0xFFFFFFFF, 0xFFFFFFFF]]]
    assert seen["graphics"] == []


def test_nvml_device_readings(state: Path, sleeper: subprocess.Popen[bytes]) -> None:
    simgpu.book([1], 91413, pid=sleeper.pid, name="python3", path=str(state))

    readings = nvml(
        state,
        """
        import json, pynvml as n
        n.nvmlInit()
        def read(i):
            h = n.nvmlDeviceGetHandleByIndex(i)
            u = n.nvmlDeviceGetUtilizationRates(h)
            return [n.nvmlDeviceGetIndex(h), n.nvmlDeviceGetName(h), n.nvmlDeviceGetUUID(h),
                    n.nvmlDeviceGetSerial(h), n.nvmlDeviceGetPciInfo(h).busId, u.gpu, u.memory,
                    n.nvmlDeviceGetTemperature(h, n.NVML_TEMPERATURE_GPU), n.nvmlDeviceGetPowerUsage(h),
                    n.nvmlDeviceGetEnforcedPowerLimit(h), n.nvmlDeviceGetPowerManagementLimit(h)]
        by_uuid = n.nvmlDeviceGetHandleByUUID(n.nvmlDeviceGetUUID(n.nvmlDeviceGetHandleByIndex(1)))
        print(json.dumps({"driver": n.nvmlSystemGetDriverVersion(), "cuda": n.nvmlSystemGetCudaDriverVersion(),
                          "count": n.nvmlDeviceGetCount(), "gpus": [read(0), read(1)],
                          "by_uuid": n.nvmlDeviceGetIndex(by_uuid)}))
    """,
    )

    entries = gpu_entries(SimHostSpec("b200-01", "b200", 2))
    assert (readings["driver"], readings["cuda"], readings["count"], readings["by_uuid"]) == ("580.95.05", 13000, 2, 1)
    assert readings["gpus"][0] == [
        0,
        "NVIDIA B200",
        entries[0]["uuid"],
        entries[0]["serial"],
        "00000000:18:00.0",
        0,
        0,
        31,
        140000,
        1000000,
        1000000,
    ]
    busy = readings["gpus"][1]
    assert busy[:5] == [1, "NVIDIA B200", entries[1]["uuid"], entries[1]["serial"], "00000000:28:00.0"]
    assert busy[5] == 50 and busy[6] > 0
    assert busy[7] > 32 and 140000 < busy[8] <= 1000000


def test_nvml_errors_carry_real_codes_and_messages(state: Path) -> None:
    errors = nvml(
        state,
        """
        import json, pynvml as n
        def attempt(call):
            try:
                call()
            except n.NVMLError as error:
                return [type(error).__name__, error.value, str(error)]
        found = []
        found.append(attempt(n.nvmlDeviceGetCount))
        found.append(attempt(n.nvmlShutdown))
        n.nvmlInit()
        h = n.nvmlDeviceGetHandleByIndex(0)
        found.append(attempt(lambda: n.nvmlDeviceGetHandleByIndex(2)))
        found.append(attempt(lambda: n.nvmlDeviceGetHandleByUUID("GPU-nope")))
        found.append(attempt(lambda: n.nvmlDeviceGetMemoryInfo(h, version=1)))
        found.append(attempt(lambda: n.nvmlDeviceGetTemperature(h, 7)))
        n.nvmlShutdown()
        found.append(attempt(lambda: n.nvmlDeviceGetName(h)))
        print(json.dumps(found))
    """,
    )

    assert errors == [
        ["NVMLError_Uninitialized", 1, "Uninitialized"],
        ["NVMLError_Uninitialized", 1, "Uninitialized"],
        ["NVMLError_InvalidArgument", 2, "Invalid Argument"],
        ["NVMLError_NotFound", 6, "Not Found"],
        ["NVMLError_ArgumentVersionMismatch", 25, "Argument version mismatch"],
        ["NVMLError_InvalidArgument", 2, "Invalid Argument"],
        ["NVMLError_Uninitialized", 1, "Uninitialized"],
    ]


def test_nvml_reports_a_gpu_off_the_bus_as_lost(state: Path) -> None:
    lost = nvml(
        state,
        f"""
        import json, time, pynvml as n
        n.nvmlInit()
        held = n.nvmlDeviceGetHandleByIndex(1)
        state = json.load(open({str(state)!r}))
        state["gpus"][1]["fallen_off_bus"] = True
        json.dump(state, open({str(state)!r}, "w"))
        time.sleep(n.CACHE_SECONDS + 0.05)
        found = []
        for call in (lambda: n.nvmlDeviceGetHandleByIndex(1), lambda: n.nvmlDeviceGetName(held)):
            try:
                call()
            except n.NVMLError_GpuIsLost as error:
                found.append([error.value, str(error), isinstance(error, n.NVMLError)])
        print(json.dumps({{"lost": found, "count": n.nvmlDeviceGetCount(),
                          "other": n.nvmlDeviceGetName(n.nvmlDeviceGetHandleByIndex(0))}}))
    """,
    )

    assert lost == {"lost": [[15, "GPU is lost", True]] * 2, "count": 2, "other": "NVIDIA B200"}


def test_nvml_init_without_driver_fails(tmp_path: Path) -> None:
    failure = nvml(
        tmp_path / "absent.json",
        """
        import json, pynvml
        try:
            pynvml.nvmlInit()
        except pynvml.NVMLError_DriverNotLoaded as error:
            print(json.dumps([error.value, str(error)]))
    """,
    )

    assert failure == [real_pynvml.NVML_ERROR_DRIVER_NOT_LOADED, "Driver Not Loaded"]


def test_nvml_names_values_and_fields_match_nvidia_ml_py() -> None:
    assert Path(real_pynvml.__file__).parent != HOSTLIB
    constants = [name for name in dir(sim_pynvml) if name.startswith(("NVML_ERROR_", "NVML_TEMPERATURE_"))]
    constants += ["NVML_SUCCESS", "nvmlMemory_v2"]
    assert {name: getattr(sim_pynvml, name) for name in constants} == {
        name: getattr(real_pynvml, name) for name in constants
    }
    for struct in ("c_nvmlMemory_t", "c_nvmlMemory_v2_t", "c_nvmlUtilization_t", "nvmlPciInfo_t"):
        sim_fields = [field.name for field in dataclasses.fields(getattr(sim_pynvml, struct))]
        assert sim_fields == [name for name, _ in getattr(real_pynvml, struct)._fields_], struct
    for name in [name for name in dir(sim_pynvml) if name.startswith("NVMLError_")]:
        assert getattr(real_pynvml, name)().value == getattr(sim_pynvml, name)().value, name
        assert isinstance(sim_pynvml.NVMLError(getattr(sim_pynvml, name)().value), getattr(sim_pynvml, name))
    for code in [*range(1, 19), 20, 999]:
        assert str(sim_pynvml.NVMLError(code)) == str(real_pynvml.NVMLError(code))
