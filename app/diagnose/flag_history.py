"""Which of a preset's flags a given SGLang release renamed, deprecated or removed, and the
rewrite SGLang itself advises.

The facts come from flag_history.json, derived from the released packages' own parsers
(tests/oracle/derive_flag_history.py). A flag a release removed, or a choice it dropped, makes that
release's argparse exit with status 2, so such a finding blocks; a renamed or deprecated flag
still works there (with a warning), so it only warns. The other direction counts as well: a flag
that is only the new name of an older one is unknown to the releases before the rename.

Pure functions over argument lists; a version is compared by its public release part, so the
simulated "0.5.23+launchdeck.sim" is 0.5.23.
"""

from __future__ import annotations

import functools
import json
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

HISTORY = Path(__file__).with_name("flag_history.json")
RELEASE = re.compile(r"\d+(?:\.\d+)*")
MAX_REWRITE_PASSES = 5  # a rename of a rename (--nsa-* -> --dsa-* -> --cp-*) takes two


@dataclass(frozen=True)
class Change:
    """One row of the flag history: what `version` did to `flag` (or to one of its choices)."""

    flag: str
    change: str  # renamed, deprecated, removed, choice-removed
    version: str
    first_seen: str
    nargs: Any  # argparse's nargs for the flag: None (one value), 0 (a switch), "?", "*", "+"
    note: str = ""
    rewrite: tuple[str, ...] | None = None  # "{value}" stands for the flag's value
    values: dict[str, str] = field(default_factory=dict)
    choice: str | None = None
    replacement_since: str | None = None
    warns: bool = False


@dataclass(frozen=True)
class Finding:
    """A flag of the argument list that the release would warn about or refuse."""

    flag: str
    change: str  # renamed, deprecated, removed, choice-removed, or new (unknown to this older release)
    version: str  # the release that made the change
    blocking: bool  # the release's argparse refuses it (exit 2)
    message: str
    replacement: tuple[str, ...] | None  # what takes the place of the flag and its value, if mechanical
    start: int  # the flag's position in the argument list, and one past its last value
    end: int


def release(version: str | None) -> tuple[int, ...] | None:
    """(0, 5, 23) for "0.5.23" and "0.5.23+launchdeck.sim"; None when no release number is found."""
    found = RELEASE.match((version or "").strip().lstrip("v"))
    return tuple(int(part) for part in found[0].split(".")) if found else None


@functools.cache
def history() -> tuple[tuple[str, ...], tuple[Change, ...]]:
    data = json.loads(HISTORY.read_text())
    changes = []
    for row in data["changes"]:
        rewrite = row.get("rewrite")
        row = {**row, "rewrite": tuple(rewrite) if rewrite is not None else None, "values": row.get("values", {})}
        changes.append(Change(**row))
    return tuple(data["versions"]), tuple(changes)


def newest_version() -> str:
    return history()[0][-1]


def lint(args: list[str], version: str) -> list[Finding]:
    """Every flag in `args` that `version` renamed, deprecated or removed (or, for an older
    release, does not know yet because it is a later release's new name)."""
    target = release(version)
    if target is None:
        return []
    changes = history()[1]
    by_flag: dict[str, list[Change]] = {}
    for change in changes:
        by_flag.setdefault(change.flag, []).append(change)
    newer_names: dict[str, Change] = {}
    for change in changes:
        if (
            change.change == "renamed"
            and change.rewrite
            and _release(change.replacement_since) > target >= _release(change.first_seen)
        ):
            newer_names.setdefault(change.rewrite[0], change)
    findings = []
    i = 0
    while i < len(args):
        option, has_inline, inline = args[i].partition("=")
        if not option.startswith("--"):
            i += 1
            continue
        rows = [row for row in by_flag.get(option, []) if _release(row.version) <= target]
        nargs = rows[0].nargs if rows else (newer_names[option].nargs if option in newer_names else None)
        values, end = _values(args, i, nargs, inline if has_inline else None)
        if rows:
            finding = _finding(option, rows, values, version, i, end)
            if finding:
                findings.append(finding)
        elif option in newer_names:
            findings.append(_newer_name(option, newer_names[option], values, version, i, end))
        i = end
    return findings


