"""/metrics as Prometheus scrapes it: closed until a scraper's token or address is set; then what
the dashboard holds, what the database counts and how requests went."""

from __future__ import annotations

import asyncio
import json
import re
from pathlib import Path

from fastapi import FastAPI
from httpx import AsyncClient
from prometheus_client.parser import text_string_to_metric_families
from pydantic import SecretStr

from tests.support.launching import launch, wait_for

SCRAPER = "scraper-token-0123456789abcdef0123"
GRAFANA = Path(__file__).resolve().parents[2] / "docs" / "grafana" / "launchdeck.json"


def open_to(app: FastAPI, **settings: object) -> None:
    runtime = app.state.runtime
    runtime.settings = runtime.settings.model_copy(update=settings)


def samples(text: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    return {
        (sample.name, tuple(sorted(sample.labels.items()))): sample.value
        for family in text_string_to_metric_families(text)
        for sample in family.samples
    }


async def test_closed_until_a_scraper_is_named_and_then_only_to_it(running_app: FastAPI, api: AsyncClient) -> None:
    closed = await api.get("/metrics")  # a person's API token does not open it
    assert closed.status_code == 403
    assert closed.json()["detail"] == "/metrics is closed: set LAUNCHDECK_METRICS_TOKEN or LAUNCHDECK_METRICS_ALLOWED"
    open_to(running_app, metrics_token=SecretStr(SCRAPER))
    assert (await api.get("/metrics")).status_code == 401
    assert (await api.get("/metrics", headers={"Authorization": f"Bearer {SCRAPER}x"})).status_code == 401
    assert (await api.get("/metrics", headers={"Authorization": f"Bearer {SCRAPER}"})).status_code == 200
    open_to(running_app, metrics_token=None, metrics_allowed="10.0.0.0/8")
    assert (await api.get("/metrics")).status_code == 401  # the test client is 127.0.0.1
    open_to(running_app, metrics_allowed="127.0.0.1")
    allowed = await api.get("/metrics")
    assert allowed.status_code == 200 and allowed.headers["content-type"].startswith("text/plain; version=")


async def test_a_launch_shows_in_the_counts_the_hosts_gpus_and_requests(running_app: FastAPI, api: AsyncClient) -> None:
    open_to(running_app, metrics_allowed="127.0.0.1")
    attempt = await launch(api, "llama31-8b", "b200-01", [0])
    await wait_for(api, attempt, {"ready"})
    running_app.state.runtime.metrics._counted_at = -1e9  # counted afresh, not 15 s later
    seen = samples((await api.get("/metrics")).text)
    assert seen["launchdeck_attempts", (("class", ""), ("status", "ready"))] == 1
    assert seen["launchdeck_launches", (("host", "b200-01"), ("preset", "llama31-8b"))] == 1
    assert seen["launchdeck_time_to_ready_seconds_count", (("host", "b200-01"),)] == 1
    for host in ("b200-01", "rtxpro-01", "rtxpro-02"):
        assert seen["launchdeck_host_up", (("host", host),)] == 1
        assert seen["launchdeck_ssh_connects_total", (("host", host),)] >= 1
    total = seen["launchdeck_gpu_memory_total_bytes", (("gpu", "0"), ("host", "b200-01"))]
    assert total == 183359 * 1024 * 1024
    route = (("method", "GET"), ("route", "/api/attempts/{attempt_id}"), ("status", "200"))
    assert seen["launchdeck_http_request_duration_seconds_count", route] >= 1  # a series per route, not per id
    assert not any("/api/attempts/1" in str(labels) for _, labels in seen)


async def test_every_metric_the_grafana_dashboard_plots_exists(running_app: FastAPI, api: AsyncClient) -> None:
    """Its launchdeck_ names as this dashboard exposes them, its sglang: names as a ready attempt run
    with --enable-metrics has them re-exported (the simulated server serves the release's own)."""
    open_to(running_app, metrics_allowed="127.0.0.1")
    attempt = await launch(api, "qwen36-27b-mtp-newest", "rtxpro-01", [0])
    await wait_for(api, attempt, {"ready"}, timeout=60)
    for _ in range(100):
        text = (await api.get("/metrics")).text
        if f'attempt="{attempt}"' in text:
            break
        await asyncio.sleep(0.1)
    exposed = {family.name for family in text_string_to_metric_families(text)}
    exposed |= {f"{name}_{suffix}" for name in exposed for suffix in ("bucket", "count", "sum", "total")}
    dashboard = json.loads(GRAFANA.read_text())
    queries = [target["expr"] for panel in dashboard["panels"] for target in panel.get("targets", [])]
    named = {name for query in queries for name in re.findall(r"\b(?:launchdeck_|sglang:)[a-z_]+", query)}
    assert len([n for n in named if n.startswith("sglang:")]) >= 6
    assert len(named) >= 16 and named <= exposed, sorted(named - exposed)
