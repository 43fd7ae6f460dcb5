"""Resolves SGLang server arguments case by case and prints what came of each, as JSON.

One script for both sides of the oracle comparison, so both are asked the same way:

- `python resolve.py --real`, run by the oracle venv's interpreter with one real SGLang release on
  PYTHONPATH. Real SGLang needs a GPU to resolve its arguments; on a CPU `--device cuda` is
  appended, the hub stays offline, and only these are patched, each where argument resolution
  reads it (kernel modules imported meanwhile keep the CPU's answers, or they would import CUDA
  kernels):
  - the GPU memory capacity query: the case's GPU size;
  - "is this CUDA?" (`is_cuda()`): yes. 0.5.10 reads it in `server_args` (CUDA-only defaults,
    the mamba extra buffer); 0.5.23 through `get_platform().is_cuda` (the mamba extra buffer,
    among others) and in `cuda_graph_config.default_prefill_backend` (prefill CUDA graphs are
    captured by default on CUDA only, which lowers the default static memory fraction);
  - "is flashinfer installed?" (`is_flashinfer_available()`, 0.5.23's `has_flashinfer`): yes, as
    on every GPU host, flashinfer being a dependency of both releases; it picks the default
    attention and sampling backends (flashinfer rather than triton and pytorch);
  - the architecture probes (SM 9.0/10.0/12.0, Blackwell, Hopper, the SM number): answered for the
    case's GPU, SM 10.0 for a B200 and SM 12.0 for an RTX PRO 6000 Blackwell (CUDA 12.8 or later
    assumed). 0.5.10 reads them in `server_args`; 0.5.23 through `get_platform()` and, for the MoE
    runner, `moe_hook.is_sm100_supported`. On SM 10.0 SGLang takes its TensorRT-LLM kernels
    (trtllm_mha attention with 64-token pages, the flashinfer_trtllm MoE runner).
- `python resolve.py`, run by any Python 3.11 with the simulated package (app/demo/hostlib) on
  PYTHONPATH and LAUNCHDECK_SIM_SGLANG_VERSION naming the version; each case gets a simulated
  GPU state file holding its GPU.

stdin: a JSON list of cases `{"name", "argv", "gpu_mib", "gpu_name", "gpu_compute_cap", "gpu_count", "env"}`.
stdout: a JSON list of outcomes `{"name", "version", "values", "warnings", "exception", "exit"}`: the effective
arguments, the lines printed while resolving (a leading log timestamp replaced by `[TIMESTAMP]`),
the exception raised (type and message), and for argparse refusals the exit code and the last
line printed. Standard library only at the top level: it runs in either environment.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import io
import json
import logging
import os
import re
import sys
import tempfile
import warnings
from collections.abc import Iterator
from typing import Any

TIMESTAMP = re.compile(r"^\[\d{4}-\d\d-\d\d \d\d:\d\d:\d\d\] ")
TIMESTAMP_TOKEN = "[TIMESTAMP] "


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--real", action="store_true", help="resolve with real SGLang (patched for a CPU)")
    options = parser.parse_args()
    cases = json.load(sys.stdin)
    os.environ["HF_HUB_OFFLINE"] = "1"
    # Python warnings printed while importing (CPU-only kernels, the installed transformers'
    # deprecations) come from this environment, not from SGLang's argument handling.
    warnings.simplefilter("ignore")
    with tempfile.TemporaryDirectory(prefix="sglang-resolve-") as workdir:
        side = RealSGLang() if options.real else SimulatedSGLang(workdir)
        outcomes = [resolve_case(side, case) for case in cases]
    json.dump(outcomes, sys.stdout, indent=1, default=repr)
    sys.stdout.write("\n")


class RealSGLang:
    """The real package, imported once; each case sets the GPU memory and compute capability the
    patched probes report."""

    def __init__(self) -> None:
        import_torchvision_without_compiled_ops()
        import sglang
        from sglang.srt import server_args

        self.version = sglang.__version__
        self.server_args = server_args
        self.gpu_mib = 0
        self.sm_version = 0
        if hasattr(server_args.ServerArgs, "resolve_once"):
            import sglang.srt.utils.common
            from sglang.srt.arg_groups import kv_shard_hook, memory_hook
            from sglang.srt.arg_groups.model_overrides import qwen3_vl
            from sglang.srt.model_executor import cuda_graph_config
            from sglang.srt.runtime_context import override_platform

            for module in (sglang.srt.utils.common, memory_hook, kv_shard_hook, qwen3_vl):
                module.get_device_memory_capacity = self.gpu_memory_capacity  # type: ignore[attr-defined]
            # SGLang's own switch for telling argument resolution what machine this is.
            override_platform(is_cuda=True, has_flashinfer=True).install()
            cuda_graph_config.default_prefill_backend = answering_cuda(cuda_graph_config.default_prefill_backend)
        else:
            server_args.get_device_memory_capacity = self.gpu_memory_capacity  # type: ignore[attr-defined]
            server_args.is_cuda = lambda: True  # type: ignore[attr-defined]
            server_args.is_flashinfer_available = lambda: True  # type: ignore[attr-defined]

    def gpu_memory_capacity(self, device: str | None = None) -> int:
        return self.gpu_mib

    def prepare(self, case: dict[str, Any]) -> list[str]:
        self.gpu_mib = case["gpu_mib"]
        self.declare_compute_capability(sm_version(case["gpu_compute_cap"]))
        return [*case["argv"], "--device", "cuda"]

    def declare_compute_capability(self, sm: int) -> None:
        """The architecture probes (SM 9.0, 10.0, 12.0, Blackwell, Hopper) answered for the case's GPU."""
        facts = {
            "is_sm90": sm == 90,
            "is_hopper_with_cuda_12_3": sm == 90,
            "is_sm100": sm == 100,
            "is_sm100_or_sm110": sm in (100, 110),
            "is_sm110": sm == 110,
            "is_sm120": sm == 120,
            "is_blackwell": sm // 10 in (10, 11, 12),
        }
        if hasattr(self.server_args.ServerArgs, "resolve_once"):
            from sglang.srt.arg_groups import moe_hook
            from sglang.srt.runtime_context import override_platform

            override_platform(**facts, device_sm=sm, device_capability=(sm // 10, sm % 10)).install()
            moe_hook.is_sm100_supported = lambda: facts["is_sm100"]
        else:
            probes = {
                "is_sm90_supported": "is_sm90",
                "is_hopper_with_cuda_12_3": "is_hopper_with_cuda_12_3",
                "is_sm100_supported": "is_sm100",
                "is_sm120_supported": "is_sm120",
                "is_blackwell_supported": "is_blackwell",
            }
            for probe, fact in probes.items():
                setattr(self.server_args, probe, lambda answer=facts[fact]: answer)
            self.server_args.get_device_sm = lambda: sm

    def reset(self) -> None:
        """Real SGLang sets some of its environment switches through module-level fields."""
        environ = sys.modules.get("sglang.srt.environ")
        envs = getattr(environ, "envs", None)
        for field in vars(type(envs)).values() if envs is not None else ():
            if hasattr(field, "_set_to_none"):
                field._set_to_none = False


class SimulatedSGLang:
    """The simulated package; each case gets a GPU state file of its own."""

    def __init__(self, workdir: str) -> None:
        import sglang
        from sglang.srt import server_args

        self.version = sglang.__version__
        self.server_args = server_args
        self.workdir = workdir
        self.case_count = 0

    def prepare(self, case: dict[str, Any]) -> list[str]:
        import simgpu

        self.case_count += 1
        path = os.path.join(self.workdir, f"gpus-{self.case_count}.json")
        gpus = [
            {
                "index": index,
                "name": case["gpu_name"],
                "uuid": f"GPU-{index:08x}-0000-0000-0000-000000000000",
                "pci_bus_id": f"00000000:{0x18 + 0x10 * index:02X}:00.0",
                "memory_total_mib": case["gpu_mib"],
                "power_limit_w": 600,
                "idle_power_w": 30,
                "compute_cap": case["gpu_compute_cap"],
                "temperature_c": 31,
            }
            for index in range(case["gpu_count"])
        ]
        simgpu.write_new(path, simgpu.new_state(gpus))
        os.environ[simgpu.STATE_ENV] = path
        return list(case["argv"])

    def reset(self) -> None:
        pass


def sm_version(compute_cap: str) -> int:
    """SGLang's SM number: 100 for compute capability "10.0"."""
    major, _, minor = compute_cap.partition(".")
    return int(major) * 10 + int(minor)


def answering_cuda(function: Any) -> Any:
    """`function` run with `sglang.srt.utils.is_cuda()` answering True. The probe is swapped for
    the call only: kernel modules imported meanwhile would take CUDA imports from it."""
    from sglang.srt import utils

    def on_cuda(*args: Any, **kwargs: Any) -> Any:
        probe = utils.is_cuda
        utils.is_cuda = lambda: True
        try:
            return function(*args, **kwargs)
        finally:
            utils.is_cuda = probe

    return on_cuda


def import_torchvision_without_compiled_ops() -> None:
    """torchvision's wheel cannot load its compiled operators beside the CPU torch; registering
    their fake kernels is the step that fails, and argument handling never calls them."""
    import torch.library

    register_fake = torch.library.register_fake

    def skip_torchvision(op: Any, *args: Any, **kwargs: Any) -> Any:
        if isinstance(op, str) and op.startswith("torchvision::"):
            return lambda function=None: function
        return register_fake(op, *args, **kwargs)

    torch.library.register_fake = skip_torchvision  # type: ignore[assignment]
    try:
        import torchvision  # noqa: F401
    finally:
        torch.library.register_fake = register_fake


def resolve_case(side: RealSGLang | SimulatedSGLang, case: dict[str, Any]) -> dict[str, Any]:
    outcome: dict[str, Any] = {
        "name": case["name"],
        "version": side.version,
        "values": None,
        "warnings": [],
        "exception": None,
        "exit": None,
    }
    printed = io.StringIO()
    with isolated_case(case.get("env", {})), redirected_output(printed):
        argv = side.prepare(case)
        try:
            outcome["values"] = effective_values(side.server_args, argv)
        except SystemExit as exc:
            outcome["exit"] = {"code": exc.code, "message": None}
        except Exception as exc:
            outcome["exception"] = {"type": qualified_name(type(exc)), "message": str(exc)}
        finally:
            side.reset()
    lines = printed.getvalue().splitlines()
    if outcome["exit"] is not None:
        # argparse prints the whole usage first; only the lines before it were logged, and the
        # last line is its error message.
        usage_at = next((i for i, line in enumerate(lines) if line.startswith("usage: ")), len(lines))
        outcome["exit"]["message"] = next((line for line in reversed(lines) if line.strip()), None)
        lines = lines[:usage_at]
    outcome["warnings"] = [TIMESTAMP.sub(TIMESTAMP_TOKEN, line) for line in lines]
    return outcome


def effective_values(server_args: Any, argv: list[str]) -> dict[str, Any]:
    """0.5.10 resolves inside prepare_server_args; newer releases resolve in `resolve_once()`.
    Both then run `check_server_args()`, as the engine does before it logs the arguments."""
    args = server_args.prepare_server_args(argv)
    if hasattr(args, "resolve_once"):
        args.resolve_once()
        args.check_server_args()
        values = args.resolved_dict()
    else:
        args.check_server_args()
        values = {field.name: getattr(args, field.name) for field in dataclasses.fields(args)}
    return {name: json_value(value) for name, value in values.items()}


def json_value(value: Any) -> Any:
    """Values as JSON holds them, so both sides compare alike (enums and paths as text)."""
    return json.loads(json.dumps(value, default=str))


def qualified_name(kind: type) -> str:
    return kind.__qualname__ if kind.__module__ == "builtins" else f"{kind.__module__}.{kind.__qualname__}"


@contextlib.contextmanager
def isolated_case(env: dict[str, str]) -> Iterator[None]:
    """Each case starts from the same environment and logging set-up, whatever the last one did."""
    saved_environ = dict(os.environ)
    root = logging.getLogger()
    saved_handlers, saved_level = root.handlers[:], root.level
    saved_levels = {
        name: logger.level
        for name, logger in logging.Logger.manager.loggerDict.items()
        if isinstance(logger, logging.Logger)
    }
    os.environ.update(env)
    try:
        yield
    finally:
        os.environ.clear()
        os.environ.update(saved_environ)
        for handler in root.handlers[:]:
            root.removeHandler(handler)
        for handler in saved_handlers:
            root.addHandler(handler)
        root.setLevel(saved_level)
        for name, logger in logging.Logger.manager.loggerDict.items():
            if isinstance(logger, logging.Logger):
                logger.setLevel(saved_levels.get(name, logging.NOTSET))


@contextlib.contextmanager
def redirected_output(stream: io.StringIO) -> Iterator[None]:
    """What a case prints on either stream, in order, as the server's log would hold it."""
    with contextlib.redirect_stdout(stream), contextlib.redirect_stderr(stream):
        yield


if __name__ == "__main__":
    main()
