"""Log pages: the live tail (server-sent events), grep with its zero-hits answer, the full log
paged through the line index, and grep across attempts."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncGenerator, AsyncIterator, Coroutine
from html import escape
from typing import Annotated, Any, TypeVar, cast

from fastapi import APIRouter, Header, Request
from fastapi.responses import HTMLResponse, Response
from sse_starlette import EventSourceResponse, ServerSentEvent

from app.db import history
from app.db.history import attempt_finished
from app.errors import InvalidInput, SearchBusy, SearchTooSlow
from app.logs.live import Batch, Ended, Lines, Restarted, Skipped
from app.logs.search import FIRST_ERROR, LogSearch, first_line, match_ranges, search_log
from app.logs.stages import last_stamp
from app.logs.store import LogFile
from app.runtime import Runtime
from app.web.deps import AttemptDep, LogDep, RuntimeDep, Viewer, loaded_attempt, session_login
from app.web.disconnect import unless_disconnected
from app.web.errors import status_of
from app.web.log_views import (
    Sections,
    attempts_matching,
    event_stream,
    excerpts,
    hits_html,
    lines_html,
    log_context,
    resume_offset,
)
from app.web.params import Int64
from app.web.templating import render

T = TypeVar("T")

router = APIRouter(include_in_schema=False)

PAGE_LINES = 500
MAX_PAGE_LINES = 5000
LINES_ABOVE_TARGET = 20  # a page opened at a line shows a little of what led to it
GREP_PAGE_HITS = 200
NOTES_EVERY = 1.0  # how often a live page's notes kept only in memory (tracking, log mirror) are compared


def marker_html(attempt_id: Int64, event: Skipped | Restarted) -> str:
    if isinstance(event, Skipped):
        link = f"/attempts/{attempt_id}/log?line={event.first_line}#L{event.first_line}"
        return (
            f'<div class="marker skipped">skipped {event.lines:,} lines to keep up — '
            f'<a href="{link}">open the full log here</a></div>'
        )
    return (
        f'<div class="marker restarted">the log on the host was {escape(event.reason)} here; '
        "what follows is its new content</div>"
    )


def batch_event(log: LogFile, batch: Batch) -> bytes:
    """A batch of lines as an encoded `lines` event, made once and sent to every viewer. A stage
    that starts in it opens a section, which the lines of later batches join (log.js)."""
    if "page-event" not in batch.cache:
        sections = Sections(log.stages.read(log.path, batch.end), continued=False)
        html = lines_html(log.attempt_id, batch.lines, fold_progress=True, sections=sections)
        batch.cache["page-event"] = ServerSentEvent(data=html, event="lines", id=str(batch.end)).encode()
    encoded: bytes = batch.cache["page-event"]
    return encoded


async def live_events(runtime: Runtime, attempt_id: int, offset: int, seen: int) -> AsyncIterator[bytes]:
    """The attempt page's stream: the log's new lines, and a `status` event whenever the page's
    status block (status, stage, diagnosis, drift) has changed, which the page then fetches. It ends
    (`end`) once the log is complete and the attempt has ended, which may come in either order."""
    mirrored = runtime.logs.get(attempt_id)
    if mirrored.exists:  # the stages before the stream's start, read off the event loop
        await asyncio.to_thread(mirrored.stages.read, mirrored.path, offset)
    log = runtime.fanout.follow(attempt_id, offset)
    changes = _status_changes(runtime, attempt_id, seen)
    next_event: asyncio.Future[Any] = asyncio.ensure_future(anext(log))
    next_change: asyncio.Future[Any] = asyncio.ensure_future(anext(changes))
    ended: Ended | None = None
    try:
        while True:
            await asyncio.wait({next_event, next_change}, return_when=asyncio.FIRST_COMPLETED)
            if next_change.done():
                seen = next_change.result()
                yield _status_event(seen)
                next_change = asyncio.ensure_future(anext(changes))
            if next_event.done():
                event = next_event.result()
                if isinstance(event, Ended):
                    ended, next_event = event, asyncio.get_running_loop().create_future()  # no more lines
                else:
                    yield _log_event(mirrored, event)
                    next_event = asyncio.ensure_future(anext(log))
            if ended is not None:
                async with runtime.sessions.read() as db:
                    finished = await attempt_finished(db, attempt_id)
                if finished:  # a last refresh, which also brings the log's final state (its sha256)
                    yield _status_event(runtime.attempts.changes.stamp(attempt_id))
                    yield ServerSentEvent(data="", event="end", id=str(ended.offset)).encode()
                    return
    finally:
        for task in (next_event, next_change):
            task.cancel()
        await asyncio.gather(next_event, next_change, return_exceptions=True)
        await log.aclose()  # type: ignore[attr-defined]
        await changes.aclose()


def _log_event(log: LogFile, event: Lines | Skipped | Restarted) -> bytes:
    if isinstance(event, Lines):
        return b"".join(batch_event(log, batch) for batch in event.batches)
    end = str(event.end) if isinstance(event, Skipped) else None
    return ServerSentEvent(data=marker_html(log.attempt_id, event), event="lines", id=end).encode()


def _status_event(stamp: int) -> bytes:
    return ServerSentEvent(data=str(stamp), event="status").encode()


async def _status_changes(runtime: Runtime, attempt_id: int, seen: int) -> AsyncGenerator[int, None]:
    """The attempt's stamp each time its row is written, at once if it was since the page had it
    (`seen`, its stamp then: a reconnected page catches up), and when a note that the status
    block shows from memory (tracking interrupted, log mirror behind) changes."""

    def notes() -> tuple[str, str]:
        return runtime.attempts.tracking_note(attempt_id), runtime.mirror_note(attempt_id)

    shown = notes()
    while True:
        try:
            seen = await asyncio.wait_for(runtime.attempts.changes.wait(attempt_id, seen), NOTES_EVERY)
        except TimeoutError:
            if notes() == shown:
                continue
        shown = notes()
        yield seen


@router.get("/attempts/{attempt_id}/log/stream")
async def log_stream(
    request: Request,
    attempt_id: Int64,
    runtime: RuntimeDep,
    offset: Int64 = 0,
    seen: Int64 = 0,
    last_event_id: Annotated[str | None, Header()] = None,
) -> EventSourceResponse:
    """New lines of the attempt's log as HTML fragments (event id = the byte offset after them),
    and `status` events when the attempt changed since `seen` (see AttemptService.changes)."""
    user = await session_login(request, runtime)
    if user is None:  # this swaps in an element whose request htmx turns into the login redirect

        async def login() -> AsyncIterator[ServerSentEvent]:
            yield ServerSentEvent(data=f'<div hx-get="/attempts/{attempt_id}" hx-trigger="load"></div>', event="lines")
            yield ServerSentEvent(data="", event="end")

        return EventSourceResponse(login())
    await loaded_attempt(attempt_id, runtime)  # 404 for an unknown attempt; the stream holds no session
    events = live_events(runtime, attempt_id, resume_offset(offset, last_event_id), seen)
    return event_stream(events)


@router.get("/attempts/{attempt_id}/log", response_class=HTMLResponse)
async def full_log(
    request: Request,
    attempt_id: Int64,
    runtime: RuntimeDep,
    user: Viewer,
    attempt: AttemptDep,
    log: LogDep,
    line: Int64 | None = None,
    start: int | None = None,
    offset: Int64 | None = None,
    at: str | None = None,
    count: int = PAGE_LINES,
) -> Response:
    """One page of the mirrored log: from line `start`, around a `line` or a byte `offset`, at the
    bottom or at the first error."""
    context = log_context(runtime, log)
    count = max(1, min(count, MAX_PAGE_LINES))
    notice = ""
    if at == "error":
        line, notice = await _first_error(request, runtime, log)
    elif offset is not None:
        line = log.line_at(offset)[0]
    if at == "bottom" or (line is None and at == "error"):
        page = log.last_lines(count)
        if at == "bottom" and page.lines:
            line = page.lines[-1].number
    else:
        page = log.lines(start or max(1, (line or 1) - LINES_ABOVE_TARGET), count)
    first = page.lines[0].number if page.lines else 1
    async with runtime.sessions.read() as db:
        parts = await history.parts_of(db, attempt_id)  # a multi-node attempt's nodes, to filter by
    context |= {
        "user": user,
        "attempt": attempt,
        "parts": parts,
        "page": page,
        "lines_html": lines_html(
            attempt_id,
            page.lines,
            mark=line,
            fold_tracebacks=True,
            fold_progress=True,
            sections=await asyncio.to_thread(_sections, log),
        ),
        "target": line,
        "notice": notice,
        "previous_line": max(1, first - count) if not page.at_start else None,
        "next_line": page.lines[-1].number + 1 if not page.at_end else None,
        "count": count,
    }
    return render(request, "log.html", context)


def _sections(log: LogFile) -> Sections | None:
    """The launch stages of the whole log, each running to the next, the last to the log's last time."""
    if not log.exists:
        return None
    return Sections(log.stages.read(log.path, log.size), until=last_stamp(log.path, log.size), final=True)


