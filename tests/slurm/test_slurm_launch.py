"""Launching on a real Slurm cluster through the dashboard: the attempt follows its batch job from
the queue to ready, and every way a job ends shows as what it is, in the API and on the page. The
dashboard polls the cluster every second here (5 s by default), once for every attempt there."""

from __future__ import annotations

import asyncio
import dataclasses
import html
import re
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import pytest
from fastapi import FastAPI
from httpx import ASGITransport, AsyncClient
from playwright.async_api import async_playwright, expect

from app.config import Settings
from app.demo.presets import seed_demo_presets
from app.demo.slurm import SlurmSite
from app.launch.record import Pace
from app.ssh import HostConnection, render_hosts
from app.ssh.hosts import SlurmSettings
from app.web.app import create_app
from tests.support.browser import CHROMIUM, CHROMIUM_ARGS, FORM_SETTLED, open_tab
from tests.support.browser import log_in as log_in_with_token
from tests.support.dashboard import AUTH, TOKEN
from tests.support.served import served
from tests.support.servers import free_port
from tests.support.slurm import SlurmCommands, sbatch
from tests.support.strict import require
from tests.support.waiting import until
from tests.support.web import log_in

FINAL = {"ready", "failed", "stopped", "lost"}
LLAMA = "meta-llama/Llama-3.1-8B-Instruct"
ENDED = {"failed", "stopped", "lost"}
pytestmark = pytest.mark.timeout(240)


def hosts_file(site: SlurmSite, path: Path, **settings: Any) -> Path:
    """Two entries for the one cluster: "slurm" on the one-node b200 partition, "slurm-rtx" on the
    two-node rtxpro partition; `settings` change the first."""
    login = site.login_spec()
    b200 = SlurmSettings(partition="b200", gpus_per_node=1, output_dir=site.output_dir)
    rtx = SlurmSettings(partition="rtxpro", gpus_per_node=1, output_dir=site.output_dir)
    specs = [
        dataclasses.replace(login, name="slurm", slurm=dataclasses.replace(b200, **settings)),
        dataclasses.replace(login, name="slurm-rtx", slurm=rtx),
    ]
    path.write_text(render_hosts(specs))
    return path


@asynccontextmanager
async def dashboard(site: SlurmSite, root: Path, **settings: Any) -> AsyncIterator[tuple[AsyncClient, AsyncClient]]:
    """The dashboard on `root` (its data dir survives a restart): an API client with the token, and
    a browser logged in."""
    async with started_app(site, root, **settings) as app:
        transport = ASGITransport(app=app)
        async with (
            AsyncClient(transport=transport, base_url="http://testserver", headers=AUTH) as api,
            AsyncClient(transport=transport, base_url="http://testserver") as browser,
        ):
            await log_in(browser)
            yield api, browser


@asynccontextmanager
async def started_app(site: SlurmSite, root: Path, **settings: Any) -> AsyncIterator[FastAPI]:
    """The dashboard's app on `root`, started, its hosts online, launching at a test's pace."""
    app = create_app(
        Settings(
            data_dir=root / "data",
            hosts_file=hosts_file(site, root / "hosts.toml", **settings),
            token=TOKEN,
            known_hosts=root / "known_hosts",
            ssh_config=root / "no-ssh-config",
            cookie_secure=False,
            slurm_poll_seconds=1,
        )
    )
    async with app.router.lifespan_context(app):
        runtime = app.state.runtime
        for host in runtime.ssh:
            await host.wait_online(10)
        runtime.attempts.pace = Pace(loading=0.1, serving=0.3, health_timeout=10, drain=10)
        runtime.attempts.stop_grace = 5.0
        async with runtime.sessions.write() as session:
            await seed_demo_presets(session)
        yield app


async def launch(api: AsyncClient, preset: str = "llama31-8b", host: str = "slurm") -> int:
    response = await api.post("/api/attempts", json={"preset": preset, "host": host, "gpus": [0], "port": free_port()})
    assert response.status_code == 202, response.text
    return int(response.json()["id"])


async def attempt_of(api: AsyncClient, attempt_id: int) -> dict[str, Any]:
    response = await api.get(f"/api/attempts/{attempt_id}")
    assert response.status_code == 200, response.text
    result: dict[str, Any] = response.json()
    return result


