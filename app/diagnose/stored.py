"""The diagnosis as launchdeck keeps and shows it: one typed shape for the attempt's row (a JSON
column), the attempt pages, the API's `diagnosis` object and `launchdeck diagnose`.

It lives in diagnose/, not beside the signatures in launch/, because the CLI prints it too and must
not load the database layer for that (failure_signatures.py pulls in SQLAlchemy: 0.7 s of start-up);
like the rest of diagnose/ it does no I/O.

Its JSON keys are the field names, except `class` for `failure_class`. A row written by an older
version may lack keys: each gets its default, and a row without `recognised` is recognised unless
its class is `other`, the class of a failure no rule placed. `server_info`, `built_in` and `rule`
are absent from the JSON while there is none.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field, fields, replace
from typing import Any

from app.diagnose.analyze import Diagnosis
from app.diagnose.drift import drift
from app.diagnose.fingerprint import lasting_part
from app.diagnose.hints import Evidence, SuggestedChange, explain, generic_change
from app.diagnose.lexicon import HINTS
from app.diagnose.lines import logical_lines
from app.diagnose.rules import RuleDecision, RuleScanner
from app.diagnose.weighing import Observation

CHART_POINTS = 480  # decode samples kept for the attempt's chart
JSON_KEYS = {"failure_class": "class"}  # the one field whose JSON key is not its name
ABSENT_WHEN_NONE = {"server_info", "built_in", "rule", "change"}


@dataclass(frozen=True)
class BuiltIn:
    """What launchdeck said by itself, kept beside the answer of a team rule."""

    failure_class: str = ""
    hint: str = ""
    fingerprint: str | None = None
    recognised: bool = True
    change: SuggestedChange | None = None

    @classmethod
    def from_json(cls, value: Mapping[str, Any]) -> BuiltIn:
        values = _fields_of(cls, value)
        values.setdefault("recognised", values.get("failure_class") != "other")
        return cls(**_with_change(values))


@dataclass(frozen=True)
class AppliedRule:
    """The team rule that decided, and on what evidence."""

    title: str = ""
    author: str | None = None
    match: str = ""
    scope: str = "root"
    matched: str = ""  # the line it matched, or the fingerprint it merges
    failure_class: str = ""
    id: int | None = None  # the rule's row in the dashboard; None for a rules file
    line: int | None = None  # the matched line's number in the log

    @classmethod
    def of(cls, decision: RuleDecision, rule_id: int | None, line: int | None) -> AppliedRule:
        rule = decision.rule
        return cls(
            rule.title, rule.author or None, rule.match, str(rule.scope), decision.evidence, rule.failure_class,
            rule_id, line,
        )  # fmt: skip

    @classmethod
    def from_json(cls, value: Mapping[str, Any]) -> AppliedRule:
        return cls(**_fields_of(cls, value))


@dataclass(frozen=True)
class StoredDiagnosis:
    stage: str = ""  # "" before any of the log was read
    stage_percent: int | None = None
    failure_class: str = ""
    concept: str = ""  # the lexicon's name for the kind of failure, "" where none placed it
    root_error: str | None = None
    root_line: int | None = None
    fingerprint: str | None = None
    hint: str = ""
    # The argument the hint's fix names, for "edit and relaunch"; None where the hint names none
    # (and where a team rule's hint replaced launchdeck's).
    change: SuggestedChange | None = None
    recognised: bool = True  # False: a failure no rule placed, or no SGLang log at all
    adjustments: list[str] = field(default_factory=list)
    frames: list[str] = field(default_factory=list)
    error_type: str = ""
    error_message: str = ""
    memory: dict[str, Any] = field(default_factory=dict)
    decode: list[dict[str, Any]] = field(default_factory=list)
    server_args: dict[str, Any] | None = None
    server_info: dict[str, Any] | None = None  # what the live server's /get_server_info reported
    built_in: BuiltIn | None = None  # set where a team rule changed the answer
    rule: AppliedRule | None = None
    traceback_arriving: str = ""  # live: the frame a traceback being written has reached
    cut_off: str = ""  # the frame a traceback the log ends in was cut off at, before its exception
    observations: list[Observation] = field(default_factory=list)  # what the class was decided from

    @classmethod
    def from_json(cls, value: Mapping[str, Any] | None) -> StoredDiagnosis:
        values = _fields_of(cls, value or {})
        values.setdefault("recognised", values.get("failure_class") != "other")
        if "built_in" in values:
            values["built_in"] = BuiltIn.from_json(values["built_in"])
        if "rule" in values:
            values["rule"] = AppliedRule.from_json(values["rule"])
        values["observations"] = [Observation.from_json(seen) for seen in values.get("observations", [])]
        return cls(**_with_change(values))

    def to_json(self) -> dict[str, Any]:
        return asdict(self, dict_factory=_json_object)

    def teach_match(self) -> str:
        """What a rule taught from this failure matches unless the person changes it: the part of
        the root error that stays the same from run to run (no numbers, paths or wrapper prefix)."""
        records = logical_lines(self.root_error or "", 0)
        return lasting_part(records[-1].text.strip()) if records else ""

    def alone(self) -> StoredDiagnosis:
        """What launchdeck said without the team's rules."""
        if self.built_in is None:
            return replace(self, rule=None)
        said = self.built_in
        return replace(
            self, failure_class=said.failure_class, hint=said.hint, fingerprint=said.fingerprint,
            recognised=said.recognised, change=said.change, built_in=None, rule=None,
        )  # fmt: skip

    def decided_by(self, scanner: RuleScanner) -> tuple[StoredDiagnosis, RuleDecision | None]:
        """The diagnosis as the rules of `scanner` (which has read the log) decide it, always from
        what launchdeck said alone, so a rule edited or deleted undoes what it did; and the rule
        that decided, if one did, for the caller to name as `rule`."""
        alone = self.alone()
        base = Diagnosis(
            failure_class=alone.failure_class, hint=alone.hint, fingerprint=alone.fingerprint,
            root_error=alone.root_error, root_line=alone.root_line, recognised=alone.recognised,
        )  # fmt: skip
        result, decision = scanner.decide(base)
        if decision is None and result.fingerprint == alone.fingerprint:
            return alone, None
        built_in = BuiltIn(alone.failure_class, alone.hint, alone.fingerprint, alone.recognised, alone.change)
        # The fix launchdeck found stays one click away while the rule keeps its kind of failure
        # (the team named or explained it); a rule that calls it another kind takes it away.
        same_kind = result.failure_class == alone.failure_class
        decided = replace(
            alone, failure_class=result.failure_class, hint=result.hint, fingerprint=result.fingerprint,
            recognised=result.recognised, built_in=built_in, change=alone.change if same_kind else None,
        )  # fmt: skip
        return decided, decision