def rewrite(args: list[str], version: str) -> tuple[list[str], list[Finding]]:
    """`args` with every mechanical rewrite for `version` applied (chains followed), and the
    findings that were rewritten."""
    applied: list[Finding] = []
    for _ in range(MAX_REWRITE_PASSES):
        findings = [finding for finding in lint(args, version) if finding.replacement is not None]
        if not findings:
            break
        for finding in reversed(findings):
            assert finding.replacement is not None
            args = [*args[: finding.start], *finding.replacement, *args[finding.end :]]
        applied += findings
    return args, applied


def story(flag: str) -> tuple[str, tuple[str, ...]] | None:
    """What the releases did to `flag` ("renamed to --x in 0.5.14, removed in 0.5.20") and what the
    newest release takes in its place (values left out; empty when nothing does), or None when the
    history does not know the flag."""
    rows = [row for row in history()[1] if row.flag == flag and row.change != "choice-removed"]
    if not rows:
        return None
    instead = next((row.rewrite for row in reversed(rows) if row.rewrite), ())
    return ", ".join(_event(row) for row in rows), tuple(token for token in instead if token != "{value}")


def _release(version: str | None) -> tuple[int, ...]:
    return release(version) or (0,)


def _values(args: list[str], i: int, nargs: Any, inline: str | None) -> tuple[list[str], int]:
    """The flag's values and the position after them, as argparse would take them."""
    if inline is not None:
        return [inline], i + 1
    following = []
    for arg in args[i + 1 :]:
        if arg.startswith("--"):
            break
        following.append(arg)
    if nargs == 0:
        return [], i + 1
    if nargs in (None, "?"):
        taken = following[:1]
    elif isinstance(nargs, int):
        taken = following[:nargs]
    else:
        taken = following
    return taken, i + 1 + len(taken)


def _finding(option: str, rows: list[Change], values: list[str], version: str, start: int, end: int) -> Finding | None:
    choice_rows = [row for row in rows if row.change == "choice-removed" and row.choice in values]
    flag_rows = [row for row in rows if row.change != "choice-removed"]
    if choice_rows:
        row = choice_rows[-1]
        message = (
            f"{option} {row.choice}: the choice {row.choice} was removed in SGLang {row.version}; "
            f"SGLang {version} refuses it (argparse exits 2)"
        )
        return Finding(option, row.change, row.version, True, message, None, start, end)
    if not flag_rows:
        return None
    row = flag_rows[-1]
    replacement = _replacement(row, values)
    story = ", ".join(_event(earlier) for earlier in flag_rows)
    if row.change == "removed":
        consequence = f"SGLang {version} refuses it (argparse exits 2)"
    else:
        consequence = f"SGLang {version} still accepts it" + (" with a warning" if row.warns else "")
    message = f"{option}: {story}; {consequence}"
    if row.note and not row.note.startswith("Deprecated alias for"):  # the story says as much
        message += f". SGLang says: {row.note.rstrip('.')}"
    if replacement is not None:
        message += f". Rewrite: {' '.join(replacement)}"
    elif row.rewrite is not None and values:
        message += f". No rewrite for the value {' '.join(values)}"
    return Finding(option, row.change, row.version, row.change == "removed", message, replacement, start, end)


def _event(row: Change) -> str:
    if row.change == "renamed" and row.rewrite:
        return f"renamed to {row.rewrite[0]} in {row.version}"
    return f"{row.change} in {row.version}"


def _replacement(row: Change, values: list[str]) -> tuple[str, ...] | None:
    if row.rewrite is None:
        return None
    tokens: list[str] = []
    for token in row.rewrite:
        if token != "{value}":
            tokens.append(token)
            continue
        if not values:
            return None
        for value in values:
            if row.values and value not in row.values:
                return None  # SGLang names no equivalent for this value
            tokens.append(row.values.get(value, value))
    return tuple(tokens)


def _newer_name(option: str, row: Change, values: list[str], version: str, start: int, end: int) -> Finding:
    """A flag that only exists as the new name of `row.flag`, in a release older than the rename."""
    assert row.rewrite is not None
    simple = not row.values and row.rewrite[1:] in ((), ("{value}",))
    replacement = (row.flag, *values) if simple else None
    message = (
        f"{option}: new in SGLang {row.replacement_since} as the new name of {row.flag}; "
        f"SGLang {version} does not know it (argparse exits 2)"
    )
    if replacement:
        message += f". Rewrite: {' '.join(replacement)}"
    return Finding(option, "new", str(row.replacement_since), True, message, replacement, start, end)