async def reaches(api: AsyncClient, attempt_id: int, statuses: set[str], timeout: float = 60) -> dict[str, Any]:
    last: dict[str, Any] = {}

    async def check() -> dict[str, Any] | None:
        last.update(await attempt_of(api, attempt_id))
        return last if last["status"] in statuses else None

    wanted = f"attempt {attempt_id} to be {' or '.join(sorted(statuses))}"
    try:
        return await until(check, wanted, timeout)
    except AssertionError as exc:
        seen = {key: last.get(key) for key in ("status", "error", "job_id", "scheduler")}
        raise AssertionError(f"{exc}; it was {seen}") from None


async def page(browser: AsyncClient, attempt_id: int) -> str:
    response = await browser.get(f"/attempts/{attempt_id}")
    assert response.status_code == 200
    return response.text


async def squeue_state(login: HostConnection, job_id: str) -> str:
    result = await login.run(["squeue", "-h", "-j", job_id, "-o", "%T"], check=False)
    return result.stdout.decode().strip()


@pytest.fixture
async def login(slurm_site: SlurmSite, slurm_login: HostConnection) -> AsyncIterator[HostConnection]:
    """The login node; every job this test left is cancelled after it."""
    yield slurm_login
    await slurm_login.run(["scancel", "--user", slurm_site.login_spec().user or "root"], check=False)
    await until(lambda: _queue_empty(slurm_login), "the test's jobs to leave the queue", 30)


async def _queue_empty(login: HostConnection) -> bool:
    result = await login.run(["squeue", "-h", "-t", "PD,R,CG", "-o", "%i"], check=False)
    return not result.stdout.strip()


async def test_queued_job_shows_its_reason_and_position_then_runs_to_ready_and_stops(
    slurm_site: SlurmSite, login: HostConnection, tmp_path: Path
) -> None:
    blocker = await sbatch(login, "#!/bin/sh\nsleep 600\n", "--partition=b200", "--gres=gpu:8", "--output=/dev/null")
    await until(lambda: _running(login, blocker), "the blocking job to run")
    async with dashboard(slurm_site, tmp_path) as (api, browser):
        attempt_id = await launch(api)

        async def queued() -> dict[str, Any] | None:
            attempt = await attempt_of(api, attempt_id)
            return attempt if attempt["scheduler"].get("reason") == "Resources" else None

        attempt = await until(queued, "the attempt to show it waits for resources")
        assert attempt["status"] == "pending"
        assert attempt["job_id"] and attempt["scheduler"]["state"] == "PENDING"
        assert attempt["scheduler"]["position"] == 1
        html = await page(browser, attempt_id)
        assert "<strong>PENDING</strong> (Resources)" in html
        assert "position 1 in the queue of partition b200" in html

        await login.run(["scancel", blocker])
        ready = await reaches(api, attempt_id, FINAL)
        assert ready["status"] == "ready", ready["error"]
        assert ready["scheduler"]["state"] == "RUNNING" and ready["scheduler"]["nodes"] == ["b200-01"]
        assert "job running" in [stage["stage"] for stage in ready["stages"]]
        assert "The server is fired up and ready to roll!" in (await api.get(f"/api/attempts/{attempt_id}/log")).text
        shown = await page(browser, attempt_id)
        assert "<strong>RUNNING</strong>" in shown
        assert "run this on b200-01)" in shown  # the job's node, where its loopback is, not the login node

        response = await api.post(f"/api/attempts/{attempt_id}/stop")
        assert response.status_code == 202, response.text
        stopped = await reaches(api, attempt_id, ENDED)
        assert stopped["status"] == "stopped" and stopped["error"] == ""
        assert await squeue_state(login, stopped["job_id"]) in ("", "COMPLETED", "CANCELLED")


async def _running(login: HostConnection, job_id: str) -> bool:
    return await squeue_state(login, job_id) == "RUNNING"


