"""What the log pages and the log API share: log lines as HTML, the stream of server-sent
events a viewer follows a log by, what every log view shows about the mirror, and the search
across attempts."""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator, Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

from sse_starlette import EventSourceResponse, ServerSentEvent
from sse_starlette.sse import SendTimeoutError
from starlette.types import Receive, Scope, Send

from app.db.history import list_attempts
from app.db.models import Attempt
from app.errors import SearchTooSlow
from app.logs.render import line_class, render_line
from app.logs.search import TRACEBACK, Match, count_matches, grep_log
from app.logs.store import Line, LogFile
from app.runtime import Runtime
from app.web.params import INT64_MAX, Int64

log = logging.getLogger(__name__)

SEARCH_ATTEMPTS = 500  # the newest attempts a search across attempts looks at
EXCERPT_ATTEMPTS, EXCERPT_HITS = 10, 3  # the search page shows the first hits of its first attempts
SEND_TIMEOUT = 30.0  # a viewer that takes nothing for this long is dropped
TRACEBACK_BYTES = TRACEBACK.encode()


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


def log_context(runtime: Runtime, log: LogFile) -> dict[str, Any]:
    """What every log view shows about the mirror itself."""
    return {
        "log": log,
        "mirror_note": runtime.mirror_note(log.attempt_id),
        "restarts": log.meta.segments,
        "verification": log.meta.verification,
    }


async def attempts_matching(
    runtime: Runtime, q: str, *, person: str, preset: str = "", host: str = "", **options: bool
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
        counts = await count_matches(list(paths.values()), q, limits=runtime.grep_limits.of(person), **options)
    except SearchTooSlow as exc:
        assert isinstance(exc.partial, dict)
        raise SearchTooSlow(str(exc), with_hits(exc.partial)) from None
    return with_hits(counts)


def hits_html(attempt_id: int, matches: Sequence[Match], ranges: Sequence[Sequence[tuple[int, int]]] = ()) -> str:
    """Each matching line with its context, marked and linked into the full log; `ranges` (one list
    per match) highlights the matched bytes."""
    groups = []
    for i, match in enumerate(matches):
        found = {match.line: ranges[i]} if i < len(ranges) else {}
        lines = [
            *(Line(c.line, c.offset, c.text, len(c.text)) for c in match.before),
            Line(match.line, match.offset, match.text, len(match.text)),
            *(Line(c.line, c.offset, c.text, len(c.text)) for c in match.after),
        ]
        hit = lines_html(attempt_id, lines, mark=match.line, anchors=False, matches=found)
        groups.append(f'<div class="hit">{hit}</div>')
    return "\n".join(groups)


async def excerpts(
    runtime: Runtime, found: Sequence[tuple[Attempt, int]], q: str, *, person: str, **options: bool
) -> dict[int, str]:
    """The first hits, with a line of context, of the first attempts a search found: what a person
    scans before choosing an attempt to open."""
    paths = runtime.logs.paths([attempt.id for attempt, _ in found[:EXCERPT_ATTEMPTS]])
    shown = {}
    for attempt_id, path in paths.items():
        result = await grep_log(
            path, q, context=1, limit=EXCERPT_HITS, limits=runtime.grep_limits.of(person), **options
        )
        shown[attempt_id] = hits_html(attempt_id, result.matches)
    return shown
