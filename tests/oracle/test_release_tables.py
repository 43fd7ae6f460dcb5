"""The simulator's argument tables (app/demo/hostlib/sglang/srt/releases/) are what the real releases
say: derived again from the oracle environment, each equals the committed one, so a change to the
derivation or a rebuilt environment that moves a flag, a default or a resolved value fails here
with the command that brings the tables back in line."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.oracle import derive_metric_tables
from tests.oracle.compare import VERSION_ENV
from tests.oracle.derive_release_tables import TABLES, derive
from tests.oracle.environment import ORACLE_VERSIONS, OracleEnvironment
from tests.oracle.test_flag_history import run_parser
from tests.support.paths import HOSTLIB

pytestmark = pytest.mark.oracle


@pytest.mark.parametrize("version", ORACLE_VERSIONS)
def test_the_simulators_flags_and_fields_are_the_real_releases(version: str, sglang_oracle: OracleEnvironment) -> None:
    committed = json.loads((TABLES / f"{version}.json").read_text())
    derived = json.loads(json.dumps(derive(sglang_oracle, version)))
    stale = [part for part in ("actions", "fields", "filled") if committed[part] != derived[part]]
    assert not stale, (
        f"{', '.join(stale)} differ from sglang {version}: run python -m tests.oracle.derive_release_tables"
    )


@pytest.mark.parametrize("version", ORACLE_VERSIONS)
def test_the_simulators_metrics_are_the_real_releases(version: str, sglang_oracle: OracleEnvironment) -> None:
    """The /metrics families the simulated server serves (names, types, help, labels, buckets)."""
    committed = json.loads((TABLES / f"{version}-metrics.json").read_text())
    derived = json.loads(json.dumps(derive_metric_tables.derive(Path(sglang_oracle.pythonpath(version)), version)))
    assert committed == derived, f"sglang {version}'s metrics moved: run python -m tests.oracle.derive_metric_tables"
    names = {m["name"] for m in derived["scheduler"] + derived["tokenizer"] if not m["conditional"]}
    # What the serving panel reads, in every release the simulator plays.
    assert {"sglang:num_running_reqs", "sglang:gen_throughput", "sglang:time_to_first_token_seconds"} <= names
    assert {"sglang:inter_token_latency_seconds", "sglang:spec_accept_length", "sglang:token_usage"} <= names


# A value of each argument type that the type takes.
SAMPLES = {"loads": "{}", "json_list_type": "[]", "parse_cuda_graph_config_arg": "{}", "str": "x", None: "x"}


def argument_lists(version: str) -> list[list[str]]:
    """Every option of the release once, with a value where it takes one."""
    lists = []
    for action in json.loads((TABLES / f"{version}.json").read_text())["actions"]:
        for option in action["options"]:
            value = (action["choices"] or [SAMPLES.get(action["type"], "1")])[0]
            lists.append(["--model-path", "m", option] + ([] if action["nargs"] == 0 else [str(value)]))
    return lists


SIMULATED_PARSE = """
import contextlib, io, json, sys
from sglang.srt.cli_flags import build_parser
from sglang.version import release
parser, results = build_parser(release()), []
for argv in json.load(sys.stdin):
    said, status = io.StringIO(), 0
    with contextlib.redirect_stderr(said):
        try:
            parser.parse_args(argv)
        except SystemExit as exc:
            status = exc.code
    results.append(status)
json.dump(results, sys.stdout)
"""


@pytest.mark.parametrize("version", ORACLE_VERSIONS)
def test_every_real_flag_parses_in_the_simulator_as_in_the_release(
    version: str, sglang_oracle: OracleEnvironment
) -> None:
    lists = argument_lists(version)
    real = [result["exit"] for result in run_parser(sglang_oracle, version, "parse", json.dumps(lists))]
    simulated = subprocess.run(
        [sys.executable, "-c", SIMULATED_PARSE],
        input=json.dumps(lists),
        capture_output=True,
        text=True,
        env={**os.environ, "PYTHONPATH": str(HOSTLIB), VERSION_ENV: version},
        check=True,
    )
    differ = [(argv[2:], got, want) for argv, got, want in zip(lists, json.loads(simulated.stdout), real, strict=True)]
    assert len(lists) > 350
    assert [row for row in differ if row[1] != row[2]] == []
