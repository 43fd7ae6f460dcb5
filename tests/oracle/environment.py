"""The real SGLang releases the simulator is checked against, installed once and cached.

Real SGLang is imported on the CPU only for its argument handling, so the environment holds
torch's CPU build, the modules that handling imports, and each release unpacked without its
dependencies into a directory of its own (`sglang-<version>`), put on PYTHONPATH one at a time.

The cache lives at $LAUNCHDECK_ORACLE_CACHE (default ~/.cache/launchdeck/sglang-oracle). It is
built beside that path and moved into place when complete, with a stamp naming the hash of what
it was built from: a changed spec or an interrupted build is rebuilt, a complete one is reused
without calling pip. `python -m tests.oracle.environment` builds it ahead of a test run.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import os
import shutil
import subprocess
from collections.abc import Iterator
from dataclasses import asdict, dataclass
from pathlib import Path

ORACLE_VERSIONS = ("0.5.10", "0.5.23")
CACHE_ENV = "LAUNCHDECK_ORACLE_CACHE"
STAMP = "complete.json"


@dataclass(frozen=True)
class OracleSpec:
    """What the cache is built from; its hash names a complete build."""

    python: str = "python3.11"
    # First and alone: on this machine kind it is a CPU build on local disk, and a torch
    # requested later by another package would pull a CUDA build of several GB.
    torch: str = "torch==2.13.0"
    packages: tuple[str, ...] = (
        "numpy", "psutil", "requests", "packaging", "pydantic", "orjson", "transformers", "pyzmq",
        "msgspec", "pybase64", "setproctitle", "pillow", "starlette", "fastapi", "ipython",
        "aiohttp", "attrs", "openai",
    )  # fmt: skip
    # Imported by the argument handling, but their own dependencies are not (or would bring
    # another torch).
    packages_without_deps: tuple[str, ...] = (
        "triton", "torchvision==0.28.0", "dill", "apache-tvm-ffi==0.1.11", "sentencepiece",
        "compressed_tensors", "loguru", "gguf", "partial-json-parser",
    )  # fmt: skip
    versions: tuple[str, ...] = ORACLE_VERSIONS

    @property
    def digest(self) -> str:
        return hashlib.sha256(json.dumps(asdict(self), sort_keys=True).encode()).hexdigest()[:16]


class OracleUnavailable(Exception):
    """The environment cannot be built here (no Python 3.11, or a package pip cannot install)."""


@dataclass(frozen=True)
class OracleEnvironment:
    root: Path
    spec: OracleSpec

    @property
    def interpreter(self) -> Path:
        return self.root / "venv" / "bin" / "python"

    def pythonpath(self, version: str) -> str:
        """The PYTHONPATH that makes `import sglang` import this release."""
        if version not in self.spec.versions:
            raise ValueError(f"sglang {version} is not in the oracle environment ({', '.join(self.spec.versions)})")
        return str(self.root / f"sglang-{version}")


def cache_root() -> Path:
    default = Path.home() / ".cache" / "launchdeck" / "sglang-oracle"
    return Path(os.environ.get(CACHE_ENV) or default)


def oracle_environment(spec: OracleSpec = OracleSpec(), root: Path | None = None) -> OracleEnvironment:
    """The cached environment for `spec`, built first if it is missing, partial or outdated."""
    root = root or cache_root()
    environment = OracleEnvironment(root, spec)
    if is_complete(environment):
        return environment
    try:
        root.parent.mkdir(parents=True, exist_ok=True)
        with exclusive(root.with_name(root.name + ".lock")):
            if not is_complete(environment):  # another process may have built it meanwhile
                build(environment)
    except OSError as exc:
        raise OracleUnavailable(f"cannot build in {root}: {exc}") from exc
    return environment


def is_complete(environment: OracleEnvironment) -> bool:
    try:
        stamp = json.loads((environment.root / STAMP).read_text())
    except (OSError, ValueError):
        return False
    return bool(stamp.get("spec") == environment.spec.digest and environment.interpreter.exists())


def build(environment: OracleEnvironment) -> None:
    """Builds beside the cache and swaps it in, so the cache path never holds a partial build."""
    spec, root = environment.spec, environment.root
    staging = root.with_name(root.name + ".partial")
    shutil.rmtree(staging, ignore_errors=True)
    staging.mkdir()
    python = shutil.which(spec.python)
    if python is None:
        raise OracleUnavailable(f"{spec.python} is not on PATH")
    run([python, "-m", "venv", str(staging / "venv")])
    # The venv is used only as `venv/bin/python`, which finds its environment wherever it lies,
    # so it can be built here and moved.
    pip = [str(staging / "venv" / "bin" / "python"), "-m", "pip", "install", "--quiet", "--disable-pip-version-check"]
    run([*pip, spec.torch])
    run([*pip, *spec.packages])
    run([*pip, "--no-deps", *spec.packages_without_deps])
    for version in spec.versions:
        run([*pip, "--no-deps", "--target", str(staging / f"sglang-{version}"), f"sglang=={version}"])
    (staging / STAMP).write_text(json.dumps({"spec": spec.digest, **asdict(spec)}, indent=1) + "\n")
    outdated = root.with_name(root.name + ".outdated")
    shutil.rmtree(outdated, ignore_errors=True)
    if root.exists():
        root.rename(outdated)
    staging.rename(root)
    shutil.rmtree(outdated, ignore_errors=True)


def run(command: list[str]) -> None:
    result = subprocess.run(command, capture_output=True, text=True, check=False)
    if result.returncode != 0:
        output = (result.stdout + result.stderr).strip()
        raise OracleUnavailable(f"{' '.join(command)} failed ({result.returncode}):\n{output[-3000:]}")


@contextlib.contextmanager
def exclusive(lock_path: Path) -> Iterator[None]:
    with lock_path.open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        yield


if __name__ == "__main__":
    built = oracle_environment()
    print(f"real SGLang {', '.join(built.spec.versions)} at {built.root}")
