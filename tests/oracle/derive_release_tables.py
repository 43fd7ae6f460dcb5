"""Derives the simulated SGLang's argument tables from the real releases in the oracle environment.

    python -m tests.oracle.derive_release_tables [VERSION ...]

For each release it writes app/demo/hostlib/sglang/srt/releases/<version>.json, which the
simulator builds its parser and its `ServerArgs` record from:
- `actions`: every argparse action of the release's own parser (tests/oracle/sglang_parser.py
  `table`), so each real flag is accepted with its real type, choices, default and aliases, and
  retired flags warn or refuse as they do there;
- `fields`: every field of the record `from_cli_args` builds, with its value before resolution;
- `filled`: the fields resolution sets, when the arguments leave them at their default, to one
  value on every demo model and GPU (a `None` that becomes `"xgrammar"`, an `auto` that becomes
  `round_robin`), read from real SGLang resolving the demo's defaults. Fields whose resolved value
  depends on the model or the GPU are modelled by the simulator's rules instead, and the oracle
  comparison checks both.
Do not edit those files by hand: run this again.
"""

from __future__ import annotations

import argparse
import json
import subprocess
from pathlib import Path
from typing import Any

from tests.oracle.cases import GPUS, MODELS, OracleCase
from tests.oracle.compare import NONDETERMINISTIC_FIELDS, real_outcomes
from tests.oracle.environment import ORACLE_VERSIONS, OracleEnvironment, oracle_environment
from tests.support.paths import HOSTLIB, ROOT

PARSER_SCRIPT = Path(__file__).with_name("sglang_parser.py")
TABLES = HOSTLIB / "sglang" / "srt" / "releases"
# Set from the case itself (its model path), not from a rule the table could hold.
FROM_THE_CASE = frozenset({"model_path", "tokenizer_path", "served_model_name"})


def parser_table(environment: OracleEnvironment, version: str) -> dict[str, Any]:
    found = subprocess.run(
        [str(environment.interpreter), str(PARSER_SCRIPT), "table"],
        env={"PYTHONPATH": environment.pythonpath(version), "HF_HUB_OFFLINE": "1", "PATH": "/usr/bin:/bin"},
        capture_output=True,
        text=True,
        check=False,
    )
    if found.returncode != 0:
        raise SystemExit(f"sglang {version}'s parser could not be read:\n{found.stderr[-3000:]}")
    table: dict[str, Any] = json.loads(found.stdout)
    for action in table["actions"]:
        action.pop("help")  # the simulator prints no help; the real text stays in the release
    table["fields"]["model_path"] = None  # read with a stand-in model; every launch names its own
    return table


def filled_by_resolution(environment: OracleEnvironment, version: str, fields: dict[str, Any]) -> dict[str, Any]:
    """The fields real SGLang resolves from their default to one same value for every demo model
    and GPU when nothing but the model is given."""
    cases = [
        OracleCase(f"defaults · {model} · {label}", ["--model-path", str(path)], gpu, {})
        for model, path in MODELS.items()
        for label, gpu in GPUS.items()
    ]
    outcomes = real_outcomes(environment, version, cases)
    filled: dict[str, Any] = {}
    for name, default in fields.items():
        if name in FROM_THE_CASE or name in NONDETERMINISTIC_FIELDS:
            continue
        resolved = [outcome["values"][name] for outcome in outcomes if name in outcome["values"]]
        everywhere = len(resolved) == len(outcomes) and all(value == resolved[0] for value in resolved)
        if everywhere and resolved[0] != default:
            filled[name] = resolved[0]
    return filled


def derive(environment: OracleEnvironment, version: str) -> dict[str, Any]:
    table = parser_table(environment, version)
    return {
        "about": f"SGLang {version}'s arguments, derived by tests/oracle/derive_release_tables.py from the "
        "release itself. Do not edit by hand: run it again.",
        "version": version,
        "actions": table["actions"],
        "fields": table["fields"],
        "filled": filled_by_resolution(environment, version, table["fields"]),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("versions", nargs="*", default=list(ORACLE_VERSIONS), metavar="VERSION")
    options = parser.parse_args()
    environment = oracle_environment()
    TABLES.mkdir(exist_ok=True)
    for version in options.versions:
        table = derive(environment, version)
        path = TABLES / f"{version}.json"
        path.write_text(json.dumps(table, indent=0, sort_keys=False) + "\n")
        print(
            f"{path.relative_to(ROOT)}: {len(table['actions'])} flags, {len(table['fields'])} fields, "
            f"{len(table['filled'])} filled by resolution"
        )


if __name__ == "__main__":
    main()
