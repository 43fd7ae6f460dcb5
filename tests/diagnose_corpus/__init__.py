"""The `diagnose` corpus as data: one log window per file under a folder per failure class, its
labels in header lines above a `---` line.

The format is described in README.md beside this module; this loader refuses anything else, so a
mistyped label fails the suite instead of silently dropping out of it.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

CORPUS = Path(__file__).parent
SEPARATOR = "\n---\n"
SINGLE_LABELS = {"class", "cause", "root", "xfail"}
REPEATED_LABELS = {"note", "adjustment"}
CAUSE_NAME = re.compile(r"[a-z0-9]+(?:-[a-z0-9]+)*")


class CorpusError(ValueError):
    """A corpus file that does not follow the format in README.md."""


@dataclass(frozen=True)
class Case:
    id: str
    log: str
    failure_class: str
    root: str | None  # the raw line as it stands in the log; None for a healthy log
    cause: str = ""  # the cause group, in kebab-case: cases with one cause share it, whatever their wording
    adjustments: tuple[str, ...] = ()  # each must appear within one entry of Diagnosis.adjustments
    xfail: str = ""  # why the analyzer still gets this case wrong (a strict xfail)
    notes: tuple[str, ...] = ()  # what the window shows, for the person reading the file


def read_case(path: Path) -> Case:
    # Bytes, not read_text: universal newlines would turn the fixtures' "\r" into "\n".
    text = path.read_bytes().decode("utf-8")
    header, separator, log = text.partition(SEPARATOR)
    if not separator:
        raise CorpusError(f"{path}: no '---' line ends the header")
    labels: dict[str, list[str]] = {}
    for line in header.split("\n"):
        name, colon, value = line.removeprefix("# ").partition(": ")
        if not line.startswith("# ") or not colon or name not in SINGLE_LABELS | REPEATED_LABELS:
            raise CorpusError(f"{path}: not a header line: {line!r}")
        if name in SINGLE_LABELS and name in labels:
            raise CorpusError(f"{path}: '{name}' given twice")
        labels.setdefault(name, []).append(value)
    failure_class = labels.get("class", [""])[0]
    cause = labels.get("cause", [""])[0]
    if "cause" in labels and not CAUSE_NAME.fullmatch(cause):
        raise CorpusError(f"{path}: cause {cause!r} is not a kebab-case name")
    if failure_class != path.parent.name:
        raise CorpusError(f"{path}: class {failure_class!r} but the file is in {path.parent.name}/")
    return Case(
        id=path.stem,
        log=log,
        failure_class=failure_class,
        root=labels["root"][0] if "root" in labels else None,
        cause=cause,
        adjustments=tuple(labels.get("adjustment", ())),
        xfail=labels.get("xfail", [""])[0],
        notes=tuple(labels.get("note", ())),
    )


def load_cases(folder: Path = CORPUS) -> list[Case]:
    """Every case under `folder`, one class folder deep: the corpus by default, or a folder in the
    same format kept out of it (a batch of arrivals, the held-back split)."""
    return [read_case(path) for path in sorted(folder.glob("*/*.log"))]