async def test_many_queued_attempts_each_show_their_place_and_cost_one_squeue_a_poll(
    slurm_site: SlurmSite, login: HostConnection, tmp_path: Path
) -> None:
    """Ten attempts wait behind a job that holds every GPU of their partition: each shows why and
    where it waits, and the dashboard asks squeue for all ten at once, once a poll (a follower that
    asked for its own job, as before, asked ten times as often, and twice a second), until they stop."""
    blocker = await sbatch(login, "#!/bin/sh\nsleep 600\n", "--partition=b200", "--gres=gpu:8", "--output=/dev/null")
    await until(lambda: _running(login, blocker), "the blocking job to run")
    commands = SlurmCommands(slurm_site)
    try:
        async with dashboard(slurm_site, tmp_path) as (api, browser):
            attempt_ids = [await launch(api) for _ in range(10)]

            async def placed() -> dict[int, dict[str, Any]] | None:
                shown = {attempt_id: (await attempt_of(api, attempt_id))["scheduler"] for attempt_id in attempt_ids}
                places = sorted(scheduler.get("position", 0) for scheduler in shown.values())
                # A job just queued has no reason until the scheduler's next pass looks at it.
                reasons = all(scheduler.get("reason") for scheduler in shown.values())
                return shown if places == list(range(1, 11)) and reasons else None

            shown = await until(placed, "each attempt to show its place in the queue", timeout=60)
            assert {scheduler["state"] for scheduler in shown.values()} == {"PENDING"}
            assert {scheduler["reason"] for scheduler in shown.values()} <= {"Resources", "Priority"}
            last = next(attempt_id for attempt_id, scheduler in shown.items() if scheduler["position"] == 10)
            assert "position 10 in the queue of partition b200" in await page(browser, last)
            job_ids = {scheduler["job_id"] for scheduler in shown.values()}

            commands.clear()
            await asyncio.sleep(5.0)
            argvs = commands.argvs()
            polls = [
                argv for argv in argvs if argv[0] == "squeue" and f"--jobs={','.join(sorted(job_ids, key=int))}" in argv
            ]
            assert 3 <= len(polls) <= 7, argvs  # one a second
            # Besides, at most one read of the partitions and one of the queue's places (every 12 polls).
            assert len(argvs) - len(polls) <= 2, argvs

            for attempt_id in attempt_ids:
                assert (await api.post(f"/api/attempts/{attempt_id}/stop")).status_code == 202
            for attempt_id in attempt_ids:
                stopped = await reaches(api, attempt_id, ENDED)
                assert (stopped["status"], stopped["error"], stopped["scheduler"]["state"]) == (
                    "stopped",
                    "",
                    "CANCELLED",
                )
    finally:
        commands.remove()


async def test_failing_launch_shows_its_root_error(
    slurm_site: SlurmSite, login: HostConnection, tmp_path: Path
) -> None:
    # The attempt's directory under an output_dir relative to the login node's (shared) home.
    async with dashboard(slurm_site, tmp_path, output_dir="slurm-relative") as (api, browser):
        response = await api.post(
            "/api/presets", json={"name": "no-such-model", "model_path": "nobody/no-such-model", "args": []}
        )
        assert response.status_code in (200, 201), response.text
        attempt_id = await launch(api, "no-such-model")
        failed = await reaches(api, attempt_id, ENDED)
        assert failed["status"] == "failed" and failed["remote_dir"].startswith("slurm-relative/")
        assert failed["error"].startswith("the server exited with ")
        root = failed["diagnosis"]["root_error"]
        assert root and root.startswith("huggingface_hub.errors.RepositoryNotFoundError: 404 Client Error.")
        html = await page(browser, attempt_id)
        assert 'id="root-error"' in html and "RepositoryNotFoundError" in html


async def test_sbatch_refusal_is_the_attempts_error(
    slurm_site: SlurmSite, login: HostConnection, tmp_path: Path
) -> None:
    async with dashboard(slurm_site, tmp_path, partition="nosuch") as (api, _):
        # The login node is not where the job runs: nothing is checked there, and preflight says
        # what Slurm will be asked for.
        checked = await api.post("/api/preflight", json={"preset": "llama31-8b", "host": "slurm", "gpus": [0]})
        assert checked.status_code == 200, checked.text
        assert [(c["name"], c["ok"], c["blocking"]) for c in checked.json()["checks"]] == [("slurm", True, False)]
        failed = await reaches(api, await launch(api), ENDED)
        assert failed["status"] == "failed" and failed["job_id"] is None
        assert failed["error"].startswith("sbatch refused the job: ")
        assert "invalid partition" in failed["error"].lower()


