"""Diagnosis of real launches on the simulated cluster: kept on the attempt as its log streams,
filed under signatures, drift against the request, preflight and the live server, hangs, and
attempts compared."""

from __future__ import annotations

import asyncio
import re
from typing import Any

from fastapi import FastAPI
from httpx import AsyncClient

from app.db.history import load_attempt
from app.launch.record import Pace
from tests.support.cli import cli
from tests.support.dashboard import TOKEN
from tests.support.launching import FINAL, REPLAY, launch, remote_log, wait_for
from tests.support.served import served
from tests.support.waiting import until
from tests.support.web import log_in


async def log_line(api: AsyncClient, attempt_id: int, number: int) -> str:
    body = (await api.get(f"/api/attempts/{attempt_id}/log", params={"limit": 1 << 24})).content
    return body.decode(errors="replace").split("\n")[number - 1]


def drift_row(attempt: dict[str, Any], name: str) -> dict[str, Any]:
    return next(row for row in attempt["drift"] if row["name"] == name)


async def test_the_seed_story_is_diagnosed_filed_and_compared(api: AsyncClient, running_app: FastAPI) -> None:
    oom_id = await launch(api, "qwen36-27b-mtp-oom", "rtxpro-01", [0])
    refused_id = await launch(api, "qwen36-27b-mtp-strategy-unset", "rtxpro-01", [1], override_reason=REPLAY)
    fixed_id = await launch(api, "qwen36-27b-mtp-fixed", "rtxpro-01", [2])
    oom, refused = await wait_for(api, oom_id, FINAL), await wait_for(api, refused_id, FINAL)
    fixed = await wait_for(api, fixed_id, FINAL)

    # SGLang 0.5.10's own fraction for MTP leaves too little beside the weights for the draft mamba states.
    found = oom["diagnosis"]
    assert (found["class"], found["stage"]) == ("oom", "weights loaded")
    assert found["root_error"].startswith(
        "RuntimeError: Not enough memory. Please try to increase --mem-fraction-static."
    )
    assert found["root_error"] in await log_line(api, oom_id, found["root_line"])
    assert found["memory"]["weights_gb"] > 40
    assert "raise --mem-fraction-static" in found["hint"]
    assert "one mamba state per draft token for every running request" in found["hint"]

    # The refusal: the strategy was never requested; 0.5.10 turned auto into no_buffer.
    found = refused["diagnosis"]
    assert found["class"] == "arg-conflict"
    assert "the strategy was never requested" in found["hint"]
    row = drift_row(refused, "mamba_scheduler_strategy")
    assert (row["requested"], row["effective"], row["source"], row["changed"]) == (None, "no_buffer", "error", True)

    # The healthy one: its live server was asked for its arguments, and its adjustments show.
    assert fixed["status"] == "ready"
    found = fixed["diagnosis"]
    assert found["class"] == "healthy" and found["root_error"] is None and found["fingerprint"] is None
    assert found["server_info"]["mamba_scheduler_strategy"] == "extra_buffer"
    assert any("Max running requests is reset to 48" in line for line in found["adjustments"])
    row = drift_row(fixed, "max_running_requests")
    assert (row["requested"], row["effective"]) == (None, 48)
    assert found["server_args"]["mem_fraction_static"] == 0.95

    # Signatures: one per cause; a second launch of the same failure is counted under it.
    again_id = await launch(api, "qwen36-27b-mtp-oom", "rtxpro-01", [3], confirm_failed_before=True)
    again = await wait_for(api, again_id, FINAL)
    assert again["diagnosis"]["fingerprint"] == oom["diagnosis"]["fingerprint"]
    signatures = {s["fingerprint"]: s for s in (await api.get("/api/signatures")).json()}
    assert len(signatures) == 2
    grouped = signatures[oom["diagnosis"]["fingerprint"]]
    assert (grouped["count"], grouped["failure_class"], grouped["hosts"]) == (2, "oom", ["rtxpro-01"])
    assert grouped["presets"] == ["qwen36-27b-mtp-oom"] and grouped["first_seen"] <= grouped["last_seen"]
    members = await api.get(f"/api/signatures/{grouped['fingerprint']}/attempts")
    assert members.json() == [again_id, oom_id]
    await log_in(api)  # the pages take the browser's session cookie
    page = (await api.get(f"/attempts/{again_id}")).text
    assert "same signature: 1 earlier attempt" in page and f'href="/attempts/{oom_id}"' in page
    # Compare links only where there is something to compare: no attempt of this preset became ready.
    assert f'href="/compare?a={oom_id}&amp;b={again_id}" id="compare-previous"' in page
    assert 'id="compare-success"' not in page
    assert f'href="/attempts/{again_id}/log?line={found_line(again)}#L{found_line(again)}"' in page
    errors = (await api.get("/errors")).text
    assert grouped["fingerprint"] in errors and "qwen36-27b-mtp-strategy-unset" in errors

    # Compare: what differed between the OOM and the launch that worked.
    compared = (await api.get("/api/compare", params={"a": oom_id, "b": fixed_id})).json()
    argv = {row["name"]: row for row in compared["argv"]}
    assert (argv["--mem-fraction-static"]["a"], argv["--mem-fraction-static"]["b"]) == (None, "0.95")
    assert argv["--mem-fraction-static"]["differs"] and not argv["--speculative-algorithm"]["differs"]
    assert (compared["a"]["failure_class"], compared["b"]["failure_class"]) == ("oom", "healthy")
    assert compared["a"]["root_line"] in [line["number"] for line in compared["a"]["log_excerpt"]]
    assert compared["b"]["log_excerpt"] == [] and "ready" in [s["stage"] for s in compared["b"]["stages"]]
    assert compared["gpus"][0]["a"] > 90_000  # free MiB of GPU 0 when the OOM launched
    assert any(row["name"] == "weights_gb" and not row["differs"] for row in compared["memory"])
    # The page: the changed argument first, above the outcome; what is the same on both folded away.
    page = (await api.get("/compare", params={"a": oom_id, "b": fixed_id})).text
    changed, outcome = page.index('data-row="--mem-fraction-static"'), page.index('id="outcome"')
    same_rows = page.index('<details class="same-rows">', page.index('id="argv-diff"'))
    assert changed < same_rows < page.index('data-row="--speculative-algorithm"') < outcome

    previous = await api.get(f"/attempts/{again_id}/compare/previous", follow_redirects=False)
    assert previous.status_code == 303 and previous.headers["location"] == f"/compare?a={oom_id}&b={again_id}"
    none = await api.get(f"/attempts/{again_id}/compare/last-success", follow_redirects=False)
    assert none.status_code == 404 and "became ready" in none.text
    page = (await api.get(previous.headers["location"])).text
    assert "Log around the root error" in page and 'class="ln error mark"' in page

    async with served(running_app) as url:
        code, out, _ = await cli("compare", str(oom_id), str(fixed_id), url=url, env={"LAUNCHDECK_TOKEN": TOKEN})
    assert code == 0
    assert re.search(r"^--mem-fraction-static +- +0\.95$", out, re.M), out
    assert f"#{oom_id} root error (line {found_line(oom)}): RuntimeError: Not enough memory." in out
    assert "--speculative-algorithm" not in out  # the same on both sides
    assert re.search(r"^avail_after_cuda_graph_gb +- +\d", out, re.M), out  # long names whole
    assert f"#{oom_id} stages: pending " in out and "-0.0s" not in out


