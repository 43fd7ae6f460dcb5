"""Operators limited to hosts with some labels: a launch or preflight on another host is refused
with 403 and a sentence before anything runs, and records no attempt; admins and the access token
are never limited; the CLI sets and lifts the limit."""

from __future__ import annotations

import html
import io
import re
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import pytest
from fastapi import FastAPI
from httpx import ASGITransport, AsyncClient

from app.cli import main
from app.states import Role
from app.web.deps import api_launch_permission, page_launch_permission
from tests.accounts.test_roles import LEAST_ROLE
from tests.support.accounts import PASSWORD, add_user, browser, log_in, person
from tests.support.launching import wait_for
from tests.support.servers import free_port
from tests.support.waiting import until
from tests.support.web import api_routes, csrf_from

REFUSAL = "ann may launch only on hosts labelled rtx-pro-6000; b200-01 has labels b200"


@pytest.fixture
async def ann(api: AsyncClient, running_app: FastAPI) -> AsyncIterator[AsyncClient]:
    """An operator who may launch only on the RTX PRO host (the `api` fixture seeds the presets)."""
    async with await person(running_app, "ann", Role.OPERATOR, ["rtx-pro-6000"]) as client:
        yield client


async def attempt_count(api: AsyncClient) -> int:
    return len((await api.get("/api/attempts", params={"limit": 500})).json())


async def test_a_limited_operator_is_refused_another_hosts_launch_and_preflight(
    api: AsyncClient, ann: AsyncClient
) -> None:
    body = {"preset": "llama31-8b", "host": "b200-01", "gpus": [0], "port": free_port()}
    before = await attempt_count(api)
    launched = await ann.post("/api/attempts", json=body)
    assert launched.status_code == 403, launched.text
    assert launched.json()["detail"] == REFUSAL
    checked = await ann.post("/api/preflight", json=body)
    assert checked.status_code == 403 and checked.json()["detail"] == REFUSAL
    assert await attempt_count(api) == before
    assert not [event for event in (await api.get("/api/audit")).json() if event["action"] == "launch"]


async def test_a_limited_operator_launches_on_a_host_with_the_label(api: AsyncClient, ann: AsyncClient) -> None:
    body = {"preset": "llama31-8b", "host": "rtxpro-01", "gpus": [1], "port": free_port()}
    checked = await ann.post("/api/preflight", json=body)
    assert checked.status_code == 200, checked.text
    launched = await ann.post("/api/attempts", json=body)
    assert launched.status_code == 202, launched.text
    attempt_id = launched.json()["id"]
    attempt = await wait_for(api, attempt_id, {"ready", "failed", "lost"})
    assert attempt["status"] == "ready" and attempt["launched_by"] == "ann"
    assert (await ann.post(f"/api/attempts/{attempt_id}/stop")).status_code == 202
    assert (await wait_for(api, attempt_id, {"stopped", "failed", "lost"}))["status"] == "stopped"


async def test_admins_and_the_access_token_are_never_limited(api: AsyncClient, running_app: FastAPI) -> None:
    body = {"preset": "llama31-8b", "host": "b200-01", "gpus": [0], "port": free_port()}
    async with await person(running_app, "root", Role.ADMIN, ["rtx-pro-6000"]) as admin:
        assert (await admin.post("/api/preflight", json=body)).status_code == 200
    assert (await api.post("/api/preflight", json=body)).status_code == 200


async def test_the_launch_form_tells_a_limited_operator_why(ann: AsyncClient, running_app: FastAPI) -> None:
    async with AsyncClient(transport=ASGITransport(app=running_app), base_url="http://testserver") as browser:
        form = await browser.get("/login")
        fields = {"name": "ann", "password": PASSWORD, "csrf_token": csrf_from(form.text)}
        assert (await browser.post("/login", data=fields)).status_code == 303
        csrf = csrf_from((await browser.get("/launch")).text)
        choice = {"preset": "llama31-8b", "host": "b200-01", "gpus": "0", "csrf_token": csrf}
        preflight = await browser.post("/launch/preflight", data=choice)
        assert REFUSAL in html.unescape(preflight.text)
        launched = await browser.post("/launch", data=choice)
        assert launched.status_code == 403 and REFUSAL in html.unescape(launched.text)


