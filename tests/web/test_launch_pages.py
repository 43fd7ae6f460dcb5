"""Preset, launch, attempt and audit pages as plain HTTP forms (what works without JavaScript)."""

from __future__ import annotations

import asyncio
import html
import re

from fastapi import FastAPI
from httpx import AsyncClient
from sqlalchemy import select

from app.casebook.signatures import assign_signature
from app.db.models import Attempt, Host, Preset, PresetRevision
from app.diagnose.analyze import Analyzer, diagnose
from app.diagnose.stored import stored
from app.launch.record import Pace
from tests.support.servers import free_port
from tests.support.sglang_logs import MODEL, NEWEST_ARGV, NEWEST_OOM_LOG
from tests.support.waiting import until
from tests.support.web import csrf_from, log_in

LLAMA = "meta-llama/Llama-3.1-8B-Instruct"


async def test_preset_editor_creates_validates_revises_and_diffs(app_client: AsyncClient) -> None:
    csrf = await log_in(app_client)
    form = {"csrf_token": csrf, "name": "llama", "model_path": LLAMA, "port": "31000", "tp_size": "1", "env": ""}
    bad = await app_client.post("/presets", data={**form, "tp_size": "one"})
    assert bad.status_code == 422
    assert "tp_size: &#39;one&#39; is not a whole number" in bad.text
    assert 'value="llama"' in bad.text  # what was typed is kept
    created = await app_client.post("/presets", data=form)
    assert created.status_code == 303 and created.headers["location"] == "/presets/llama"
    assert "Not launched yet." in (await app_client.get("/presets/llama")).text

    edit = {**form, "tp_size": "2", "disable_radix_cache": "on", "extra_args": "--served-model-name 'my model'",
            "env": "HF_HUB_OFFLINE=1"}  # fmt: skip
    saved = await app_client.post("/presets/llama", data=edit)
    assert saved.headers["location"] == "/presets/llama?saved=2"
    page = html.unescape((await app_client.get(saved.headers["location"])).text)
    assert "Saved as revision 2." in page
    assert (
        f"python3 -m sglang.launch_server --model-path {LLAMA} --port 31000 --tp-size 2 --disable-radix-cache "
        "--served-model-name 'my model'" in page
    )
    diff = html.unescape((await app_client.get("/presets/llama", params={"a": 1, "b": 2})).text)
    assert re.search(r"<code>--tp-size</code></td><td class=\"before\">1</td><td class=\"after\">2</td>", diff)
    assert re.search(r"<code>env HF_HUB_OFFLINE</code></td><td class=\"before\">\(unset\)</td>", diff)
    fragment = await app_client.get("/presets/llama", params={"a": 2, "b": 2}, headers={"HX-Request": "true"})
    assert fragment.text.strip().startswith('<div id="diff">') and "are the same" in fragment.text

    unchanged = await app_client.post("/presets/llama", data=edit)
    assert unchanged.headers["location"] == "/presets/llama?saved=unchanged"
    cloned = await app_client.post("/presets/llama/clone", data={"csrf_token": csrf, "new_name": "llama-2"})
    assert cloned.headers["location"] == "/presets/llama-2"
    listing = (await app_client.get("/presets")).text
    assert 'data-preset="llama"' in listing and 'data-preset="llama-2"' in listing
    await app_client.post("/presets/llama-2/archive", data={"csrf_token": csrf})
    assert 'data-preset="llama-2"' not in (await app_client.get("/presets")).text
    assert 'data-preset="llama-2"' in (await app_client.get("/presets?archived=true")).text


