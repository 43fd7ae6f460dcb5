"""How `diagnose` scores on a folder of labelled logs in the corpus format: class right, root line
right, and healthy logs called failed. It measures batches kept out of the corpus (new arrivals,
the held-back split) the way the catalogue test measures the corpus.

    python -m tests.diagnose_corpus.score tests/diagnose_arrivals/2026-12-03 tests/diagnose_holdout
"""

from __future__ import annotations

import sys
from dataclasses import dataclass, field
from pathlib import Path

from app.diagnose.analyze import diagnose
from tests.diagnose_corpus import load_cases


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


def main(folders: list[str]) -> int:
    if not folders:
        print(__doc__)
        return 2
    for name in folders:
        folder = Path(name)
        print(report(folder, score(folder)))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