def test_users_cli_limits_an_operator_to_labels_and_lifts_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("LAUNCHDECK_DATA_DIR", str(tmp_path))
    monkeypatch.setattr("sys.stdin", io.StringIO(PASSWORD + "\n"))
    assert main(["users", "add", "ann", "--role", "operator", "--password-stdin"]) == 0
    capsys.readouterr()
    assert main(["users", "hosts", "ann", "--labels", "rtxpro, b200"]) == 0
    assert capsys.readouterr().out == "launchdeck: ann may launch on hosts labelled b200 or rtxpro\n"
    assert main(["users", "list"]) == 0
    assert capsys.readouterr().out.split()[-1] == "b200,rtxpro"
    assert main(["users", "hosts", "ann", "--all"]) == 0
    assert capsys.readouterr().out == "launchdeck: ann may launch on every host\n"
    assert main(["users", "list"]) == 0
    assert capsys.readouterr().out.rstrip().endswith("all hosts")
    assert main(["users", "hosts", "nobody", "--all"]) == 1
    with pytest.raises(SystemExit):
        main(["users", "hosts", "ann"])


async def test_a_limited_operator_cannot_stop_what_runs_on_another_host(
    api: AsyncClient, ann: AsyncClient, running_app: FastAPI
) -> None:
    """Stopping is acting on the host as launching is: an attempt, its process and a sweep on
    b200-01 are refused to ann with the sentence, and nothing is stopped."""
    body = {"preset": "llama31-8b", "host": "b200-01", "gpus": [0], "port": free_port()}
    launched = await api.post("/api/attempts", json=body)
    attempt = await wait_for(api, launched.json()["id"], {"ready", "failed", "lost"})
    assert attempt["status"] == "ready"
    refused = await ann.post(f"/api/attempts/{attempt['id']}/stop")
    assert refused.status_code == 403 and refused.json()["detail"] == REFUSAL
    async with browser(running_app) as page_client:
        csrf = await log_in(page_client, name="ann", password=PASSWORD)
        page = await page_client.post(f"/hosts/b200-01/processes/{attempt['pid']}/stop", data={"csrf_token": csrf})
        assert page.status_code == 403 and REFUSAL in html.unescape(page.text)
        page = await page_client.post(f"/attempts/{attempt['id']}/stop", data={"csrf_token": csrf})
        assert page.status_code == 403 and REFUSAL in html.unescape(page.text)
    assert (await api.get(f"/api/attempts/{attempt['id']}")).json()["status"] == "ready"
    assert not [event for event in (await api.get("/api/audit")).json() if event["action"].startswith("stop")]


async def test_stopping_a_tracked_server_from_the_host_page_stops_its_attempt(
    api: AsyncClient, running_app: FastAPI
) -> None:
    """The host page's process list stops a process launchdeck tracks by stopping its attempt:
    recorded as stopped by that person, not as a failure (exit 143) with a failure webhook."""
    body = {"preset": "llama31-8b", "host": "rtxpro-01", "gpus": [2], "port": free_port()}
    launched = await api.post("/api/attempts", json=body)
    attempt = await wait_for(api, launched.json()["id"], {"ready", "failed", "lost"})
    assert attempt["status"] == "ready"
    await add_user(running_app, "olga", Role.OPERATOR)
    async with browser(running_app) as page_client:
        csrf = await log_in(page_client, name="olga", password=PASSWORD)
        page = await page_client.post(f"/hosts/rtxpro-01/processes/{attempt['pid']}/stop", data={"csrf_token": csrf})
        assert page.status_code == 303, page.text
    ended = await wait_for(api, attempt["id"], {"stopped", "failed", "lost"})
    assert ended["status"] == "stopped"
    stops = [e for e in (await api.get("/api/audit")).json() if e["action"] in ("stop", "stop-process")]
    assert [(e["actor"], e["action"], e["target"]) for e in stops] == [("olga", "stop", f"attempt {attempt['id']}")]


