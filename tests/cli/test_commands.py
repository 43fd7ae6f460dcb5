"""The command line as a whole, without a dashboard: what `--help` and `--version` say, and the
table of commands in docs/api.md."""

from __future__ import annotations

import re
from importlib.metadata import version

import pytest

from tests.support.cli import run_cli
from tests.support.paths import ROOT


@pytest.mark.parametrize(
    "listing",
    [
        ["attempts"], ["hosts"], ["presets"], ["presets", "list"], ["presets", "show", "p"], ["compare", "1", "2"],
        ["diagnose", "-"], ["users", "list"], ["tokens", "list"],
    ],
    ids=" ".join,
)  # fmt: skip
def test_every_listing_offers_json(listing: list[str]) -> None:
    usage = run_cli(*listing, "--help", check=True).stdout
    assert re.search(r"^  --json +\S", usage, re.M), usage


def test_version_is_the_installed_packages() -> None:
    result = run_cli("--version", check=True)
    assert (result.stdout, result.stderr) == (f"launchdeck {version('launchdeck')}\n", "")


def test_the_command_table_in_the_docs_names_every_command() -> None:
    usage = run_cli("--help", check=True).stdout
    commands = re.findall(r"^    (\w+)", usage, re.M)
    assert {"stop", "relaunch", "hosts", "presets", "attempts", "diagnose"} <= set(commands)
    rows = [line for line in (ROOT / "docs" / "api.md").read_text().splitlines() if line.startswith("| `launchdeck")]
    missing = [name for name in commands if not any(f"`launchdeck {name}" in row for row in rows)]
    assert not missing, f"docs/api.md's table of commands lacks {missing}"
