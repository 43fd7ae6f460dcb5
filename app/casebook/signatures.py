"""A launch's diagnosis while its log streams in: the analyzer fed by the log mirror, the answer
kept on the attempt's row (its shape: app.diagnose.stored), its failure counted under a Signature,
and the arguments SGLang used lined up with those asked for and those preflight predicted."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from typing import Any

from sqlalchemy import Select, func, select, tuple_
from sqlalchemy.ext.asyncio import AsyncSession

from app.clock import utcnow
from app.db.history import ATTEMPT_RELATIONS
from app.db.models import Attempt, Host, Preset, PresetRevision, Signature
from app.diagnose.analyze import Analyzer
from app.diagnose.drift import Drift, drift
from app.diagnose.stored import StoredDiagnosis
from app.errors import NotFound
from app.states import FailureClass

# The timeline's name for a log stage where it differs: the ready line alone is not "ready",
# which needs /health to answer too.
TIMELINE_NAMES = {"ready": "ready line"}


class LiveDiagnosis:
    """Reads the attempt's local log as the mirror appends it (a LogFile watcher), so the log is
    read once, in the order it arrives; the answer is taken whenever it is wanted."""

    def __init__(self) -> None:
        self.analyzer = Analyzer()
        self.offset = 0  # bytes of the local log read so far
        self.changed = False  # read more since the answer was last taken
        self.news = asyncio.Event()  # set when what the attempt's page shows may have changed
        self._landmarks = self.analyzer.landmarks()
        self._stages_taken = 0

    def feed(self, offset: int, data: bytes) -> None:
        if offset + len(data) <= self.offset:
            return  # read already, by the scan of what was mirrored before
        self.analyzer.feed_bytes(data[max(0, self.offset - offset) :])
        self.offset = offset + len(data)
        self.changed = True

    def watch(self, offset: int, data: bytes) -> None:
        """The log file's watcher, in the event loop: reads what the mirror appended, and tells the
        follower at once when the stage, its progress or the root error may have changed."""
        self.feed(offset, data)
        if (landmarks := self.analyzer.landmarks()) != self._landmarks:
            self._landmarks = landmarks
            self.news.set()

    def new_stages(self) -> list[str]:
        """Stages reached since the last call, by their timeline names."""
        reached = self.analyzer.reached[self._stages_taken :]
        self._stages_taken += len(reached)
        return [TIMELINE_NAMES.get(stage, stage) for stage in reached]


def signature_unrecognised(signature: Signature) -> bool:
    """A failure signature that no rule placed: its class is its latest attempt's, and `other` is
    the class of a failure no rule placed."""
    return signature.failure_class == FailureClass.OTHER


def drift_of(attempt: Attempt) -> list[Drift]:
    """The attempt's requested arguments against every witness of the effective ones."""
    found = StoredDiagnosis.from_json(attempt.diagnosis)
    return drift(
        attempt.argv,
        found.server_args,
        found.adjustments,
        found.root_error,
        server_info=found.server_info,
        predicted=attempt.effective_args or None,
    )


async def assign_signature(session: AsyncSession, attempt: Attempt) -> None:
    """Files the attempt under the Signature of its diagnosis (created the first time a cause is
    seen), moving it if its diagnosis changed; each attempt counts once. The group takes the class
    its latest attempt was given, so a team rule that reclassifies a cause reclassifies its group.
    A multi-node attempt's part files nothing: its attempt files the cause found in the merged log."""
    if attempt.part_of_id is not None:
        return
    found = StoredDiagnosis.from_json(attempt.diagnosis)
    fingerprint = found.fingerprint
    current = await session.get(Signature, attempt.signature_id) if attempt.signature_id else None
    if (current.fingerprint if current else None) == fingerprint:
        if current is not None and found.failure_class and current.failure_class != found.failure_class:
            current.failure_class = found.failure_class
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
            failure_class=found.failure_class,
            exception_type=found.error_type,
            message=found.error_message,
            frames=found.frames,
            first_seen=now,
            last_seen=now,
            count=1,
        )
        session.add(signature)
        await session.flush()
    else:
        signature.count += 1
        signature.last_seen = now
        signature.failure_class = found.failure_class
    attempt.signature_id = signature.id


