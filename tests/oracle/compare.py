"""Runs the oracle table through real SGLang and through the simulator, and lists where they differ.

`python -m tests.oracle.compare [VERSION ...]` prints the report for each version (all by
default), building the real environment first if needed; `--hostlib DIR` checks the simulated
package in another checkout.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import math
import os
import subprocess
import sys
from collections.abc import Iterable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tests.oracle.cases import MODEL_FILES, OracleCase, oracle_cases
from tests.oracle.environment import ORACLE_VERSIONS, OracleEnvironment, oracle_environment
from tests.support.paths import HOSTLIB, ROOT

RESOLVER = Path(__file__).with_name("resolve.py")
SIMULATED_PACKAGE = HOSTLIB
VERSION_ENV = "LAUNCHDECK_SIM_SGLANG_VERSION"

# Not compared: drawn at random whenever it is not given.
NONDETERMINISTIC_FIELDS = frozenset({"random_seed"})

Outcome = dict[str, Any]


@dataclass(frozen=True)
class Disagreement:
    case: str
    field: str
    real: Any
    simulator: Any


def resolve(command: list[str], env: dict[str, str], cases: list[OracleCase]) -> list[Outcome]:
    payload = json.dumps([case.to_json() for case in cases])
    # Only what locates things is inherited: an SGLANG_* or CUDA_* switch of the caller's shell
    # would change the outcomes behind the cases' back.
    inherited = {name: os.environ[name] for name in ("PATH", "HOME", "LANG") if name in os.environ}
    result = subprocess.run(
        command, input=payload, capture_output=True, text=True, env={**inherited, **env}, cwd=ROOT, check=False
    )
    if result.returncode != 0:
        raise RuntimeError(f"{' '.join(command)} failed ({result.returncode}):\n{result.stderr[-5000:]}")
    outcomes: list[Outcome] = json.loads(result.stdout)
    return outcomes


def real_outcomes(environment: OracleEnvironment, version: str, cases: list[OracleCase]) -> list[Outcome]:
    """Real SGLang's outcomes, kept beside the environment: they change only with the cases, the
    model files, the resolver or the environment, and computing them costs half a minute per version."""
    key = hashlib.sha256()
    key.update(environment.spec.digest.encode())
    key.update(RESOLVER.read_bytes())
    key.update(json.dumps([case.to_json() for case in cases]).encode())
    for model_file in sorted(MODEL_FILES.rglob("*.json")):
        key.update(model_file.read_bytes())
    saved = environment.root / "outcomes" / f"{version}-{key.hexdigest()[:16]}.json"
    if saved.exists():
        outcomes: list[Outcome] = json.loads(saved.read_text())
        return outcomes
    outcomes = resolve(
        [str(environment.interpreter), str(RESOLVER), "--real"],
        {"PYTHONPATH": environment.pythonpath(version)},
        cases,
    )
    saved.parent.mkdir(exist_ok=True)
    saved.with_suffix(".tmp").write_text(json.dumps(outcomes))
    saved.with_suffix(".tmp").rename(saved)
    return outcomes


def real_outcomes_by_version(
    environment: OracleEnvironment, versions: Iterable[str], cases: list[OracleCase]
) -> dict[str, list[Outcome]]:
    """Each version in its own process, side by side: importing real SGLang alone takes seconds."""
    with ThreadPoolExecutor() as pool:
        futures = {version: pool.submit(real_outcomes, environment, version, cases) for version in versions}
        return {version: future.result() for version, future in futures.items()}


def simulated_outcomes(version: str, cases: list[OracleCase], hostlib: Path = SIMULATED_PACKAGE) -> list[Outcome]:
    return resolve([sys.executable, str(RESOLVER)], {"PYTHONPATH": str(hostlib), VERSION_ENV: version}, cases)


def disagreements(real: list[Outcome], simulated: list[Outcome]) -> list[Disagreement]:
    found = []
    real_version, simulated_version = real[0]["version"], simulated[0]["version"]
    if public_version(real_version) != public_version(simulated_version):
        found.append(Disagreement("(every case)", "sglang.__version__", real_version, simulated_version))
    for real_outcome, simulated_outcome in zip(real, simulated, strict=True):
        found.extend(case_disagreements(real_outcome, simulated_outcome))
    return found


def case_disagreements(real: Outcome, simulated: Outcome) -> Iterable[Disagreement]:
    case = real["name"]
    for field in ("exit", "exception"):
        if real[field] != simulated[field]:
            yield Disagreement(case, field, real[field], simulated[field])
    if real["warnings"] != simulated["warnings"]:
        yield Disagreement(case, "warnings", real["warnings"], simulated["warnings"])
    if real["values"] is None or simulated["values"] is None:
        return
    # Every field of the real record: one the simulator leaves out cannot pass for agreeing on it.
    for name in sorted(real["values"].keys() - simulated["values"].keys()):
        yield Disagreement(case, f"values.{name}", real["values"][name], "(not reported)")
    for name, value in simulated["values"].items():
        if name in NONDETERMINISTIC_FIELDS:
            continue
        if name not in real["values"]:
            yield Disagreement(case, f"values.{name}", "(no such field)", value)
        elif not same_value(real["values"][name], value):
            yield Disagreement(case, f"values.{name}", real["values"][name], value)


def same_value(real: Any, simulated: Any) -> bool:
    """Equal, floats up to rounding: the simulator may reach SGLang's number in another order."""
    if isinstance(real, float) and isinstance(simulated, (int, float)) and not isinstance(simulated, bool):
        return math.isclose(real, simulated, rel_tol=1e-9)
    return bool(real == simulated) and type(real) is type(simulated)


def public_version(version: str) -> str:
    return version.split("+", 1)[0]


def report(version: str, case_count: int, found: list[Disagreement]) -> str:
    cases = sorted({d.case for d in found})
    lines = [
        f"sglang {version}: {len(found)} disagreements in {len(cases)} of {case_count} cases "
        "(real SGLang vs the simulator)"
    ]
    for disagreement in found:
        lines.append(f"- {disagreement.case} | {disagreement.field}")
        lines.append(f"    real:      {render(disagreement.real)}")
        lines.append(f"    simulator: {render(disagreement.simulator)}")
    return "\n".join(lines)


def render(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False) if not isinstance(value, str) else value


def compare(
    version: str, real: list[Outcome], cases: list[OracleCase], hostlib: Path = SIMULATED_PACKAGE
) -> str | None:
    """The report of every disagreement for `version`, or None when there is none."""
    found = disagreements(real, simulated_outcomes(version, cases, hostlib))
    return report(version, len(cases), found) if found else None


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("versions", nargs="*", default=list(ORACLE_VERSIONS), metavar="VERSION")
    parser.add_argument("--hostlib", type=Path, default=SIMULATED_PACKAGE, help="the simulated package's directory")
    options = parser.parse_args()
    table = oracle_cases()
    real_by_version = real_outcomes_by_version(oracle_environment(), options.versions, table)
    for version in options.versions:
        disagreement_report = compare(version, real_by_version[version], table, options.hostlib.resolve())
        print(disagreement_report or f"sglang {version}: all {len(table)} cases agree")
        print()


if __name__ == "__main__":
    main()