async def launch_two_nodes(api: AsyncClient) -> int:
    response = await api.post(
        "/api/presets",
        json={"name": "llama-two-nodes", "model_path": LLAMA, "args": ["--nnodes", "2", "--tp-size", "2"]},
    )
    assert response.status_code == 201, response.text
    return await launch(api, "llama-two-nodes", host="slurm-rtx")


async def test_two_node_launch_starts_one_server_per_node_with_slurms_rank_and_first_node(
    slurm_site: SlurmSite, login: HostConnection, tmp_path: Path
) -> None:
    async with dashboard(slurm_site, tmp_path) as (api, _):
        attempt_id = await launch_two_nodes(api)

        async def joined() -> str | None:
            log = (await api.get(f"/api/attempts/{attempt_id}/log")).text
            ends = [f"[node{rank} rtx-0{rank + 1}] " for rank in (0, 1)]
            return log if all(f"{tag}[" in log and "Init torch distributed ends" in log for tag in ends) else None

        log = await until(joined, "both nodes' servers to join the distributed init")
        port = (await attempt_of(api, attempt_id))["port"]
        for rank in (0, 1):  # each node's lines carry its tag, as a multi-node attempt's merged log does
            assert f"[node{rank} rtx-0{rank + 1}] [" in log
            assert f"'dist_init_addr': 'rtx-01:{port + 1000}', " in log
            assert f"'nnodes': 2, 'node_rank': {rank}, " in log
        assert (await attempt_of(api, attempt_id))["scheduler"]["nodes"] == ["rtx-01", "rtx-02"]


async def test_two_node_launch_reaches_ready(slurm_site: SlurmSite, login: HostConnection, tmp_path: Path) -> None:
    async with dashboard(slurm_site, tmp_path) as (api, _):
        attempt_id = await launch_two_nodes(api)
        ready = await reaches(api, attempt_id, FINAL)
        assert ready["status"] == "ready", ready["error"]
        assert (await api.post(f"/api/attempts/{attempt_id}/stop")).status_code == 202
        stopped = await reaches(api, attempt_id, ENDED)
        assert stopped["status"] == "stopped", stopped["error"]


async def test_time_limit_reached_is_a_scheduler_ending(
    slurm_site: SlurmSite, login: HostConnection, tmp_path: Path
) -> None:
    async with dashboard(slurm_site, tmp_path, time_limit="1") as (api, browser):
        attempt_id = await launch(api)
        assert (await reaches(api, attempt_id, FINAL))["status"] == "ready"
        # Slurm counts limits in minutes and checks them about every 30 s.
        ended = await reaches(api, attempt_id, ENDED, timeout=150)
        assert ended["status"] == "stopped"
        assert ended["error"] == "Slurm ended the job: TIMEOUT (its time limit was reached)"
        assert ended["scheduler"]["state"] == "TIMEOUT"
        assert "DUE TO TIME LIMIT" in (await api.get(f"/api/attempts/{attempt_id}/log")).text
        html = await page(browser, attempt_id)
        assert "its time limit was reached" in html and "<strong>TIMEOUT</strong>" in html


async def test_job_survives_a_controller_restart_and_stops_as_asked(
    slurm_site: SlurmSite, login: HostConnection, tmp_path: Path
) -> None:
    async with dashboard(slurm_site, tmp_path) as (api, _):
        attempt_id = await launch(api)
        assert (await reaches(api, attempt_id, FINAL))["status"] == "ready"
        await asyncio.to_thread(slurm_site.slurm.restart_controller)
        await asyncio.sleep(1.0)  # some looks at the job across the restart
        attempt = await attempt_of(api, attempt_id)
        assert attempt["status"] == "ready" and attempt["scheduler"]["state"] == "RUNNING"
        assert (await api.post(f"/api/attempts/{attempt_id}/stop")).status_code == 202
        assert (await reaches(api, attempt_id, ENDED))["status"] == "stopped"


