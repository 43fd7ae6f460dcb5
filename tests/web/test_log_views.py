"""What the log views show of a launch's log: one foldable section per launch stage with how long
it took, and progress bars as their last state, the earlier ones folded before it."""

from __future__ import annotations

import html
import re
from pathlib import Path

from fastapi import FastAPI
from httpx import AsyncClient
from sqlalchemy import select

from app.db.models import Attempt, Host, Preset, PresetRevision
from app.logs.live import Batch
from app.logs.store import Line, LogFile
from app.web.log_views import lines_html
from app.web.pages.logs import batch_event
from tests.support.sglang_logs import STAGED_LOG
from tests.support.web import log_in


async def attempt_with_log(app: FastAPI, log: bytes) -> int:
    """A failed attempt whose mirrored log is `log`."""
    async with app.state.runtime.sessions.write() as session:
        revision = PresetRevision(preset=Preset(name="staged"), number=1, model_path="m")
        host = await session.scalar(select(Host).where(Host.name == "rtxpro-01"))
        assert host is not None
        session.add(revision)
        await session.flush()
        attempt = Attempt(host_id=host.id, preset_revision_id=revision.id, argv=[], status="failed")
        session.add(attempt)
        await session.commit()
    app.state.runtime.logs.get(attempt.id).append(log)
    return attempt.id


def headings(page: str) -> list[tuple[str, str, str]]:
    """Each stage section's (name, duration, where it began when the page starts inside it)."""
    found = re.findall(
        r'<details class="stage" open data-stage="[^"]*" data-at="[^"]*"><summary class="stage-head">'
        r'<span class="stage-name">([^<]*)</span> <span class="took">([^<]*)</span>'
        r'(?: <span class="began">([^<]*)</span>)?',
        page,
    )
    return [(name, took, html.unescape(began)) for name, took, began in found]


async def test_the_full_log_is_one_section_per_stage_headed_by_how_long_it_took(
    running_app: FastAPI, app_client: AsyncClient
) -> None:
    attempt_id = await attempt_with_log(running_app, STAGED_LOG)
    await log_in(app_client)
    page = (await app_client.get(f"/attempts/{attempt_id}/log")).text
    assert headings(page) == [
        ("args parsed", "2 s", ""), ("weights loading", "5 s", ""), ("weights loaded", "1 s", ""),
        ("kv cache allocated", "1 s", ""), ("cuda graph capture", "31 s", ""),  # to the log's last time
    ]  # fmt: skip
    capture = page[page.index('data-stage="cuda graph capture"') :]
    assert capture.index('id="L9"') < capture.index('id="L13"') < capture.index("</details>\n</details>")
    # A page that starts inside a stage is headed by it, though it began pages before.
    later = (await app_client.get(f"/attempts/{attempt_id}/log", params={"start": 4, "count": 2})).text
    assert headings(later) == [("weights loading", "5 s", "· began at line 2")]


async def test_a_log_without_times_says_dash_for_each_stage(running_app: FastAPI, app_client: AsyncClient) -> None:
    untimed = re.sub(rb"\[2026-01-01 [\d:]+( TP0)?\] ", b"", STAGED_LOG)
    attempt_id = await attempt_with_log(running_app, untimed)
    await log_in(app_client)
    page = (await app_client.get(f"/attempts/{attempt_id}/log")).text
    assert [took for _, took, _ in headings(page)] == ["—"] * 5


async def test_a_progress_bar_shows_its_last_state_with_the_earlier_ones_folded(
    running_app: FastAPI, app_client: AsyncClient
) -> None:
    attempt_id = await attempt_with_log(running_app, STAGED_LOG)
    await log_in(app_client)
    page = (await app_client.get(f"/attempts/{attempt_id}/log")).text
    # Lines 3 to 6 are one bar's states: 3 to 5 folded, closed, before 6, which stays in view.
    fold = re.search(r'<details class="progress" data-bar="[^"]*"><summary>3 earlier states</summary>(.*?)</details>\n'
                     r'<div class="ln " id="L6"', page, re.S)  # fmt: skip
    assert fold and re.findall(r'id="L(\d+)"', fold[1]) == ["3", "4", "5"]
    # Line 10's carriage returns drew three states: the last one shows, the two before are folded.
    redrawn = re.search(r'<summary>2 earlier states</summary>(.*?)</details>\n'
                        r'<div class="ln " id="L10"[^>]*>(.*?)</div>', page, re.S)  # fmt: skip
    assert redrawn and "bs=8 avail_mem=50.00 GB" in redrawn[1] and "bs=4 avail_mem=49.90 GB" in redrawn[1]
    assert "bs=1 avail_mem=49.80 GB): 100%" in redrawn[2] and "bs=8" not in redrawn[2]


async def test_a_deep_link_into_a_folded_progress_bar_opens_it(running_app: FastAPI, app_client: AsyncClient) -> None:
    attempt_id = await attempt_with_log(running_app, STAGED_LOG)
    await log_in(app_client)
    page = (await app_client.get(f"/attempts/{attempt_id}/log", params={"line": 4})).text  # as ?line=4#L4 asks
    fold = page[page.rindex("<details", 0, page.index('id="L4"')) : page.index('id="L4"')]
    assert fold.startswith('<details class="progress"') and " open>" in fold
    assert re.search(r'<div class="ln\s+mark" id="L4"', page)


def test_a_line_that_is_no_bar_or_another_bar_ends_the_run() -> None:
    lines = [
        b"Loading safetensors checkpoint shards:   0% Completed | 0/4",
        b"Loading safetensors checkpoint shards:  50% Completed | 2/4",
        b"[2026-01-01 10:00:05 TP0] Load weight end.",
        b"Loading safetensors checkpoint shards: 100% Completed | 4/4",
        b"Capturing batches (bs=8 avail_mem=50.00 GB):   0%|  | 0/3",
    ]
    shown = lines_html(1, _lines(lines), fold_progress=True)
    assert shown.count("<details") == 1 and "<summary>1 earlier state</summary>" in shown
    assert re.findall(r'id="L(\d+)"', shown[shown.index("</details>") :]) == ["2", "3", "4", "5"]


def test_live_batches_head_each_stage_once_however_the_stream_resumes(tmp_path: Path) -> None:
    log = LogFile(tmp_path, 1)
    log.append(STAGED_LOG)
    lines = log.lines(1, 20).lines

    def stream(*cuts: int) -> str:
        ends = [*cuts, len(lines)]
        starts = [0, *cuts]
        sent = []
        for start, end in zip(starts, ends, strict=True):
            part = lines[start:end]
            offset = part[-1].offset + part[-1].length + 1
            sent.append(batch_event(log, Batch(part[0].offset, offset, part, log)).decode())
        return "".join(sent)

    for shown in (stream(), stream(3), stream(1, 2, 8, 9, 12)):
        assert re.findall(r'data-stage="([^"]*)"', shown) == [
            "args parsed", "weights loading", "weights loaded", "kv cache allocated", "cuda graph capture",
        ]  # fmt: skip


def _lines(texts: list[bytes]) -> list[Line]:
    offsets = [0]
    for text in texts:
        offsets.append(offsets[-1] + len(text) + 1)
    return [Line(n + 1, offsets[n], text, len(text)) for n, text in enumerate(texts)]
