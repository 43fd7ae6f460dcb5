"""The team's knowledge base: rules that correct the built-in diagnosis.

A rule names what to look for (a fixed string or a regular expression, in the root error or in any
line of the log) and what it means (a failure class, a title, a hint). Rules come from TOML files
(`parse_rules`) or, built the same way, from database rows: a `Rule` is a plain frozen value.

How rules decide, in one place (`RuleScanner.decide`):
- a rule applies when its `match` is found in its scope, or when the built-in fingerprint is listed
  in its `merge`; the first rule that applies, in file order, decides the class, title and hint
  (an empty hint gives the class's own), and the built-in answer is kept beside it. A scope `any`
  rule applies to a log the analyzer called healthy too: the team may know a line means failure;
- merging files a fingerprint under the first one the rule lists: that group already exists, so it
  keeps its history, its id does not change when the rule's wording is edited, and it has the shape
  of every other fingerprint. The first rule that lists a fingerprint decides where it goes.
- `flag_aware` (fixed strings only, as in log search) makes `-` and `_` alike and a flag's leading
  `--` optional, so `--mamba-scheduler-strategy` finds `mamba_scheduler_strategy`; a regular
  expression says what it means itself (`[-_]`), and a rule asking for both is refused.

How a rule cannot stall diagnosis: Python's `re` cannot be interrupted, and no screening of patterns
catches every slow one (`(a+)+$`, `(.*)(.*)\\2\\1x`), so a rule's regular expression runs on the
`regex` package, whose matcher stops at a timeout. Each search may take `SEARCH_SECONDS`; over a
whole log a rule may spend `RULE_SECONDS` plus `RULE_SECONDS_PER_CHARACTER` for each character it
reads, so a slow rule costs at most time linear in the log. A rule that runs out is skipped for the
rest of the log with a warning (`stalled` names it, so the team's copy can be set aside until it
is edited), and the diagnosis goes on without it. All the rules of one diagnosis share
`DIAGNOSIS_SECONDS`; past it the regular expressions left are skipped. The matcher lets go of the
GIL while it runs, so a scan in a worker thread leaves the event loop its share. Lines are cut at
`MAX_LINE` characters, which also bounds the memory a line without a newline takes. Fixed strings
compile to an escaped `re` pattern, which runs in time linear in the line.

A rule is also checked when it is made or imported (`rule_from`): a regular expression that cannot
search a few hostile lines (`PROBE_LINES`) within `PROBE_SECONDS` each backtracks without bound and
is refused with a sentence, before it can cost a diagnosis anything.
"""

from __future__ import annotations

import codecs
import re
import time
import tomllib
from dataclasses import dataclass, field, replace
from enum import StrEnum
from typing import Any

import regex

from app.diagnose.analyze import Diagnosis
from app.diagnose.lexicon import HINTS
from app.errors import InvalidInput
from app.states import FailureClass

SEARCH_SECONDS = 0.1  # one regular expression on one line
RULE_SECONDS = 1.0  # what one rule may spend on a log, at first,
RULE_SECONDS_PER_CHARACTER = 50e-9  # and more for each character it reads: 20 MB/s at the slowest
DIAGNOSIS_SECONDS = 2.0  # what all the rules together may spend on one diagnosis
MAX_LINE = 64 * 1024
MAX_PATTERN = 2000
MAX_RULES = 500  # a team's rules; each diagnosis runs them all
PROBE_SECONDS = 0.05
# Lines on which a pattern that backtracks without bound runs for seconds, while a sound one takes
# microseconds: long runs of one character, of log-like text and of spaces, none matching to the end.
PROBE_LINES = ("x" * 4096 + "!", "[2026-01-01 00:00:00 TP0] Error: a-b_c.d/e (f) " * 80 + "\x00", " " * 4096 + "!")
FINGERPRINT = re.compile(r"[0-9a-f]{16}")
FLAG_PIECES = re.compile(r"(?<![\w-])--(?=\w)|[-_]")
KEYS = ("match", "regex", "class", "title", "hint", "scope", "flag_aware", "merge", "author")