async def test_the_editor_keeps_a_flag_spelled_as_the_newest_release_spells_it(app_client: AsyncClient) -> None:
    """A preset for the newest SGLang shows --mamba-radix-cache-strategy in the mamba strategy field;
    saving the page's form as it is shown changes nothing, so no flag is renamed behind the user."""
    csrf = await log_in(app_client)
    form = {"csrf_token": csrf, "name": "newest", "model_path": LLAMA, "port": "30000", "env": "",
            "extra_args": "--mamba-radix-cache-strategy extra_buffer"}  # fmt: skip
    assert (await app_client.post("/presets", data=form)).status_code == 303
    page = html.unescape((await app_client.get("/presets/newest")).text)
    editor = page[page.index('class="flags"') :]
    assert re.search(r"<code>--mamba-radix-cache-strategy</code>\s*<select name=\"mamba_scheduler_strategy\">", editor)
    assert "<option selected>extra_buffer</option>" in editor
    assert 'name="extra_args" value=""' in editor
    shown = dict(re.findall(r'<input type="hidden" name="([\w.]+)" value="([^"]*)"', editor))
    assert shown == {"mamba_scheduler_strategy.flag": "--mamba-radix-cache-strategy"}
    again = {**form, "extra_args": "", "mamba_scheduler_strategy": "extra_buffer", **shown}
    saved = await app_client.post("/presets/newest", data=again)
    assert saved.headers["location"] == "/presets/newest?saved=unchanged"


async def test_forms_without_csrf_token_are_refused(app_client: AsyncClient) -> None:
    await log_in(app_client)
    response = await app_client.post("/presets", data={"name": "x", "model_path": LLAMA})
    assert response.status_code == 403
    assert (
        await app_client.get("/api/presets", headers={"Authorization": "Bearer test-token-0123456789abcdef012345"})
    ).json() == []


async def test_launch_form_checks_launches_and_stops(app_client: AsyncClient, running_app: FastAPI) -> None:
    running_app.state.runtime.attempts.pace = Pace(loading=0.1, serving=0.3, health_timeout=10)
    csrf = await log_in(app_client)
    await app_client.post("/presets", data={"csrf_token": csrf, "name": "llama", "model_path": LLAMA, "port": "30000"})
    form = await app_client.get("/launch", params={"preset": "llama", "host": "rtxpro-01"})
    assert form.text.count('name="gpus"') == 4 and "GPU 3 · 95.1 GiB free of 95.6" in form.text
    choice = {"csrf_token": csrf, "preset": "llama", "host": "rtxpro-01", "gpus": ["0"], "port": str(free_port())}
    checked = await app_client.post("/launch/preflight", data=choice, headers={"HX-Request": "true"})
    assert checked.text.strip().startswith('<div id="preflight"')
    assert re.search(r'data-check="memory">\s*<td>memory</td><td>✓ enough free memory', checked.text)

    launched = await app_client.post("/launch", data=choice)
    assert launched.status_code == 303
    attempt_url = launched.headers["location"]
    for _ in range(300):
        status_html = (await app_client.get(attempt_url, headers={"HX-Request": "true"})).text
        if 'id="status">ready<' in status_html:
            break
        await asyncio.sleep(0.1)
    assert 'id="status">ready<' in status_html and 'data-stage="cuda graph capture"' in status_html
    # The next launch's form ticks the freest GPU, not GPU 0, which this server now fills.
    await until(lambda: gpu_free_gib(running_app, "rtxpro-01", 0) < 50, "the server's memory to show on GPU 0")
    again = await app_client.get("/launch", params={"preset": "llama", "host": "rtxpro-01"})
    ticked = re.findall(r'name="gpus" value="(\d)" checked', again.text)
    assert len(ticked) == 1 and ticked != ["0"], ticked
    attempts = (await app_client.get("/attempts", params={"host": "rtxpro-01", "status": "ready"})).text
    assert f'href="{attempt_url}"' in attempts
    assert "No attempts match these filters" in (await app_client.get("/attempts?status=lost")).text

    attempt_number = attempt_url.removeprefix("/attempts/")
    busy = await app_client.post("/launch/preflight", data=choice, headers={"HX-Request": "true"})
    assert f'from <a href="/attempts/{attempt_number}">attempt {attempt_number}</a>' in busy.text
    assert f'hx-post="/attempts/{attempt_number}/stop"' in busy.text
    stopped = await app_client.post(f"{attempt_url}/stop", data={"csrf_token": csrf})
    assert stopped.status_code == 303
    for _ in range(100):
        if 'id="status">stopped<' in (await app_client.get(attempt_url)).text:
            break
        await asyncio.sleep(0.1)
    page = (await app_client.get(attempt_url)).text
    assert 'id="status">stopped<' in page and "exit code 143" in page
    audit = (await app_client.get("/audit")).text
    assert f">attempt {attempt_number}</a>" in audit and "<td>stop</td>" in audit and "<td>launch</td>" in audit
    on_its_preset = (await app_client.get("/presets/llama")).text  # the preset's page lists its attempts
    assert f'<a href="{attempt_url}">{attempt_number}</a>' in on_its_preset and "status-stopped" in on_its_preset


