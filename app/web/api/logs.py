"""JSON API for logs: exact bytes by offset, download, live events, grep, grep across attempts."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from typing import Annotated, Any

from fastapi import APIRouter, Header, Request
from fastapi.responses import FileResponse, JSONResponse, Response
from sse_starlette import EventSourceResponse, ServerSentEvent

from app.db.models import Attempt
from app.errors import NotFound, SearchTooSlow
from app.logs.live import Batch, Ended, Lines, Restarted, Skipped
from app.logs.search import LogSearch, search_log
from app.web.deps import ApiViewer, AttemptDep, LogDep, RuntimeDep
from app.web.disconnect import unless_disconnected
from app.web.errors import status_of
from app.web.log_views import attempts_matching, event_stream, resume_offset
from app.web.params import Int64

router = APIRouter(prefix="/api", tags=["logs"])

MAX_READ = 16 << 20


@router.get("/attempts/{attempt_id}/log", response_class=Response)
async def read_log(
    _user: ApiViewer,
    _attempt: AttemptDep,
    log: LogDep,
    offset: Int64 = 0,
    limit: Int64 = 1 << 20,
) -> Response:
    """The mirrored bytes at [offset, offset + limit), exactly; X-Log-Size and X-Log-Complete say
    whether there is more to come."""
    data = log.read(max(offset, 0), max(0, min(limit, MAX_READ)))
    headers = {
        "X-Log-Size": str(log.size),
        "X-Log-Complete": "true" if log.meta.complete else "false",
        "X-Next-Offset": str(max(offset, 0) + len(data)),
    }
    return Response(data, media_type="application/octet-stream", headers=headers)


@router.get("/attempts/{attempt_id}/log/download", response_class=FileResponse)
async def download_log(attempt_id: Int64, _user: ApiViewer, attempt: AttemptDep, log: LogDep) -> FileResponse:
    if not log.exists:
        raise NotFound(f"attempt {attempt_id} has no mirrored log yet")
    filename = f"attempt-{attempt_id}-{attempt.host.name}.log"
    return FileResponse(log.path, media_type="application/octet-stream", filename=filename)


@router.get("/attempts/{attempt_id}/events")
async def log_events(
    attempt_id: Int64,
    runtime: RuntimeDep,
    _user: ApiViewer,
    _attempt: AttemptDep,
    offset: Int64 = 0,
    last_event_id: Annotated[str | None, Header()] = None,
) -> EventSourceResponse:
    """The log live, as `log` events of JSON {offset, text} (event id = the byte offset after the
    text, so Last-Event-ID resumes exactly); `skipped` and `restarted` markers; `end` when the log
    is complete. Invalid UTF-8 travels as lone surrogates, so Python clients get the exact bytes
    back with errors="surrogateescape"."""

    def batch_event(batch: Batch) -> bytes:
        """Made once per batch and sent to every viewer."""
        if "api-event" not in batch.cache:
            text = batch.log.read(batch.start, batch.end - batch.start).decode(errors="surrogateescape")
            batch.cache["api-event"] = _json_event("log", {"offset": batch.start, "text": text}, batch.end).encode()
        encoded: bytes = batch.cache["api-event"]
        return encoded

    async def events() -> AsyncIterator[ServerSentEvent | bytes]:
        async for event in runtime.fanout.follow(attempt_id, resume_offset(offset, last_event_id)):
            if isinstance(event, Lines):
                yield b"".join(batch_event(batch) for batch in event.batches)
            elif isinstance(event, Skipped):
                yield _json_event("skipped", {"offset": event.start, "lines": event.lines}, event.end)
            elif isinstance(event, Restarted):
                yield _json_event("restarted", {"offset": event.offset, "reason": event.reason}, None)
            elif isinstance(event, Ended):
                yield _json_event("end", {"offset": event.offset}, event.offset)

    return event_stream(events())


def _json_event(name: str, data: dict[str, Any], end: int | None) -> ServerSentEvent:
    return ServerSentEvent(data=json.dumps(data), event=name, id=None if end is None else str(end))


@router.get("/attempts/{attempt_id}/grep")
async def grep(
    request: Request,
    runtime: RuntimeDep,
    user: ApiViewer,
    _attempt: AttemptDep,
    log: LogDep,
    q: str,
    regex: bool = False,
    ignore_case: bool = False,
    context: Int64 = 0,
    flags: bool = True,
    limit: Int64 = 200,
    after: Int64 = 0,
) -> Response:
    """Matching lines after line `after` with their line numbers and byte offsets (`skipped` counts
    the matching lines at or before it). With no hits: how much was searched, the last lines and the
    first traceback's line. A search stopped by its time limit answers 422 with `timed_out` and the
    matches found before then."""
    options = {"regex": regex, "ignore_case": ignore_case, "context": context, "flag_aware": flags}
    try:
        searching = search_log(
            log, q, limits=runtime.grep_limits.of(user.name), limit=max(1, min(limit, 5000)), after=after, **options
        )
        search = await unless_disconnected(request, searching)
    except SearchTooSlow as exc:
        assert isinstance(exc.partial, LogSearch)
        body = {"detail": str(exc), "timed_out": True, **_search_json(exc.partial)}
        return JSONResponse(body, status_code=status_of(exc))
    return JSONResponse(_search_json(search))


def _search_json(search: LogSearch) -> dict[str, Any]:
    def line(number: int, offset: int, text: bytes) -> dict[str, Any]:
        return {"line": number, "offset": offset, "text": text.decode(errors="replace")}

    return {
        "matches": [
            {
                **line(m.line, m.offset, m.text),
                "before": [line(c.line, c.offset, c.text) for c in m.before],
                "after": [line(c.line, c.offset, c.text) for c in m.after],
            }
            for m in search.result.matches
        ],
        "total": search.result.total,
        "skipped": search.result.skipped,
        "more": search.result.more,
        "searched_bytes": search.result.searched_bytes,
        "searched_lines": search.searched_lines,
        "tail": [line(t.number, t.offset, t.text) for t in search.tail],
        "first_traceback_line": search.first_traceback,
    }


@router.get("/grep")
async def grep_attempts(
    request: Request,
    runtime: RuntimeDep,
    user: ApiViewer,
    q: str,
    preset: str = "",
    host: str = "",
    regex: bool = False,
    ignore_case: bool = False,
) -> Response:
    """The newest attempts (of a preset, on a host) whose logs contain `q`, with hit counts. A search
    stopped by its time limit answers 422 with `timed_out` and, as `matches`, the attempts found
    before then."""
    try:
        matching = attempts_matching(
            runtime, q, person=user.name, preset=preset, host=host, regex=regex, ignore_case=ignore_case
        )
        found = await unless_disconnected(request, matching)
    except SearchTooSlow as exc:
        assert isinstance(exc.partial, list)
        partial = [_attempt_hits(row, n) for row, n in exc.partial]
        return JSONResponse({"detail": str(exc), "timed_out": True, "matches": partial}, status_code=status_of(exc))
    return JSONResponse([_attempt_hits(row, n) for row, n in found])


def _attempt_hits(row: Attempt, hits: int) -> dict[str, Any]:
    return {
        "attempt": row.id,
        "preset": row.revision.preset.name,
        "host": row.host.name,
        "status": row.status,
        "hits": hits,
    }