@dataclass
class SignatureGroup:
    """A failure cause with where it struck."""

    signature: Signature
    hosts: list[str]
    presets: list[str]
    example: str = ""  # the root error of its newest attempt, as the log wrote it

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
    examples = await _newest_root_errors(session, [signature.id for signature in signatures])
    return [
        SignatureGroup(
            signature,
            sorted(hosts.get(signature.id, ())),
            sorted(presets.get(signature.id, ())),
            examples.get(signature.id, ""),
        )
        for signature in signatures
    ]


async def _newest_root_errors(session: AsyncSession, signature_ids: list[int]) -> dict[int, str]:
    """Each cause's root error as its newest attempt's log wrote it: a title a person reads, where
    the signature's own message has its numbers and paths taken out (`<n>`, `<path>`)."""
    newest = (
        select(func.max(Attempt.id))
        .where(Attempt.signature_id.in_(signature_ids))
        .group_by(Attempt.signature_id)
        .scalar_subquery()
    )
    found = await session.execute(
        select(Attempt.signature_id, Attempt.diagnosis["root_error"].as_string()).where(Attempt.id.in_(newest))
    )
    return {signature_id: (root or "").strip() for signature_id, root in found.all()}


@dataclass(frozen=True)
class Failure:
    """How an attempt failed, as a list shows it."""

    failure_class: str
    fingerprint: str
    root_error: str | None = None  # its first LISTED_ROOT_ERROR characters


# What a list carries of a root error (which may run to 64 KiB: a tensor printed whole); the
# attempt's own answer carries it all.
LISTED_ROOT_ERROR = 500


async def failures_of(session: AsyncSession, attempt_ids: list[int]) -> dict[int, Failure]:
    """The class, fingerprint and root error of those attempts that have a failure signature, taken
    out of their diagnosis by the database (its JSON keys `class`, `fingerprint` and `root_error`),
    so a list never loads the whole document."""
    found = Attempt.diagnosis
    root_start = func.substr(found["root_error"].as_string(), 1, LISTED_ROOT_ERROR)
    query = select(Attempt.id, found["class"].as_string(), found["fingerprint"].as_string(), root_start).where(
        Attempt.id.in_(attempt_ids), Attempt.signature_id.is_not(None)
    )
    return {
        attempt_id: Failure(failure_class or "", fingerprint, root_error)
        for attempt_id, failure_class, fingerprint, root_error in (await session.execute(query)).all()
        if fingerprint
    }


async def get_signature(session: AsyncSession, fingerprint: str) -> Signature:
    signature = await session.scalar(select(Signature).where(Signature.fingerprint == fingerprint))
    if signature is None:
        raise NotFound(f"no failure signature {fingerprint!r}")
    return signature


def _with_signature(signature_id: int, *, before: int | None = None) -> Select[Any]:
    """Attempts filed under a signature, newest first; `before` keeps those older than an attempt."""
    query = select(Attempt).where(Attempt.signature_id == signature_id).order_by(Attempt.id.desc())
    return query if before is None else query.where(Attempt.id < before)


async def count_with_signature(session: AsyncSession, signature_id: int, *, before: int | None = None) -> int:
    query = _with_signature(signature_id, before=before).order_by(None).subquery()
    return int(await session.scalar(select(func.count()).select_from(query)) or 0)


async def attempt_ids_with_signature(
    session: AsyncSession, signature_id: int, *, before: int | None = None, limit: int
) -> list[int]:
    """The ids of up to `limit` attempts filed under a signature, newest first (for links)."""
    query = _with_signature(signature_id, before=before).with_only_columns(Attempt.id).limit(limit)
    return list((await session.scalars(query)).all())


async def attempts_with_signature(
    session: AsyncSession, signature_id: int, *, before: int | None = None, limit: int
) -> list[Attempt]:
    """Up to `limit` attempts filed under a signature, newest first, with their host and preset."""
    query = _with_signature(signature_id, before=before).options(*ATTEMPT_RELATIONS).limit(limit)
    return list((await session.scalars(query)).all())
