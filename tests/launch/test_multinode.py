"""Multi-node attempts: the merged log of the parts' logs, the diagnosis through its node tags, and
launches over two simulated RTX PRO hosts through the API, over real SSH."""

from __future__ import annotations

import asyncio
import functools
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from fastapi import FastAPI
from httpx import ASGITransport, AsyncClient

from app.diagnose.analyze import diagnose
from app.launch import nodes
from app.launch.record import Pace
from app.logs.merge import MergePart, node_tag
from app.logs.mirror import Mirrors
from app.logs.store import LogStore
from app.ssh import HostSpec
from app.web.app import create_app
from tests.support.cli import cli
from tests.support.dashboard import AUTH, TOKEN, make_settings
from tests.support.hosts import wait_until_free
from tests.support.launching import FINAL, launch, wait_for
from tests.support.paths import DIAGNOSE_CORPUS
from tests.support.served import served
from tests.support.servers import free_port
from tests.support.waiting import until
from tests.support.web import log_in

PACE = Pace(loading=0.1, serving=0.3, health_timeout=10)


def merged_parts() -> list[MergePart]:
    return [MergePart(11, node_tag(0, "rtxpro-01")), MergePart(12, node_tag(1, "rtxpro-02"))]


async def test_the_merged_log_takes_whole_lines_tagged_in_the_order_they_arrive(tmp_path: Path) -> None:
    mirrors = Mirrors(LogStore(tmp_path))
    node0, node1 = mirrors.store.get(11), mirrors.store.get(12)
    merger = mirrors.merge(10, merged_parts())
    merged = mirrors.store.get(10)
    node0.append(b"[10:00:00] first of node 0\n")
    await until(lambda: merged.total_lines == 1, "the merger follows the parts")
    node0.append(b"[10:00:01] half of a li")
    node1.append(b"[10:00:02] first of node 1\n")
    node0.append(b"ne, ended later\n")
    node1.append(b"last line without a newline")
    await until(lambda: merged.total_lines == 3, "three whole lines merged")
    assert merged.read(0, merged.size).decode().splitlines() == [
        "[node0 rtxpro-01] [10:00:00] first of node 0",
        "[node1 rtxpro-02] [10:00:02] first of node 1",
        "[node0 rtxpro-01] [10:00:01] half of a line, ended later",
    ]
    for part in (node0, node1):
        part.finish(host_size=part.size, host_sha256=None, mirror_sha256=None)
    await asyncio.wait_for(merger.done.wait(), 5)
    assert merged.meta.complete and merged.meta.verification and merged.meta.verification["merged"] == 2
    assert merged.read(0, merged.size).endswith(b"[node1 rtxpro-02] last line without a newline\n")
    await mirrors.close()


async def test_a_restart_resumes_the_merge_without_repeating_or_losing_a_line(tmp_path: Path) -> None:
    """Whatever moment the dashboard stops at, the next one resumes each part after the lines the
    merged log holds of it."""
    store = LogStore(tmp_path)
    mirrors = Mirrors(store)
    mirrors.merge(10, merged_parts())
    for i in range(50):
        store.get(11 + i % 2).append(f"line {i} of node {i % 2}\n".encode())
    merged = store.get(10)
    await until(lambda: merged.total_lines == 50, "the first 50 lines merged")
    await mirrors.close()
    # The dashboard is away: the parts' mirrors (resumed before the merge) bring more.
    for i in range(50, 80):
        store.get(11 + i % 2).append(f"line {i} of node {i % 2}\n".encode())
    store = LogStore(tmp_path)  # a new dashboard reads everything from disk again
    mirrors = Mirrors(store)
    mirrors.merge(10, merged_parts())
    merged = store.get(10)
    await until(lambda: merged.total_lines == 80, "all 80 lines merged")
    lines = merged.read(0, merged.size).decode().splitlines()
    assert sorted(int(line.split()[3]) for line in lines) == list(range(80))
    assert all(line.startswith(f"[node{int(line.split()[3]) % 2} ") for line in lines)
    await mirrors.close()


