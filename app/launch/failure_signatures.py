"""A launch's diagnosis while its log streams in: the analyzer fed by the log mirror, the answer
kept on the attempt's row, its failure counted under a Signature, and the arguments SGLang used
lined up with those asked for and those preflight predicted."""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from sqlalchemy import Select, func, select, tuple_
from sqlalchemy.ext.asyncio import AsyncSession

from app.clock import utcnow
from app.db.models import Attempt, Host, Preset, PresetRevision, Signature
from app.diagnose.analyze import Analyzer, Diagnosis
from app.diagnose.drift import Drift, drift
from app.diagnose.hints import explain
from app.diagnose.lexicon import HINTS
from app.errors import NotFound

# The timeline's name for a log stage where it differs: the ready line alone is not "ready",
# which needs /health to answer too.
TIMELINE_NAMES = {"ready": "ready line"}
CHART_POINTS = 480  # decode samples kept on the attempt's row for its chart


class LiveDiagnosis:
    """Reads the attempt's local log as the mirror appends it (a LogFile watcher), so the log is
    read once, in the order it arrives; the answer is taken whenever it is wanted."""

    def __init__(self) -> None:
        self.analyzer = Analyzer()
        self.offset = 0  # bytes of the local log read so far
        self.changed = False  # read more since the answer was last taken
        self._stages_taken = 0

    def feed(self, offset: int, data: bytes) -> None:
        if offset + len(data) <= self.offset:
            return  # read already, by the scan of what was mirrored before
        self.analyzer.feed_bytes(data[max(0, self.offset - offset) :])
        self.offset = offset + len(data)
        self.changed = True

    def new_stages(self) -> list[str]:
        """Stages reached since the last call, by their timeline names."""
        reached = self.analyzer.reached[self._stages_taken :]
        self._stages_taken += len(reached)
        return [TIMELINE_NAMES.get(stage, stage) for stage in reached]


def stored(result: Diagnosis, argv: list[str]) -> dict[str, Any]:
    """The diagnosis as kept on the attempt's row (JSON), with what the argv it ran reveals: a hint
    that can say whether a flag was in it, and an error about a value SGLang chose itself, where
    another was asked for, is an override, not a conflict."""
    failure_class, hint = result.failure_class, result.hint
    explained = result.root_error and explain(
        result.root_error, failure_class, server_args=result.figures.server_args, argv=argv, context=result.evidence
    )
    if explained:
        failure_class, hint = explained.failure_class, explained.hint
    elif failure_class in ("arg-conflict", "other") and any(
        item.source == "error" and item.requested is not None and item.changed
        for item in drift(argv, None, (), result.root_error)
    ):
        failure_class = "arg-override"
        hint = HINTS[failure_class]
    decode = result.figures.decode
    step = math.ceil(len(decode) / CHART_POINTS) or 1
    kept: dict[str, Any] = _jsonable(
        {
            "stage": result.stage,
            "stage_percent": result.stage_percent,
            "class": failure_class,
            "root_error": result.root_error,
            "root_line": result.root_line,
            "fingerprint": result.fingerprint,
            "hint": hint,
            # a failure the argv placed (above) is recognised, whatever the log alone left it
            "recognised": result.recognised or failure_class != "other",
            "adjustments": result.adjustments,
            "frames": result.frames,
            "error_type": result.error_type,
            "error_message": result.error_message,
            "memory": result.figures.memory,
            "decode": decode[::step],
            "server_args": result.figures.server_args,
        }
    )
    return kept


def unrecognised(found: Mapping[str, Any]) -> bool:
    """A stored diagnosis that says it does not know: a failure no rule placed, or a log that is no
    SGLang log. One stored before it said so carries no `recognised`: its `other` could only come
    from no rule matching."""
    return found.get("recognised", found.get("class") != "other") is False


def signature_unrecognised(signature: Signature) -> bool:
    """A failure signature that no rule placed: its class is its first attempt's, and `other` is
    the class of a failure no rule placed."""
    return unrecognised({"class": signature.failure_class})


def drift_of(attempt: Attempt) -> list[Drift]:
    """The attempt's requested arguments against every witness of the effective ones."""
    found = attempt.diagnosis or {}
    return drift(
        attempt.argv,
        found.get("server_args"),
        found.get("adjustments", ()),
        found.get("root_error"),
        server_info=found.get("server_info"),
        predicted=attempt.effective_args or None,
    )


