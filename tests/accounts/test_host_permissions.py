"""Operators limited to hosts with some labels: a launch or preflight on another host is refused
with 403 and a sentence before anything runs, and records no attempt; admins and the access token
are never limited; the CLI sets and lifts the limit."""

from __future__ import annotations

import html
import io
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from fastapi import FastAPI
from httpx import ASGITransport, AsyncClient

from app.cli import main
from app.states import Role
from tests.support.accounts import PASSWORD, add_user, browser, log_in, person
from tests.support.launching import wait_for
from tests.support.servers import free_port
from tests.support.web import csrf_from

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