async def test_launch_form_keeps_the_choice_and_says_what_is_wrong(app_client: AsyncClient) -> None:
    csrf = await log_in(app_client)
    response = await app_client.post(
        "/launch", data={"csrf_token": csrf, "preset": "missing", "host": "rtxpro-01", "gpus": ["1"]}
    )
    assert response.status_code == 422
    assert "no preset named &#39;missing&#39;" in response.text
    assert csrf_from(response.text) == csrf


async def test_attempt_page_shows_drift_from_the_newest_releases_dict_dump(
    running_app: FastAPI, app_client: AsyncClient
) -> None:
    log = NEWEST_OOM_LOG
    async with running_app.state.runtime.sessions.write() as session:
        revision = PresetRevision(preset=Preset(name="newest-mtp"), number=1, model_path=MODEL)
        host = await session.scalar(select(Host).where(Host.name == "rtxpro-01"))
        assert host is not None
        session.add(revision)
        await session.flush()
        attempt = Attempt(
            host_id=host.id,
            preset_revision_id=revision.id,
            argv=NEWEST_ARGV,
            status="failed",
            diagnosis=stored(diagnose(log), NEWEST_ARGV).to_json(),
        )
        session.add(attempt)
        await session.commit()
    await log_in(app_client)
    page = await attempt_page(app_client, attempt.id)
    drift_table = page[page.index('id="drift"') : page.index("</table>", page.index('id="drift"'))]
    rows = dict(re.findall(r'data-arg="(\w+)">\s*((?:<td>.*?</td>\s*)+)', drift_table, re.S))
    cells = {name: re.findall(r"<td[^>]*>(.*?)</td>", row, re.S) for name, row in rows.items()}
    assert cells["cuda_graph_backend_prefill"][:4] == ["<code>--cuda-graph-backend-prefill</code>", "breakable", "",
                                                       "<b>disabled</b>"]  # fmt: skip
    assert cells["mem_fraction_static"][1:4] == ["0.85", "", "<b>0.7712349018554687</b>"]
    assert cells["max_running_requests"][1:4] == ["(default)", "", "<b>48</b>"]
    assert "cuda_graph_max_bs_decode" not in cells and "mamba_radix_cache_strategy" not in cells  # as asked
    assert "mamba state cache" in page[page.index('id="hint"') :]
    compared = html.unescape((await app_client.get("/compare", params={"a": attempt.id, "b": attempt.id})).text)
    side = compared[compared.index('id="drift"') :]
    assert re.search(r'data-arg="cuda_graph_backend_prefill"><td><code>--cuda-graph-backend-prefill</code></td>'
                     r"<td>breakable</td><td><b>disabled</b></td>", side)  # fmt: skip


UNPLACED_LOG = """[2026-02-01 10:00:00] server_args=ServerArgs(model_path='acme/Lark-8B', tp_size=1)
[2026-02-01 10:00:09 TP0] Scheduler hit an exception: Traceback (most recent call last):
  File "/x/sglang/srt/managers/scheduler.py", line 10, in event_loop
ValueError: the wibble of the frobnicator is out of phase by 0.7592325781249999 at /opt/lark/phase.py
"""


