"""The simulated SGLang resolves every argument combination of the oracle table as the real
release of the same version does: effective values, warnings, exceptions and argparse exits."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.oracle.cases import GPUS, OracleCase, oracle_cases
from tests.oracle.compare import Outcome, compare, disagreements, real_outcomes_by_version
from tests.oracle.drawn import ci_sample, modelled
from tests.oracle.environment import ORACLE_VERSIONS, STAMP, OracleEnvironment, OracleSpec, is_complete


@pytest.fixture(scope="module")
def table() -> list[OracleCase]:
    return oracle_cases()


@pytest.fixture(scope="module")
def real_outcomes(sglang_oracle: OracleEnvironment, table: list[OracleCase]) -> dict[str, list[Outcome]]:
    return real_outcomes_by_version(sglang_oracle, ORACLE_VERSIONS, table)


@pytest.mark.parametrize("version", ORACLE_VERSIONS)
def test_simulator_resolves_arguments_as_real_sglang(
    version: str, real_outcomes: dict[str, list[Outcome]], table: list[OracleCase]
) -> None:
    disagreement_report = compare(version, real_outcomes[version], table)
    if disagreement_report is not None:
        pytest.fail(disagreement_report, pytrace=False)


def outcome(values: dict[str, object] | None = None, warnings: list[str] | None = None) -> Outcome:
    return {
        "name": "case",
        "version": "0.5.23",
        "values": values,
        "warnings": warnings or [],
        "exception": None,
        "exit": None,
    }


def test_a_field_the_simulator_leaves_out_is_a_disagreement() -> None:
    real = outcome({"mem_fraction_static": 0.798, "enable_lora": False})
    found = disagreements([real], [outcome({"mem_fraction_static": 0.798})])
    assert [(d.field, d.real, d.simulator) for d in found] == [("values.enable_lora", False, "(not reported)")]


def test_the_seed_is_not_compared_but_the_kernel_backends_are() -> None:
    real = outcome(
        {"random_seed": 1, "attention_backend": "flashinfer", "max_running_requests": 48},
        ["[TIMESTAMP] Attention backend not specified. Use flashinfer backend by default."],
    )
    simulated = outcome(
        {"random_seed": 2, "attention_backend": "triton", "max_running_requests": 48},
        ["[TIMESTAMP] Attention backend not specified. Use triton backend by default."],
    )
    assert [(d.field, d.real, d.simulator) for d in disagreements([real], [simulated])] == [
        ("warnings", real["warnings"], simulated["warnings"]),
        ("values.attention_backend", "flashinfer", "triton"),
    ]


def test_a_cache_built_from_another_spec_or_left_half_built_is_not_reused(tmp_path: Path) -> None:
    spec = OracleSpec()
    environment = OracleEnvironment(tmp_path, spec)
    environment.interpreter.parent.mkdir(parents=True)
    environment.interpreter.touch()
    assert not is_complete(environment)  # no stamp: the build stopped before its end
    (tmp_path / STAMP).write_text(json.dumps({"spec": OracleSpec(torch="torch==2.12.0").digest}))
    assert not is_complete(environment)
    (tmp_path / STAMP).write_text(json.dumps({"spec": spec.digest}))
    assert is_complete(environment)


@pytest.fixture(scope="module")
def drawn_sample() -> list[OracleCase]:
    cases = [case for case in ci_sample() if modelled(case)]
    assert len(cases) >= 300, f"only {len(cases)} drawn cases can be compared"
    return cases


@pytest.mark.parametrize("version", ORACLE_VERSIONS)
def test_drawn_argument_lists_resolve_as_in_real_sglang(
    version: str, sglang_oracle: OracleEnvironment, drawn_sample: list[OracleCase]
) -> None:
    """Argument lists drawn from the real flag tables (fixed seed), not only the written table."""
    real = real_outcomes_by_version(sglang_oracle, [version], drawn_sample)[version]
    disagreement_report = compare(version, real, drawn_sample)
    if disagreement_report is not None:
        pytest.fail(disagreement_report, pytrace=False)


def test_a_drawn_case_with_an_unmodelled_flag_is_set_aside_under_any_of_its_names() -> None:
    gpu = next(iter(GPUS.values()))
    assert modelled(OracleCase("a", ["--model-path", "m", "--tp-size", "2"], gpu, {}))
    assert not modelled(OracleCase("b", ["--model-path", "m", "--attn-cp-size", "2"], gpu, {}))
    assert not modelled(OracleCase("c", ["--model-path", "m", "--attention-context-parallel-size", "2"], gpu, {}))