async def test_dashboard_restart_reconciles_by_job_id_and_sees_an_outside_scancel(
    slurm_site: SlurmSite, login: HostConnection, tmp_path: Path
) -> None:
    async with dashboard(slurm_site, tmp_path) as (api, browser):
        attempt_id = await launch(api)
        job_id = (await reaches(api, attempt_id, FINAL))["job_id"]
    assert await squeue_state(login, job_id) == "RUNNING"  # the job goes on without the dashboard
    async with dashboard(slurm_site, tmp_path) as (api, browser):
        attempt = await attempt_of(api, attempt_id)
        assert attempt["status"] == "ready" and attempt["job_id"] == job_id
        await login.run(["scancel", job_id])
        ended = await reaches(api, attempt_id, ENDED)
        assert ended["status"] == "stopped"
        assert ended["error"] == "Slurm ended the job: CANCELLED (the job was cancelled)"
        html = await page(browser, attempt_id)
        assert "Slurm ended the job: CANCELLED" in html and 'class="status status-stopped"' in html


async def test_hosts_show_each_partitions_free_and_total_gpus(
    slurm_site: SlurmSite, login: HostConnection, tmp_path: Path
) -> None:
    blocker = await sbatch(login, "#!/bin/sh\nsleep 600\n", "--partition=b200", "--gres=gpu:3", "--output=/dev/null")
    await until(lambda: _running(login, blocker), "the job holding 3 GPUs to run")
    async with dashboard(slurm_site, tmp_path) as (api, browser):

        async def partitions() -> dict[str, dict[str, Any]] | None:
            hosts = {host["name"]: host for host in (await api.get("/api/hosts")).json()}
            shown = {p["name"]: p for p in hosts["slurm"]["partitions"]}
            return shown if shown.get("b200", {}).get("gpus_free") == 5 else None

        shown = await until(partitions, "the b200 partition to show 5 of its 8 GPUs free")
        assert shown["b200"] == {"name": "b200", "gpu_types": ["b200"], "nodes": 1, "gpus_total": 8, "gpus_free": 5}
        assert shown["rtxpro"]["gpus_total"] == 8 and shown["rtxpro"]["nodes"] == 2
        hosts = {host["name"]: host for host in (await api.get("/api/hosts")).json()}
        assert hosts["slurm"]["kind"] == "slurm" and hosts["slurm"]["gpus"] == []
        html = (await browser.get("/hosts")).text
        assert 'data-partition="b200"' in html and "5 of 8 free" in html


async def test_node_failure_loses_the_attempt_in_slurms_words(
    slurm_site: SlurmSite, login: HostConnection, tmp_path: Path
) -> None:
    async with dashboard(slurm_site, tmp_path) as (api, browser):
        attempt_id = await launch(api, host="slurm-rtx")
        ready = await reaches(api, attempt_id, FINAL)
        assert ready["status"] == "ready", ready["error"]
        [node] = ready["scheduler"]["nodes"]
        await asyncio.to_thread(slurm_site.slurm.kill_node, node)
        try:
            lost = await reaches(api, attempt_id, ENDED, timeout=90)  # once Slurm's node timeout passes
        finally:
            slurm_site.slurm.hosts[node].kill_detached()  # the dead node's processes, as a reboot would
            await asyncio.to_thread(slurm_site.slurm.start_node, node)
            await asyncio.to_thread(slurm_site.slurm.wait_idle)
        assert lost["status"] == "lost"
        assert lost["error"] == "Slurm ended the job: NODE_FAIL (a node of the job failed)"
        assert "a node of the job failed" in await page(browser, attempt_id)


async def test_a_running_attempts_gpus_are_read_inside_its_job(
    slurm_site: SlurmSite, login: HostConnection, tmp_path: Path
) -> None:
    async with dashboard(slurm_site, tmp_path) as (api, browser):
        attempt_id = await launch(api)
        ready = await reaches(api, attempt_id, FINAL)
        assert ready["status"] == "ready", ready["error"]

        async def shown() -> str | None:
            html = (await browser.get("/hosts")).text
            return html if f'<a href="/attempts/{attempt_id}">attempt {attempt_id}</a>' in html else None

        html = await until(shown, "the hosts page to show the attempt's GPUs read inside its job")
        assert f'data-job="{ready["job_id"]}"' in html and "<td>b200-01</td>" in html and "NVIDIA B200" in html