async def test_a_failure_no_rule_places_says_unrecognised_on_its_attempt_and_its_group(
    running_app: FastAPI, app_client: AsyncClient
) -> None:
    attempts = {}
    async with running_app.state.runtime.sessions.write() as session:
        revision = PresetRevision(preset=Preset(name="lark"), number=1, model_path="acme/Lark-8B")
        host = await session.scalar(select(Host).where(Host.name == "rtxpro-01"))
        assert host is not None
        session.add(revision)
        await session.flush()
        for name, log, status in [
            ("unplaced", UNPLACED_LOG, "failed"),
            (
                "nginx",
                '10.1.2.3 - - [03/Dec/2026:10:00:00 +0000] "GET / HTTP/1.1" 200 12 "-" "curl/8.5.0"\n',
                "stopped",
            ),
            ("starting", "", "starting"),
        ]:
            attempt = Attempt(
                host_id=host.id,
                preset_revision_id=revision.id,
                argv=[],
                status=status,
                diagnosis=stored(diagnose(log), []).to_json(),
            )
            session.add(attempt)
            await session.flush()
            await assign_signature(session, attempt)
            attempts[name] = attempt
        await session.commit()
    await log_in(app_client)
    page = html.unescape((await app_client.get(f"/attempts/{attempts['unplaced'].id}")).text)
    card = page[page.index('id="root-error"') :]
    assert "unrecognised failure" in card and "the wibble of the frobnicator" in card
    assert "Unrecognised failure: launchdeck has no rule for this error yet." in card
    # Teaching is one click away: the badge links to the teach form, which stands open.
    teach_form = '<details class="teach" id="teach" hx-preserve open>'
    assert '<a href="#teach">teach launchdeck</a>' in card and teach_form in card
    fingerprint = attempts["unplaced"].diagnosis["fingerprint"]
    group = html.unescape((await app_client.get(f"/errors/{fingerprint}")).text)
    assert "Unrecognised failure</strong>: launchdeck has no rule for this error yet" in group
    assert '<a href="#teach">Teach launchdeck</a>' in group and teach_form in group
    listed = html.unescape((await app_client.get("/errors")).text)
    row = listed[listed.index(f'data-fingerprint="{fingerprint}"') :]
    assert '<span class="unrecognised">unrecognised</span>' in row[: row.index("</tr>")]
    # Its title is the error as the log wrote it; the signed form, numbers and paths taken out, is its tooltip.
    title = "ValueError: the wibble of the frobnicator is out of phase by 0.7592325781249999 at /opt/lark/phase.py"
    assert f">{title}</a>" in row and "out of phase by <n>" in row and ">ValueError</code>" not in row
    # A log that is no SGLang log is not called healthy, nor given an error, and the attempt's
    # status stays what its host said.
    other = html.unescape((await app_client.get(f"/attempts/{attempts['nginx'].id}")).text)
    assert "This does not look like an SGLang log: no line launchdeck recognises" in other
    assert 'id="root-error"' not in other and "no error in the log" not in other
    assert attempts["nginx"].signature_id is None
    assert (await app_client.get(f"/api/attempts/{attempts['nginx'].id}")).json()["status"] == "stopped"
    # Before its server wrote a line, a launch's log is not called foreign.
    starting = html.unescape((await app_client.get(f"/attempts/{attempts['starting'].id}")).text)
    assert "no line from SGLang in the log yet" in starting and "not an SGLang log" not in starting


def gpu_free_gib(app: FastAPI, host: str, index: int) -> float:
    snapshot = app.state.runtime.gpus.hosts[host].snapshot
    gpu = next(g for g in snapshot.gpus if g.index == index) if snapshot else None
    return (gpu.memory_free_mib or 0) / 1024 if gpu else float("inf")