def found_line(attempt: dict[str, Any]) -> int:
    return int(attempt["diagnosis"]["root_line"])


async def test_comparing_attempts_leaves_no_log_open(api: AsyncClient, running_app: FastAPI) -> None:
    """Compare reads the log around each root error; the request gives the logs back when it ends."""
    logs = running_app.state.runtime.logs
    oom_id = await launch(api, "qwen36-27b-mtp-oom", "rtxpro-01", [0])
    oom = await wait_for(api, oom_id, FINAL)
    assert found_line(oom)  # so compare reads its log
    # Once the mirror and the follower are done with it, the ended attempt's log leaves memory.
    await until(
        lambda: logs.is_complete(oom_id) and not logs.is_open(oom_id), "the ended attempt's log to be let go", timeout=5
    )
    compared = (await api.get("/api/compare", params={"a": oom_id, "b": oom_id})).json()
    assert compared["a"]["log_excerpt"]
    assert not logs.is_open(oom_id)
    await log_in(api)
    page = (await api.get("/compare", params={"a": oom_id, "b": oom_id})).text
    assert "Log around the root error" in page
    assert not logs.is_open(oom_id)


async def test_a_silent_launch_is_reported_hung_while_its_process_lives(api: AsyncClient, running_app: FastAPI) -> None:
    runtime = running_app.state.runtime
    runtime.attempts.pace = Pace(loading=0.1, serving=0.3, health_timeout=10, hang=1.0)
    slow = {
        "name": "slow-loader",
        "model_path": "meta-llama/Llama-3.1-8B-Instruct",
        "args": [],
        "env": {"LAUNCHDECK_SIM_TIME_SCALE": "3"},  # seconds between loading lines
    }
    assert (await api.post("/api/presets", json=slow)).status_code == 201
    attempt_id = await launch(api, "slow-loader", "b200-01", [7])
    for _ in range(300):
        attempt = (await api.get(f"/api/attempts/{attempt_id}")).json()
        if attempt["diagnosis"].get("class") == "timeout":
            break
        await asyncio.sleep(0.1)
    assert attempt["status"] == "loading", attempt
    assert attempt["error"].startswith("no new log line for 1 s during ")
    found = attempt["diagnosis"]
    assert found["root_error"] and found["root_error"] in await log_line(api, attempt_id, found["root_line"])
    assert "Nothing progressed" in found["hint"]
    signatures = (await api.get("/api/signatures", params={"failure_class": "timeout"})).json()
    assert [s["count"] for s in signatures] == [1]

    await api.post(f"/api/attempts/{attempt_id}/stop")
    stopped = await wait_for(api, attempt_id, FINAL)
    assert stopped["status"] == "stopped"


