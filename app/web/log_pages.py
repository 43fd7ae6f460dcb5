"""Log pages: the live tail (server-sent events), grep with its zero-hits answer, the full log
paged through the line index, and grep across attempts."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncGenerator, AsyncIterator, Coroutine, Iterable, Mapping, Sequence
from html import escape
from pathlib import Path
from typing import Annotated, Any, TypeVar, cast

from fastapi import APIRouter, Header, Request
from fastapi.responses import HTMLResponse, Response
from sse_starlette import EventSourceResponse, ServerSentEvent
from sse_starlette.sse import SendTimeoutError
from starlette.types import Receive, Scope, Send

from app.db.models import Attempt
from app.errors import InvalidInput, SearchBusy, SearchTooSlow
from app.launch.history import attempt_finished, list_attempts, load_attempt
from app.logs.live import Batch, Ended, Lines, Restarted, Skipped
from app.logs.render import line_class, render_line
from app.logs.search import (
    FIRST_ERROR,
    TRACEBACK,
    LogSearch,
    count_matches,
    first_line,
    match_ranges,
    search_log,
)
from app.logs.store import Line, LogFile
from app.web.deps import AttemptDep, PageUser, Runtime, RuntimeDep, session_user
from app.web.disconnect import unless_disconnected
from app.web.errors import status_of
from app.web.params import INT64_MAX, Int64
from app.web.templating import render

T = TypeVar("T")

log = logging.getLogger(__name__)

router = APIRouter(include_in_schema=False)

PAGE_LINES = 500
MAX_PAGE_LINES = 5000
LINES_ABOVE_TARGET = 20  # a page opened at a line shows a little of what led to it
GREP_PAGE_HITS = 200
LIVE_TAIL_LINES = 200
SEARCH_ATTEMPTS = 500  # the newest attempts a search across attempts looks at
SEND_TIMEOUT = 30.0  # a viewer that takes nothing for this long is dropped
TRACEBACK_BYTES = TRACEBACK.encode()
NOTES_EVERY = 1.0  # how often a live page's notes kept only in memory (tracking, log mirror) are compared


def lines_html(
    attempt_id: Int64,
    lines: Iterable[Line],
    *,
    mark: int | None = None,
    anchors: bool = True,
    matches: Mapping[int, Sequence[tuple[int, int]]] | None = None,
    fold_tracebacks: bool = False,
) -> str:
    """Log lines as HTML: numbered, linked into the full log, coloured, every byte escaped; line
    `mark` is highlighted, and in each line of `matches` its byte ranges. Without `anchors` (for
    excerpts shown beside a log) lines have no id. With `fold_tracebacks` a Python traceback, from
    its first line to the exception's (the first not indented), is one block that can be folded."""
    href = f"/attempts/{attempt_id}/log"
    matches = matches or {}
    parts = []
    in_traceback = False
    for line in lines:
        number, kind = line.number, line_class(line.text)
        anchor = f' id="L{number}"' if anchors else ""
        if number == mark:
            kind += " mark"
        cut = ""
        if line.cut:
            download = f"/api/attempts/{attempt_id}/log/download"
            cut = f' <span class="cut">… {line.cut:,} more bytes in the <a href="{download}">download</a></span>'
        indented = line.text[:1] in (b" ", b"\t")
        starts_traceback = fold_tracebacks and not indented and TRACEBACK_BYTES in line.text
        # (a traceback's first line is its block's summary, which may hold no link of its own)
        number_html = (
            f'<span class="n">{number}</span>'
            if starts_traceback
            else f'<a class="n" href="{href}?line={number}#L{number}">{number}</a>'
        )
        row = (
            f'<div class="ln {kind}"{anchor}>{number_html}'
            f'<span class="t">{render_line(line.text, matches.get(number, ()))}{cut}</span></div>'
        )
        if in_traceback and starts_traceback:  # a chained exception's traceback follows at once
            parts.append("</details>")
            in_traceback = False
        if in_traceback:
            parts.append(row)
            if not indented:
                parts.append("</details>")
                in_traceback = False
        elif starts_traceback:
            parts.append(f'<details class="traceback" open><summary>{row}</summary>')
            in_traceback = True
        else:
            parts.append(row)
    if in_traceback:
        parts.append("</details>")
    return "\n".join(parts)


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


