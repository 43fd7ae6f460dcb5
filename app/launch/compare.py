"""Two attempts side by side: what was asked (preset revision, argv, env), where it ran (host,
GPUs, free memory at launch), what SGLang made of it (drift), how far it got and when, and how it
ended (outcome, signature, the log around the root error)."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

from sqlalchemy import Select, select
from sqlalchemy.ext.asyncio import AsyncSession

from app.db.models import Attempt, PresetRevision
from app.diagnose.drift import Drift, requested_args
from app.diagnose.stored import StoredDiagnosis
from app.launch.failure_signatures import drift_of
from app.launch.history import durations, load_attempt
from app.logs.store import Line, LogLoan

CONTEXT_LINES = 6  # of log on each side of the root error


@dataclass(frozen=True)
class Row:
    name: str
    a: Any
    b: Any

    @property
    def differs(self) -> bool:
        return bool(self.a != self.b)


@dataclass
class Side:
    """One attempt as the comparison shows it."""

    id: int
    preset: str
    revision: int
    host: str
    gpus: list[int]
    status: str
    exit_code: int | None
    error: str
    failure_class: str
    recognised: bool  # False where the diagnosis says it does not know
    fingerprint: str | None
    root_error: str | None
    root_line: int | None
    stages: list[dict[str, Any]]  # stage, seconds since the attempt was created, how long it took
    drift: list[Drift]
    log_excerpt: list[Line] = field(default_factory=list)  # the log around the root error


@dataclass
class Comparison:
    a: Side
    b: Side
    revision: list[Row]  # the preset revisions' fields
    argv: list[Row]  # each option of the command line
    env: list[Row]
    gpus: list[Row]  # free memory at launch, per GPU
    memory: list[Row]  # the memory figures SGLang printed

    def as_dict(self) -> dict[str, Any]:
        def rows(items: list[Row]) -> list[dict[str, Any]]:
            return [{"name": row.name, "a": row.a, "b": row.b, "differs": row.differs} for row in items]

        def side(item: Side) -> dict[str, Any]:
            excerpt = [{"number": line.number, "text": line.text.decode(errors="replace")} for line in item.log_excerpt]
            drift = [asdict(row) | {"changed": row.changed, "unforeseen": row.unforeseen} for row in item.drift]
            return asdict(item) | {"log_excerpt": excerpt, "drift": drift}

        return {
            "a": side(self.a),
            "b": side(self.b),
            "revision": rows(self.revision),
            "argv": rows(self.argv),
            "env": rows(self.env),
            "gpus": rows(self.gpus),
            "memory": rows(self.memory),
        }


async def compare(session: AsyncSession, logs: LogLoan, a_id: int, b_id: int) -> Comparison:
    a, b = await load_attempt(session, a_id), await load_attempt(session, b_id)
    return Comparison(
        a=_side(a, logs),
        b=_side(b, logs),
        revision=_revision_rows(a.revision, b.revision),
        argv=_rows(_options(a.argv), _options(b.argv)),
        env=_rows(a.env, b.env),
        gpus=_rows(_free_at_launch(a), _free_at_launch(b)),
        memory=_rows(StoredDiagnosis.from_json(a.diagnosis).memory, StoredDiagnosis.from_json(b.diagnosis).memory),
    )


async def previous_attempt(session: AsyncSession, attempt: Attempt) -> int | None:
    """The attempt of the same preset launched just before this one, if any."""
    found: int | None = await session.scalar(
        _same_preset(attempt).where(Attempt.id < attempt.id).order_by(Attempt.id.desc()).limit(1)
    )
    return found


async def last_successful_attempt(session: AsyncSession, attempt: Attempt) -> int | None:
    """The latest other attempt of the same preset that became ready, if any."""
    query = _same_preset(attempt).where(Attempt.id != attempt.id, Attempt.ready_at.is_not(None))
    found: int | None = await session.scalar(query.order_by(Attempt.id.desc()).limit(1))
    return found


def _same_preset(attempt: Attempt) -> Select[Any]:
    return (
        select(Attempt.id)
        .join(PresetRevision, Attempt.preset_revision_id == PresetRevision.id)
        .where(PresetRevision.preset_id == attempt.revision.preset_id)
    )


def _side(attempt: Attempt, logs: LogLoan) -> Side:
    found = StoredDiagnosis.from_json(attempt.diagnosis)
    root_line = found.root_line
    excerpt: list[Line] = []
    if root_line:
        first = max(1, root_line - CONTEXT_LINES)
        excerpt = logs.get(attempt.id).lines(first, 2 * CONTEXT_LINES + 1, max_line=4096).lines
    created = attempt.created_at
    return Side(
        id=attempt.id,
        preset=attempt.revision.preset.name,
        revision=attempt.revision.number,
        host=attempt.host.name,
        gpus=list(attempt.gpus),
        status=attempt.status,
        exit_code=attempt.exit_code,
        error=attempt.error,
        failure_class=found.failure_class,
        recognised=found.recognised,
        fingerprint=found.fingerprint,
        root_error=found.root_error,
        root_line=root_line,
        stages=[
            # The first stage is stamped a moment before the row's creation time: never negative.
            {"stage": stage, "after_s": max(0.0, round((at - created).total_seconds(), 2)), "took_s": took}
            for stage, at, took in durations(attempt)
        ],
        drift=drift_of(attempt),
        log_excerpt=excerpt,
    )


def _revision_rows(a: PresetRevision, b: PresetRevision) -> list[Row]:
    fields = ("model_path", "launcher", "python", "port")
    rows = [Row("preset", a.preset.name, b.preset.name), Row("revision", a.number, b.number)]
    return rows + [Row(name, getattr(a, name), getattr(b, name)) for name in fields]


def _options(argv: list[str]) -> dict[str, Any]:
    return {f"--{name.replace('_', '-')}": value for name, value in requested_args(argv).items()}


def _free_at_launch(attempt: Attempt) -> dict[str, Any]:
    """Free MiB of each of the attempt's GPUs when it launched."""
    readings = ((attempt.gpu_snapshot or {}).get("at_launch") or {}).get("gpus", [])
    free = {reading.get("index"): reading.get("memory_free_mib") for reading in readings}
    return {f"GPU {gpu}": free.get(gpu) for gpu in attempt.gpus}


def _rows(a: dict[str, Any], b: dict[str, Any]) -> list[Row]:
    """One row per key of either side, in the first side's order; a missing value is None."""
    names = [*a, *(name for name in b if name not in a)]
    return [Row(name, a.get(name), b.get(name)) for name in names]