async def assign_signature(session: AsyncSession, attempt: Attempt) -> None:
    """Files the attempt under the Signature of its diagnosis (created the first time a cause is
    seen), moving it if its diagnosis changed; each attempt counts once. The group takes the class
    its latest attempt was given, so a team rule that reclassifies a cause reclassifies its group."""
    found = attempt.diagnosis or {}
    fingerprint = found.get("fingerprint")
    current = await session.get(Signature, attempt.signature_id) if attempt.signature_id else None
    if (current.fingerprint if current else None) == fingerprint:
        if current is not None and found.get("class") and current.failure_class != found["class"]:
            current.failure_class = found["class"]
        return
    if current is not None:
        current.count -= 1
    if fingerprint is None:
        attempt.signature_id = None
        return
    signature = await session.scalar(select(Signature).where(Signature.fingerprint == fingerprint))
    now = utcnow()
    if signature is None:
        signature = Signature(
            fingerprint=fingerprint,
            failure_class=found["class"],
            exception_type=found.get("error_type", ""),
            message=found.get("error_message", ""),
            frames=found.get("frames", []),
            first_seen=now,
            last_seen=now,
            count=1,
        )
        session.add(signature)
        await session.flush()
    else:
        signature.count += 1
        signature.last_seen = now
        signature.failure_class = found["class"]
    attempt.signature_id = signature.id


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


@dataclass
class SignatureGroup:
    """A failure cause with where it struck."""

    signature: Signature
    hosts: list[str]
    presets: list[str]

    @property
    def unrecognised(self) -> bool:
        return signature_unrecognised(self.signature)


async def signature_groups(
    session: AsyncSession, *, failure_class: str | None = None, before: str | None = None, limit: int = 50
) -> list[SignatureGroup]:
    """Causes seen, the most recent first, with the hosts and presets of their attempts; `before`
    (a fingerprint) keeps those seen before that cause, for the next page."""
    query = (
        select(Signature)
        .where(Signature.count > 0)
        .order_by(Signature.last_seen.desc(), Signature.id.desc())
        .limit(limit)
    )
    if failure_class:
        query = query.where(Signature.failure_class == failure_class)
    if before:
        after = await get_signature(session, before)
        query = query.where(tuple_(Signature.last_seen, Signature.id) < tuple_(after.last_seen, after.id))
    signatures = list((await session.scalars(query)).all())
    # The distinct places come from an index alone; only those few rows meet the name tables.
    places = (
        select(Attempt.signature_id, Attempt.host_id, Attempt.preset_revision_id)
        .where(Attempt.signature_id.in_([signature.id for signature in signatures]))
        .distinct()
        .subquery()
    )
    named = await session.execute(
        select(places.c.signature_id, Host.name, Preset.name)
        .join(Host, places.c.host_id == Host.id)
        .join(PresetRevision, places.c.preset_revision_id == PresetRevision.id)
        .join(Preset, PresetRevision.preset_id == Preset.id)
    )
    hosts: dict[int | None, set[str]] = {}
    presets: dict[int | None, set[str]] = {}
    for signature_id, host, preset in named.all():
        hosts.setdefault(signature_id, set()).add(host)
        presets.setdefault(signature_id, set()).add(preset)
    return [
        SignatureGroup(signature, sorted(hosts.get(signature.id, ())), sorted(presets.get(signature.id, ())))
        for signature in signatures
    ]


@dataclass(frozen=True)
class Failure:
    """How an attempt failed, as a list shows it."""

    failure_class: str
    fingerprint: str


async def failures_of(session: AsyncSession, attempt_ids: list[int]) -> dict[int, Failure]:
    """The class and fingerprint of those attempts that have a failure signature, taken out of
    their diagnosis by the database, so a list never loads the whole document."""
    found = Attempt.diagnosis
    query = select(Attempt.id, found["class"].as_string(), found["fingerprint"].as_string()).where(
        Attempt.id.in_(attempt_ids), Attempt.signature_id.is_not(None)
    )
    return {
        attempt_id: Failure(failure_class or "", fingerprint)
        for attempt_id, failure_class, fingerprint in (await session.execute(query)).all()
        if fingerprint
    }


async def get_signature(session: AsyncSession, fingerprint: str) -> Signature:
    signature = await session.scalar(select(Signature).where(Signature.fingerprint == fingerprint))
    if signature is None:
        raise NotFound(f"no failure signature {fingerprint!r}")
    return signature


def with_signature(signature_id: int, *, before: int | None = None) -> Select[Any]:
    """Attempts filed under a signature, newest first; `before` keeps those older than an attempt."""
    query = select(Attempt).where(Attempt.signature_id == signature_id).order_by(Attempt.id.desc())
    return query if before is None else query.where(Attempt.id < before)


async def count_with_signature(session: AsyncSession, signature_id: int, *, before: int | None = None) -> int:
    query = with_signature(signature_id, before=before).order_by(None).subquery()
    return int(await session.scalar(select(func.count()).select_from(query)) or 0)
