"""The simulated SGLang resolves every argument combination of the oracle table as the real
release of the same version does: effective values, warnings, exceptions and argparse exits."""

from __future__ import annotations

import pytest

from tests.oracle.cases import OracleCase, oracle_cases
from tests.oracle.compare import Outcome, compare, real_outcomes_by_version
from tests.oracle.environment import ORACLE_VERSIONS, OracleEnvironment


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
