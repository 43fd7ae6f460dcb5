"""Log search within bounds: a time limit that keeps the hits found so far, a memory limit grep cannot
grow past, a few greps at once, and no grep left running once its client has gone."""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlencode

import pytest
from fastapi import FastAPI
from httpx import ASGITransport, AsyncClient

from app.db.models import Attempt, Host, Preset, PresetRevision
from app.errors import SearchOutOfMemory, SearchTooSlow
from app.logs.grep import GrepLimits
from app.logs.search import grep_log
from app.states import Role
from app.web.app import create_app
from tests.support.accounts import person
from tests.support.dashboard import AUTH, make_settings
from tests.support.hosts import grep_children
from tests.support.served import served
from tests.support.web import log_in

# Short lines starting with "hit" match at once; the long line ending in x makes the back-references
# try every split of it, for minutes.
BACKTRACKS = r"^hit|(.*)(.*)(.*)(.*)(.*)\5\4\3\2\1x"
SLOW_LOG = b"hit one\nhit two\n" + b"a" * 40 + b"x\nhit three\n"
EXPONENTIAL = "(a{1,999}){1,999}"  # compiles into gigabytes


@pytest.fixture
def slow_log(tmp_path: Path) -> Path:
    path = tmp_path / "slow.log"
    path.write_bytes(SLOW_LOG)
    return path


async def wait_until(condition: object, timeout: float) -> bool:
    for _ in range(int(timeout * 50)):
        if callable(condition) and condition():
            return True
        await asyncio.sleep(0.02)
    return False


async def test_a_backtracking_regex_stops_at_the_time_limit_with_the_hits_found_so_far(slow_log: Path) -> None:
    started = time.monotonic()
    with pytest.raises(SearchTooSlow) as stopped:
        await grep_log(slow_log, BACKTRACKS, regex=True, limits=GrepLimits(seconds=1))
    assert time.monotonic() - started < 10  # without the limit grep runs for minutes
    assert str(stopped.value).startswith("the pattern took too long: grep was stopped after 1 s, with the 2 matching")
    partial = stopped.value.partial
    assert [(m.line, m.text) for m in partial.matches] == [(1, b"hit one"), (2, b"hit two")]  # type: ignore[attr-defined]
    assert partial.timed_out and partial.total == 2  # type: ignore[attr-defined]
    assert grep_children() == []


def address_space(pid: int) -> tuple[int, str] | None:
    """A process's peak address space in bytes and its RLIMIT_AS, while it runs."""
    try:
        status = Path(f"/proc/{pid}/status").read_text()
        limits = Path(f"/proc/{pid}/limits").read_text()
    except OSError:
        return None
    peak = next(int(line.split()[1]) << 10 for line in status.splitlines() if line.startswith("VmPeak"))
    limit = next(line.split()[3] for line in limits.splitlines() if line.startswith("Max address space"))
    return peak, limit


async def test_a_pattern_needing_gigabytes_is_refused_and_grep_never_grows_past_the_limit(slow_log: Path) -> None:
    limit = 256 << 20
    seen: list[tuple[int, str]] = []

    async def watch() -> None:
        while True:
            seen.extend(filter(None, map(address_space, grep_children())))
            await asyncio.sleep(0.005)

    watching = asyncio.create_task(watch())
    try:
        with pytest.raises(SearchOutOfMemory) as refused:
            await grep_log(slow_log, EXPONENTIAL, regex=True, limits=GrepLimits(memory_bytes=limit))
    finally:
        watching.cancel()
    assert str(refused.value).startswith("the pattern needs more memory than allowed: grep stopped at its limit of 256")
    # Until it has its pattern, grep has the dashboard's own limit (none here) and allocates nothing.
    assert str(limit) in {grep_limit for _, grep_limit in seen}, "grep was never seen running with its limit"
    assert max(peak for peak, _ in seen) <= limit


async def test_a_search_waits_for_a_turn_and_then_runs(slow_log: Path) -> None:
    limits = GrepLimits(seconds=1, at_once=1, wait_seconds=30)
    slow = asyncio.create_task(grep_log(slow_log, BACKTRACKS, regex=True, limits=limits))
    assert await wait_until(grep_children, 10)
    quick = await grep_log(slow_log, "hit", limits=limits)  # runs once the slow one is stopped
    assert [m.line for m in quick.matches] == [1, 2, 4]
    with pytest.raises(SearchTooSlow):
        await slow


@dataclass
class Dashboard:
    app: FastAPI
    api: AsyncClient
    attempt_id: int


@contextlib.asynccontextmanager
async def open_dashboard(tmp_path: Path, grep_timeout_seconds: float) -> AsyncIterator[Dashboard]:
    """The app without hosts and one finished attempt whose mirrored log is SLOW_LOG; 2 searches
    may run at once, with 256 MiB each."""
    settings = make_settings(
        tmp_path,
        [],
        grep_timeout_seconds=grep_timeout_seconds,
        grep_memory_mib=256,
        grep_max_running=2,
        grep_wait_seconds=0.5,
    )
    app = create_app(settings)
    async with app.router.lifespan_context(app):
        runtime = app.state.runtime
        async with runtime.sessions.write() as session:
            host, preset = Host(name="gpu-01"), Preset(name="llama")
            session.add_all([host, preset])
            await session.flush()
            revision = PresetRevision(preset_id=preset.id, number=1, model_path="/models/llama")
            session.add(revision)
            await session.flush()
            attempt = Attempt(host_id=host.id, preset_revision_id=revision.id, status="failed")
            session.add(attempt)
            await session.commit()
            attempt_id = attempt.id
        runtime.logs.get(attempt_id).append(SLOW_LOG)
        async with AsyncClient(transport=ASGITransport(app=app), base_url="http://testserver") as client:
            yield Dashboard(app, client, attempt_id)