def batch_event(attempt_id: Int64, batch: Batch) -> bytes:
    """A batch of lines as an encoded `lines` event, made once and sent to every viewer."""
    if "page-event" not in batch.cache:
        html = lines_html(attempt_id, batch.lines)
        batch.cache["page-event"] = ServerSentEvent(data=html, event="lines", id=str(batch.end)).encode()
    encoded: bytes = batch.cache["page-event"]
    return encoded


class _LogStream(EventSourceResponse):
    """sse-starlette drops a viewer that takes nothing for `send_timeout` by raising to the server,
    which would log a traceback per dropped viewer: the drop is expected, so it is one line here."""

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        try:
            await super().__call__(scope, receive, send)
        except SendTimeoutError:
            log.info("dropped a viewer of %s that took nothing for %g s", scope.get("path"), SEND_TIMEOUT)


def event_stream(events: AsyncIterator[ServerSentEvent | bytes]) -> EventSourceResponse:
    """A long-lived stream of a log: a viewer that takes nothing for SEND_TIMEOUT is dropped."""
    return _LogStream(events, send_timeout=SEND_TIMEOUT, headers={"X-Accel-Buffering": "no"})


def resume_offset(offset: int, last_event_id: str | None) -> int:
    """The browser's own reconnection sends Last-Event-ID, the newest; a fresh EventSource (as htmx
    makes after an error) has only the offset the page keeps in the stream's URL."""
    if last_event_id and last_event_id.strip().isdigit() and int(last_event_id) <= INT64_MAX:
        return int(last_event_id)
    return max(offset, 0)


async def live_events(runtime: Runtime, attempt_id: int, offset: int, seen: int) -> AsyncIterator[bytes]:
    """The attempt page's stream: the log's new lines, and a `status` event whenever the page's
    status block (status, stage, diagnosis, drift) has changed, which the page then fetches. It ends
    (`end`) once the log is complete and the attempt has ended, which may come in either order."""
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
                    yield _log_event(attempt_id, event)
                    next_event = asyncio.ensure_future(anext(log))
            if ended is not None:
                async with runtime.sessions.read() as db:
                    finished = await attempt_finished(db, attempt_id)
                if finished:
                    if (stamp := runtime.attempts.changes.stamp(attempt_id)) != seen:
                        yield _status_event(stamp)
                    yield ServerSentEvent(data="", event="end", id=str(ended.offset)).encode()
                    return
    finally:
        for task in (next_event, next_change):
            task.cancel()
        await asyncio.gather(next_event, next_change, return_exceptions=True)
        await log.aclose()  # type: ignore[attr-defined]
        await changes.aclose()


def _log_event(attempt_id: int, event: Lines | Skipped | Restarted) -> bytes:
    if isinstance(event, Lines):
        return b"".join(batch_event(attempt_id, batch) for batch in event.batches)
    end = str(event.end) if isinstance(event, Skipped) else None
    return ServerSentEvent(data=marker_html(attempt_id, event), event="lines", id=end).encode()


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


def log_context(runtime: Runtime, attempt_id: Int64) -> dict[str, Any]:
    """What every log view shows about the mirror itself."""
    log = runtime.logs.get(attempt_id)
    return {
        "log": log,
        "mirror_note": runtime.mirror_note(attempt_id),
        "restarts": log.meta.segments,
        "verification": log.meta.verification,
    }


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
    user = session_user(request, runtime)
    if user is None:  # this swaps in an element whose request htmx turns into the login redirect

        async def login() -> AsyncIterator[ServerSentEvent]:
            yield ServerSentEvent(data=f'<div hx-get="/attempts/{attempt_id}" hx-trigger="load"></div>', event="lines")
            yield ServerSentEvent(data="", event="end")

        return EventSourceResponse(login())
    async with runtime.sessions.read() as db:  # the stream may last hours: it holds no session
        await load_attempt(db, attempt_id)  # 404 for an unknown attempt
    events = live_events(runtime, attempt_id, resume_offset(offset, last_event_id), seen)
    return event_stream(events)


