"""Logs of real launches on the simulated cluster: exact bytes, grep with its zero-hits answer,
the full log paged at a line, live events that resume exactly, and the `launchdeck logs` CLI."""

from __future__ import annotations

import asyncio
import functools
import html
import json
import re
import uuid
from pathlib import Path
from typing import Any

import pytest
from fastapi import FastAPI
from httpx import AsyncClient

from app.demo.cluster import SimCluster
from app.web import log_views
from tests.support.cli import cli
from tests.support.dashboard import TOKEN
from tests.support.launching import FINAL, REPLAY, launch, wait_for
from tests.support.served import served
from tests.support.waiting import until
from tests.support.web import asgi_scope, log_in, read_events


async def failed_override_attempt(api: AsyncClient) -> dict[str, Any]:
    """The demo story's refusal on SGLang 0.5.10: the mamba strategy was left to auto, which became no_buffer."""
    attempt = await wait_for(
        api, await launch(api, "qwen36-27b-mtp-strategy-unset", "rtxpro-01", [1], override_reason=REPLAY), FINAL
    )
    assert attempt["status"] == "failed"
    return attempt


def host_log(sim_cluster: SimCluster, attempt: dict[str, Any]) -> Path:
    return sim_cluster.hosts[attempt["host"]].home / attempt["remote_dir"] / "server.log"


async def test_the_mirror_holds_the_host_log_byte_for_byte(
    api: AsyncClient, running_app: FastAPI, sim_cluster: SimCluster
) -> None:
    attempt = await failed_override_attempt(api)
    response = await api.get(f"/api/attempts/{attempt['id']}/log", params={"offset": 0, "limit": 1 << 24})
    expected = host_log(sim_cluster, attempt).read_bytes()
    assert response.content == expected and response.headers["X-Log-Complete"] == "true"
    assert attempt["log_size"] == len(expected)
    part = await api.get(f"/api/attempts/{attempt['id']}/log", params={"offset": 100, "limit": 50})
    assert part.content == expected[100:150] and part.headers["X-Next-Offset"] == "150"
    verification = running_app.state.runtime.logs.get(attempt["id"]).meta.verification
    assert verification["match"] is True
    download = await api.get(f"/api/attempts/{attempt['id']}/log/download")
    assert download.content == expected and "attachment" in download.headers["content-disposition"]


async def test_flag_aware_grep_finds_the_option_the_plain_grep_missed(api: AsyncClient) -> None:
    attempt = await failed_override_attempt(api)
    grep = f"/api/attempts/{attempt['id']}/grep"
    plain = (await api.get(grep, params={"q": "mamba_scheduler", "flags": "false"})).json()
    assert plain["total"] == 0  # the story's grep: the process died before printing its arguments
    found = (await api.get(grep, params={"q": "mamba_scheduler"})).json()
    assert found["total"] >= 1
    hit = found["matches"][0]
    assert "--mamba-scheduler-strategy no_buffer" in hit["text"]
    log = (await api.get(f"/api/attempts/{attempt['id']}/log", params={"limit": 1 << 24})).content
    assert log[hit["offset"] :].startswith(hit["text"].encode())
    assert log[: hit["offset"]].count(b"\n") + 1 == hit["line"]


async def test_zero_hits_says_what_was_searched_and_where_to_look(api: AsyncClient) -> None:
    attempt = await failed_override_attempt(api)
    log = (await api.get(f"/api/attempts/{attempt['id']}/log", params={"limit": 1 << 24})).content
    answer = (await api.get(f"/api/attempts/{attempt['id']}/grep", params={"q": "no such text anywhere"})).json()
    lines = log.decode().splitlines()
    assert answer["total"] == 0 and answer["matches"] == []
    assert answer["searched_bytes"] == len(log) and answer["searched_lines"] == len(lines)
    assert [t["text"] for t in answer["tail"]] == lines[-50:]
    assert lines[answer["first_traceback_line"] - 1] == "Traceback (most recent call last):"
    assert "Traceback (most recent call last):" not in lines[: answer["first_traceback_line"] - 1]


HOSTILE_PATTERNS = ["-v", "--help", "-e x", "'; touch {marker}; '", "$(touch {marker})", '"quoted"', "\\"]


async def test_grep_searches_hostile_patterns_literally(api: AsyncClient) -> None:
    """Every pattern on one attempt's log (a launch each would only repeat the same log)."""
    attempt = await failed_override_attempt(api)
    wrong = []
    for pattern in HOSTILE_PATTERNS:
        marker = Path(f"/tmp/launchdeck-grep-{uuid.uuid4().hex}")
        answer = await api.get(f"/api/attempts/{attempt['id']}/grep", params={"q": pattern.format(marker=marker)})
        if answer.status_code != 200 or answer.json()["total"] != 0 or marker.exists():
            wrong.append(f"{pattern!r}: {answer.status_code} {answer.text}, {marker} exists: {marker.exists()}")
    assert not wrong, "\n".join(wrong)


