"""A ready server's own figures: SGLang's Prometheus metrics (`--enable-metrics`), read with its
health check through the same SSH port forward, so nothing new is opened to the host.

Each scrape becomes one sample of what the attempt page's serving panel shows: running and queued
requests, token usage, generation throughput and accept length as the server's gauges say, and
time to first token and inter-token latency over the interval since the previous scrape, from the
histograms' growth (as Prometheus' histogram_quantile would). Samples are kept SERVING_HISTORY per
attempt. The last scrape of each ready attempt stays in memory for /metrics to re-export under
its `sglang:` names, with the attempt, host and preset as labels."""

from __future__ import annotations

import logging
import math
import time
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import datetime, timedelta

from prometheus_client.core import Metric
from prometheus_client.parser import text_string_to_metric_families
from prometheus_client.samples import Sample
from sqlalchemy import delete, select
from sqlalchemy.exc import SQLAlchemyError
from sqlalchemy.ext.asyncio import AsyncSession

from app.clock import utcnow
from app.db import Sessions
from app.db.models import ServingSample

log = logging.getLogger(__name__)

METRICS_FLAG = "--enable-metrics"
METRICS_PATH = "/metrics"
SERVING_HISTORY = timedelta(hours=6)  # 2,160 samples per attempt at the health check's 10 s
# The panel's figures: key, heading, unit, how many decimals.
FIGURES = (
    ("running", "Running requests", "", 0),
    ("queued", "Queued requests", "", 0),
    ("token_usage", "Token usage", "%", 1),
    ("gen_throughput", "Generation throughput", "tok/s", 1),
    ("ttft_p50", "Time to first token p50", "ms", 1),
    ("ttft_p99", "Time to first token p99", "ms", 1),
    ("itl_p50", "Inter-token latency p50", "ms", 2),
    ("itl_p99", "Inter-token latency p99", "ms", 2),
    ("accept_length", "Accept length", "", 2),
)


def scrapes_metrics(argv: list[str]) -> bool:
    """Whether the server was asked to serve its metrics (SGLang serves /metrics only then)."""
    return METRICS_FLAG in argv


def parse(text: str) -> dict[str, Metric]:
    """The exposition text's families by name; ValueError where it is not Prometheus text."""
    try:
        return {family.name: family for family in text_string_to_metric_families(text)}
    except (ValueError, IndexError, KeyError) as exc:
        raise ValueError(f"the server's /metrics is not Prometheus text: {exc}") from None


def _values(families: dict[str, Metric], name: str, suffix: str = "") -> list[float]:
    family = families.get(name)
    return [s.value for s in family.samples if s.name == name + suffix] if family else []


def _buckets(families: dict[str, Metric], name: str) -> dict[float, float]:
    """A histogram's cumulative counts by upper bound, summed over its series (tp ranks, streaming)."""
    counts: dict[float, float] = {}
    family = families.get(name)
    for sample in family.samples if family else []:
        if sample.name == f"{name}_bucket":
            bound = float(sample.labels["le"])
            counts[bound] = counts.get(bound, 0.0) + sample.value
    return counts


def quantile(q: float, now: dict[float, float], before: dict[float, float] | None) -> float | None:
    """The q-quantile of what a histogram observed between two scrapes, interpolated within its
    bucket as Prometheus does; None when it observed nothing. A counter reset (the server
    restarted) counts from zero."""
    growth = {bound: count - (before or {}).get(bound, 0.0) for bound, count in now.items()}
    if any(value < 0 for value in growth.values()):
        growth = dict(now)
    bounds = sorted(growth)
    total = growth[bounds[-1]] if bounds else 0.0
    if total <= 0:
        return None
    rank, lower, below = q * total, 0.0, 0.0
    for bound in bounds:
        if growth[bound] >= rank:
            if math.isinf(bound):
                return lower  # beyond the last finite bound: that bound is all that can be said
            inside = growth[bound] - below
            return lower + (bound - lower) * ((rank - below) / inside if inside else 1.0)
        lower, below = bound, growth[bound]
    return lower


