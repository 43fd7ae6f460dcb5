"""The GPU samples kept in the database for history: how often, how long, and thinned how."""

from __future__ import annotations

from datetime import datetime, timedelta

from sqlalchemy import delete, select
from sqlalchemy.ext.asyncio import AsyncSession

from app.db.models import GpuSample

# Stored: one sample per GPU a minute, kept for a day, then one a quarter hour, dropped after RETENTION:
# 1,440 + 576 = 2,016 rows per GPU at most, 8.3 M at 4,096 GPUs, written at 68 rows/s
# (tests/gpu/test_probe.py runs a simulated week). Prometheus, fed by /metrics, keeps finer history.
SAMPLE_EVERY = 60.0
RECENT = timedelta(days=1)
THIN_TO_MINUTES = 15  # a divisor of 60: samples thinned to one per quarter hour of the clock
RETENTION = timedelta(days=7)


async def prune_samples(session: AsyncSession, now: datetime, *, since: datetime) -> datetime:
    """Drops samples past retention and thins those older than RECENT to one per GPU and quarter hour.

    Only rows newer than `since` (the previous run's boundary) are thinned, so each run reads
    the last few minutes, not the week. The boundary returned is a quarter hour of the clock, so
    that no quarter is thinned in two runs (each would keep one). Returns the new boundary."""
    await session.execute(delete(GpuSample).where(GpuSample.taken_at < now - RETENTION))
    boundary = _quarter_of(now - RECENT)
    rows = await session.execute(
        select(GpuSample.id, GpuSample.host_id, GpuSample.gpu_index, GpuSample.taken_at)
        .where(GpuSample.taken_at >= since, GpuSample.taken_at < boundary)
        .order_by(GpuSample.taken_at)
    )
    seen: set[tuple[int, int, datetime]] = set()
    extra = []
    for row_id, host_id, gpu_index, taken_at in rows.all():
        key = (host_id, gpu_index, _quarter_of(taken_at))
        if key in seen:
            extra.append(row_id)
        else:
            seen.add(key)
    for start in range(0, len(extra), 500):
        await session.execute(delete(GpuSample).where(GpuSample.id.in_(extra[start : start + 500])))
    await session.commit()
    return boundary


def _quarter_of(moment: datetime) -> datetime:
    return moment.replace(minute=moment.minute - moment.minute % THIN_TO_MINUTES, second=0, microsecond=0)
