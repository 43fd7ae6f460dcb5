"""NVML for a simulated GPU host, under the names nvidia-ml-py gives it.

Monitoring code on a simulated host imports this module as `pynvml`. Every query reads the
host's GPU state file afresh, so bookings made or released by other processes show at once.
Names, constants, struct fields, units (bytes, milliwatts) and error codes follow
nvidia-ml-py; the readings of a busy GPU are derived from its bookings. Standard library only.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any

if __package__:
    from . import simgpu
else:  # on a simulated host, where hostlib itself is on PYTHONPATH
    import simgpu  # type: ignore[no-redef]

MiB = 1024 * 1024

NVML_SUCCESS = 0
NVML_ERROR_UNINITIALIZED = 1
NVML_ERROR_INVALID_ARGUMENT = 2
NVML_ERROR_NOT_SUPPORTED = 3
NVML_ERROR_NO_PERMISSION = 4
NVML_ERROR_ALREADY_INITIALIZED = 5
NVML_ERROR_NOT_FOUND = 6
NVML_ERROR_INSUFFICIENT_SIZE = 7
NVML_ERROR_INSUFFICIENT_POWER = 8
NVML_ERROR_DRIVER_NOT_LOADED = 9
NVML_ERROR_TIMEOUT = 10
NVML_ERROR_IRQ_ISSUE = 11
NVML_ERROR_LIBRARY_NOT_FOUND = 12
NVML_ERROR_FUNCTION_NOT_FOUND = 13
NVML_ERROR_CORRUPTED_INFOROM = 14
NVML_ERROR_GPU_IS_LOST = 15
NVML_ERROR_RESET_REQUIRED = 16
NVML_ERROR_OPERATING_SYSTEM = 17
NVML_ERROR_LIB_RM_VERSION_MISMATCH = 18
NVML_ERROR_IN_USE = 19
NVML_ERROR_MEMORY = 20
NVML_ERROR_NO_DATA = 21
NVML_ERROR_VGPU_ECC_NOT_SUPPORTED = 22
NVML_ERROR_INSUFFICIENT_RESOURCES = 23
NVML_ERROR_FREQ_NOT_SUPPORTED = 24
NVML_ERROR_ARGUMENT_VERSION_MISMATCH = 25
NVML_ERROR_DEPRECATED = 26
NVML_ERROR_NOT_READY = 27
NVML_ERROR_GPU_NOT_FOUND = 28
NVML_ERROR_INVALID_STATE = 29
NVML_ERROR_RESET_TYPE_NOT_SUPPORTED = 30
NVML_ERROR_UNKNOWN = 999

NVML_TEMPERATURE_GPU = 0
NVML_TEMPERATURE_GPU_MAX = 1
NVML_PSTATE_0 = 0
NVML_FEATURE_DISABLED = 0
NVML_FEATURE_ENABLED = 1

nvmlMemory_v2 = 0x02000028

# What NVML puts in a process's gpuInstanceId and computeInstanceId when MIG is off.
_NO_MIG_INSTANCE = 0xFFFFFFFF

_MESSAGES = {
    NVML_ERROR_UNINITIALIZED: "Uninitialized",
    NVML_ERROR_INVALID_ARGUMENT: "Invalid Argument",
    NVML_ERROR_NOT_SUPPORTED: "Not Supported",
    NVML_ERROR_NO_PERMISSION: "Insufficient Permissions",
    NVML_ERROR_ALREADY_INITIALIZED: "Already Initialized",
    NVML_ERROR_NOT_FOUND: "Not Found",
    NVML_ERROR_INSUFFICIENT_SIZE: "Insufficient Size",
    NVML_ERROR_INSUFFICIENT_POWER: "Insufficient External Power",
    NVML_ERROR_DRIVER_NOT_LOADED: "Driver Not Loaded",
    NVML_ERROR_TIMEOUT: "Timeout",
    NVML_ERROR_IRQ_ISSUE: "Interrupt Request Issue",
    NVML_ERROR_LIBRARY_NOT_FOUND: "NVML Shared Library Not Found",
    NVML_ERROR_FUNCTION_NOT_FOUND: "Function Not Found",
    NVML_ERROR_CORRUPTED_INFOROM: "Corrupted infoROM",
    NVML_ERROR_GPU_IS_LOST: "GPU is lost",
    NVML_ERROR_RESET_REQUIRED: "GPU requires restart",
    NVML_ERROR_OPERATING_SYSTEM: "The operating system has blocked the request.",
    NVML_ERROR_LIB_RM_VERSION_MISMATCH: "RM has detected an NVML/RM version mismatch.",
    NVML_ERROR_MEMORY: "Insufficient Memory",
    NVML_ERROR_ARGUMENT_VERSION_MISMATCH: "Argument version mismatch",
    NVML_ERROR_UNKNOWN: "Unknown Error",
}


class NVMLError(Exception):
    """An NVML failure; `NVMLError(code)` builds the matching subclass, e.g. NVMLError_GpuIsLost."""

    _by_code: dict[int, type[NVMLError]] = {}
    value: int

    def __new__(cls, value: int, *args: Any) -> NVMLError:
        if cls is NVMLError:
            cls = NVMLError._by_code.get(value, NVMLError)
        error = Exception.__new__(cls)
        error.value = value
        return error

    def __str__(self) -> str:
        return _MESSAGES.get(self.value, f"NVML Error with code {self.value}")


def _define_error_classes() -> None:
    """NVMLError_<Name> for every NVML_ERROR_<NAME>, raisable with or without the code."""
    for name, code in list(globals().items()):
        if not name.startswith("NVML_ERROR_"):
            continue
        words = name.removeprefix("NVML_ERROR_").split("_")
        class_name = "NVMLError_" + "".join(word.capitalize() for word in words)

        def new(cls: type[NVMLError], *args: Any, _code: int = code) -> NVMLError:
            return NVMLError.__new__(cls, _code)

        error_class = type(class_name, (NVMLError,), {"__new__": new, "__module__": __name__})
        globals()[class_name] = error_class
        NVMLError._by_code[code] = error_class


_define_error_classes()


def nvmlErrorString(result: int) -> str:
    return str(NVMLError(result))


@dataclass(frozen=True)
class c_nvmlDevice_t:
    """An opaque device handle; it names the GPU by index and reads its state on each use."""

    index: int


@dataclass
class c_nvmlMemory_t:
    total: int
    free: int
    used: int


@dataclass
class c_nvmlMemory_v2_t:
    version: int
    total: int
    reserved: int
    free: int
    used: int


@dataclass
class c_nvmlUtilization_t:
    gpu: int
    memory: int


@dataclass
class nvmlPciInfo_t:
    busIdLegacy: str
    domain: int
    bus: int
    device: int
    pciDeviceId: int
    pciSubSystemId: int
    busId: str


class nvmlFriendlyObject:
    """A plain record, as nvidia-ml-py returns running processes."""

    def __init__(self, dictionary: dict[str, Any]):
        self.__dict__.update(dictionary)

    def __str__(self) -> str:
        return str(self.__dict__)


_init_count = 0


def nvmlInit() -> None:
    """Initialises NVML; as in NVML, each call needs its own nvmlShutdown."""
    global _init_count
    _read_state()
    _init_count += 1


def nvmlInitWithFlags(flags: int) -> None:
    nvmlInit()


def nvmlShutdown() -> None:
    global _init_count
    _require_init()
    _init_count -= 1


def nvmlSystemGetDriverVersion() -> str:
    return str(_state()["driver_version"])


def nvmlSystemGetCudaDriverVersion() -> int:
    """The CUDA version as NVML encodes it: 13.0 is 13000."""
    major, _, minor = str(_state()["cuda_version"]).partition(".")
    return int(major) * 1000 + int(minor or 0) * 10


nvmlSystemGetCudaDriverVersion_v2 = nvmlSystemGetCudaDriverVersion


def nvmlSystemGetNVMLVersion() -> str:
    state = _state()
    return f"{str(state['cuda_version']).partition('.')[0]}.{state['driver_version']}"


def nvmlSystemGetProcessName(pid: int) -> str:
    for process in _state()["processes"]:
        if process["pid"] == pid:
            return str(process["name"])
    raise NVMLError(NVML_ERROR_NOT_FOUND)


def nvmlDeviceGetCount() -> int:
    return len(_state()["gpus"])


def nvmlDeviceGetHandleByIndex(index: int) -> c_nvmlDevice_t:
    state = _state()
    if isinstance(index, bool) or not isinstance(index, int):
        raise NVMLError(NVML_ERROR_INVALID_ARGUMENT)
    return _handle(next((g for g in state["gpus"] if g["index"] == index), None), NVML_ERROR_INVALID_ARGUMENT)


def nvmlDeviceGetHandleByUUID(uuid: str | bytes) -> c_nvmlDevice_t:
    wanted = _text(uuid)
    return _handle(next((g for g in _state()["gpus"] if g["uuid"] == wanted), None), NVML_ERROR_NOT_FOUND)


def nvmlDeviceGetHandleByPciBusId(pciBusId: str | bytes) -> c_nvmlDevice_t:
    wanted = _bus_key(_text(pciBusId))
    return _handle(
        next((g for g in _state()["gpus"] if _bus_key(g["pci_bus_id"]) == wanted), None), NVML_ERROR_NOT_FOUND
    )


def nvmlDeviceGetIndex(handle: c_nvmlDevice_t) -> int:
    return int(_gpu(handle)[1]["index"])


def nvmlDeviceGetName(handle: c_nvmlDevice_t) -> str:
    return str(_gpu(handle)[1]["name"])


def nvmlDeviceGetUUID(handle: c_nvmlDevice_t) -> str:
    return str(_gpu(handle)[1]["uuid"])


def nvmlDeviceGetSerial(handle: c_nvmlDevice_t) -> str:
    return str(_gpu(handle)[1]["serial"])


def nvmlDeviceGetCudaComputeCapability(handle: c_nvmlDevice_t) -> tuple[int, int]:
    major, _, minor = str(_gpu(handle)[1]["compute_cap"]).partition(".")
    return int(major), int(minor)


def nvmlDeviceGetPciInfo(handle: c_nvmlDevice_t) -> nvmlPciInfo_t:
    bus_id = _gpu(handle)[1]["pci_bus_id"]
    domain, bus, device_function = bus_id.split(":")
    return nvmlPciInfo_t(
        busIdLegacy=bus_id[-12:],
        domain=int(domain, 16),
        bus=int(bus, 16),
        device=int(device_function.partition(".")[0], 16),
        pciDeviceId=0,
        pciSubSystemId=0,
        busId=bus_id,
    )


nvmlDeviceGetPciInfo_v3 = nvmlDeviceGetPciInfo


def nvmlDeviceGetMemoryInfo(handle: c_nvmlDevice_t, version: int | None = None) -> c_nvmlMemory_t | c_nvmlMemory_v2_t:
    """In bytes. The original struct counts driver-reserved memory as used; v2 reports it apart."""
    state, gpu = _gpu(handle)
    total = gpu["memory_total_mib"] * MiB
    reserved = gpu.get("reserved_mib", simgpu.RESERVED_MIB) * MiB
    booked = simgpu.used_mib(state, gpu["index"]) * MiB
    if not version:
        return c_nvmlMemory_t(total=total, free=total - reserved - booked, used=reserved + booked)
    if version != nvmlMemory_v2:
        raise NVMLError(NVML_ERROR_ARGUMENT_VERSION_MISMATCH)
    return c_nvmlMemory_v2_t(
        version=version, total=total, reserved=reserved, free=total - reserved - booked, used=booked
    )


def nvmlDeviceGetUtilizationRates(handle: c_nvmlDevice_t) -> c_nvmlUtilization_t:
    busy = _busy_percent(*_gpu(handle))
    return c_nvmlUtilization_t(gpu=busy, memory=max(1, busy // 4) if busy else 0)


def nvmlDeviceGetTemperature(handle: c_nvmlDevice_t, sensor: int) -> int:
    state, gpu = _gpu(handle)
    if sensor != NVML_TEMPERATURE_GPU:
        raise NVMLError(NVML_ERROR_INVALID_ARGUMENT)
    return int(gpu["temperature_c"]) + _busy_percent(state, gpu) // 5


def nvmlDeviceGetPowerUsage(handle: c_nvmlDevice_t) -> int:
    """Milliwatts: the idle draw, plus three quarters of the headroom to the limit at full load."""
    state, gpu = _gpu(handle)
    headroom_mw = (gpu["power_limit_w"] - gpu["idle_power_w"]) * 1000
    return int(gpu["idle_power_w"] * 1000 + headroom_mw * 3 * _busy_percent(state, gpu) // 400)


def nvmlDeviceGetPowerManagementLimit(handle: c_nvmlDevice_t) -> int:
    return int(_gpu(handle)[1]["power_limit_w"]) * 1000


nvmlDeviceGetEnforcedPowerLimit = nvmlDeviceGetPowerManagementLimit
nvmlDeviceGetPowerManagementDefaultLimit = nvmlDeviceGetPowerManagementLimit


def nvmlDeviceGetPerformanceState(handle: c_nvmlDevice_t) -> int:
    _gpu(handle)
    return NVML_PSTATE_0


def nvmlDeviceGetPersistenceMode(handle: c_nvmlDevice_t) -> int:
    _gpu(handle)
    return NVML_FEATURE_ENABLED


def nvmlDeviceGetComputeRunningProcesses(handle: c_nvmlDevice_t) -> list[nvmlFriendlyObject]:
    state, gpu = _gpu(handle)
    return [
        nvmlFriendlyObject(
            {
                "pid": process["pid"],
                "usedGpuMemory": process["used_mib"] * MiB,
                "gpuInstanceId": _NO_MIG_INSTANCE,
                "computeInstanceId": _NO_MIG_INSTANCE,
            }
        )
        for process in simgpu.processes_on(state, gpu["index"])
    ]


nvmlDeviceGetComputeRunningProcesses_v2 = nvmlDeviceGetComputeRunningProcesses
nvmlDeviceGetComputeRunningProcesses_v3 = nvmlDeviceGetComputeRunningProcesses


def nvmlDeviceGetGraphicsRunningProcesses(handle: c_nvmlDevice_t) -> list[nvmlFriendlyObject]:
    """Always empty: the simulated hosts are headless."""
    _gpu(handle)
    return []


nvmlDeviceGetGraphicsRunningProcesses_v2 = nvmlDeviceGetGraphicsRunningProcesses
nvmlDeviceGetGraphicsRunningProcesses_v3 = nvmlDeviceGetGraphicsRunningProcesses


def _require_init() -> None:
    if _init_count == 0:
        raise NVMLError(NVML_ERROR_UNINITIALIZED)


def _read_state() -> dict[str, Any]:
    """The state file plays the driver: no file, no driver; not a simulated host, no library."""
    try:
        return simgpu.read()
    except RuntimeError:
        raise NVMLError(NVML_ERROR_LIBRARY_NOT_FOUND) from None
    except (OSError, ValueError):
        raise NVMLError(NVML_ERROR_DRIVER_NOT_LOADED) from None


_cache: tuple[float, dict[str, Any]] | None = None
# A monitor reads a dozen values per GPU in a burst; reading the state file once per burst keeps
# a host's simulated driver cheap, as a real one is, while changes still show within this time.
CACHE_SECONDS = 0.1


def _state() -> dict[str, Any]:
    global _cache
    _require_init()
    now = time.monotonic()
    if _cache is None or now - _cache[0] > CACHE_SECONDS:
        _cache = (now, _read_state())
    return _cache[1]


def _handle(gpu: dict[str, Any] | None, missing: int) -> c_nvmlDevice_t:
    if gpu is None:
        raise NVMLError(missing)
    if gpu.get("fallen_off_bus"):
        raise NVMLError(NVML_ERROR_GPU_IS_LOST)
    return c_nvmlDevice_t(gpu["index"])


def _gpu(handle: c_nvmlDevice_t) -> tuple[dict[str, Any], dict[str, Any]]:
    """The current state and the handle's GPU in it; a GPU that has fallen off the bus is lost."""
    state = _state()
    if not isinstance(handle, c_nvmlDevice_t):
        raise NVMLError(NVML_ERROR_INVALID_ARGUMENT)
    gpu = next((g for g in state["gpus"] if g["index"] == handle.index), None)
    if gpu is None:
        raise NVMLError(NVML_ERROR_INVALID_ARGUMENT)
    if gpu.get("fallen_off_bus"):
        raise NVMLError(NVML_ERROR_GPU_IS_LOST)
    return state, gpu


def _busy_percent(state: dict[str, Any], gpu: dict[str, Any]) -> int:
    """GPU utilisation: 0 with no process on the GPU, else its booked share of usable memory."""
    if not simgpu.processes_on(state, gpu["index"]):
        return 0
    usable: int = gpu["memory_total_mib"] - gpu.get("reserved_mib", simgpu.RESERVED_MIB)
    return min(100, max(1, round(100 * simgpu.used_mib(state, gpu["index"]) / usable)))


def _text(value: str | bytes) -> str:
    return value.decode() if isinstance(value, bytes) else value


def _bus_key(bus_id: str) -> str:
    """A PCI bus id without its domain's leading zeros, for matching the short and long forms."""
    domain, _, rest = bus_id.upper().partition(":")
    return f"{int(domain, 16):04X}:{rest}" if rest else bus_id.upper()
