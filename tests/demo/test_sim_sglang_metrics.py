"""The simulated SGLang's /metrics under --enable-metrics: each release's own families (derived from
its source by tests/oracle/derive_metric_tables.py), read back by prometheus_client's parser."""

from __future__ import annotations

import asyncio
import json

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

from tests.support.paths import HOSTLIB
from tests.support.servers import free_port
from tests.support.sim import READY, SGLANG_0_5_10, Launcher

LLAMA = "meta-llama/Llama-3.1-8B-Instruct"
MTP = [
    "--speculative-algorithm", "EAGLE", "--speculative-num-steps", "3",
    "--speculative-eagle-topk", "1", "--speculative-num-draft-tokens", "4",
]  # fmt: skip
LOG_OFTEN = ["--decode-log-interval", "5"]  # the scheduler sets its gauges where it logs a batch
RELEASES = HOSTLIB / "sglang" / "srt" / "releases"


def release_table(version: str) -> dict[str, dict[str, object]]:
    table = json.loads((RELEASES / f"{version}-metrics.json").read_text())
    return {m["name"]: m for role in ("scheduler", "tokenizer") for m in table[role] if not m["conditional"]}


def families(text: str) -> dict[str, object]:
    return {family.name: family for family in text_string_to_metric_families(text)}


@pytest.mark.parametrize(("python", "version"), [("python3", "0.5.23"), (SGLANG_0_5_10, "0.5.10")])
async def test_metrics_are_the_releases_own_and_count_what_was_served(rtx: Launcher, python: str, version: str) -> None:
    port = free_port()
    server = await rtx.on(python).start(
        ["--model-path", LLAMA, "--port", str(port), "--enable-metrics", *MTP, *LOG_OFTEN]
    )
    await server.wait_for(READY)
    listener = await rtx.host.forward_local_port(port)
    base = f"http://127.0.0.1:{listener.get_port()}"
    try:
        async with httpx.AsyncClient(base_url=base, timeout=30) as client:
            body = {"text": "the of and " * 20, "sampling_params": {"max_new_tokens": 64}}
            replies = await asyncio.gather(*(client.post("/generate", json=body) for _ in range(6)))
            assert all(reply.status_code == 200 for reply in replies)
            response = await client.get("/metrics")
        assert response.status_code == 200 and response.headers["content-type"].startswith("text/plain")
        text = response.text
    finally:
        listener.close()

    table = release_table(version)
    # Every family the release registers unconditionally, with its type and help text; nothing else.
    help_lines = {line.split()[2] for line in text.splitlines() if line.startswith("# HELP ")}
    assert help_lines == set(table)
    parsed = families(text)
    running = parsed["sglang:num_running_reqs"]
    assert running.type == "gauge" and running.samples[0].labels["model_name"] == LLAMA
    labels = json.loads((RELEASES / f"{version}-metrics.json").read_text())["labels"]
    assert set(running.samples[0].labels) == set(labels["scheduler"])
    # Six requests and the warmup: their tokens, and one time to first token each.
    requests = sum(s.value for s in parsed["sglang:num_requests"].samples)
    assert requests == 7
    generated = sum(s.value for s in parsed["sglang:generation_tokens"].samples)
    assert generated == 6 * 64 + 8
    ttft_count = [s for s in parsed["sglang:time_to_first_token_seconds"].samples if s.name.endswith("_count")]
    assert sum(s.value for s in ttft_count) == 7
    buckets = [s for s in parsed["sglang:time_to_first_token_seconds"].samples if s.name.endswith("_bucket")]
    assert [float(s.labels["le"]) for s in buckets][:-1] == table["sglang:time_to_first_token_seconds"]["buckets"]
    # MTP on: the accept length the scheduler logged (tokens per verify, above 1).
    accept = parsed["sglang:spec_accept_length"].samples[0].value
    assert 1.5 < accept <= 4


async def test_metrics_are_not_served_without_the_flag(rtx: Launcher) -> None:
    port = free_port()
    server = await rtx.start(["--model-path", LLAMA, "--port", str(port)])
    await server.wait_for(READY)
    listener = await rtx.host.forward_local_port(port)
    try:
        async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{listener.get_port()}", timeout=10) as client:
            assert (await client.get("/metrics")).status_code == 404
    finally:
        listener.close()