async def test_bad_patterns_get_a_400_with_the_reason(api: AsyncClient) -> None:
    attempt = await failed_override_attempt(api)
    grep = f"/api/attempts/{attempt['id']}/grep"
    bad = await api.get(grep, params={"q": "(radix", "regex": "true"})
    assert bad.status_code == 400 and bad.json()["detail"] == "Invalid regular expression: Unmatched ( or \\("
    assert (await api.get(grep, params={"q": "a\nb"})).status_code == 400
    regex = await api.get(grep, params={"q": "radix cache when using --mamba-[a-z-]+ no_buffer", "regex": "true"})
    assert regex.json()["total"] >= 1


async def test_grep_across_attempts_counts_hits_per_attempt(api: AsyncClient) -> None:
    failed = await failed_override_attempt(api)
    ready = await wait_for(api, await launch(api, "llama31-8b", "rtxpro-01", [2]), FINAL)
    rows = (await api.get("/api/grep", params={"q": "not compatible with radix cache"})).json()
    assert [(r["attempt"], r["hits"] >= 1) for r in rows] == [(failed["id"], True)]
    both = (await api.get("/api/grep", params={"q": "sglang serve", "host": "rtxpro-01"})).json()
    assert {r["attempt"] for r in both} == {failed["id"], ready["id"]}
    assert (await api.get("/api/grep", params={"q": "sglang serve", "host": "b200-01"})).json() == []


async def test_full_log_opens_at_a_line_and_at_the_first_error(api: AsyncClient, app_client: AsyncClient) -> None:
    attempt = await failed_override_attempt(api)
    log = (await api.get(f"/api/attempts/{attempt['id']}/log", params={"limit": 1 << 24})).content.decode()
    lines = log.splitlines()
    app_client.headers.pop("Authorization")
    await log_in(app_client)
    target = len(lines) - 1
    assert target > 21
    page = (await app_client.get(f"/attempts/{attempt['id']}/log", params={"line": target})).text
    above = [f'id="L{n}"' in page for n in (target, target - 20, target - 21)]
    assert above == [True, True, False]  # the page opens a little above the target
    first_error = lines.index("Traceback (most recent call last):") + 1
    page = (await app_client.get(f"/attempts/{attempt['id']}/log", params={"at": "error"})).text
    assert f'id="L{first_error}"' in page and f'data-target="{first_error}"' in page
    assert f'<details class="traceback" open><summary><div class="ln error mark" id="L{first_error}">' in page
    bottom = (await app_client.get(f"/attempts/{attempt['id']}/log", params={"at": "bottom"})).text
    assert f'data-target="{len(lines)}"' in bottom and f'mark" id="L{len(lines)}"' in bottom
    offset = log.index("Traceback (most recent call last):") + 5
    page = (await app_client.get(f"/attempts/{attempt['id']}/log", params={"offset": offset})).text
    assert f'data-target="{first_error}"' in page
    zero = await app_client.get(
        f"/attempts/{attempt['id']}/log/grep", params={"q": "mamba_scheduler", "submitted": "true"}
    )
    assert "No line matches" in zero.text and f"?line={first_error}#L{first_error}" in zero.text
    bad = await app_client.get(f"/attempts/{attempt['id']}/log/grep", params={"q": "(", "regex": "true"})
    assert bad.status_code == 400 and "Invalid regular expression" in bad.text


async def test_grep_page_reaches_every_hit_with_its_matches_marked_and_escaped(
    api: AsyncClient, app_client: AsyncClient, running_app: FastAPI
) -> None:
    attempt = await failed_override_attempt(api)
    log = running_app.state.runtime.logs.get(attempt["id"])
    first = log.total_lines + 1
    log.append(b"".join(b"worker <i>%d</i> said <script>x</script> & <SCRIPT>x</script>\n" % n for n in range(450)))
    app_client.headers.pop("Authorization")
    await log_in(app_client)
    url = f"/attempts/{attempt['id']}/log/grep?q=%3Cscript%3Ex&submitted=true"
    hits: list[int] = []
    next_page = re.compile(
        r'<a href="([^"]+)" hx-get="[^"]+" hx-target="#grep-results" hx-push-url="false" rel="next">'
    )
    marked = "said <mark>&lt;script&gt;x</mark>&lt;/script&gt; &amp; &lt;SCRIPT&gt;x"
    for shown, count in (("1\N{EN DASH}200", 200), ("201\N{EN DASH}400", 200), ("401\N{EN DASH}450", 50)):
        page = (await app_client.get(url, headers={"HX-Request": "true"})).text
        assert f"450 matching lines for <code>&lt;script&gt;x</code>, showing {shown}" in page
        assert "<script>" not in page and "<i>" not in page
        assert page.count(marked) == count
        hits += [int(n) for n in re.findall(r'<div class="ln\s+mark"><a class="n" href="[^"]*">(\d+)</a>', page)]
        assert ("← first hits" in page) == (shown != "1\N{EN DASH}200")
        if following := next_page.search(page):
            url = html.unescape(following[1])
    assert following is None and hits == list(range(first, first + 450))
    ignoring = url.replace("submitted", "ignore_case=true&submitted")
    page = (await app_client.get(ignoring, headers={"HX-Request": "true"})).text
    assert "&amp; <mark>&lt;SCRIPT&gt;x</mark>" in page  # -i marks what -i found