# Every route that runs or stops something on a host, and the action it is: each asks
# app.launch.guards.launch_permission, so an operator limited to other hosts is refused.
HOST_ACTIONS: dict[tuple[str, str], str] = {
    ("POST", "/api/preflight"): "preflight",
    ("POST", "/launch/preflight"): "preflight",
    ("POST", "/api/attempts"): "launch",
    ("POST", "/launch"): "launch",
    ("POST", "/api/attempts/{attempt_id}/relaunch"): "relaunch",
    ("POST", "/attempts/{attempt_id}/relaunch"): "relaunch",
    ("POST", "/attempts/{attempt_id}/edit"): "relaunch with changes",
    ("POST", "/api/attempts/{attempt_id}/stop"): "stop",
    ("POST", "/attempts/{attempt_id}/stop"): "stop",
    ("POST", "/hosts/{name}/processes/{pid}/stop"): "stop a process",
    ("POST", "/api/hosts/{name}/adopt"): "adopt a server",
    ("POST", "/hosts/{name}/adopt"): "adopt a server",
    ("POST", "/api/attempts/{attempt_id}/benchmarks"): "benchmark",
    ("POST", "/attempts/{attempt_id}/benchmarks"): "benchmark",
    ("POST", "/api/benchmarks/{benchmark_id}/stop"): "stop a benchmark",
    ("POST", "/api/sweeps"): "sweep",
    ("POST", "/sweeps"): "sweep",
    ("POST", "/api/sweeps/{sweep_id}/stop"): "stop a sweep",
    ("POST", "/sweeps/{sweep_id}/stop"): "stop a sweep",
}
# The operator's other routes run nothing on a host: the role alone decides them.
PRESET, TEACH, WORKLOAD, FORM = "edits a preset", "teaches a rule", "adds a workload", "shows a form; its post acts"
ROLE_ONLY: dict[tuple[str, str], str] = {
    ("POST", "/api/presets"): PRESET,
    ("PUT", "/api/presets/{name}"): PRESET,
    ("POST", "/api/presets/{name}/clone"): PRESET,
    ("POST", "/api/presets/{name}/archive"): PRESET,
    ("POST", "/api/presets/{name}/rewrite"): PRESET,
    ("GET", "/presets/new"): PRESET,
    ("POST", "/presets"): PRESET,
    ("POST", "/presets/{name}"): PRESET,
    ("POST", "/presets/{name}/clone"): PRESET,
    ("POST", "/presets/{name}/archive"): PRESET,
    ("POST", "/presets/{name}/rewrite"): PRESET,
    ("POST", "/api/sweeps/{sweep_id}/points/{attempt_id}/adopt"): PRESET,
    ("POST", "/sweeps/{sweep_id}/adopt"): PRESET,
    ("POST", "/api/rules/import"): TEACH,
    ("POST", "/api/rules"): TEACH,
    ("PUT", "/api/rules/{rule_id}"): TEACH,
    ("DELETE", "/api/rules/{rule_id}"): TEACH,
    ("POST", "/rules"): TEACH,
    ("POST", "/rules/{rule_id}"): TEACH,
    ("POST", "/rules/{rule_id}/delete"): TEACH,
    ("POST", "/api/workloads"): WORKLOAD,
    ("GET", "/launch"): FORM,
    ("GET", "/sweeps/new"): FORM,
    ("GET", "/attempts/{attempt_id}/relaunch"): FORM,
    ("GET", "/attempts/{attempt_id}/edit"): FORM,
}


async def sweep_ended(api: AsyncClient, sweep_id: int) -> bool:
    return bool((await api.get(f"/api/sweeps/{sweep_id}")).json()["status"] != "running")


def depends_on(dependant: Any, call: Callable[..., Any]) -> bool:
    return any(d.call is call or depends_on(d, call) for d in dependant.dependencies)


def test_every_operator_route_is_a_host_action_or_role_only(running_app: FastAPI) -> None:
    """Built from the routes, as the role table is: a new operator route must say which it is,
    and every host action takes the caller's permission."""
    operator_routes = {route for route, least in LEAST_ROLE.items() if least == Role.OPERATOR.value}
    assert operator_routes == set(HOST_ACTIONS) | set(ROLE_ONLY) and not set(HOST_ACTIONS) & set(ROLE_ONLY)
    routes = {(method, r.path): r for r in api_routes(running_app.routes) for method in r.methods}
    permissions = (page_launch_permission, api_launch_permission)
    missing = [key for key in HOST_ACTIONS if not any(depends_on(routes[key].dependant, p) for p in permissions)]
    assert not missing, f"host actions that never ask for the caller's permission: {missing}"