async def _first_error(request: Request, runtime: Runtime, log: LogFile) -> tuple[int | None, str]:
    """The line of the log's first error, or None and why not."""
    if not log.exists:
        return None, "no traceback or error line in this log"
    try:
        finding = first_line(log.path, FIRST_ERROR, regex=True, flag_aware=False, limits=runtime.grep_limits)
        line = await unless_disconnected(request, finding)
    except (InvalidInput, SearchBusy) as exc:  # its time or memory limit, or too many searches
        return None, f"the first error was not found: {exc}"
    return line, "" if line else "no traceback or error line in this log"


@router.get("/attempts/{attempt_id}/log/grep", response_class=HTMLResponse)
async def grep_page(
    request: Request,
    attempt_id: Int64,
    runtime: RuntimeDep,
    user: Viewer,
    attempt: AttemptDep,
    log: LogDep,
    q: str = "",
    regex: bool = False,
    ignore_case: bool = False,
    context: Int64 = 0,
    flags: bool = False,
    submitted: bool = False,
    after: Int64 = 0,
) -> Response:
    """Grep of the attempt's log, GREP_PAGE_HITS hits at a time from the first after line `after`;
    hits link into the full log, their matches marked. A form sends `submitted`, so an unticked
    flag-aware box means off; a plain link without it gets the default, on."""
    flag_aware = flags or not submitted
    options = {"regex": regex, "ignore_case": ignore_case, "context": context, "flag_aware": flag_aware}
    search: LogSearch | None = None
    error, status = "", 200
    ranges: list[list[tuple[int, int]]] = []
    if q:
        limits = runtime.grep_limits.of(user.name)
        searching = search_log(log, q, limits=limits, limit=GREP_PAGE_HITS, after=after, **options)
        search, error, status = await _bounded_search(request, searching)
    if search and search.result.matches:
        texts = [m.text for m in search.result.matches]
        query = {"regex": regex, "ignore_case": ignore_case, "flag_aware": flag_aware}
        marking = match_ranges(texts, q, limits=runtime.grep_limits.of(user.name), **query)
        ranges = (await _bounded_search(request, marking))[0] or []  # without them, hits are still shown
    next_page = ""
    if search and search.result.more and not search.result.timed_out:
        last = search.result.matches[-1].line
        url = request.url.include_query_params(after=last, submitted="true", flags=str(flag_aware).lower())
        next_page = f"{url.path}?{url.query}"
    first_page = ""
    if after > 0:
        url = request.url.remove_query_params("after")
        first_page = f"{url.path}?{url.query}"
    page = {
        "user": user,
        "attempt": attempt,
        "q": q,
        "options": options,
        "search": search,
        "error": error,
        "next_page": next_page,
        "first_page": first_page,
        "hits_html": hits_html(attempt_id, search.result.matches, ranges) if search else "",
        "tail_html": lines_html(attempt_id, search.tail, anchors=False) if search else "",
    }
    return render(request, "grep.html", page, block="results", status_code=status)


