"""The flag lint: what a given SGLang release renamed, deprecated or removed among a preset's
flags, and the rewrite SGLang advises (the facts come from app/diagnose/flag_history.json)."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from app.diagnose import flag_history

EXTRA_BUFFER = ["--mamba-scheduler-strategy", "extra_buffer"]


def messages(args: list[str], version: str) -> list[tuple[str, str, bool]]:
    return [(f.flag, f.change, f.blocking) for f in flag_history.lint(args, version)]


@pytest.mark.parametrize(
    ("version", "release"),
    [("0.5.23", (0, 5, 23)), ("0.5.23+launchdeck.sim", (0, 5, 23)), ("v0.5.10rc1", (0, 5, 10)), ("dev", None)],
)
def test_a_version_is_compared_by_its_public_release(version: str, release: tuple[int, ...] | None) -> None:
    assert flag_history.release(version) == release


def test_the_mamba_strategy_flag_is_fine_until_its_rename_warned_after_and_refused_once_removed() -> None:
    assert flag_history.lint([*EXTRA_BUFFER, "--tp-size", "2"], "0.5.13") == []
    [renamed] = flag_history.lint(EXTRA_BUFFER, "0.5.16")
    assert (renamed.change, renamed.version, renamed.blocking) == ("renamed", "0.5.14", False)
    assert renamed.message == (
        "--mamba-scheduler-strategy: renamed to --mamba-radix-cache-strategy in 0.5.14; SGLang 0.5.16 still "
        "accepts it with a warning. Rewrite: --mamba-radix-cache-strategy extra_buffer"
    )
    [removed] = flag_history.lint(EXTRA_BUFFER, "0.5.23+launchdeck.sim")
    assert (removed.change, removed.version, removed.blocking) == ("removed", "0.5.20", True)
    assert removed.message.startswith(
        "--mamba-scheduler-strategy: renamed to --mamba-radix-cache-strategy in 0.5.14, removed in 0.5.20; "
        "SGLang 0.5.23+launchdeck.sim refuses it (argparse exits 2)"
    )
    assert removed.replacement == ("--mamba-radix-cache-strategy", "extra_buffer")


def test_the_new_name_on_an_older_release_is_refused_and_rewritten_back() -> None:
    [new] = flag_history.lint(["--mamba-radix-cache-strategy=extra_buffer"], "0.5.10")
    assert (new.change, new.version, new.blocking) == ("new", "0.5.14", True)
    assert "SGLang 0.5.10 does not know it (argparse exits 2)" in new.message
    assert flag_history.rewrite(["--mamba-radix-cache-strategy=extra_buffer"], "0.5.10")[0] == EXTRA_BUFFER
    assert flag_history.lint(["--mamba-radix-cache-strategy", "auto"], "0.5.14") == []


def test_cuda_graph_flags_follow_the_decode_prefill_split() -> None:
    args = ["--disable-cuda-graph", "--cuda-graph-max-bs", "16", "--cuda-graph-bs", "1", "2", "4"]
    assert messages(args, "0.5.23") == [
        ("--disable-cuda-graph", "deprecated", False),
        ("--cuda-graph-max-bs", "removed", True),
        ("--cuda-graph-bs", "removed", True),
    ]
    rewritten, applied = flag_history.rewrite(args, "0.5.23")
    assert rewritten == [
        "--cuda-graph-backend-decode", "disabled", "--cuda-graph-backend-prefill", "disabled",
        "--cuda-graph-max-bs-decode", "16", "--cuda-graph-bs-decode", "1", "2", "4",
    ]  # fmt: skip
    assert [finding.flag for finding in applied] == ["--disable-cuda-graph", "--cuda-graph-max-bs", "--cuda-graph-bs"]


def test_a_removed_choice_blocks_and_has_no_rewrite() -> None:
    [finding] = flag_history.lint(["--kv-cache-dtype", "fp4_e2m1"], "0.5.23")
    assert (finding.change, finding.version, finding.blocking, finding.replacement) == (
        "choice-removed",
        "0.5.21",
        True,
        None,
    )
    assert finding.message.startswith("--kv-cache-dtype fp4_e2m1: the choice fp4_e2m1 was removed in SGLang 0.5.21")
    assert flag_history.lint(["--kv-cache-dtype", "fp8_e4m3"], "0.5.23") == []
    assert flag_history.lint(["--kv-cache-dtype", "fp4_e2m1"], "0.5.20") == []
    assert flag_history.rewrite(["--kv-cache-dtype", "fp4_e2m1"], "0.5.23") == (["--kv-cache-dtype", "fp4_e2m1"], [])


def test_a_rename_of_a_rename_is_followed_with_the_values_sglang_maps() -> None:
    args = ["--nsa-prefill-cp-mode", "in-seq-split", "--enable-nsa-prefill-context-parallel"]
    rewritten, _ = flag_history.rewrite(args, "0.5.23")
    assert rewritten == ["--cp-strategy", "zigzag", "--enable-prefill-cp"]
    # SGLang names no --cp-strategy value for round-robin-split under this old flag: left as it is.
    [finding] = flag_history.lint(["--prefill-cp-mode", "round-robin-split"], "0.5.16")
    assert finding.replacement is None and "No rewrite for the value round-robin-split" in finding.message


def test_advice_that_is_not_a_substitution_is_shown_and_not_applied() -> None:
    [finding] = flag_history.lint(["--dp-size", "2", "--enable-dp-attention"], "0.5.23")
    assert (finding.flag, finding.change, finding.blocking, finding.replacement) == (
        "--enable-dp-attention",
        "deprecated",
        False,
        None,
    )
    assert "Use --attn-dp-size <dp-size> instead of --dp-size <dp-size> --enable-dp-attention" in finding.message


def test_unknown_versions_and_flags_are_left_alone() -> None:
    assert flag_history.lint(EXTRA_BUFFER, "unknown") == []
    assert flag_history.lint(["--served-model-name=--cuda-graph-max-bs"], "0.5.23") == []  # a value, not a flag
    assert flag_history.newest_version() == "0.5.23"


FLAGS = st.sampled_from(
    [
        ["--mamba-scheduler-strategy", "no_buffer"],
        ["--cuda-graph-max-bs", "8"],
        ["--disable-cuda-graph"],
        ["--enable-piecewise-cuda-graph"],
        ["--nsa-decode-backend", "flashmla_kv"],
        ["--tp-size", "2"],
        ["--served-model-name", "m"],
        ["--kv-cache-dtype", "fp4_e2m1"],
    ]
)
VERSIONS = st.sampled_from([f"0.5.{patch}" for patch in range(9, 25)])


@given(st.lists(FLAGS, max_size=6).map(lambda parts: [arg for part in parts for arg in part]), VERSIONS)
def test_after_a_rewrite_nothing_rewritable_is_left_and_a_second_rewrite_changes_nothing(
    args: list[str], version: str
) -> None:
    rewritten, _ = flag_history.rewrite(args, version)
    assert all(finding.replacement is None for finding in flag_history.lint(rewritten, version))
    assert flag_history.rewrite(rewritten, version) == (rewritten, [])
    untouched = [arg for arg in args if arg in ("--tp-size", "--served-model-name")]
    assert [arg for arg in rewritten if arg in ("--tp-size", "--served-model-name")] == untouched