async def append_lines(path: Path, first: int, count: int) -> None:
    with open(path, "ab") as f:
        for n in range(first, first + count, 100):
            f.write(b"".join(b"appended line %d \xff <script>x</script>\n" % i for i in range(n, n + 100)))
            f.flush()
            await asyncio.sleep(0.005)


async def test_live_events_resume_exactly_with_last_event_id(
    api: AsyncClient, sim_cluster: SimCluster, running_app: FastAPI
) -> None:
    attempt = await wait_for(api, await launch(api, "llama31-8b", "rtxpro-01", [0]), {"ready"})
    path = host_log(sim_cluster, attempt)
    events_path = f"/api/attempts/{attempt['id']}/events"
    mirror = running_app.state.runtime.logs.get(attempt["id"])
    await append_lines(path, 0, 2000)
    first = await read_events(running_app, events_path + "?offset=0", count=1)
    last_id = first[-1][1]
    await append_lines(path, 2000, 3000)
    size = path.stat().st_size
    rest = await read_events(running_app, events_path + "?offset=0", until=size, headers={"Last-Event-ID": last_id})
    received = "".join(json.loads(data)["text"] for _, _, data in first + rest)
    sent, host = received.encode(errors="surrogateescape"), path.read_bytes()
    # The server logs its health checks meanwhile: compare what was sent, which reaches `size`.
    assert len(sent) >= size and sent == host[: len(sent)] and mirror.read(0, size) == host[:size]
    assert json.loads(rest[0][2])["offset"] == int(last_id)  # resumed exactly where the first stream ended


