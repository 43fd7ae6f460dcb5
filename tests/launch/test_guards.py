"""The guards before a launch: a blocking preflight check stops it unless overridden with a reason,
a configuration that failed before asks for confirmation, a taken port gets a free one suggested;
a refused launch records no attempt. Through the API, the CLI and the launch form."""

from __future__ import annotations

import functools
import html
import re
from typing import Any

from fastapi import FastAPI
from httpx import AsyncClient

from tests.support.cli import cli
from tests.support.dashboard import TOKEN
from tests.support.launching import FINAL, launch, wait_for
from tests.support.served import served
from tests.support.servers import free_port
from tests.support.web import log_in

UNSET = "qwen36-27b-mtp-strategy-unset"  # SGLang 0.5.10's own parser refuses it
OOM = "qwen36-27b-mtp-oom"  # passes its preflight, then runs out of memory


async def attempt_count(api: AsyncClient) -> int:
    return len((await api.get("/api/attempts", params={"limit": 500})).json())


async def test_a_launch_preflight_refuses_records_nothing_until_overridden_with_a_reason(api: AsyncClient) -> None:
    body: dict[str, Any] = {"preset": UNSET, "host": "rtxpro-01", "gpus": [1], "port": free_port()}
    before = await attempt_count(api)
    refused = await api.post("/api/attempts", json=body)
    assert refused.status_code == 422, refused.text
    answer = refused.json()
    assert answer["guard"] == "preflight"
    assert answer["detail"].startswith(
        "preflight failed (arguments: SGLang will refuse these arguments: ValueError: Speculative decoding"
    )
    arguments = next(c for c in answer["preflight"]["checks"] if c["name"] == "arguments")
    assert not arguments["ok"] and arguments["blocking"]
    blank = await api.post("/api/attempts", json={**body, "override_reason": "   "})
    assert blank.status_code == 422 and blank.json()["guard"] == "preflight"
    assert await attempt_count(api) == before

    attempt_id = await launch(api, UNSET, "rtxpro-01", [1], override_reason="to see the drift table")
    attempt = await wait_for(api, attempt_id, FINAL)
    assert attempt["status"] == "failed" and attempt["override_reason"] == "to see the drift table"
    assert await attempt_count(api) == before + 1
    event = next(e for e in (await api.get("/api/audit")).json() if e["target"] == f"attempt {attempt_id}")
    assert event["action"] == "launch" and event["actor"] == attempt["launched_by"]
    assert event["detail"]["override"] == "to see the drift table"
    assert event["detail"]["overridden"][0].startswith("arguments: SGLang will refuse these arguments")
    # Preflight foresaw the strategy SGLang's refusal names: the drift table says so.
    strategy = next(row for row in attempt["drift"] if row["name"] == "mamba_scheduler_strategy")
    assert (strategy["requested"], strategy["predicted"], strategy["effective"]) == (None, "no_buffer", "no_buffer")


async def test_a_configuration_that_failed_before_asks_for_confirmation(api: AsyncClient) -> None:
    first = await wait_for(api, await launch(api, OOM, "rtxpro-01", [0]), FINAL)
    assert first["status"] == "failed" and first["exit_code"] == 137
    fingerprint = first["diagnosis"]["fingerprint"]
    body = {"preset": OOM, "host": "rtxpro-01", "gpus": [2], "port": free_port()}
    refused = await api.post("/api/attempts", json=body)
    assert refused.status_code == 409, refused.text
    answer = refused.json()
    assert re.fullmatch(
        r"this configuration failed once, last on \d{4}-\d\d-\d\d \d\d:\d\d UTC with RuntimeError: Not enough "
        r"memory\..*; confirm to launch it again",
        answer["detail"],
    ), answer["detail"]
    seen = answer["failed_before"]
    assert (seen["count"], seen["last_attempt"], seen["fingerprint"]) == (1, first["id"], fingerprint)
    assert seen["signature_url"] == f"/errors/{fingerprint}" and seen["attempt_url"] == f"/attempts/{first['id']}"
    assert await attempt_count(api) == 1

    again = await launch(api, OOM, "rtxpro-01", [2], confirm_failed_before=True)
    event = next(e for e in (await api.get("/api/audit")).json() if e["target"] == f"attempt {again}")
    assert event["detail"]["failed_before"] == 1
    await wait_for(api, again, FINAL)
    twice = await api.post("/api/attempts", json=body)
    assert twice.status_code == 409 and twice.json()["failed_before"]["count"] == 2
    assert twice.json()["failed_before"]["last_attempt"] == again


async def test_a_taken_port_gets_a_free_one_suggested(api: AsyncClient) -> None:
    port = free_port()
    serving = await wait_for(api, await launch(api, "llama31-8b", "rtxpro-01", [2], port=port), FINAL)
    assert serving["status"] == "ready"
    check = (
        await api.post("/api/preflight", json={"preset": "llama31-8b", "host": "rtxpro-01", "gpus": [3], "port": port})
    ).json()
    port_check = next(c for c in check["checks"] if c["name"] == "port")
    suggested = port_check["detail"]["suggested_port"]
    assert not port_check["ok"] and suggested > port and port_check["message"].endswith(f"; {suggested} is free")
    refused = await api.post(
        "/api/attempts", json={"preset": "llama31-8b", "host": "rtxpro-01", "gpus": [3], "port": port}
    )
    assert refused.status_code == 422 and refused.json()["suggested_port"] == suggested
    assert await attempt_count(api) == 1

    csrf = await log_in(api)
    choice = {"csrf_token": csrf, "preset": "llama31-8b", "host": "rtxpro-01", "gpus": ["3"], "port": str(port)}
    page = await api.post("/launch", data={**choice, "override_reason": "kept as typed"})
    assert page.status_code == 422
    text = html.unescape(page.text)
    # The button puts the port in the field on screen (tests/e2e/test_browser.py clicks it).
    assert f'id="use-free-port" data-use-port="{suggested}">use port {suggested}</button>' in text
    assert 'value="kept as typed"' in text and f'value="{port}"' in text  # nothing typed is lost
    assert await attempt_count(api) == 1


