"""The catalogue corpus for `diagnose`, one case per file in tests/diagnose_corpus/ (its README
gives the format): whole log windows written from the templates of /work/shared/SGLANG-LOG-FORMATS.md,
one or more per failure class and per parser trap (§4).

Each case states the class and the root line a human would pick, taken from the catalogue's "Root:"
rules (§3) and its traps (§4), not from what the analyzer says. Only surrounding whitespace is
ignored when comparing root lines. Cases the analyzer still gets wrong are strict xfails.

`pytest -s` prints a summary: class accuracy, root-line accuracy and fingerprint grouping.
"""

from __future__ import annotations

import pytest

from app.diagnose.analyze import Diagnosis, diagnose
from tests.diagnose_corpus import Case, Pair, load_cases, load_pairs
from tests.diagnose_corpus.score import same_line

CASES = load_cases()
SAME_CAUSE = load_pairs("same_cause")  # one cause in other numbers, paths, ranks, versions, wrappers
DIFFERENT_CAUSE = load_pairs("different_cause")  # apart even where the exception type or class is shared

BY_ID = {made.id: made for made in CASES}
_RESULTS: dict[str, Diagnosis] = {}


def result_of(case_id: str) -> Diagnosis:
    if case_id not in _RESULTS:
        _RESULTS[case_id] = diagnose(BY_ID[case_id].log)
    return _RESULTS[case_id]


def missing_adjustments(made: Case, result: Diagnosis) -> list[str]:
    return [wanted for wanted in made.adjustments if not any(wanted in seen for seen in result.adjustments)]


def _params(pairs: list[Pair]) -> list[object]:
    return [
        pytest.param(
            pair.first,
            pair.second,
            id=f"{pair.first}~{pair.second}",
            marks=[pytest.mark.xfail(reason=pair.xfail, strict=True)] if pair.xfail else [],
        )
        for pair in pairs
    ]


def test_the_corpus_is_consistent() -> None:
    assert len(CASES) >= 40 and len(BY_ID) == len(CASES), "case ids must be unique"
    classes = {made.failure_class for made in CASES}
    wanted = {"oom", "arg-conflict", "nccl", "cuda-graph", "port-in-use", "model-load", "import-error", "driver"}
    assert wanted | {"timeout", "other", "healthy"} <= classes
    for made in CASES:
        assert (made.root is None) == (made.failure_class == "healthy"), made.id
        assert made.root is None or made.root.strip() in made.log, f"{made.id}: the root is not in the log"
        assert 5 <= len(made.log.splitlines()) <= 60, made.id
        assert bool(made.cause) == (made.failure_class != "healthy"), (
            f"{made.id}: every failure, and only a failure, has a cause"
        )
    for pair in SAME_CAUSE + DIFFERENT_CAUSE:
        assert pair.first in BY_ID and pair.second in BY_ID, pair


@pytest.mark.parametrize(
    "made",
    [
        pytest.param(made, id=made.id, marks=[pytest.mark.xfail(reason=made.xfail, strict=True)])
        if made.xfail
        else pytest.param(made, id=made.id)
        for made in CASES
    ],
)
def test_class_and_root_line(made: Case) -> None:
    result = result_of(made.id)
    assert result.failure_class == made.failure_class, f"root_error={result.root_error!r}"
    assert same_line(result.root_error, made.root), f"got {result.root_error!r}"
    if made.root is not None:
        assert result.fingerprint
    assert not missing_adjustments(made, result), f"adjustments={result.adjustments!r}"


@pytest.mark.parametrize(("first", "second"), _params(SAME_CAUSE))
def test_one_cause_one_fingerprint(first: str, second: str) -> None:
    one, other = result_of(first).fingerprint, result_of(second).fingerprint
    assert one is not None and one == other


@pytest.mark.parametrize(("first", "second"), _params(DIFFERENT_CAUSE))
def test_different_causes_different_fingerprints(first: str, second: str) -> None:
    one, other = result_of(first).fingerprint, result_of(second).fingerprint
    assert one is not None and other is not None and one != other


def test_summary() -> None:
    """Accuracy over the whole corpus, printed for `pytest -s`, held to the targets the hold-out
    set of real logs is judged by."""
    class_hits = root_hits = healthy_ok = healthy_total = 0
    misses: list[str] = []
    for made in CASES:
        result = result_of(made.id)
        class_ok = result.failure_class == made.failure_class
        root_ok = same_line(result.root_error, made.root)
        adjust_ok = not missing_adjustments(made, result)
        class_hits += class_ok
        root_hits += root_ok
        if made.failure_class == "healthy":
            healthy_total += 1
            healthy_ok += result.failure_class == "healthy"
        if not (class_ok and root_ok and adjust_ok):
            got = (result.root_error or "")[:90]
            misses.append(f"  {made.id}: class {result.failure_class} (want {made.failure_class}); root {got!r}")
    same_ok = sum(
        result_of(pair.first).fingerprint is not None
        and result_of(pair.first).fingerprint == result_of(pair.second).fingerprint
        for pair in SAME_CAUSE
    )
    diff_ok = sum(result_of(pair.first).fingerprint != result_of(pair.second).fingerprint for pair in DIFFERENT_CAUSE)
    total = len(CASES)
    print()
    print(f"diagnose catalogue corpus: {total} logs")
    print(f"  class      {class_hits}/{total} = {100 * class_hits / total:.1f}%   (target >= 95%)")
    print(f"  root line  {root_hits}/{total} = {100 * root_hits / total:.1f}%   (target >= 90%)")
    print(f"  healthy    {healthy_ok}/{healthy_total} healthy logs called healthy")
    print(
        f"  fingerprint: same cause shared {same_ok}/{len(SAME_CAUSE)}, different causes apart "
        f"{diff_ok}/{len(DIFFERENT_CAUSE)}"
    )
    if misses:
        print("  misses:")
        print("\n".join(misses))
    assert class_hits >= 0.95 * total and root_hits >= 0.90 * total and healthy_ok == healthy_total