async def test_a_viewer_that_never_reads_does_not_stall_another(
    api: AsyncClient, sim_cluster: SimCluster, running_app: FastAPI, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(log_views, "SEND_TIMEOUT", 600)  # here the stuck viewer stays; its drop is tested below
    attempt = await wait_for(api, await launch(api, "llama31-8b", "rtxpro-01", [3]), {"ready"})
    path = host_log(sim_cluster, attempt)
    viewers = functools.partial(running_app.state.runtime.fanout.viewers, attempt["id"])
    events_path = f"/api/attempts/{attempt['id']}/events"
    start = path.stat().st_size
    stuck = asyncio.create_task(stuck_viewer(running_app, events_path + f"?offset={start}"))
    await until(lambda: viewers() == 1 or stuck.done(), "the stuck viewer to be following")
    watcher = asyncio.create_task(read_events(running_app, events_path + f"?offset={start}", count=1))
    await append_lines(path, 0, 100_000)  # 5 MB: more than a viewer's queue holds
    size = path.stat().st_size
    events = await watcher
    events += await read_events(running_app, events_path, until=size, headers={"Last-Event-ID": events[-1][1]})
    # The server logs its health checks meanwhile: the mirror and what was sent may reach past `size`.
    assert running_app.state.runtime.logs.get(attempt["id"]).size >= size  # the mirror kept up
    assert viewers() == 1 and not stuck.done()  # the stuck viewer is still there
    stuck.cancel()
    received = "".join(json.loads(data)["text"] for _, _, data in events).encode(errors="surrogateescape")
    assert len(received) >= size - start and received == path.read_bytes()[start : start + len(received)]


async def test_a_viewer_that_takes_nothing_for_the_send_timeout_is_dropped(
    api: AsyncClient, sim_cluster: SimCluster, running_app: FastAPI, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(log_views, "SEND_TIMEOUT", 1.0)
    attempt = await wait_for(api, await launch(api, "llama31-8b", "rtxpro-01", [3]), {"ready"})
    path = host_log(sim_cluster, attempt)
    viewers = functools.partial(running_app.state.runtime.fanout.viewers, attempt["id"])
    stuck = asyncio.create_task(stuck_viewer(running_app, f"/api/attempts/{attempt['id']}/events"))
    await until(lambda: viewers() == 1, "the stuck viewer to be following")
    await append_lines(path, 0, 100)
    await until(lambda: stuck.done() and viewers() == 0, "the stuck viewer to be dropped", timeout=10)
    assert stuck.exception() is None  # the stream ended; the app raised nothing to its server


async def stuck_viewer(app: FastAPI, path: str) -> None:
    """A viewer whose connection takes one message and then nothing more, forever."""
    scope = asgi_scope(path, {"authorization": f"Bearer {TOKEN}"})
    never = asyncio.Event()

    async def receive() -> dict[str, Any]:
        await never.wait()
        return {"type": "http.disconnect"}

    async def send(message: dict[str, Any]) -> None:
        if message["type"] == "http.response.body":
            await never.wait()

    await app(scope, receive, send)


async def test_logs_cli_prints_follows_and_greps(
    api: AsyncClient, sim_cluster: SimCluster, running_app: FastAPI
) -> None:
    attempt = await failed_override_attempt(api)
    async with served(running_app) as url:
        logs = functools.partial(cli, "logs", str(attempt["id"]), url=url, env={"LAUNCHDECK_TOKEN": TOKEN}, text=False)
        code, out, _ = await logs("--follow")
        assert code == 0 and out == host_log(sim_cluster, attempt).read_bytes()
        code, out, _ = await logs("--grep", "mamba_scheduler")
        assert code == 0 and b"--mamba-scheduler-strategy no_buffer" in out and out.split(b":")[0].isdigit()
        code, out, err = await logs("--grep", "nothing like this")
        assert code == 1 and out == b"" and b"no line matches: searched" in err and b"first traceback at line" in err
        code, _, err = await logs("--grep", "(", "--regex")
        assert code == 1 and b"400: Invalid regular expression" in err
        code, _, err = await logs("--grep", "x", "--follow")
        assert code == 2 and b"--follow and --grep do not go together" in err


async def test_the_stream_of_an_attempt_whose_server_wrote_nothing_ends_at_once(
    api: AsyncClient, running_app: FastAPI
) -> None:
    refused = await api.post("/api/attempts", json={"preset": "llama31-8b", "host": "rtxpro-01", "gpus": [42]})
    assert refused.status_code == 422 and (await api.get("/api/attempts")).json() == []  # no attempt to stream
    silent = {"name": "silent", "model_path": "meta-llama/Llama-3.1-8B-Instruct", "python": "true"}
    assert (await api.post("/api/presets", json=silent)).status_code == 201
    attempt = await wait_for(api, await launch(api, "silent", "rtxpro-01", [0]), FINAL)
    assert attempt["status"] == "failed" and attempt["log_size"] == 0
    events = await read_events(running_app, f"/api/attempts/{attempt['id']}/events?offset=0", count=1)
    assert events == [("end", "0", '{"offset": 0}')]
    grep = (await api.get(f"/api/attempts/{attempt['id']}/grep", params={"q": "x"})).json()
    assert (grep["total"], grep["searched_bytes"], grep["tail"]) == (0, 0, [])


async def test_a_failed_attempts_page_offers_neither_an_empty_performance_block_nor_a_blind_stop(
    api: AsyncClient,
) -> None:
    """Nothing of the failed server is left on its GPUs: the page offers no "Stop process group",
    and with no benchmark and no ready server there is no Performance block above the log."""
    attempt = await failed_override_attempt(api)
    await log_in(api)
    page = (await api.get(f"/attempts/{attempt['id']}")).text
    assert 'id="stop-leftovers"' not in page and "Stop process group" not in page
    panel = (await api.get(f"/attempts/{attempt['id']}/performance", headers={"HX-Request": "true"})).text
    assert "<h2>Performance</h2>" not in panel and "hidden" in panel


async def test_searching_many_logs_shows_the_matching_lines_each_linked_into_its_log(api: AsyncClient) -> None:
    """Counts alone make a person open every attempt; the first hits of each, with a line of
    context, say at once which one to open, and each line number opens the full log there."""
    attempt = await failed_override_attempt(api)
    await log_in(api)
    page = html.unescape((await api.get("/search", params={"q": "Speculative decoding for"})).text)
    excerpt = page[page.index(f'data-excerpt="{attempt["id"]}"') :]
    excerpt = excerpt[: excerpt.index("</tr>")]
    hit = re.search(r'<div class="ln [^"]*mark"><a class="n" href="/attempts/(\d+)/log\?line=(\d+)#L\2">', excerpt)
    assert hit and int(hit[1]) == attempt["id"], excerpt
    assert "ValueError: Speculative decoding for" in excerpt
