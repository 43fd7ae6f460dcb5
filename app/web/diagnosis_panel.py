"""The attempt page's diagnosis panel: what went wrong, the earlier attempts that failed the
same way, and the serving metrics charted."""

from __future__ import annotations

from typing import Any
from urllib.parse import urlencode

from sqlalchemy import select
from sqlalchemy.ext.asyncio import AsyncSession

from app.casebook import signatures
from app.db.models import Attempt, Workload
from app.diagnose.figures import Need, small_capacity
from app.diagnose.lexicon import HINTS
from app.diagnose.stages import STAGES
from app.diagnose.stored import StoredDiagnosis
from app.perf.workloads import DEFAULT_WORKLOAD
from app.states import AttemptStatus

SAME_SIGNATURE_SHOWN = 10
SERVED = (AttemptStatus.READY, AttemptStatus.UNHEALTHY, AttemptStatus.STOPPED)
FALLBACK_NEED = Need(4, 1024, "a useful server")  # with no workload to say
# The serving metrics charted from the decode-batch lines: (key, label, format).
METRICS = (
    ("running_requests", "running requests", "{:.0f}"),
    ("token_usage", "KV token usage", "{:.2f}"),
    ("gen_throughput", "generation throughput (token/s)", "{:.1f}"),
    ("accept_length", "speculative accept length", "{:.2f}"),
)
CHART_WIDTH, CHART_HEIGHT = 600, 60


async def diagnosis_context(db: AsyncSession, attempt: Attempt) -> dict[str, Any]:
    """The attempt page's diagnosis panel: stage, root error, class and hint, drift, the earlier
    attempts that failed the same way, and the serving metrics."""
    found = StoredDiagnosis.from_json(attempt.diagnosis)
    earlier: list[int] = []
    same = 0
    if attempt.signature_id is not None:
        same = await signatures.count_with_signature(db, attempt.signature_id, before=attempt.id)
        earlier = await signatures.attempt_ids_with_signature(
            db, attempt.signature_id, before=attempt.id, limit=SAME_SIGNATURE_SHOWN
        )
    capacity = None
    bisect = None
    if found.failure_class == "oom" and "--mem-fraction-static" in (found.hint or ""):
        bisect = bisect_fraction_href(attempt)
    if attempt.status in SERVED and not found.root_error:  # up, and maybe too small to be of use
        capacity = small_capacity(found.memory or {}, await workload_need(db))
        bisect = bisect_fraction_href(attempt) if capacity else None
    return {
        "diagnosis": found,
        "capacity": capacity,
        "bisect_href": bisect,
        "unrecognised": not found.recognised,
        "drift": signatures.drift_of(attempt),
        "same_signature": same,
        "earlier": earlier,
        "charts": charts(found.decode),
        "stage_names": [name for name, _ in STAGES],
        "rule_classes": list(HINTS),  # the "teach launchdeck" form's choices
    }


async def workload_need(db: AsyncSession) -> Need:
    """What a server must take at once to be of use: what the default benchmark runs at once."""
    workload = await db.scalar(select(Workload).where(Workload.name == DEFAULT_WORKLOAD))
    if workload is None or not workload.max_concurrency:
        return FALLBACK_NEED
    each = workload.input_len + workload.output_len
    return Need(workload.max_concurrency, each, f"the {DEFAULT_WORKLOAD} benchmark")


def bisect_fraction_href(attempt: Attempt) -> str:
    """The sweep form opened on a bisection of --mem-fraction-static for the attempt's preset, host
    and GPUs: where the largest fraction that starts is found by launches."""
    query = {"preset": attempt.revision.preset.name, "mode": "bisect", "host": attempt.host.name}
    if attempt.gpus:
        query["gpus"] = ",".join(map(str, attempt.gpus))
    return "/sweeps/new?" + urlencode(query)


def charts(samples: list[dict[str, float]]) -> list[dict[str, Any]]:
    """Each metric the samples carry as an SVG polyline's points, scaled to its own maximum."""
    result = []
    for key, label, number in METRICS:
        values = [sample[key] for sample in samples if key in sample]
        if len(values) < 2:
            continue
        top = max(values) or 1.0
        step = CHART_WIDTH / (len(values) - 1)
        points = " ".join(
            f"{i * step:.1f},{CHART_HEIGHT - value / top * (CHART_HEIGHT - 4) - 2:.1f}"
            for i, value in enumerate(values)
        )
        result.append({"key": key, "label": label, "points": points, "max": number.format(max(values)),
                       "last": number.format(values[-1]), "samples": len(values)})  # fmt: skip
    return result