async def test_the_command_preview_follows_the_typed_port(api: AsyncClient) -> None:
    await log_in(api)
    default = await api.get("/launch", params={"preset": "llama31-8b", "host": "rtxpro-01"})
    assert "--port 30000" in default.text
    typed = await api.get("/launch", params={"preset": "llama31-8b", "host": "rtxpro-01", "port": "31234"})
    preview = re.search(r'<pre class="command" id="command">([^<]*)</pre>', typed.text)
    assert preview and "--port 31234" in preview.group(1) and "30000" not in preview.group(1)


async def test_the_launch_form_shows_refusals_and_keeps_what_was_chosen(api: AsyncClient) -> None:
    csrf = await log_in(api)
    choice = {"csrf_token": csrf, "preset": UNSET, "host": "rtxpro-01", "gpus": ["1"], "port": str(free_port())}
    refused = await api.post("/launch", data={**choice, "override_reason": "not ticked"})
    assert refused.status_code == 422
    text = html.unescape(refused.text)
    assert "preflight failed (arguments: SGLang will refuse these arguments" in text
    assert re.search(r'class="check fail" data-check="arguments"', text)
    assert 'value="not ticked"' in text and f'value="{choice["port"]}"' in text
    assert await attempt_count(api) == 0

    overridden = await api.post("/launch", data={**choice, "override": "1", "override_reason": "see it fail"})
    assert overridden.status_code == 303
    attempt_id = int(overridden.headers["location"].rsplit("/", 1)[1])
    attempt = await wait_for(api, attempt_id, FINAL)
    fingerprint = attempt["diagnosis"]["fingerprint"]

    form = html.unescape((await api.get("/launch", params={"preset": UNSET, "host": "rtxpro-01"})).text)
    warning = re.search(r'<div class="failed-before warn" id="failed-before".*?</div>', form, re.S)
    assert warning, form
    assert "This configuration failed once" in warning.group(0)
    assert f'href="/errors/{fingerprint}"' in warning.group(0) and f'href="/attempts/{attempt_id}"' in warning.group(0)
    again = {**choice, "override": "1", "override_reason": "see it fail", "gpus": ["2"]}
    unconfirmed = await api.post("/launch", data=again)
    assert unconfirmed.status_code == 409 and "this configuration failed once" in unconfirmed.text
    assert 'value="see it fail"' in unconfirmed.text and await attempt_count(api) == 1
    confirmed = await api.post("/launch", data={**again, "confirm_failed_before": "1"})
    assert confirmed.status_code == 303 and await attempt_count(api) == 2


async def test_cli_exits_3_when_a_guard_refuses(api: AsyncClient, running_app: FastAPI) -> None:
    async with served(running_app) as url:
        launchdeck = functools.partial(cli, url=url, env={"LAUNCHDECK_TOKEN": TOKEN})
        code, output, errors = await launchdeck("launch", "llama31-8b", "rtxpro-01", "--gpus", "42", "--no-wait")
        assert code == 3 and output == ""
        assert errors.startswith("launchdeck: preflight failed (gpus: no GPU 42 on this host (it has 4)")
        assert await attempt_count(api) == 0
        code, output, errors = await launchdeck(
            "launch", "llama31-8b", "rtxpro-01", "--gpus", "42", "--override-reason", "a GPU on its way", "--no-wait"
        )
        assert code == 0 and output.startswith("attempt 1: "), errors
        await wait_for(api, 1, FINAL)
        code, output, _ = await launchdeck("launch", "--help")
        assert "3 a guard refused the launch" in " ".join(output.split())


async def test_a_refusal_preflight_predicts_offers_its_fix_and_launches_it_in_one_click(api: AsyncClient) -> None:
    """SGLang 0.5.10 would refuse the preset (the mamba strategy left to auto): the refused form
    offers the fix the diagnosis knows, and its button saves the preset with it and launches that,
    with no failed launch first."""
    csrf = await log_in(api)
    revisions = len((await api.get(f"/api/presets/{UNSET}/revisions")).json())
    choice = {"csrf_token": csrf, "preset": UNSET, "host": "rtxpro-01", "gpus": ["3"], "port": str(free_port())}
    refused = html.unescape((await api.post("/launch", data=choice)).text)
    offer = re.search(
        r'<button type="submit" class="primary" name="apply_fix" value="([^"]+)">([^<]+)</button>', refused
    )
    assert offer and offer[1] == "--mamba-scheduler-strategy extra_buffer", refused
    assert offer[2] == "Apply --mamba-scheduler-strategy extra_buffer and launch"
    launched = await api.post("/launch", data={**choice, "apply_fix": offer[1]})
    assert launched.status_code == 303, launched.text
    attempt = await wait_for(api, int(launched.headers["location"].rsplit("/", 1)[1]), FINAL)
    assert attempt["status"] == "ready" and attempt["revision"] == revisions + 1
    assert attempt["argv"][attempt["argv"].index("--mamba-scheduler-strategy") + 1] == "extra_buffer"
    fixes = [e for e in (await api.get("/api/audit")).json() if e["action"] == "preset-fix"]
    assert [e["detail"]["change"] for e in fixes] == ["--mamba-scheduler-strategy extra_buffer"]
    await api.post(f"/api/attempts/{attempt['id']}/stop", headers={"x-csrf-token": csrf})