async def test_every_host_action_refuses_a_host_outside_the_limit(
    api: AsyncClient, ann: AsyncClient, running_app: FastAPI
) -> None:
    """ann may act only on rtx-pro-6000 hosts. Each host action of the table, aimed at b200-01 or
    at what runs there, is refused with the sentence (403), and nothing changes: no attempt,
    revision, benchmark or audit row of hers, the server still ready, the sweep untouched."""
    await api.post("/api/workloads", json={"name": "tiny", "num_prompts": 4, "input_len": 16, "output_len": 8})
    body = {"preset": "llama31-8b", "host": "b200-01", "gpus": [0], "port": free_port()}
    served = await wait_for(api, (await api.post("/api/attempts", json=body)).json()["id"], {"ready", "failed"})
    assert served["status"] == "ready", served
    measured = await api.post(f"/api/attempts/{served['id']}/benchmarks", json={"workload": "tiny"})
    sweep_body = {"preset": "llama31-8b", "host": "b200-01", "gpus": [1], "workload": "tiny",
                  "points": [{"--max-running-requests": "8"}], "port": free_port()}  # fmt: skip
    sweep = (await api.post("/api/sweeps", json=sweep_body)).json()
    await api.post(f"/api/sweeps/{sweep['id']}/stop")
    await until(lambda: sweep_ended(api, sweep["id"]), "the stopped sweep ends")
    ids = {"attempt_id": served["id"], "benchmark_id": measured.json()["id"], "sweep_id": sweep["id"],
           "name": "b200-01", "pid": served["pid"]}  # fmt: skip
    before = (await attempt_count(api), len((await api.get("/api/presets/llama31-8b/revisions")).json()))
    benchmarks = len((await api.get(f"/api/attempts/{served['id']}/benchmarks")).json())
    async with browser(running_app) as page:
        csrf = await log_in(page, name="ann", password=PASSWORD)
        editor = (await page.get(f"/attempts/{served['id']}/edit")).text
        edited = dict(re.findall(r'<input (?:type="hidden" )?name="([^"]+)" value="([^"]*)"', editor))
        forms: dict[str, dict[str, str]] = {
            "/launch/preflight": {"preset": "llama31-8b", "host": "b200-01", "gpus": "0"},
            "/launch": {"preset": "llama31-8b", "host": "b200-01", "gpus": "0"},
            "/attempts/{attempt_id}/edit": edited | {"max_running_requests": "4", "confirmed": "1"},
            "/attempts/{attempt_id}/benchmarks": {"workload": "tiny"},
            "/hosts/{name}/adopt": {"port": str(served["port"])},
            "/sweeps": {"preset": "llama31-8b", "host": "b200-01", "gpus": "1", "workload": "tiny",
                        "grid": "--max-running-requests 8 16"},
        }  # fmt: skip
        json_bodies: dict[str, Any] = {
            "/api/preflight": body,
            "/api/attempts": body,
            "/api/attempts/{attempt_id}/relaunch": {"changes": [{"flag": "--max-running-requests", "value": "4"}]},
            "/api/attempts/{attempt_id}/benchmarks": {"workload": "tiny"},
            "/api/hosts/{name}/adopt": {"port": served["port"]},
            "/api/sweeps": sweep_body,
        }
        wrong = []
        for (method, path), action in HOST_ACTIONS.items():
            url = path.format(**ids)
            if path.startswith("/api/"):
                answer = await ann.request(method, url, json=json_bodies.get(path))
                said = answer.json().get("detail") if answer.status_code == 403 else answer.text
            else:
                answer = await page.request(method, url, data={**forms.get(path, {}), "csrf_token": csrf})
                said = REFUSAL if REFUSAL in html.unescape(answer.text) else answer.text[:300]
            if (answer.status_code, said) != (403, REFUSAL):
                wrong.append(f"{action:22} {method} {path}: {answer.status_code} {said}")
    assert not wrong, "\n".join(wrong)
    assert (await api.get(f"/api/attempts/{served['id']}")).json()["status"] == "ready"
    assert (await attempt_count(api), len((await api.get("/api/presets/llama31-8b/revisions")).json())) == before
    assert len((await api.get(f"/api/attempts/{served['id']}/benchmarks")).json()) == benchmarks
    hers = {e["action"] for e in (await api.get("/api/audit")).json() if e["actor"] == "ann"}
    assert hers == {"token-create", "login"}