@pytest.fixture
async def dashboard(tmp_path: Path) -> AsyncIterator[Dashboard]:
    """Searches get 3 s."""
    async with open_dashboard(tmp_path, grep_timeout_seconds=3) as opened:
        yield opened


async def test_a_timed_out_grep_answers_422_with_the_sentence_and_the_hits_found(dashboard: Dashboard) -> None:
    grep = f"/api/attempts/{dashboard.attempt_id}/grep"
    answer = await dashboard.api.get(grep, params={"q": BACKTRACKS, "regex": "true"}, headers=AUTH)
    assert answer.status_code == 422, answer.text
    body = answer.json()
    assert body["detail"].startswith("the pattern took too long: grep was stopped after 3 s, with the 2 matching")
    assert body["timed_out"] is True and body["total"] == 2
    assert [(m["line"], m["text"]) for m in body["matches"]] == [(1, "hit one"), (2, "hit two")]
    across = await dashboard.api.get("/api/grep", params={"q": BACKTRACKS, "regex": "true"}, headers=AUTH)
    assert across.status_code == 422 and across.json()["timed_out"] is True
    assert across.json()["detail"].startswith("the pattern took too long")
    assert across.json()["matches"] == []  # grep was still inside the only log
    normal = await dashboard.api.get(grep, params={"q": "hit"}, headers=AUTH)
    assert normal.status_code == 200 and normal.json()["total"] == 3 and "timed_out" not in normal.json()
    assert grep_children() == []


async def test_a_pattern_needing_too_much_memory_answers_422_with_the_sentence(dashboard: Dashboard) -> None:
    grep = f"/api/attempts/{dashboard.attempt_id}/grep"
    answer = await dashboard.api.get(grep, params={"q": EXPONENTIAL, "regex": "true"}, headers=AUTH)
    assert answer.status_code == 422
    assert answer.json()["detail"].startswith("the pattern needs more memory than allowed: grep stopped at its limit")
    across = await dashboard.api.get("/api/grep", params={"q": EXPONENTIAL, "regex": "true"}, headers=AUTH)
    assert across.status_code == 422 and "needs more memory than allowed" in across.json()["detail"]


async def test_the_grep_page_shows_the_sentence_and_the_hits_found(dashboard: Dashboard) -> None:
    await log_in(dashboard.api)
    page = await dashboard.api.get(
        f"/attempts/{dashboard.attempt_id}/log/grep", params={"q": BACKTRACKS, "regex": "true", "submitted": "true"}
    )
    assert page.status_code == 422
    assert "the pattern took too long: grep was stopped after 3 s" in page.text
    assert "2 matching lines for <code>" in page.text and "found before grep was stopped" in page.text
    assert "<mark>hit</mark> one" in page.text and "<mark>hit</mark> two" in page.text and "hit three" not in page.text
    search = await dashboard.api.get("/search", params={"q": EXPONENTIAL, "regex": "true"})
    assert search.status_code == 422 and "the pattern needs more memory than allowed" in search.text


async def test_searches_beyond_the_limit_get_503_with_a_sentence_never_a_hang(dashboard: Dashboard) -> None:
    """2 searches may run at once, 1 of them a person's: ann's second is refused at once, bob still
    gets a turn, and a third person finds none within 0.5 s."""
    grep = f"/api/attempts/{dashboard.attempt_id}/grep"
    params = {"q": BACKTRACKS, "regex": "true"}
    async with (
        await person(dashboard.app, "ann", Role.VIEWER, None) as ann,
        await person(dashboard.app, "bob", Role.VIEWER, None) as bob,
        asyncio.timeout(60),
    ):
        answers = await asyncio.gather(ann.get(grep, params=params), ann.get(grep, params=params))
        assert sorted(answer.status_code for answer in answers) == [422, 503]  # one ran to its time limit
        refused = next(answer for answer in answers if answer.status_code == 503)
        assert refused.json()["detail"] == (
            "you have 1 searches running, as many as one person may at once: try again when one ends."
        )
        everyone = [ann.get(grep, params=params), bob.get(grep, params=params)]
        answers = await asyncio.gather(*everyone, dashboard.api.get(grep, params=params, headers=AUTH))
    assert sorted(answer.status_code for answer in answers) == [422, 422, 503]  # the third found no turn in 0.5 s
    busy = [answer.json()["detail"] for answer in answers if answer.status_code == 503]
    assert busy == ["too many searches are running (2 at once is the most allowed): try again in a moment."]
    assert grep_children() == []


@pytest.mark.parametrize("route", ["/api/attempts/{attempt_id}/grep", "/api/grep"])
async def test_grep_dies_when_its_client_disconnects(tmp_path: Path, route: str) -> None:
    async with (
        open_dashboard(tmp_path, grep_timeout_seconds=30) as dashboard,  # only the disconnect stops it in 10 s
        served(dashboard.app) as url,
    ):
        path = f"{route.format(attempt_id=dashboard.attempt_id)}?{urlencode({'q': BACKTRACKS, 'regex': 'true'})}"
        _, writer = await asyncio.open_connection("127.0.0.1", int(url.rsplit(":", 1)[1]))
        writer.write(f"GET {path} HTTP/1.1\r\nHost: x\r\nAuthorization: {AUTH['Authorization']}\r\n\r\n".encode())
        await writer.drain()
        assert await wait_until(grep_children, 10), "grep did not start"
        writer.close()  # the client goes away mid-search
        await writer.wait_closed()
        left = time.monotonic()
        assert await wait_until(lambda: not grep_children(), 10), "grep outlived its client"
        assert time.monotonic() - left < 10