@router.get("/attempts/{attempt_id}/log", response_class=HTMLResponse)
async def full_log(
    request: Request,
    attempt_id: Int64,
    runtime: RuntimeDep,
    user: PageUser,
    attempt: AttemptDep,
    line: Int64 | None = None,
    start: int | None = None,
    offset: Int64 | None = None,
    at: str | None = None,
    count: int = PAGE_LINES,
) -> Response:
    """One page of the mirrored log: from line `start`, around a `line` or a byte `offset`, at the
    bottom or at the first error."""
    context = log_context(runtime, attempt_id)
    log: LogFile = context["log"]
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
    context |= {
        "user": user,
        "attempt": attempt,
        "page": page,
        "lines_html": lines_html(attempt_id, page.lines, mark=line, fold_tracebacks=True),
        "target": line,
        "notice": notice,
        "previous_line": max(1, first - count) if not page.at_start else None,
        "next_line": page.lines[-1].number + 1 if not page.at_end else None,
        "count": count,
    }
    runtime.logs.forget(attempt_id)
    return render(request, "log.html", context)


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
    user: PageUser,
    attempt: AttemptDep,
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
        searching = search_log(
            runtime.logs.get(attempt_id), q, limits=runtime.grep_limits, limit=GREP_PAGE_HITS, after=after, **options
        )
        search, error, status = await _bounded_search(request, searching)
        runtime.logs.forget(attempt_id)
    if search and search.result.matches:
        texts = [m.text for m in search.result.matches]
        query = {"regex": regex, "ignore_case": ignore_case, "flag_aware": flag_aware}
        marking = match_ranges(texts, q, limits=runtime.grep_limits, **query)
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
        "hits_html": _hits_html(attempt_id, search, ranges) if search else "",
        "tail_html": lines_html(attempt_id, search.tail, anchors=False) if search else "",
    }
    return render(request, "grep.html", page, block="results", status_code=status)


async def attempts_matching(
    runtime: Runtime, q: str, *, preset: str = "", host: str = "", **options: bool
) -> list[tuple[Attempt, int]]:
    """The newest attempts (of a preset, on a host) whose logs contain `q`, with hit counts; the
    attempts are read first and the session closed before grep runs. When the time limit stops the
    search, SearchTooSlow carries the attempts found before then."""
    if not q:
        return []
    async with runtime.sessions.read() as db:
        rows = await list_attempts(db, host=host or None, preset=preset or None, limit=SEARCH_ATTEMPTS)
    paths = runtime.logs.paths([row.id for row in rows])

    def with_hits(counts: dict[Path, int]) -> list[tuple[Attempt, int]]:
        return [(row, counts[paths[row.id]]) for row in rows if counts.get(paths[row.id])]

    try:
        counts = await count_matches(list(paths.values()), q, limits=runtime.grep_limits, **options)
    except SearchTooSlow as exc:
        assert isinstance(exc.partial, dict)
        raise SearchTooSlow(str(exc), with_hits(exc.partial)) from None
    return with_hits(counts)


async def _bounded_search(request: Request, search: Coroutine[Any, Any, T]) -> tuple[T | None, str, int]:
    """A search run until its client leaves: (its result, "", 200), or for a refused or stopped
    one (what it found before the time limit, if anything; the sentence; its HTTP status)."""
    try:
        return await unless_disconnected(request, search), "", 200
    except (InvalidInput, SearchBusy) as exc:
        partial = cast(T, exc.partial) if isinstance(exc, SearchTooSlow) else None  # what `search` returns
        return partial, str(exc), status_of(exc)


def _hits_html(attempt_id: int, search: LogSearch, ranges: list[list[tuple[int, int]]]) -> str:
    groups = []
    for i, match in enumerate(search.result.matches):
        found = {match.line: ranges[i]} if i < len(ranges) else {}
        lines = [
            *(Line(c.line, c.offset, c.text, len(c.text)) for c in match.before),
            Line(match.line, match.offset, match.text, len(match.text)),
            *(Line(c.line, c.offset, c.text, len(c.text)) for c in match.after),
        ]
        hit = lines_html(attempt_id, lines, mark=match.line, anchors=False, matches=found)
        groups.append(f'<div class="hit">{hit}</div>')
    return "\n".join(groups)


@router.get("/search", response_class=HTMLResponse)
async def search_attempts(
    request: Request,
    runtime: RuntimeDep,
    user: PageUser,
    q: str = "",
    preset: str = "",
    host: str = "",
    regex: bool = False,
    ignore_case: bool = False,
) -> Response:
    """Which attempts of a preset or a host contain a pattern, with hit counts."""
    matching = attempts_matching(runtime, q, preset=preset, host=host, regex=regex, ignore_case=ignore_case)
    rows, error, status = await _bounded_search(request, matching)
    context = {
        "user": user,
        "q": q,
        "preset": preset,
        "host": host,
        "regex": regex,
        "ignore_case": ignore_case,
        "rows": rows or [],
        "error": error,
        "hosts": [h.name for h in runtime.ssh],
    }
    return render(request, "search.html", context, block="results", status_code=status)