@pytest.mark.parametrize("path", sorted(DIAGNOSE_CORPUS.rglob("*.log")), ids=lambda path: path.name)
def test_a_node_tag_changes_nothing_in_the_diagnosis(path: Path) -> None:
    """The merged log's node tag is a wrapper prefix like a launcher's: a log whose every line
    carries one is diagnosed as the log itself, its root error on the same line."""
    text = path.read_text(errors="replace")
    body, newline, _ = text.rpartition("\n") if text.endswith("\n") else (text, "", "")
    tagged = "\n".join(node_tag(1, "rtxpro-02") + line for line in body.split("\n")) + newline
    plain, wrapped = diagnose(text), diagnose(tagged)
    assert (wrapped.failure_class, wrapped.fingerprint, wrapped.stage, wrapped.root_line) == (
        plain.failure_class,
        plain.fingerprint,
        plain.stage,
        plain.root_line,
    )


def test_each_node_runs_the_presets_command_with_its_rank_and_node_0s_address() -> None:
    argv = ["python3", "-m", "sglang.launch_server", "--tp", "8", "--nnodes=2", "--node-rank", "5"]
    assert nodes.nnodes_of(argv) == 2
    assert nodes.node_argv(argv, nnodes=2, node_rank=1, dist_init_addr="10.0.0.1:20000") == [
        "python3", "-m", "sglang.launch_server", "--tp", "8",
        "--nnodes", "2", "--node-rank", "1", "--dist-init-addr", "10.0.0.1:20000",
    ]  # fmt: skip
    assert nodes.nnodes_of(["--tp", "4"]) == 1


# On the simulated cluster: two RTX PRO hosts (4 x 96 GB each). The 235B model's weights (470 GB)
# split over 2 nodes x 4 GPUs fit; over 2 nodes x 2 GPUs they do not.
QWEN3_235B = "Qwen/Qwen3-235B-A22B-Instruct-2507"
TWO_NODES = {
    "name": "qwen3-235b-on-two",
    "model_path": QWEN3_235B,
    "args": ["--tp-size", "8", "--nnodes", "2", "--mem-fraction-static", "0.85"],
}
HOSTS = ["rtxpro-01", "rtxpro-02"]


async def launch_nodes(api: AsyncClient, preset: str = TWO_NODES["name"], **extra: Any) -> int:
    body = {"preset": preset, "hosts": HOSTS, "gpus": [0, 1, 2, 3], "port": free_port(), "dist_port": free_port()}
    response = await api.post("/api/attempts", json=body | extra)
    assert response.status_code == 202, response.text
    return int(response.json()["id"])


@pytest.fixture
async def two_nodes(api: AsyncClient, running_app: FastAPI) -> AsyncIterator[AsyncClient]:
    """The API with the two-node preset; afterwards every part's process group is gone (the
    attempt lists show only the attempts, which have no process of their own)."""
    assert (await api.post("/api/presets", json=TWO_NODES)).status_code == 201
    yield api
    await kill_every_part(api, running_app)


async def kill_every_part(api: AsyncClient, app: FastAPI) -> None:
    """Kills every part's process group until every part has ended (one still starting is killed
    once it has a process group)."""

    async def all_ended() -> bool:
        ended = True
        for listed in (await api.get("/api/attempts", params={"limit": 500})).json():
            for part in (await api.get(f"/api/attempts/{listed['id']}")).json()["parts"]:
                if part["pgid"]:
                    host = app.state.runtime.ssh.get(part["host"])
                    await host.run(["env", "kill", "-KILL", "--", f"-{part['pgid']}"], check=False)
                ended = ended and part["status"] in ("failed", "stopped", "lost")
        return ended

    await until(all_ended, "every part of every attempt to end")


async def merged_log(api: AsyncClient, attempt_id: int) -> list[str]:
    return (await api.get(f"/api/attempts/{attempt_id}/log")).content.decode().split("\n")[:-1]


