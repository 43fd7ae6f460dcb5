"""A ready server's own figures: SGLang's /metrics read with its health check, kept per attempt,
shown on its page and re-exported with attempt labels at launchdeck's /metrics."""

from __future__ import annotations

import asyncio
from typing import Any

import httpx
import pytest
from fastapi import FastAPI
from httpx import ASGITransport, AsyncClient
from prometheus_client.parser import text_string_to_metric_families

from app.launch.serving import quantile
from tests.support.launching import launch, wait_for
from tests.support.web import log_in

MTP_WITH_METRICS = "qwen36-27b-mtp-newest"


async def serve_requests(app: FastAPI, attempt: dict[str, Any], count: int, tokens: int) -> None:
    """Requests sent to the server as its users would, through a forward of its port."""
    listener = await app.state.runtime.ssh.get(attempt["host"]).forward_local_port(attempt["port"])
    try:
        async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{listener.get_port()}", timeout=60) as client:
            body = {"text": "the of and " * 30, "sampling_params": {"max_new_tokens": tokens}}
            replies = await asyncio.gather(*(client.post("/generate", json=body) for _ in range(count)))
        assert all(reply.status_code == 200 for reply in replies)
    finally:
        listener.close()


async def samples_until(api: AsyncClient, attempt_id: int, ready: Any, timeout: float = 30) -> list[dict[str, Any]]:
    for _ in range(int(timeout * 10)):
        found = (await api.get(f"/api/attempts/{attempt_id}/serving")).json()["samples"]
        if ready(found):
            return list(found)
        await asyncio.sleep(0.1)
    raise AssertionError(f"attempt {attempt_id}'s serving samples: {found[-3:]}")


async def test_a_ready_mtp_server_s_figures_reach_its_page_and_prometheus(
    running_app: FastAPI, api: AsyncClient
) -> None:
    attempt_id = await launch(api, MTP_WITH_METRICS, "rtxpro-01", [0])
    attempt = await wait_for(api, attempt_id, {"ready"}, timeout=60)
    await serve_requests(running_app, attempt, count=8, tokens=200)

    def served(samples: list[dict[str, Any]]) -> bool:
        return bool(samples) and samples[-1]["requests_total"] >= 9  # the 8 and the warmup

    samples = await samples_until(api, attempt_id, served)
    assert (await api.get(f"/api/attempts/{attempt_id}/serving")).json()["enabled"] is True
    assert samples[-1]["generation_tokens_total"] >= 8 * 200
    # Under MTP, the accept length SGLang's scheduler logs: tokens per verify, between 1 and 4 drafts.
    assert 1 < samples[-1]["accept_length"] <= 4
    # Some interval saw the requests start: its time to first token, and the inter-token latency.
    assert any(s["ttft_p50"] is not None and s["ttft_p50"] > 0 for s in samples)
    assert any(s["itl_p99"] is not None and s["itl_p99"] >= (s["itl_p50"] or 0) for s in samples)
    assert samples[-1]["running"] == 0 and samples[-1]["queued"] == 0  # all done, the idle batch logged

    running_app.state.runtime.settings = running_app.state.runtime.settings.model_copy(
        update={"metrics_allowed": "127.0.0.1"}
    )
    families = {f.name: f for f in text_string_to_metric_families((await api.get("/metrics")).text)}
    requests = [s for s in families["sglang:num_requests"].samples if s.labels.get("attempt") == str(attempt_id)]
    assert requests and requests[0].labels["host"] == "rtxpro-01"
    assert requests[0].labels["preset"] == MTP_WITH_METRICS and requests[0].labels["model_name"] == "Qwen/Qwen3.6-27B"
    assert sum(s.value for s in requests) >= 9

    async with AsyncClient(transport=ASGITransport(app=running_app), base_url="http://testserver") as browser:
        await log_in(browser)
        panel = (await browser.get(f"/attempts/{attempt_id}/serving")).text
    assert 'id="serving-figures"' in panel and 'hx-trigger="every 10s"' in panel
    assert 'data-figure="accept_length"' in panel and "Generation throughput" in panel

    assert (await api.post(f"/api/attempts/{attempt_id}/stop")).status_code == 202
    await wait_for(api, attempt_id, {"stopped"})
    exported = (await api.get("/metrics")).text
    assert f'attempt="{attempt_id}"' not in exported  # a stopped server's figures leave Prometheus
    kept = (await api.get(f"/api/attempts/{attempt_id}/serving")).json()["samples"]
    assert len(kept) >= len(samples)  # its history stays with the attempt


async def test_a_server_without_the_flag_says_how_to_get_its_figures(running_app: FastAPI, api: AsyncClient) -> None:
    attempt_id = await launch(api, "llama31-8b", "b200-01", [0])
    await wait_for(api, attempt_id, {"ready"})
    served = (await api.get(f"/api/attempts/{attempt_id}/serving")).json()
    assert served == {"enabled": False, "samples": []}
    async with AsyncClient(transport=ASGITransport(app=running_app), base_url="http://testserver") as browser:
        await log_in(browser)
        panel = (await browser.get(f"/attempts/{attempt_id}/serving")).text
    assert 'id="serving-off"' in panel and "--enable-metrics" in panel


@pytest.mark.parametrize(
    ("q", "now", "before", "expected"),
    [
        (0.5, {0.1: 2, 0.2: 4, float("inf"): 4}, None, 0.1),  # rank 2 of 4: the first bucket's top
        (0.75, {0.1: 2, 0.2: 4, float("inf"): 4}, None, 0.15),  # halfway through the second bucket
        (0.5, {0.1: 12, 0.2: 14, float("inf"): 14}, {0.1: 10, 0.2: 10, float("inf"): 10}, 0.1),  # growth only
        (0.99, {0.1: 0, 0.2: 0, float("inf"): 3}, None, 0.2),  # beyond the last bound: that bound
        (0.5, {0.1: 1, float("inf"): 1}, {0.1: 5, float("inf"): 5}, 0.05),  # a restart: counts from zero
    ],
)
def test_quantile_of_a_histogram_s_growth_as_prometheus_interpolates(
    q: float, now: dict[float, float], before: dict[float, float] | None, expected: float
) -> None:
    assert quantile(q, now, before) == pytest.approx(expected)


def test_no_quantile_when_nothing_was_observed() -> None:
    assert quantile(0.5, {0.1: 3, float("inf"): 3}, {0.1: 3, float("inf"): 3}) is None