TINY_SERVER_LOG = "\n".join(
    [
        "[2026-02-01 10:00:00] server_args=ServerArgs(model_path='acme/Lark-27B', tp_size=1, mem_fraction_static=0.61)",
        "[2026-02-01 10:00:40 TP0] max_total_num_tokens=2900, chunked_prefill_size=8192, max_prefill_tokens=16384, "
        "max_running_requests=1, context_len=262144, available_gpu_mem=3.10 GB",
        "[2026-02-01 10:00:52] The server is fired up and ready to roll!",
        "",
    ]
)


async def test_a_server_up_but_too_small_to_be_of_use_says_so_with_its_figures(
    running_app: FastAPI, app_client: AsyncClient
) -> None:
    """Ready is not enough: one request at a time and a KV cache shorter than one full context is
    said on the card, with the bisection that finds a fraction that serves one click away."""
    # The fixed preset of the story: a cache shorter than the whole context, and of use.
    useful_log = TINY_SERVER_LOG.replace("=2900,", "=87263,").replace(
        "max_running_requests=1,", "max_running_requests=8,"
    )
    attempt, useful = await attempts_from_logs(
        running_app, "lark-27b", (TINY_SERVER_LOG, "ready"), (useful_log, "ready")
    )
    await log_in(app_client)
    page = await attempt_page(app_client, attempt.id)
    warning = page[page.index('id="capacity"') :]
    warning = warning[: warning.index("</p>")]
    assert "serves at most 1 request at a time, where the chat-short benchmark runs 8 at once" in warning
    assert "the KV cache holds 2,900 tokens, fewer than the 3,072 those requests need" in warning
    assert 'href="/sweeps/new?preset=lark-27b&mode=bisect&host=rtxpro-01"' in warning
    assert 'id="capacity"' not in (await app_client.get(f"/attempts/{useful.id}")).text
    bisect = html.unescape((await app_client.get("/sweeps/new", params={"preset": "lark-27b", "mode": "bisect"})).text)
    assert re.search(r'<input type="radio" name="mode" value="bisect" checked>', bisect)
    on_host = (await app_client.get("/sweeps/new", params={"mode": "bisect", "host": "rtxpro-01", "gpus": "2"})).text
    assert "<option selected>rtxpro-01</option>" in on_host and 'name="gpus" value="2"' in on_host


async def test_preflight_predicts_the_kv_cache_and_warns_when_it_is_too_small_to_be_of_use(
    app_client: AsyncClient,
) -> None:
    """The capacity row: KV tokens from the GPU's free memory, the weights, the model's shape and the
    fraction, and how many requests of the default benchmark fit at once; a fraction that leaves a
    quarter GiB beside Llama 3.1 8B's 15 GiB of weights holds fewer than the benchmark's 8."""
    csrf = await log_in(app_client)
    for name, fraction in (("llama", ""), ("llama-tiny", "0.16")):
        preset = {"csrf_token": csrf, "name": name, "model_path": LLAMA, "mem_fraction_static": fraction}
        assert (await app_client.post("/presets", data=preset)).status_code == 303
    rows = {}
    for name in ("llama", "llama-tiny"):
        choice = {"csrf_token": csrf, "preset": name, "host": "rtxpro-01", "gpus": ["2"], "port": str(free_port())}
        checked = await app_client.post("/launch/preflight", data=choice, headers={"HX-Request": "true"})
        found = re.search(
            r'<tr class="check (\w+)" data-check="capacity">\s*<td>capacity</td><td>(.*?)</td>', checked.text
        )
        assert found, checked.text
        rows[name] = (found[1], html.unescape(found[2]))
    look, said = rows["llama"]
    assert look == "ok" and re.fullmatch(
        r"✓ [\d,]+ requests of 384 tokens at once \(the chat-short benchmark runs 8\); about [\d,]+ KV tokens per "
        r"GPU: 0\.858 of [\d.]+ GiB free, less 15\.0 GiB of weights, at 128 KiB a token",
        said,
    ), said
    look, said = rows["llama-tiny"]
    assert look == "warn" and re.match(
        r"! too small to be of use: it would hold [0-7] requests? of 384 tokens at once, where the chat-short "
        r"benchmark runs 8; about [\d,]+ KV tokens per GPU: 0\.16 of",
        said,
    ), said
    # The API's preflight weighs the same need.
    body = {"preset": "llama-tiny", "host": "rtxpro-01", "gpus": [2], "port": free_port()}
    checks = (await app_client.post("/api/preflight", json=body, headers={"X-CSRF-Token": csrf})).json()["checks"]
    capacity = next(check for check in checks if check["name"] == "capacity")
    assert not capacity["ok"] and capacity["message"].startswith("too small to be of use"), capacity


