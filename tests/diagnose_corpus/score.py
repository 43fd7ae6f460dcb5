"""How `diagnose` scores on folders of labelled logs in the corpus format. It measures batches kept
out of the corpus (new arrivals, the held-back split) the way the catalogue test measures the corpus.

Class right, root line right and healthy logs called failed, per folder:

    python -m tests.diagnose_corpus.score tests/diagnose_arrivals/* tests/diagnose_holdout/*

How well fingerprints group the failures by their `cause` labels, over all the folders given
together: pairwise precision and recall, and the groups that fingerprints split or merge:

    python -m tests.diagnose_corpus.score --fingerprints tests/diagnose_corpus
"""

from __future__ import annotations

import sys
from collections import Counter, defaultdict
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path

from app.diagnose.analyze import Diagnosis, diagnose
from tests.diagnose_corpus import Case, load_cases


def same_line(got: str | None, expected: str | None) -> bool:
    """Root lines compare equal when they match but for surrounding whitespace."""
    if got is None or expected is None:
        return got is expected
    return got.strip() == expected.strip()


@dataclass(frozen=True)
class Miss:
    case_id: str
    wanted_class: str
    got_class: str
    wanted_root: str | None
    got_root: str | None


@dataclass
class Score:
    size: int = 0
    class_right: int = 0
    root_right: int = 0
    healthy: int = 0
    healthy_called_failed: int = 0
    misses: list[Miss] = field(default_factory=list)

    def cells(self) -> tuple[str, str, str, str]:
        """The cells of a row in tests/diagnose_arrivals/README.md: size, class right, root right,
        healthy called failed."""
        return (
            str(self.size),
            f"{self.class_right}/{self.size} ({_percent(self.class_right, self.size)})",
            f"{self.root_right}/{self.size} ({_percent(self.root_right, self.size)})",
            f"{self.healthy_called_failed}/{self.healthy}",
        )


def score(folder: Path) -> Score:
    result = Score()
    for case in load_cases(folder):
        diagnosis = diagnose(case.log)
        class_ok = diagnosis.failure_class == case.failure_class
        root_ok = same_line(diagnosis.root_error, case.root)
        result.size += 1
        result.class_right += class_ok
        result.root_right += root_ok
        if case.failure_class == "healthy":
            result.healthy += 1
            result.healthy_called_failed += diagnosis.failure_class != "healthy"
        if not (class_ok and root_ok):
            result.misses.append(
                Miss(case.id, case.failure_class, diagnosis.failure_class, case.root, diagnosis.root_error)
            )
    return result


def _percent(hits: int, total: int) -> str:
    return f"{100 * hits / total:.0f}%" if total else "-"


def report(folder: Path, result: Score) -> str:
    lines = [
        f"{folder}: {result.size} logs",
        f"  class right            {result.class_right}/{result.size} = {_percent(result.class_right, result.size)}",
        f"  root line right        {result.root_right}/{result.size} = {_percent(result.root_right, result.size)}",
        f"  healthy called failed  {result.healthy_called_failed}/{result.healthy}",
    ]
    for miss in result.misses:
        lines.append(f"  miss {miss.case_id}: class {miss.got_class} (want {miss.wanted_class})")
        lines.append(f"       root {(miss.got_root or '')[:110]!r}")
        lines.append(f"       want {(miss.wanted_root or '')[:110]!r}")
    return "\n".join(lines)


def _pairs(size: int) -> int:
    return size * (size - 1) // 2


@dataclass(frozen=True)
class Bucket:
    """Cases under one name (a cause, or a fingerprint), and how the analyzer signs the first."""

    name: str
    case_ids: tuple[str, ...]
    signature: str  # "class | type: normalised message" of the first case, or "no fingerprint"


@dataclass(frozen=True)
class Offender:
    """A cause split over several fingerprints, or a fingerprint shared by several causes."""

    name: str
    wrong_pairs: int  # the pairs it costs recall (split) or precision (merged)
    buckets: tuple[Bucket, ...]


@dataclass(frozen=True)
class Grouping:
    """Fingerprints judged as a clustering of the failures by their `cause` labels, over pairs of
    cases: precision is the share of pairs with one fingerprint that have one cause, recall the share
    of pairs with one cause that have one fingerprint. A case without a fingerprint is paired with
    nothing. With no pair to judge, a figure is 1."""

    cases: int
    causes: int
    cause_pairs: int
    fingerprint_pairs: int
    agreeing_pairs: int
    split: tuple[Offender, ...]  # causes over several fingerprints, the costliest first
    merged: tuple[Offender, ...]  # fingerprints over several causes, the costliest first

    @property
    def precision(self) -> float:
        return self.agreeing_pairs / self.fingerprint_pairs if self.fingerprint_pairs else 1.0

    @property
    def recall(self) -> float:
        return self.agreeing_pairs / self.cause_pairs if self.cause_pairs else 1.0


