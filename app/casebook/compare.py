"""Two to four attempts side by side: what was asked (preset revision, argv, env), where it ran (host,
GPUs, free memory at launch), what SGLang made of it (drift), how far it got and when, and how it
ended (outcome, signature, the log around the root error)."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

from sqlalchemy import Select, select
from sqlalchemy.ext.asyncio import AsyncSession

from app.casebook.signatures import drift_of
from app.db.history import durations, latest_done, load_attempt
from app.db.models import Attempt, Benchmark, PresetRevision
from app.diagnose.drift import Drift, requested_args
from app.diagnose.stored import StoredDiagnosis
from app.errors import InvalidInput
from app.logs.store import Line, LogLoan

CONTEXT_LINES = 6  # of log on each side of the root error
MAX_SIDES = 4  # more columns than this no longer fit a screen side by side


@dataclass(frozen=True)
class Row:
    name: str
    values: tuple[Any, ...]  # one per side, in the sides' order

    @property
    def differs(self) -> bool:
        return any(value != self.values[0] for value in self.values[1:])

    @property
    def differs_where_given(self) -> bool:
        """Whether the sides that have a value disagree (a side without one, say not benchmarked, does not)."""
        return len({value for value in self.values if value is not None}) > 1

    def change_pct(self) -> list[float | None]:
        """Each value as a change from the first side's, in percent (None where either is not a
        number, or the first is 0)."""
        first = self.values[0]
        return [
            round((value - first) / abs(first) * 100, 1) if _number(first) and first and _number(value) else None
            for value in self.values
        ]


def _number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


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
    sides: list[Side]
    revision: list[Row]  # the preset revisions' fields
    argv: list[Row]  # each option of the command line
    env: list[Row]
    gpus: list[Row]  # free memory at launch, per GPU
    memory: list[Row]  # the memory figures SGLang printed
    # Each side's last benchmark that gave figures: its workload first (figures compare only under
    # the same one), then bench_serving's figures; [] when no side was benchmarked.
    performance: list[Row] = field(default_factory=list)

    def differs(self, name: str) -> bool:
        """Whether the sides' `name` (status, host, ...) is not the same on all of them."""
        return Row(name, tuple(getattr(side, name) for side in self.sides)).differs

    def as_dict(self) -> dict[str, Any]:
        """Every row's values in the sides' order; two sides also keep the `a` and `b` keys that
        scripts of the two-attempt comparison read."""
        pair = len(self.sides) == 2

        def rows(items: list[Row]) -> list[dict[str, Any]]:
            return [
                {"name": row.name, "values": list(row.values), "differs": row.differs}
                | ({"a": row.values[0], "b": row.values[1]} if pair else {})
                for row in items
            ]

        def side(item: Side) -> dict[str, Any]:
            excerpt = [{"number": line.number, "text": line.text.decode(errors="replace")} for line in item.log_excerpt]
            drift = [asdict(row) | {"changed": row.changed, "unforeseen": row.unforeseen} for row in item.drift]
            return asdict(item) | {"log_excerpt": excerpt, "drift": drift}

        sides = [side(item) for item in self.sides]
        return ({"a": sides[0], "b": sides[1]} if pair else {}) | {
            "sides": sides,
            "revision": rows(self.revision),
            "argv": rows(self.argv),
            "env": rows(self.env),
            "gpus": rows(self.gpus),
            "memory": rows(self.memory),
            "performance": [
                item | {"change_pct": row.change_pct()}
                for item, row in zip(rows(self.performance), self.performance, strict=True)
            ],
        }


async def compare(session: AsyncSession, logs: LogLoan, ids: list[int]) -> Comparison:
    """The attempts in the order given; an unknown one raises NotFound."""
    if not 2 <= len(ids) <= MAX_SIDES:
        raise InvalidInput(f"compare takes 2 to {MAX_SIDES} attempts, not {len(ids)}")
    attempts = [await load_attempt(session, attempt_id) for attempt_id in ids]
    sides = [_side(attempt, logs) for attempt in attempts]
    benchmarks = await latest_done(session, ids)
    measured = [benchmarks[i] for i in ids if i in benchmarks]
    return Comparison(
        sides=sides,
        revision=_revision_rows([attempt.revision for attempt in attempts]),
        argv=_rows([_options(attempt.argv) for attempt in attempts]),
        env=_rows([attempt.env for attempt in attempts]),
        gpus=_rows([_free_at_launch(attempt) for attempt in attempts]),
        memory=_rows([StoredDiagnosis.from_json(attempt.diagnosis).memory for attempt in attempts]),
        performance=_performance_rows([benchmarks.get(i) for i in ids]) if measured else [],
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
    return select(Attempt.id).where(Attempt.preset_id == attempt.preset_id, Attempt.part_of_id.is_(None))


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


def _revision_rows(revisions: list[PresetRevision]) -> list[Row]:
    fields = ("model_path", "launcher", "python", "port")
    rows = [Row("preset", tuple(r.preset.name for r in revisions)), Row("revision", tuple(r.number for r in revisions))]
    return rows + [Row(name, tuple(getattr(r, name) for r in revisions)) for name in fields]


def _options(argv: list[str]) -> dict[str, Any]:
    return {f"--{name.replace('_', '-')}": value for name, value in requested_args(argv).items()}


def _free_at_launch(attempt: Attempt) -> dict[str, Any]:
    """Free MiB of each of the attempt's GPUs when it launched."""
    readings = ((attempt.gpu_snapshot or {}).get("at_launch") or {}).get("gpus", [])
    free = {reading.get("index"): reading.get("memory_free_mib") for reading in readings}
    return {f"GPU {gpu}": free.get(gpu) for gpu in attempt.gpus}


def _performance_rows(benchmarks: list[Benchmark | None]) -> list[Row]:
    workload = Row("workload", tuple(b.workload.get("name") if b else None for b in benchmarks))
    shown = [{key: value for key, value in b.figures.items() if key in COMPARED} if b else {} for b in benchmarks]
    figures = _rows(shown)
    return [workload, *sorted(figures, key=lambda row: COMPARED.index(row.name))]


# The figures a comparison shows, in this order: throughput, latency, speculation.
COMPARED = (
    "request_throughput", "output_throughput", "total_throughput",
    "mean_ttft_ms", "median_ttft_ms", "p99_ttft_ms",
    "mean_tpot_ms", "median_tpot_ms", "p99_tpot_ms",
    "mean_itl_ms", "median_itl_ms", "p99_itl_ms",
    "mean_e2e_latency_ms", "accept_length", "accept_rate",
)  # fmt: skip


def _rows(sides: list[dict[str, Any]]) -> list[Row]:
    """One row per key of any side, in the order the sides first name them; a missing value is None."""
    names = list(dict.fromkeys(name for side in sides for name in side))
    return [Row(name, tuple(side.get(name) for side in sides)) for name in names]