class RuleScope(StrEnum):
    ROOT = "root"  # the root error line
    ANY = "any"  # any line of the log


@dataclass(frozen=True)
class Rule:
    failure_class: str
    title: str
    match: str = ""  # empty only for a rule that merges fingerprints and matches nothing itself
    regex: bool = False
    hint: str = ""
    scope: RuleScope = RuleScope.ROOT
    flag_aware: bool = True
    merge: tuple[str, ...] = ()
    author: str = ""


@dataclass(frozen=True)
class RuleDecision:
    """Which rule decided a diagnosis, and on what evidence."""

    rule: Rule
    evidence: str  # the line the rule matched, or the fingerprint it merges
    line: int | None  # that line's number in the log, when it was a line


def parse_rules(text: str) -> tuple[Rule, ...]:
    """The rules of a TOML document; `InvalidInput` names the rule (1-based) and field at fault."""
    try:
        document = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise InvalidInput(f"not valid TOML: {exc}") from None
    except RecursionError:
        raise InvalidInput("not valid TOML for a rules file: its arrays or tables nest too deep") from None
    if unknown := sorted(set(document) - {"rule"}):
        raise InvalidInput(f"unknown top-level key {unknown[0]!r}: a rules file holds only [[rule]] tables")
    tables = document.get("rule", [])
    if not isinstance(tables, list) or not all(isinstance(table, dict) for table in tables):
        raise InvalidInput("`rule` must be a list of tables, written [[rule]]")
    if len(tables) > MAX_RULES:
        raise InvalidInput(f"the file holds {len(tables)} rules; a team keeps at most {MAX_RULES}")
    return tuple(rule_from(table, where=f"rule {number}") for number, table in enumerate(tables, 1))


def rule_from(table: dict[str, Any], *, where: str) -> Rule:
    """One rule from its fields (a TOML table, a database row's columns), checked."""
    if unknown := sorted(set(table) - set(KEYS)):
        raise InvalidInput(f"{where}: unknown key {unknown[0]!r}; a rule takes {', '.join(KEYS)}")

    def text(key: str, *, required: bool = False) -> str:
        value = table.get(key, "")
        if not isinstance(value, str):
            raise InvalidInput(f"{where}: {key} must be a string, not {type(value).__name__}")
        if "\0" in value:
            raise InvalidInput(f"{where}: {key} contains a NUL byte")
        if required and not value.strip():
            raise InvalidInput(f"{where}: {key} is required and must not be empty")
        return value

    def flag(key: str, default: bool) -> bool:
        value = table.get(key, default)
        if not isinstance(value, bool):
            raise InvalidInput(f"{where}: {key} must be true or false, not {value!r}")
        return value

    failure_class = text("class", required=True)
    if failure_class not in list(FailureClass):
        raise InvalidInput(f"{where}: class {failure_class!r} is not one of {', '.join(FailureClass)}")
    scope = text("scope") or RuleScope.ROOT
    if scope not in tuple(RuleScope):
        raise InvalidInput(f"{where}: scope {scope!r} must be 'root' (the root error) or 'any' (any line)")
    merge = table.get("merge", [])
    if not isinstance(merge, list) or not all(isinstance(item, str) for item in merge):
        raise InvalidInput(f"{where}: merge must be a list of fingerprints (strings)")
    if bad := next((item for item in merge if not FINGERPRINT.fullmatch(item)), None):
        raise InvalidInput(f"{where}: merge lists {bad!r}, which is not a fingerprint (16 hex digits)")
    if "match" in table or not merge:
        text("match", required=True)  # only a rule that merges may leave it out
    if table.get("regex") is True and table.get("flag_aware") is True:
        raise InvalidInput(f"{where}: flag_aware applies to fixed strings; in a regular expression write [-_]")
    rule = Rule(
        failure_class=failure_class,
        title=text("title", required=True).strip(),
        match=text("match"),
        regex=flag("regex", False),
        hint=text("hint").strip(),
        scope=RuleScope(scope),
        flag_aware=flag("flag_aware", True),
        merge=tuple(merge),
        author=text("author").strip(),
    )
    if (pattern := compile_match(rule, where=where)) is not None and rule.regex:
        _probe(pattern, where=where)
    return rule