def stored(result: Diagnosis, argv: Sequence[str] | None = None) -> StoredDiagnosis:
    """The analyzer's answer as kept, with what the argv it ran reveals (None: not known, as for a
    log given to the CLI): a hint that can say whether a flag was in it, and an error about a value
    SGLang chose itself, where another was asked for, is an override, not a conflict."""
    failure_class, hint = result.failure_class, result.hint
    change = None
    if argv is not None:
        figures = result.figures
        explained = result.root_error and explain(
            result.root_error,
            failure_class,
            server_args=figures.server_args,
            argv=argv,
            context=result.evidence,
            memory=figures.memory,
        )
        if explained:
            failure_class, hint, change = explained.failure_class, explained.hint, explained.change
        elif failure_class in ("arg-conflict", "other") and any(
            item.source == "error" and item.requested is not None and item.changed
            for item in drift(argv, None, (), result.root_error)
        ):
            failure_class = "arg-override"
            hint = HINTS[failure_class]
        else:
            evidence = Evidence(
                result.root_error or "", failure_class, figures.server_args or {}, argv, result.evidence, figures.memory
            )
            change = generic_change(failure_class, result.concept, evidence)
    decode = result.figures.decode
    step = math.ceil(len(decode) / CHART_POINTS) or 1
    return StoredDiagnosis(
        stage=result.stage,
        stage_percent=result.stage_percent,
        failure_class=failure_class,
        concept=result.concept,
        root_error=result.root_error,
        root_line=result.root_line,
        fingerprint=result.fingerprint,
        hint=hint,
        change=change,
        # a failure the argv placed (above) is recognised, whatever the log alone left it
        recognised=result.recognised or failure_class != "other",
        adjustments=list(result.adjustments),
        frames=list(result.frames),
        error_type=result.error_type,
        error_message=result.error_message,
        memory=_jsonable(result.figures.memory),
        decode=_jsonable(decode[::step]),
        server_args=_jsonable(result.figures.server_args),
        traceback_arriving=result.traceback_arriving,
        cut_off=result.cut_off,
        observations=list(result.observations),
    )


def _fields_of(kind: type, value: Mapping[str, Any]) -> dict[str, Any]:
    """The fields a JSON object gives, by field name; missing keys and nulls leave the defaults."""
    return {
        item.name: value[key]
        for item in fields(kind)
        if value.get(key := JSON_KEYS.get(item.name, item.name)) is not None
    }


def _with_change(values: dict[str, Any]) -> dict[str, Any]:
    if isinstance(change := values.get("change"), Mapping):
        values["change"] = SuggestedChange(**_fields_of(SuggestedChange, change))
    return values


def _json_object(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    return {
        JSON_KEYS.get(name, name): value for name, value in pairs if not (value is None and name in ABSENT_WHEN_NONE)
    }


def _jsonable(value: Any) -> Any:
    """Values from a parsed repr (tuples, sets, NaN, enums kept as text) as JSON any database stores."""
    if isinstance(value, dict):
        return {str(key): _jsonable(item) for key, item in value.items()}
    if isinstance(value, list | tuple | set | frozenset):
        return [_jsonable(item) for item in value]
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if value is None or isinstance(value, str | int | float):
        return value
    return str(value)
