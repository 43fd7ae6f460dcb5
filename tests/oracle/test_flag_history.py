"""The flag history (app/diagnose/flag_history.json) against real SGLang 0.5.10 and 0.5.23: for
every flag, choice, rewrite and new name the table knows, each release's own parser refuses
(argparse exit 2) exactly what the flag lint says that release refuses, accepts the rest, and
warns of the flags the table says it warns of.

Only SGLang's argparse runs (tests/oracle/sglang_parser.py, in the oracle venv), once per
release for its flags and once for all the argument lists."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path
from typing import Any

import pytest

from app.diagnose import flag_history
from tests.oracle.environment import ORACLE_VERSIONS, OracleEnvironment

pytestmark = pytest.mark.oracle

PARSER = Path(__file__).with_name("sglang_parser.py")
RELEASES = ORACLE_VERSIONS
MODEL = ["--model-path", "m"]


def run_parser(oracle: OracleEnvironment, version: str, mode: str, stdin: str = "") -> Any:
    env = {**os.environ, "PYTHONPATH": oracle.pythonpath(version), "HF_HUB_OFFLINE": "1"}
    answer = subprocess.run(
        [str(oracle.interpreter), str(PARSER), mode],
        input=stdin,
        capture_output=True,
        text=True,
        env=env,
        timeout=600,
    )
    assert answer.returncode == 0, answer.stderr[-3000:]
    return json.loads(answer.stdout)


@pytest.fixture(scope="module")
def real_flags(sglang_oracle: OracleEnvironment) -> dict[str, dict[str, Any]]:
    return {version: run_parser(sglang_oracle, version, "flags") for version in RELEASES}


def sample(option: str, known: dict[str, Any] | None, nargs: Any, value: str) -> list[str]:
    """The flag as the parser that knows it takes it: a switch alone, else with `value`."""
    return [option] if (known["nargs"] if known else nargs) == 0 else [option, value]


def value_for(change: flag_history.Change, known: list[dict[str, Any]]) -> str:
    """A value both the flag and its other names take: the removed choice, one SGLang maps, or the
    first choice of the flag (else of its replacement or older name) in a release that knows it."""
    if change.choice or change.values:
        return change.choice or next(iter(change.values))
    older_names = [row.flag for row in flag_history.history()[1] if row.rewrite and row.rewrite[0] == change.flag]
    for option in (change.flag, *(change.rewrite or ())[:1], *older_names):
        for flags in known:
            if choices := (flags.get(option) or {}).get("choices"):
                return str(choices[0])
    return "1"


def cases(release: str, real_flags: dict[str, dict[str, Any]]) -> list[list[str]]:
    """Every argument list the table speaks of, that `release`'s parser or the lint has an opinion on."""
    flags = real_flags[release]
    argvs: list[list[str]] = []
    for change in flag_history.history()[1]:
        value = value_for(change, [flags, *real_flags.values()])
        old = sample(change.flag, flags.get(change.flag), change.nargs, value)
        argvs.append(old)
        argvs.append(flag_history.rewrite(old, release)[0])
        if change.rewrite and change.change == "renamed":
            new = change.rewrite[0]
            argvs.append(sample(new, flags.get(new), change.nargs, change.values.get(value, value)))
    unique = {json.dumps(argv): argv for argv in argvs}.values()
    return [argv for argv in unique if argv[0] in flags or flag_history.lint(argv, release)]


def test_each_release_refuses_exactly_what_the_lint_says_it_refuses(
    sglang_oracle: OracleEnvironment, real_flags: dict[str, dict[str, Any]]
) -> None:
    disagreements = []
    checked = 0
    for release in RELEASES:
        argvs = cases(release, real_flags)
        answers = run_parser(sglang_oracle, release, "parse", json.dumps([[*MODEL, *argv] for argv in argvs]))
        for argv, answer in zip(argvs, answers, strict=True):
            checked += 1
            findings = flag_history.lint(argv, release)
            refused = any(finding.blocking for finding in findings)
            if (answer["exit"] == 2) != refused:
                said = answer["said"].splitlines()[-1:] or [""]
                disagreements.append(f"{release} {argv}: exit {answer['exit']} ({said[0]}); lint: {findings}")
    assert not disagreements, "\n".join(disagreements)
    assert checked >= 140  # every flag, choice, rewrite and new name of the table, on each release it concerns


def test_the_table_is_what_the_releases_parsers_declare(real_flags: dict[str, dict[str, Any]]) -> None:
    old, new = real_flags["0.5.10"], real_flags["0.5.23"]
    changes = flag_history.history()[1]
    for change in changes:
        if change.first_seen == "0.5.10":
            assert change.flag in old, change
        if change.change == "choice-removed" and change.first_seen == "0.5.10":
            assert change.choice in old[change.flag]["choices"], change
            assert change.choice not in (new.get(change.flag, {}).get("choices") or [change.choice]), change
        if change.rewrite:
            replaced = [token for token in change.rewrite if token.startswith("--")]
            assert all(token in new or _removed_by(token, "0.5.23") for token in replaced), change
    removed = {change.flag for change in changes if change.change == "removed"}
    assert removed <= set(old) - set(new) | {change.flag for change in changes if change.first_seen != "0.5.10"}
    assert {"--mamba-scheduler-strategy", "--cuda-graph-max-bs"} <= removed


def test_deprecated_flags_warn_as_the_table_says(
    sglang_oracle: OracleEnvironment, real_flags: dict[str, dict[str, Any]]
) -> None:
    newest = real_flags["0.5.23"]
    warned = [
        change
        for change in flag_history.history()[1]
        if change.warns and change.flag in newest and not newest[change.flag]["error_message"]
    ]
    assert {"--disable-cuda-graph", "--enable-dp-attention"} <= {change.flag for change in warned}
    argvs = [sample(change.flag, newest[change.flag], change.nargs, value_for(change, [newest])) for change in warned]
    answers = run_parser(sglang_oracle, "0.5.23", "parse", json.dumps([[*MODEL, *argv] for argv in argvs]))
    for argv, answer in zip(argvs, answers, strict=True):
        assert answer["exit"] == 0 and f"'{argv[0]}' is deprecated" in answer["said"], (argv, answer)


def _removed_by(flag: str, release: str) -> bool:
    return any(
        change.flag == flag
        and change.change == "removed"
        and flag_history.release(change.version) <= flag_history.release(release)
        for change in flag_history.history()[1]
    )