async def test_the_launch_form_on_a_cluster_shows_its_partitions_and_preflight_says_what_slurm_decides(
    slurm_site: SlurmSite, login: HostConnection, tmp_path: Path
) -> None:
    """No red "no GPUs reported" for a cluster, whose login node has none: the form shows the
    partitions' free GPUs and asks how many; preflight's table says what Slurm will do, not nothing."""
    async with dashboard(slurm_site, tmp_path) as (_, browser):
        form = html.unescape((await browser.get("/launch", params={"preset": "llama31-8b", "host": "slurm-rtx"})).text)
        assert "no GPUs reported" not in form
        assert re.search(r'id="slurm-gpus">Slurm chooses the GPUs.*Partition rtxpro: \d+ of 8 GPUs free', form, re.S)
        assert re.findall(r'name="gpus" value="(\d)" checked', form) == ["0"]  # tensor parallel 1: one GPU
        csrf = re.search(r'name="csrf_token" value="([^"]+)"', form)
        assert csrf
        choice = {"csrf_token": csrf[1], "preset": "llama31-8b", "host": "slurm-rtx", "gpus": ["0"]}
        checked = await browser.post("/launch/preflight", data=choice, headers={"HX-Request": "true"})
        assert 'data-check="slurm"' in checked.text
        assert "Slurm places the job: 1 GPU per node on partition rtxpro" in html.unescape(checked.text)


@pytest.mark.browser
async def test_a_person_launches_on_the_cluster_from_the_home_page_and_stops_it(
    slurm_site: SlurmSite, login: HostConnection, tmp_path: Path
) -> None:
    """The Slurm walk, in chromium from the home page by clicks: the form shows the partition's free
    GPUs, preflight says what Slurm decides, the attempt follows its job to ready on a compute node
    and says to ask that node for health, and Stop ends the job."""
    require(CHROMIUM.exists(), f"{CHROMIUM} is missing (apt-get install chromium)")
    async with (
        started_app(slurm_site, tmp_path) as app,
        served(app) as url,
        async_playwright() as playwright,
    ):
        chromium = await playwright.chromium.launch(executable_path=str(CHROMIUM), args=CHROMIUM_ARGS)
        try:
            async with open_tab(chromium, url) as tab:
                page = tab.page
                await page.goto("/")
                await log_in_with_token(page, TOKEN)
                await page.get_by_role("link", name="Launch", exact=True).click()
                await page.wait_for_function(FORM_SETTLED)
                await page.get_by_label("Preset").select_option("llama31-8b")
                await page.wait_for_function(FORM_SETTLED)
                await page.get_by_label(re.compile(r"^Host\b")).select_option("slurm-rtx")
                await page.wait_for_function(FORM_SETTLED)
                await expect(page.locator("#slurm-gpus")).to_contain_text(re.compile(r"Partition rtxpro: \d+ of 8"))
                await expect(page.locator("input[name=gpus]:checked")).to_have_count(1)  # tensor parallel 1
                await page.get_by_label("Port", exact=True).fill(str(free_port()))
                await page.get_by_role("button", name="Run preflight").click()
                await expect(page.locator("tr[data-check='slurm']")).to_contain_text(
                    "Slurm places the job: 1 GPU per node on partition rtxpro"
                )
                await page.get_by_role("button", name="Launch", exact=True).click()
                await expect(page).to_have_url(re.compile(r"/attempts/\d+$"))
                await expect(page.locator("#status")).to_have_text("ready", timeout=60_000)
                endpoint = page.locator("#endpoint")
                await expect(endpoint).to_contain_text(re.compile(r"run this on rtx-0\d\)"))  # the node, not the login
                page.once("dialog", lambda dialog: asyncio.ensure_future(dialog.accept()))
                await page.get_by_role("button", name="Stop").click()
                await expect(page.locator("#status")).to_have_text("stopped", timeout=60_000)
                assert tab.console_errors == [], tab.console_errors
        finally:
            await chromium.close()
