"""The catalogue corpus for `diagnose`, one case per file in tests/diagnose_corpus/ (its README
gives the format): whole log windows written from the templates of /work/shared/SGLANG-LOG-FORMATS.md,
one or more per failure class and per parser trap (§4).

Each case states the class and the root line a human would pick, taken from the catalogue's "Root:"
rules (§3) and its traps (§4), not from what the analyzer says. Only surrounding whitespace is
ignored when comparing root lines. Cases the analyzer still gets wrong are strict xfails.

Each failure also names its cause group, and fingerprints are measured as a grouping of the corpus
by those groups (pairwise precision and recall, held to a floor).

`pytest -s` prints a summary (class and root-line accuracy) and the groups fingerprints split or merge.
"""

from __future__ import annotations

import pytest

from app.diagnose.analyze import Diagnosis, diagnose
from tests.diagnose_corpus import Case, load_cases
from tests.diagnose_corpus.score import fingerprint_report, grouping, same_line

CASES = load_cases()
# What fingerprint precision and recall over the cause groups may not fall below: the values measured
# when the groups were first labelled, to be raised as fingerprints improve (the goal is 0.9 each).
FINGERPRINT_PRECISION_FLOOR = 0.9
FINGERPRINT_RECALL_FLOOR = 0.9

BY_ID = {made.id: made for made in CASES}
_RESULTS: dict[str, Diagnosis] = {}


def result_of(case_id: str) -> Diagnosis:
    if case_id not in _RESULTS:
        _RESULTS[case_id] = diagnose(BY_ID[case_id].log)
    return _RESULTS[case_id]


def missing_adjustments(made: Case, result: Diagnosis) -> list[str]:
    return [wanted for wanted in made.adjustments if not any(wanted in seen for seen in result.adjustments)]


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


def test_fingerprints_group_failures_by_cause() -> None:
    """Cases with one cause share a fingerprint and cases with different causes do not, measured over
    all pairs of the corpus's failures; `pytest -s` prints the groups that fingerprints split or merge."""
    measured = grouping((made, result_of(made.id)) for made in CASES)
    report = fingerprint_report(measured)
    print()
    print("fingerprints over the diagnose catalogue corpus:")
    print(report)
    assert measured.precision >= FINGERPRINT_PRECISION_FLOOR and measured.recall >= FINGERPRINT_RECALL_FLOOR, report


def test_grouping_counts_pairs() -> None:
    """Three cases of one cause, one of which has no fingerprint, and a fourth of another cause that
    shares a fingerprint with two of them: 1 of 3 same-cause pairs kept, 1 of 3 same-fingerprint pairs right."""

    def labelled(case_id: str, cause: str, fingerprint: str | None) -> tuple[Case, Diagnosis]:
        return Case(case_id, "", "oom", "x", cause=cause), Diagnosis(failure_class="oom", fingerprint=fingerprint)

    measured = grouping(
        [
            labelled("a", "kv", "f1"),
            labelled("b", "kv", "f1"),
            labelled("c", "kv", None),
            labelled("d", "capture", "f1"),
        ]
    )
    assert (measured.cause_pairs, measured.fingerprint_pairs, measured.agreeing_pairs) == (3, 3, 1)
    assert [(split.name, split.wrong_pairs) for split in measured.split] == [("kv", 2)]
    assert [(merged.name, merged.wrong_pairs) for merged in measured.merged] == [("f1", 2)]


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
    total = len(CASES)
    print()
    print(f"diagnose catalogue corpus: {total} logs")
    print(f"  class      {class_hits}/{total} = {100 * class_hits / total:.1f}%   (target >= 95%)")
    print(f"  root line  {root_hits}/{total} = {100 * root_hits / total:.1f}%   (target >= 90%)")
    print(f"  healthy    {healthy_ok}/{healthy_total} healthy logs called healthy")
    if misses:
        print("  misses:")
        print("\n".join(misses))
    assert class_hits >= 0.95 * total and root_hits >= 0.90 * total and healthy_ok == healthy_total