async def test_a_two_node_launch_serves_with_both_parts_alive_and_one_merged_log(
    two_nodes: AsyncClient, running_app: FastAPI
) -> None:
    api = two_nodes
    attempt_id = await launch_nodes(api)
    attempt = await wait_for(api, attempt_id, FINAL, timeout=60)
    assert attempt["status"] == "ready", attempt
    assert attempt["host"] == "rtxpro-01" and attempt["argv"][-6:-2] == ["--nnodes", "2", "--node-rank", "0"]
    node0 = attempt["parts"][0]
    assert (node0["node_rank"], node0["host"], node0["status"]) == (0, "rtxpro-01", "ready")

    async def node_1_ready() -> list[dict[str, Any]] | None:  # on its next look at node 0
        parts: list[dict[str, Any]] = (await api.get(f"/api/attempts/{attempt_id}")).json()["parts"]
        return parts if parts[1]["status"] == "ready" else None

    parts = await until(node_1_ready, "node 1's part to follow node 0 to ready")
    assert [(p["node_rank"], p["host"]) for p in parts] == [(0, "rtxpro-01"), (1, "rtxpro-02")]
    assert all(p["pid"] for p in parts)
    # The attempt is what lists show; its parts are not attempts of their own there.
    listed = [a["id"] for a in (await api.get("/api/attempts")).json()]
    assert attempt_id in listed and not {p["id"] for p in parts} & set(listed)

    lines = await merged_log(api, attempt_id)
    assert all(line.startswith(("[node0 rtxpro-01] ", "[node1 rtxpro-02] ")) for line in lines)
    assert {line.split("]")[0] for line in lines} == {"[node0 rtxpro-01", "[node1 rtxpro-02"}
    # Each node's log is its part's own, at the part's id.
    node1 = (await api.get(f"/api/attempts/{parts[1]['id']}/log")).content.decode().split("\n")[:-1]
    assert node1 and all(f"[node1 rtxpro-02] {line}" in lines for line in node1)
    # grep on the merged log finds both nodes' lines.
    found = (await api.get(f"/api/attempts/{attempt_id}/grep", params={"q": "Load weight begin"})).json()
    assert {m["text"].split("]")[0] for m in found["matches"]} == {"[node0 rtxpro-01", "[node1 rtxpro-02"}
    # The hosts page shows node 1's processes as the attempt's.
    await log_in(api)

    async def shown_on_node_1() -> bool:
        return f"attempt {attempt_id}</a> node 1 (ready)" in (await api.get("/hosts/rtxpro-02")).text

    await until(shown_on_node_1, "node 1's GPU processes shown as the attempt's on the hosts page")

    assert (await api.post(f"/api/attempts/{attempt_id}/stop")).status_code == 202
    stopped = await wait_for(api, attempt_id, {"stopped", "failed", "lost"})
    assert stopped["status"] == "stopped", stopped
    assert [p["status"] for p in stopped["parts"]] == ["stopped", "stopped"]
    for host in HOSTS:
        await wait_until_free(running_app.state.runtime.ssh.get(host), [0, 1, 2, 3])
    events = [(e["actor"], e["action"], e["target"]) for e in (await api.get("/api/audit")).json()]
    stops = [actor for actor, action, target in events if (action, target) == ("stop", f"attempt {attempt_id}")]
    assert len(stops) == 1 and stops[0] != "launchdeck"  # the person's stop, once for every part


async def test_node_1_out_of_memory_fails_the_attempt_naming_node_1_and_stops_node_0(
    two_nodes: AsyncClient, running_app: FastAPI
) -> None:
    api = two_nodes
    blocker = await launch(api, "llama31-8b", "rtxpro-02", [1])  # node 1's GPU 1 is taken
    assert (await wait_for(api, blocker, FINAL))["status"] == "ready"
    refused = await api.post(
        "/api/attempts",
        json={"preset": TWO_NODES["name"], "hosts": HOSTS, "gpus": [0, 1, 2, 3], "port": free_port(),
              "dist_port": free_port()},
    )  # fmt: skip
    assert refused.status_code == 422 and "node 1 (rtxpro-02)" in refused.json()["detail"]
    attempt_id = await launch_nodes(api, override_reason="node 1 runs out of memory")
    attempt = await wait_for(api, attempt_id, {"failed", "lost", "stopped"}, timeout=60)
    assert attempt["status"] == "failed", attempt
    assert attempt["error"].startswith("node1 rtxpro-02: "), attempt["error"]
    assert attempt["diagnosis"]["class"] == "oom", attempt["diagnosis"]
    ended = await wait_for_parts(api, attempt_id)
    assert ended[1] == "failed" and ended[0] in ("stopped", "failed"), ended  # node 0 may fall first
    await wait_until_free(running_app.state.runtime.ssh.get("rtxpro-01"), [0, 1, 2, 3])


