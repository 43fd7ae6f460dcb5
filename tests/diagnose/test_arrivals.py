"""The on-arrival table in tests/diagnose_arrivals/README.md cannot go stale: every row whose batch
names a folder is scored again, and its "now" cells must say what the analyzer gives today. The "on
arrival" cells are history and are not checked.

These folders stay out of the corpus summary in tests/diagnose/test_catalogue.py, which fails the suite
below its targets; here the figures only have to be recorded truthfully.
"""

from __future__ import annotations

import pytest

from tests.diagnose_corpus import load_cases
from tests.diagnose_corpus.score import score
from tests.support.paths import DIAGNOSE_ARRIVALS, ROOT

TABLE = DIAGNOSE_ARRIVALS / "README.md"
HEADER = "| date | batch | size |"


def checked_rows() -> list[dict[str, str]]:
    """The table's rows whose batch cell is a folder in backticks, as {column name: cell}."""
    lines = TABLE.read_text(encoding="utf-8").splitlines()
    start = next(index for index, line in enumerate(lines) if line.startswith(HEADER))
    names = [cell.strip() for cell in lines[start].strip("|").split("|")]
    rows = []
    for line in lines[start + 2 :]:
        if not line.startswith("|"):
            break
        cells = dict(zip(names, (cell.strip() for cell in line.strip("|").split("|")), strict=True))
        if cells["batch"].startswith("`"):
            rows.append(cells)
    return rows


ROWS = checked_rows()


def test_the_table_checks_the_arrivals_and_the_held_back_split() -> None:
    folders = {row["batch"].strip("`") for row in ROWS}
    assert any(folder.startswith("tests/diagnose_holdout/") for folder in folders)
    assert any(folder.startswith("tests/diagnose_arrivals/") for folder in folders)
    measured = [case for folder in folders for case in load_cases(ROOT / folder)]
    assert not {case.id for case in measured} & {case.id for case in load_cases()}, "a log in the corpus too"
    for case in measured:
        assert (case.root is None) == (case.failure_class == "healthy"), case.id
        assert case.root is None or case.root.strip() in case.log, f"{case.id}: the root is not in the log"
        assert 5 <= len(case.log.splitlines()) <= 60, case.id
        assert not (case.cause and case.failure_class == "healthy"), f"{case.id}: a healthy log has no cause"


@pytest.mark.parametrize("row", ROWS, ids=[row["batch"].strip("`") for row in ROWS])
def test_the_now_columns_match_the_analyzer(row: dict[str, str]) -> None:
    size, class_right, root_right, healthy_called_failed = score(ROOT / row["batch"].strip("`")).cells()
    recorded = (row["size"], row["class right now"], row["root right now"], row["healthy called failed now"])
    assert recorded == (size, class_right, root_right, healthy_called_failed), (
        "update the 'now' cells of this row in tests/diagnose_arrivals/README.md (never the 'on arrival' ones)"
    )