async def test_a_preset_whose_python_is_missing_fails_with_its_whole_log_and_root_error(
    api: AsyncClient, running_app: FastAPI
) -> None:
    runtime = running_app.state.runtime
    preset = {
        "name": "wrong-python",
        "model_path": "meta-llama/Llama-3.1-8B-Instruct",
        "python": "/opt/missing/python3.12",
    }
    assert (await api.post("/api/presets", json=preset)).status_code == 201
    preflight = (
        await api.post("/api/preflight", json={"preset": "wrong-python", "host": "b200-01", "gpus": [6]})
    ).json()
    refused = [(check["name"], check["message"]) for check in preflight["checks"] if not check["ok"]]
    assert refused[0][0] == "python" and refused[0][1].startswith("the preset's python cannot be run on the host: ")
    assert "/opt/missing/python3.12" in refused[0][1] and refused[0][1].endswith(": No such file or directory")
    assert "port" not in dict(refused)  # not "the port is not free": nothing was learnt about it
    attempt_id = await launch(api, "wrong-python", "b200-01", [6], override_reason="the interpreter is being fixed")
    attempt = await wait_for(api, attempt_id, FINAL)
    assert (attempt["status"], attempt["exit_code"]) == ("failed", 127)
    on_host = await remote_log(running_app, attempt)
    assert on_host.endswith(": /opt/missing/python3.12: not found\n")  # the shell's word (dash)
    assert (await api.get(f"/api/attempts/{attempt_id}/log")).text == on_host
    found = attempt["diagnosis"]
    assert (found["class"], found["root_error"], found["root_line"]) == ("import-error", on_host.strip(), 1)
    assert "check the preset's python" in found["hint"]
    assert runtime.mirrors.get(attempt_id) is None  # drained and done: nothing is retried
    await log_in(api)
    page = (await api.get(f"/attempts/{attempt_id}")).text
    card = page[page.index('id="root-error"') :]
    assert "/opt/missing/python3.12: not found" in card[: card.index("</div>")]
    assert "complete, sha256 matches the host's file" in page

    # The same attempt's mirror started again (as a restarted dashboard does for an incomplete
    # log) where the host's log cannot be read: it gives up, and the attempt page says why.
    runtime.logs.forget(attempt_id)
    for name in (f"{attempt_id}.log", f"{attempt_id}.json", f"{attempt_id}.idx"):
        (runtime.logs.directory / name).unlink(missing_ok=True)
    host = runtime.ssh.get("b200-01")
    log_path = f"{attempt['remote_dir']}/server.log"
    await host.run(["sh", "-c", 'rm "$1" && mkdir "$1"', "sh", log_path])
    runtime.mirrors.retry_max, runtime.mirrors.give_up_after = 0.05, 3
    async with runtime.sessions.read() as session:
        mirror = runtime.attempts.mirror(await load_attempt(session, attempt_id))
    await asyncio.wait_for(mirror.done.wait(), 20)
    assert runtime.mirrors.get(attempt_id) is None
    page = (await api.get(f"/attempts/{attempt_id}")).text
    stopped = page[page.index('id="mirror-stopped"') :]
    assert stopped.startswith(
        'id="mirror-stopped">mirroring stopped: gave up after 3 tries without progress after the attempt ended: '
        f"b200-01: IsADirectoryError: [Errno 21] Is a directory: &#39;{log_path}&#39;</span>"
    )