async def wait_for_parts(api: AsyncClient, attempt_id: int) -> list[str]:
    async def ended() -> list[str] | None:
        parts = (await api.get(f"/api/attempts/{attempt_id}")).json()["parts"]
        statuses = [p["status"] for p in parts]
        return statuses if all(s in ("failed", "stopped", "lost") for s in statuses) else None

    found: list[str] = await until(ended, "every part ended", timeout=60)
    return found


async def test_killing_node_1_fails_the_attempt_and_stops_node_0(two_nodes: AsyncClient, running_app: FastAPI) -> None:
    api = two_nodes
    attempt_id = await launch_nodes(api)
    attempt = await wait_for(api, attempt_id, FINAL, timeout=60)
    assert attempt["status"] == "ready", attempt
    node1 = attempt["parts"][1]
    host = running_app.state.runtime.ssh.get("rtxpro-02")
    # The server's main process (the launch script's child), as the kernel's OOM killer would.
    children = await host.run(["pgrep", "-P", str(node1["pid"])])
    await host.run(["kill", "-KILL", children.stdout.decode().split()[0]])
    attempt = await wait_for(api, attempt_id, {"failed", "lost", "stopped"}, timeout=60)
    assert attempt["status"] == "failed", attempt
    assert attempt["error"].startswith(("node1 rtxpro-02: ", "node0 rtxpro-01: ")), attempt["error"]
    assert attempt["exit_code"] is not None
    assert await wait_for_parts(api, attempt_id) in (["stopped", "failed"], ["failed", "failed"])
    await wait_until_free(running_app.state.runtime.ssh.get("rtxpro-01"), [0, 1, 2, 3])


async def test_preflight_refuses_weights_that_do_not_fit_per_node_and_a_taken_rendezvous_port(
    two_nodes: AsyncClient, running_app: FastAPI
) -> None:
    api = two_nodes
    small = {**TWO_NODES, "name": "qwen3-235b-two-nodes-tp4", "args": ["--tp-size", "4", "--nnodes", "2"]}
    assert (await api.post("/api/presets", json=small)).status_code == 201
    body = {"preset": small["name"], "hosts": HOSTS, "gpus": [0, 1], "port": free_port(), "dist_port": free_port()}
    checked = (await api.post("/api/preflight", json=body)).json()
    memory = [c for c in checked["checks"] if c["name"] == "memory"]
    assert [c["detail"]["node"] for c in memory] == [0, 1] and not any(c["ok"] for c in memory)
    assert "split over 2 nodes x 2 GPUs" in memory[0]["message"]
    assert (await api.post("/api/attempts", json=body)).status_code == 422

    # A process listens on node 0's rendezvous port.
    dist_port = free_port()
    node0 = running_app.state.runtime.ssh.get("rtxpro-01")
    listener = await node0.run(["sh", "-c", START_LISTENER, "sh", str(dist_port)])
    try:
        body = {"preset": TWO_NODES["name"], "hosts": HOSTS, "gpus": [0, 1, 2, 3], "port": free_port(),
                "dist_port": dist_port}  # fmt: skip

        async def listening() -> bool:
            checks = (await api.post("/api/preflight", json=body)).json()["checks"]
            return any(c["name"] == "rendezvous port" and not c["ok"] for c in checks)

        await until(listening, "the listener to take the port on node 0")
        refused = await api.post("/api/attempts", json=body)
        assert refused.status_code == 422, refused.text
        (check,) = [c for c in refused.json()["preflight"]["checks"] if c["name"] == "rendezvous port"]
        assert check["message"].startswith(f"node 0 (rtxpro-01): {dist_port} is not free on the host")
        assert check["detail"]["suggested_dist_port"] > dist_port
        assert (await api.get("/api/attempts")).json() == []  # nothing was launched
    finally:
        await node0.run(["kill", listener.stdout.decode().split()[0]], check=False)