ARGPARSE_LOG = "\n".join(
    [
        "usage: launch_server.py [-h] --model-path MODEL_PATH [--mamba-scheduler-strategy STRATEGY]",
        "launch_server.py: error: argument --mamba-scheduler-strategy: invalid choice: 'extra' "
        "(choose from 'auto', 'no_buffer', 'extra_buffer')",
        "",
    ]
)


async def test_a_launch_that_failed_parsing_its_arguments_marks_that_first_step(
    running_app: FastAPI, app_client: AsyncClient
) -> None:
    _, page = await failed_attempt_page(running_app, app_client, "lark-argparse", ARGPARSE_LOG)
    bar = page[page.index('id="stage-progress"') :]
    assert re.search(r'<span class="step current failed">\s*✗ args parsed', bar[: bar.index("</div>")]), bar[:600]


CUT_TRACEBACK_LOG = "\n".join(
    [
        "[2026-03-02 08:14:05 TP0] Load weight begin. avail mem=78.10 GB",
        "[2026-03-02 08:14:12 TP0] Scheduler hit an exception: Traceback (most recent call last):",
        '  File "/opt/sglang/srt/managers/scheduler.py", line 2946, in run_scheduler_process',
        '  File "/opt/sglang/srt/model_loader/loader.py", line 362, in load_model',
        "",
    ]
)


async def test_a_log_cut_inside_a_traceback_roots_at_its_last_frame_and_the_card_says_it_is_cut(
    running_app: FastAPI, app_client: AsyncClient
) -> None:
    """Never the traceback's header: the last frame is where it was, and the card says why no exception shows."""
    _, page = await failed_attempt_page(running_app, app_client, "lark-cut", CUT_TRACEBACK_LOG)
    root = re.search(r'<pre class="root-line">(.*?)</pre>', page)
    assert root and root[1] == 'File "/opt/sglang/srt/model_loader/loader.py", line 362, in load_model', page
    cut = "The traceback is cut off in <code>sglang/srt/model_loader/loader.py:load_model</code>: the log ends"
    assert f'id="traceback-cut">{cut} before its exception.' in page
    summary = "Why model-load: raised in sglang/srt/model_loader/loader.py:load_model: model does not fit"
    assert f'id="evidence"><summary>{summary}</summary>' in page, page


async def test_the_card_lists_the_evidence_its_class_was_weighed_from(
    running_app: FastAPI, app_client: AsyncClient
) -> None:
    """A traceback cut in distributed set-up, beside a c10d line: that line is the root, and the card
    says why the class is nccl, each piece with its weight and the line it was read from."""
    store = (
        "[W302 08:14:11.551 TCPStore.cpp:125] [c10d] recvValue failed on SocketImpl(fd=31): Connection reset by peer"
    )
    log = "\n".join(
        [
            "[2026-03-02 08:14:05 TP0] Init torch distributed begin.",
            store,
            "[2026-03-02 08:14:12 TP2] Scheduler hit an exception: Traceback (most recent call last):",
            '  File "/opt/sglang/srt/model_executor/model_runner.py", line 512, in init_torch_distributed',
            "",
        ]
    )
    attempt, page = await failed_attempt_page(running_app, app_client, "lark-store", log)
    assert re.search(r'<pre class="root-line">(.*?)</pre>', page)[1] == store  # type: ignore[index]
    summary = re.search(r'id="evidence"><summary>(.*?)</summary>', page)
    assert summary and summary[1] == (
        "Why nccl: the error says: distributed store; "
        "raised in sglang/srt/model_executor/model_runner.py:init_torch_distributed: collective communication"
    )
    assert f'<b>nccl +12</b> <a href="/attempts/{attempt.id}/log?line=2#L2" hx-boost="false">line 2</a>' not in page
    assert "<b>nccl +12</b> the error says: distributed store" in page