async def _bounded_search(request: Request, search: Coroutine[Any, Any, T]) -> tuple[T | None, str, int]:
    """A search run until its client leaves: (its result, "", 200), or for a refused or stopped
    one (what it found before the time limit, if anything; the sentence; its HTTP status)."""
    try:
        return await unless_disconnected(request, search), "", 200
    except (InvalidInput, SearchBusy) as exc:
        partial = cast(T, exc.partial) if isinstance(exc, SearchTooSlow) else None  # what `search` returns
        return partial, str(exc), status_of(exc)


@router.get("/search", response_class=HTMLResponse)
async def search_attempts(
    request: Request,
    runtime: RuntimeDep,
    user: Viewer,
    q: str = "",
    preset: str = "",
    host: str = "",
    regex: bool = False,
    ignore_case: bool = False,
) -> Response:
    """Which attempts of a preset or a host contain a pattern, with hit counts."""
    matching = attempts_matching(
        runtime, q, person=user.name, preset=preset, host=host, regex=regex, ignore_case=ignore_case
    )
    rows, error, status = await _bounded_search(request, matching)
    shown: dict[int, str] = {}
    if rows:  # the lines themselves, for the first attempts; a refused or slow excerpt leaves the counts
        options = {"regex": regex, "ignore_case": ignore_case}
        shown = (await _bounded_search(request, excerpts(runtime, rows, q, person=user.name, **options)))[0] or {}
    context = {
        "user": user,
        "q": q,
        "preset": preset,
        "host": host,
        "regex": regex,
        "ignore_case": ignore_case,
        "rows": rows or [],
        "excerpts": shown,
        "error": error,
        "hosts": [h.name for h in runtime.ssh],
    }
    return render(request, "search.html", context, block="results", status_code=status)