# $1: port. Listens on it on the host's loopback for a minute, in the background; prints the pid.
START_LISTENER = (
    'python3 -c \'import socket, sys, time; s = socket.socket(); s.bind(("127.0.0.1", int(sys.argv[1]))); '
    's.listen(); time.sleep(60)\' "$1" > /dev/null 2>&1 < /dev/null & echo $!'
)


async def test_a_restart_mid_launch_follows_every_part_and_repeats_no_line(
    tmp_path: Path, sim_specs: list[HostSpec]
) -> None:
    settings = make_settings(tmp_path, sim_specs)
    slow = {**TWO_NODES, "name": "slow-two-nodes", "env": {"LAUNCHDECK_SIM_TIME_SCALE": "0.1"}}
    first = create_app(settings)
    async with first.router.lifespan_context(first):
        first.state.runtime.attempts.pace = PACE
        async with AsyncClient(transport=ASGITransport(app=first), base_url="http://t", headers=AUTH) as api:
            for host in first.state.runtime.ssh:
                await host.wait_online(10)
            assert (await api.post("/api/presets", json=slow)).status_code == 201
            attempt_id = await launch_nodes(api, slow["name"])
            try:
                await wait_for(api, attempt_id, {"loading"}, timeout=60)

                async def both_nodes_merged() -> bool:
                    lines = await merged_log(api, attempt_id)
                    return {line.split("]")[0] for line in lines} == {"[node0 rtxpro-01", "[node1 rtxpro-02"}

                await until(both_nodes_merged, "lines of both nodes in the merged log")
            except BaseException:
                await kill_every_part(api, first)
                raise
    second = create_app(settings)  # the dashboard stops mid-launch and comes back
    async with second.router.lifespan_context(second):
        second.state.runtime.attempts.pace = PACE
        async with AsyncClient(transport=ASGITransport(app=second), base_url="http://t", headers=AUTH) as api:
            try:
                attempt = await wait_for(api, attempt_id, FINAL, timeout=90)
                assert attempt["status"] == "ready", attempt
                assert [p["status"] for p in attempt["parts"]] == ["ready", "ready"]

                async def own_log(part: dict[str, Any]) -> list[str]:
                    return (await api.get(f"/api/attempts/{part['id']}/log")).content.decode().split("\n")[:-1]

                async def merged_is_each_part_exactly() -> bool:
                    """The serving parts keep logging (health checks): compare when no line came between."""
                    before = [await own_log(part) for part in attempt["parts"]]
                    lines = await merged_log(api, attempt_id)
                    after = [await own_log(part) for part in attempt["parts"]]
                    tags = [f"[node{part['node_rank']} {part['host']}] " for part in attempt["parts"]]
                    merged = [[line.removeprefix(tag) for line in lines if line.startswith(tag)] for tag in tags]
                    return before == after == merged

                await until(merged_is_each_part_exactly, "the merged log to hold each part's log exactly", 20)
                assert (await api.post(f"/api/attempts/{attempt_id}/stop")).status_code == 202
                assert (await wait_for(api, attempt_id, {"stopped", "failed", "lost"}))["status"] == "stopped"
            finally:
                await kill_every_part(api, second)