async def test_a_server_killed_with_no_error_in_its_log_is_said_killed_on_the_card(
    running_app: FastAPI, app_client: AsyncClient
) -> None:
    """The dashboard knows how the process ended: a kill with a log that shows no error is the failure."""
    [attempt] = await attempts_from_logs(running_app, "lark-killed", ("", "failed"))
    analyzer = Analyzer()
    analyzer.feed("[2026-03-02 08:14:05 TP0] Load weight begin. avail mem=78.10 GB\n")
    analyzer.exited(137)
    async with running_app.state.runtime.sessions.write() as session:
        row = await session.get(Attempt, attempt.id)
        assert row is not None
        row.diagnosis = stored(analyzer.finish(file_alone=False), []).to_json()
        await session.commit()
    await log_in(app_client)
    page = await attempt_page(app_client, attempt.id)
    assert '<span class="failure-class" id="failure-class">oom</span> the server exited with 137, and its log' in page
    assert 'id="evidence"><summary>Why oom: the process was killed (137)</summary>' in page
    assert "OOM killer" in page


async def test_a_traceback_still_arriving_is_said_on_the_card_without_its_header_as_the_error(
    running_app: FastAPI, app_client: AsyncClient
) -> None:
    analyzer = Analyzer()
    analyzer.feed(CUT_TRACEBACK_LOG)  # read live: the exception may still come
    [attempt] = await attempts_from_logs(running_app, "lark-live", (CUT_TRACEBACK_LOG, "loading"))
    async with running_app.state.runtime.sessions.write() as session:
        live = await session.get(Attempt, attempt.id)
        assert live is not None
        live.diagnosis = stored(analyzer.snapshot(), []).to_json()
        await session.commit()
    await log_in(app_client)
    page = await attempt_page(app_client, attempt.id)
    assert 'id="root-error"' not in page and "Traceback (most recent call last)" not in page.split('id="diagnosis"')[1]
    said = re.search(r'id="traceback-arriving">A traceback is being written, now in <code>(.*?)</code>', page)
    assert said and said[1].endswith(":load_model"), page


async def attempt_page(client: AsyncClient, attempt_id: int | None) -> str:
    """The attempt's page as a person reads it (entities decoded)."""
    return html.unescape((await client.get(f"/attempts/{attempt_id}")).text)


async def failed_attempt_page(app: FastAPI, client: AsyncClient, preset: str, log: str) -> tuple[Attempt, str]:
    """A failed attempt of a new preset with `log`'s diagnosis, and its page as a person logged in sees it."""
    [attempt] = await attempts_from_logs(app, preset, (log, "failed"))
    await log_in(client)
    return attempt, await attempt_page(client, attempt.id)


async def attempts_from_logs(app: FastAPI, preset: str, *runs: tuple[str, str]) -> list[Attempt]:
    """Attempts on rtxpro-01 of a new preset, each with the status and the diagnosis of its log
    (log, status), as a finished launch leaves them."""
    async with app.state.runtime.sessions.write() as session:
        revision = PresetRevision(preset=Preset(name=preset), number=1, model_path="acme/Lark-27B")
        host = await session.scalar(select(Host).where(Host.name == "rtxpro-01"))
        assert host is not None
        session.add(revision)
        await session.flush()
        attempts = [
            Attempt(host_id=host.id, preset_revision_id=revision.id, argv=[], status=status,
                    diagnosis=stored(diagnose(log), []).to_json())
            for log, status in runs
        ]  # fmt: skip
        session.add_all(attempts)
        await session.commit()
    return attempts