@dataclass
class Scrape:
    families: dict[str, Metric]
    labels: dict[str, str]  # attempt, host, preset: added to every series it re-exports
    at: float


def figures(now: Scrape, before: Scrape | None) -> dict[str, float | None]:
    """One sample of the panel's figures; latencies in milliseconds over the interval."""
    current, earlier = now.families, before.families if before else None

    def total(name: str) -> float | None:
        values = _values(current, name)
        return sum(values) if values else None

    def latency(name: str, q: float) -> float | None:
        value = quantile(q, _buckets(current, name), _buckets(earlier, name) if earlier else None)
        return None if value is None else value * 1000

    usage = _values(current, "sglang:token_usage")
    accept = [value for value in _values(current, "sglang:spec_accept_length") if value > 0]
    return {
        "running": total("sglang:num_running_reqs"),
        "queued": total("sglang:num_queue_reqs"),
        "token_usage": max(usage) * 100 if usage else None,
        "gen_throughput": total("sglang:gen_throughput"),
        "ttft_p50": latency("sglang:time_to_first_token_seconds", 0.5),
        "ttft_p99": latency("sglang:time_to_first_token_seconds", 0.99),
        "itl_p50": latency("sglang:inter_token_latency_seconds", 0.5),
        "itl_p99": latency("sglang:inter_token_latency_seconds", 0.99),
        "accept_length": max(accept) if accept else None,
        "requests_total": sum(_values(current, "sglang:num_requests", "_total")),
        "generation_tokens_total": sum(_values(current, "sglang:generation_tokens", "_total")),
    }


class ServingMetrics:
    """The last scrape of each ready attempt (for /metrics) and the samples written from them."""

    def __init__(self, sessions: Sessions):
        self.sessions = sessions
        self.latest: dict[int, Scrape] = {}

    async def record(self, attempt_id: int, labels: dict[str, str], text: str) -> None:
        """Stores one scrape's sample; a scrape that is not Prometheus text is logged and skipped."""
        try:
            scrape = Scrape(parse(text), labels, time.monotonic())
        except ValueError as exc:
            log.warning("attempt %s: %s", attempt_id, exc)
            return
        sample = figures(scrape, self.latest.get(attempt_id))
        self.latest[attempt_id] = scrape
        now = utcnow()
        try:
            async with self.sessions.write.begin() as session:
                session.add(ServingSample(attempt_id=attempt_id, taken_at=now, figures=sample))
                await session.execute(
                    delete(ServingSample).where(
                        ServingSample.attempt_id == attempt_id, ServingSample.taken_at < now - SERVING_HISTORY
                    )
                )
        except SQLAlchemyError as exc:  # the panel misses a point; the attempt's status is not the dashboard's error
            log.warning("attempt %s: its serving figures could not be stored: %s", attempt_id, exc)

    def forget(self, attempt_id: int) -> None:
        """The attempt is no longer ready: its figures leave /metrics (its samples stay)."""
        self.latest.pop(attempt_id, None)

    def exported(self) -> Iterator[Metric]:
        """Every ready attempt's families under their own names, each series with the attempt's labels."""
        merged: dict[str, Metric] = {}
        for scrape in list(self.latest.values()):
            for name, family in scrape.families.items():
                if name not in merged:
                    merged[name] = Metric(name, family.documentation, family.type, family.unit)
                merged[name].samples.extend(
                    Sample(s.name, {**s.labels, **scrape.labels}, s.value, s.timestamp, s.exemplar)
                    for s in family.samples
                )
        yield from (family for family in merged.values() if family.samples)


async def samples_of(session: AsyncSession, attempt_id: int, since: datetime | None = None) -> list[ServingSample]:
    """An attempt's samples, oldest first."""
    query = select(ServingSample).where(ServingSample.attempt_id == attempt_id)
    if since is not None:
        query = query.where(ServingSample.taken_at >= since)
    return list((await session.scalars(query.order_by(ServingSample.taken_at, ServingSample.id))).all())