async def test_the_launch_form_picks_a_host_per_node_and_the_attempt_page_shows_each_node(
    two_nodes: AsyncClient, running_app: FastAPI
) -> None:
    api = two_nodes
    csrf = await log_in(api)
    form = (await api.get("/launch", params={"preset": TWO_NODES["name"]})).text
    assert 'name="hosts" data-node="0"' in form and 'name="hosts" data-node="1"' in form
    assert 'name="host"' not in form and 'name="dist_port"' in form
    choice = {
        "csrf_token": csrf, "preset": TWO_NODES["name"], "hosts": HOSTS, "gpus": ["0", "1", "2", "3"],
        "port": str(free_port()), "dist_port": str(free_port()),
    }  # fmt: skip
    checked = (await api.post("/launch/preflight", data=choice, headers={"HX-Request": "true"})).text
    assert "node 1 (rtxpro-02): enough free memory" in checked and "✗" not in checked

    launched = await api.post("/launch", data=choice)
    assert launched.status_code == 303, launched.text
    attempt_url = launched.headers["location"]
    attempt_id = int(attempt_url.rsplit("/", 1)[1])
    assert (await wait_for(api, attempt_id, FINAL, timeout=60))["status"] == "ready"
    page = (await api.get(attempt_url)).text
    parts = (await api.get(f"/api/attempts/{attempt_id}")).json()["parts"]
    for part in parts:
        assert f'href="/attempts/{part["id"]}/log?at=bottom" class="node-log">node {part["node_rank"]}' in page
    assert 'id="nodes"' in page and "Log of all 2 nodes, merged" in page
    assert "[node1 rtxpro-02] " in page  # the merged live log's tail
    part_page = (await api.get(f"/attempts/{parts[1]['id']}")).text
    assert f'Node 1 of <a href="/attempts/{attempt_id}">attempt {attempt_id}</a>' in part_page

    stop = await api.post(f"{attempt_url}/stop", data={"csrf_token": csrf})
    assert stop.status_code == 303
    assert (await wait_for(api, attempt_id, {"stopped", "failed", "lost"}))["status"] == "stopped"


async def test_a_label_picks_the_nodes_and_a_wrong_number_of_hosts_is_refused(two_nodes: AsyncClient) -> None:
    api = two_nodes
    body = {"preset": TWO_NODES["name"], "gpus": [0, 1, 2, 3], "port": free_port(), "dist_port": free_port()}
    checked = (await api.post("/api/preflight", json={**body, "label": "rtx-pro-6000"})).json()
    assert [(c["detail"]["node"], c["detail"]["host"]) for c in checked["checks"] if c["name"] == "gpus"] == [
        (0, "rtxpro-01"),
        (1, "rtxpro-02"),
    ]
    one = await api.post("/api/attempts", json={**body, "hosts": ["rtxpro-01"]})
    assert one.status_code == 422
    assert one.json()["detail"] == "hosts: the preset asks for 2 nodes (--nnodes 2); give 2 hosts or a label"
    single = await api.post("/api/attempts", json={**body, "preset": "llama31-8b", "hosts": HOSTS})
    assert single.status_code == 422 and "runs on one node" in single.json()["detail"]
    too_few = await api.post("/api/attempts", json={**body, "label": "b200"})
    assert too_few.status_code == 422 and "1 host(s) have it" in too_few.json()["detail"]
    assert (await api.get("/api/attempts")).json() == []


async def test_the_command_line_launches_on_the_hosts_it_is_given(two_nodes: AsyncClient, running_app: FastAPI) -> None:
    async with served(running_app) as url:
        launchdeck = functools.partial(cli, url=url, env={"LAUNCHDECK_TOKEN": TOKEN}, merge=True)
        code, output, _ = await launchdeck("launch", TWO_NODES["name"])
        assert code == 1 and "give a host, or --hosts a,b or --label" in output
        code, output, _ = await launchdeck(
            "launch", TWO_NODES["name"], "--hosts", ",".join(HOSTS), "--gpus", "0,1,2,3",
            "--port", str(free_port()), "--dist-port", str(free_port()),
        )  # fmt: skip
        assert code == 0 and output.splitlines()[-1].startswith("ready after "), output
        attempt_id = int(output.split()[1].rstrip(":"))
        attempt = (await two_nodes.get(f"/api/attempts/{attempt_id}")).json()
        assert [part["host"] for part in attempt["parts"]] == HOSTS
        assert (await two_nodes.post(f"/api/attempts/{attempt_id}/stop")).status_code == 202
        assert (await wait_for(two_nodes, attempt_id, {"stopped", "failed", "lost"}))["status"] == "stopped"