def _probe(pattern: re.Pattern[str] | regex.Pattern[str], *, where: str) -> None:
    """Refuses a regular expression that backtracks without bound on one of the hostile lines."""
    assert isinstance(pattern, regex.Pattern)
    for line in PROBE_LINES:
        try:
            pattern.search(line, timeout=PROBE_SECONDS, concurrent=True)
        except TimeoutError:
            raise InvalidInput(
                f"{where}: match is a regular expression that ran past {PROBE_SECONDS:g} s on a test line of "
                f"{len(line)} characters (it backtracks without bound, as nested or repeated groups that can "
                "match the same text do); write it so that each part can match a piece of text one way only"
            ) from None


def compile_match(rule: Rule, *, where: str = "rule") -> re.Pattern[str] | regex.Pattern[str] | None:
    """The rule's match as a pattern: a user's regular expression on the `regex` engine (it can be
    stopped), a fixed string as an escaped `re` pattern."""
    if not rule.match:
        return None
    if not rule.regex:
        if not rule.flag_aware:
            return re.compile(re.escape(rule.match))
        pieces = FLAG_PIECES.split(rule.match)
        joints = ["(?:--)?" if joint == "--" else "[-_]" for joint in FLAG_PIECES.findall(rule.match)]
        pattern = re.escape(pieces[0]) + "".join(j + re.escape(p) for j, p in zip(joints, pieces[1:], strict=True))
        return re.compile(pattern)
    if len(rule.match) > MAX_PATTERN:
        raise InvalidInput(
            f"{where}: match is a regular expression of {len(rule.match)} characters; at most {MAX_PATTERN}"
        )
    try:
        return regex.compile(rule.match, regex.VERSION0)
    except (regex.error, OverflowError, RecursionError) as exc:
        raise InvalidInput(f"{where}: match is not a valid regular expression: {exc}") from None


@dataclass
class _Watch:
    """One rule as the scanner runs it: its pattern and the time it has left."""

    index: int
    rule: Rule
    pattern: re.Pattern[str] | regex.Pattern[str] | None
    seconds_left: float = RULE_SECONDS
    skipped: bool = False