def _signature(result: Diagnosis) -> str:
    if result.fingerprint is None:
        return "no fingerprint"
    message = f"{result.error_type}: {result.error_message}" if result.error_type else result.error_message
    return f"{result.failure_class} | {message}"


def _offenders(groups: dict[str, list[tuple[Case, Diagnosis]]], key: str) -> tuple[Offender, ...]:
    """The groups whose cases fall apart under `key` ("fingerprint" or "cause"), with what it costs."""
    found = []
    for name, members in groups.items():
        parts: dict[str, list[tuple[Case, Diagnosis]]] = defaultdict(list)
        for made, result in members:
            # Cases without a fingerprint are each apart from everything.
            part = (result.fingerprint or f"none:{made.id}") if key == "fingerprint" else made.cause
            parts[part].append((made, result))
        if len(parts) < 2:
            continue
        buckets = tuple(
            Bucket(part, tuple(made.id for made, _ in cases), _signature(cases[0][1]))
            for part, cases in sorted(parts.items(), key=lambda item: -len(item[1]))
        )
        wrong = _pairs(len(members)) - sum(_pairs(len(cases)) for cases in parts.values())
        found.append(Offender(name, wrong, buckets))
    return tuple(sorted(found, key=lambda offender: (-offender.wrong_pairs, offender.name)))


def grouping(results: Iterable[tuple[Case, Diagnosis]]) -> Grouping:
    """How fingerprints group the cases that carry a cause label (healthy logs carry none)."""
    labelled = [(made, result) for made, result in results if made.cause]
    by_cause: dict[str, list[tuple[Case, Diagnosis]]] = defaultdict(list)
    by_fingerprint: dict[str, list[tuple[Case, Diagnosis]]] = defaultdict(list)
    for made, result in labelled:
        by_cause[made.cause].append((made, result))
        if result.fingerprint is not None:
            by_fingerprint[result.fingerprint].append((made, result))
    both = Counter((made.cause, result.fingerprint) for made, result in labelled if result.fingerprint is not None)
    return Grouping(
        cases=len(labelled),
        causes=len(by_cause),
        cause_pairs=sum(_pairs(len(members)) for members in by_cause.values()),
        fingerprint_pairs=sum(_pairs(len(members)) for members in by_fingerprint.values()),
        agreeing_pairs=sum(_pairs(size) for size in both.values()),
        split=_offenders(by_cause, "fingerprint"),
        merged=_offenders(by_fingerprint, "cause"),
    )


def diagnosed(folders: Iterable[Path]) -> list[tuple[Case, Diagnosis]]:
    return [(made, diagnose(made.log)) for folder in folders for made in load_cases(folder)]


def fingerprint_report(result: Grouping) -> str:
    precision = f"{result.precision:.2f}" if result.fingerprint_pairs else "-   "
    recall = f"{result.recall:.2f}" if result.cause_pairs else "-   "
    lines = [
        f"  {result.cases} failures labelled with a cause, in {result.causes} cause groups",
        f"  precision  {precision}  ({result.agreeing_pairs}/{result.fingerprint_pairs} pairs that share "
        "a fingerprint share a cause)",
        f"  recall     {recall}  ({result.agreeing_pairs}/{result.cause_pairs} pairs that share a cause "
        "share a fingerprint)",
    ]
    for offender in result.split:
        lines.append(f"  split    {offender.name}: {offender.wrong_pairs} pairs apart, over these fingerprints")
        lines.extend(
            f"             {bucket.signature[:110]!r}: {', '.join(bucket.case_ids)}" for bucket in offender.buckets
        )
    for offender in result.merged:
        signature = offender.buckets[0].signature[:110]
        lines.append(f"  merged   {offender.name} {signature!r}: {offender.wrong_pairs} pairs of different causes")
        lines.extend(f"             {bucket.name}: {', '.join(bucket.case_ids)}" for bucket in offender.buckets)
    return "\n".join(lines)


def main(arguments: list[str]) -> int:
    fingerprints = "--fingerprints" in arguments
    folders = [Path(name) for name in arguments if name != "--fingerprints"]
    if not folders:
        print(__doc__)
        return 2
    if fingerprints:
        print(f"fingerprints over {' '.join(map(str, folders))}:")
        print(fingerprint_report(grouping(diagnosed(folders))))
        return 0
    for folder in folders:
        print(report(folder, score(folder)))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