@dataclass
class RuleScanner:
    """Runs a list of rules over a log as it is read (`feed_bytes`, the same chunks the analyzer
    gets), then decides the finished diagnosis (`decide`). Memory is bounded by the rules: a scope
    `any` rule keeps only the first line it matched, and the pending line is cut at `MAX_LINE`."""

    rules: tuple[Rule, ...]
    warnings: list[str] = field(default_factory=list)
    # Rules (by index) whose own regular expression ran out of time, with why: the team's copy of
    # such a rule is set aside until someone edits it. A rule skipped because the diagnosis's
    # shared time ran out is not listed: it may be sound.
    stalled: dict[int, str] = field(default_factory=dict)
    seconds_left: float = DIAGNOSIS_SECONDS

    def __post_init__(self) -> None:
        self._watches = [_Watch(index, rule, compile_match(rule)) for index, rule in enumerate(self.rules)]
        self._first_hit: dict[int, tuple[str, int]] = {}  # rule index -> (line, number)
        self._listening = [w for w in self._watches if w.rule.scope == RuleScope.ANY and w.pattern is not None]
        self._decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
        self._pending = ""
        self._number = 0

    def feed_bytes(self, chunk: bytes) -> None:
        if self._listening:
            self.feed(self._decoder.decode(chunk))

    def feed(self, chunk: str) -> None:
        if not self._listening:
            return
        lines = (self._pending + chunk).split("\n")
        self._pending = lines.pop()[:MAX_LINE]
        for line in lines:
            self._number += 1
            self._see(line[:MAX_LINE], self._number)

    def finish(self) -> None:
        """Reads the last line when the log does not end with a newline."""
        self._pending += self._decoder.decode(b"", final=True)
        if self._pending and self._listening:
            self._number += 1
            self._see(self._pending, self._number)
        self._pending = ""

    def _see(self, line: str, number: int) -> None:
        settled = False
        for watch in self._listening:
            if self._search(watch, line):
                self._first_hit[watch.index] = (line.strip(), number)
                settled = True
            settled = settled or watch.skipped
        if settled:
            # Once a rule has matched, it and every rule after it have nothing left to decide.
            earliest = min(self._first_hit, default=len(self.rules))
            self._listening = [w for w in self._listening if w.index < earliest and not w.skipped]

    def _search(self, watch: _Watch, line: str) -> bool:
        if watch.skipped or watch.pattern is None:
            return False
        if isinstance(watch.pattern, re.Pattern):
            return watch.pattern.search(line) is not None
        if self.seconds_left <= 0:
            self._skip(watch, f"the rules' {DIAGNOSIS_SECONDS:g} s for this diagnosis were spent")
            return False
        watch.seconds_left += len(line) * RULE_SECONDS_PER_CHARACTER
        own = min(SEARCH_SECONDS, watch.seconds_left)
        timeout = min(own, self.seconds_left)
        started = time.perf_counter()
        try:
            found = watch.pattern.search(line, timeout=timeout, concurrent=True)
        except TimeoutError:
            self.seconds_left -= timeout
            if timeout < own:  # cut short by the diagnosis's time, not its own
                self._skip(watch, f"the rules' {DIAGNOSIS_SECONDS:g} s for this diagnosis were spent")
            elif timeout < SEARCH_SECONDS:
                self._skip(watch, "its regular expression used all the time it has on a log this long", stalled=True)
            else:
                why = f"its regular expression ran past {timeout:g} s on a line of {len(line)} characters"
                self._skip(watch, why, stalled=True)
            return False
        spent = time.perf_counter() - started
        watch.seconds_left -= spent
        self.seconds_left -= spent
        return found is not None

    def _skip(self, watch: _Watch, why: str, *, stalled: bool = False) -> None:
        watch.skipped = True
        self.warnings.append(f"rule {watch.index + 1} ({watch.rule.title}) was skipped: {why}")
        if stalled:
            self.stalled[watch.index] = why

    def decide(self, diagnosis: Diagnosis) -> tuple[Diagnosis, RuleDecision | None]:
        """The diagnosis as the rules decide it, and which rule did (None: the built-in answer stands)."""
        self.finish()
        fingerprint = diagnosis.fingerprint
        merged = next((w.rule.merge[0] for w in self._watches if fingerprint in w.rule.merge), fingerprint)
        decision = next(
            (found for watch in self._watches if (found := self._applies(watch, diagnosis)) is not None), None
        )
        if decision is None:
            return replace(diagnosis, fingerprint=merged), None
        rule = decision.rule
        decided = replace(
            diagnosis,
            failure_class=rule.failure_class,
            hint=rule.hint or HINTS[rule.failure_class],
            fingerprint=merged,
            recognised=True,  # a person placed it, even as `other`
        )
        return decided, decision

    def _applies(self, watch: _Watch, diagnosis: Diagnosis) -> RuleDecision | None:
        if diagnosis.fingerprint is not None and diagnosis.fingerprint in watch.rule.merge:
            return RuleDecision(watch.rule, f"fingerprint {diagnosis.fingerprint}", None)
        if watch.rule.scope == RuleScope.ANY:
            line, number = self._first_hit.get(watch.index, ("", 0))
            return RuleDecision(watch.rule, line, number) if number else None
        root = diagnosis.root_error
        if root is not None and self._search(watch, root[:MAX_LINE]):
            return RuleDecision(watch.rule, root, diagnosis.root_line)
        return None
