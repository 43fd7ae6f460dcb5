"""What the log pages and the log API share: log lines as HTML, the stream of server-sent
events a viewer follows a log by, what every log view shows about the mirror, and the search
across attempts."""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator, Iterable, Mapping, Sequence
from dataclasses import dataclass
from html import escape
from pathlib import Path
from typing import Any

from sse_starlette import EventSourceResponse, ServerSentEvent
from sse_starlette.sse import SendTimeoutError
from starlette.types import Receive, Scope, Send

from app.db.history import list_attempts
from app.db.models import Attempt
from app.errors import SearchTooSlow
from app.logs.render import line_class, progress_key, render_line, render_states
from app.logs.search import TRACEBACK, Match, count_matches, grep_log
from app.logs.stages import StageMark, took
from app.logs.store import Line, LogFile
from app.runtime import Runtime
from app.web.params import INT64_MAX, Int64

log = logging.getLogger(__name__)

SEARCH_ATTEMPTS = 500  # the newest attempts a search across attempts looks at
EXCERPT_ATTEMPTS, EXCERPT_HITS = 10, 3  # the search page shows the first hits of its first attempts
SEND_TIMEOUT = 30.0  # a viewer that takes nothing for this long is dropped
TRACEBACK_BYTES = TRACEBACK.encode()


@dataclass(frozen=True)
class Sections:
    """The launch stages that head log lines: `marks`, where the log's stages start (at least up
    to the lines' end), and with `final` the time the last one ran to, `until` (the log's last; for
    a log still arriving the last stage's time is left for the page to fill in, see log.js). With
    `continued`, lines that begin inside a stage are headed by it, however long before it began."""

    marks: Sequence[StageMark]
    until: float | None = None
    final: bool = False
    continued: bool = True


def lines_html(
    attempt_id: Int64,
    lines: Iterable[Line],
    *,
    mark: int | None = None,
    anchors: bool = True,
    matches: Mapping[int, Sequence[tuple[int, int]]] | None = None,
    fold_tracebacks: bool = False,
    fold_progress: bool = False,
    sections: Sections | None = None,
) -> str:
    """Log lines as HTML: numbered, linked into the full log, coloured, every byte escaped; line
    `mark` is highlighted, and in each line of `matches` its byte ranges. Without `anchors` (for
    excerpts shown beside a log) lines have no id. With `fold_tracebacks` a Python traceback, from
    its first line to the exception's (the first not indented), is one block that can be folded.
    With `fold_progress` a progress bar shows its last state, as a terminal does, the earlier ones
    (its lines before, and what carriage returns drew over) folded before it. With `sections` each
    launch stage is a section that can be folded, headed by its name and how long it took."""
    href = f"/attempts/{attempt_id}/log"
    matches = matches or {}
    parts: list[str] = []
    run: list[tuple[int, list[str], str]] = []  # one progress bar's lines: (number, earlier states, row)
    key: str | None = None  # the bar's (progress_key)
    in_traceback = in_section = False
    starts = {stage.line: i for i, stage in enumerate(sections.marks)} if sections else {}

    def end_run() -> None:
        if run:
            parts.append(_progress_html(run, key, mark))
            run.clear()

    lines = list(lines)
    if sections and sections.continued and lines:
        began = sum(stage.line < lines[0].number for stage in sections.marks)
        if began:
            parts.append(_section_head(sections, began - 1, continued=True))
            in_section = True
    for line in lines:
        number = line.number
        if number in starts:
            end_run()
            parts.append("</details>" * (in_traceback + in_section))
            parts.append(_section_head(sections, starts[number]))  # type: ignore[arg-type]
            in_traceback, in_section = False, True
        kind = line_class(line.text)
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
        states = [render_line(line.text, matches.get(number, ()))]
        bar = None
        if fold_progress and not in_traceback and not starts_traceback:
            states = render_states(line.text) if b"\r" in line.text else states
            bar = progress_key(line.text)
        data = f' data-bar="{escape(bar)}"' if bar is not None else ""
        row = f'<div class="ln {kind}"{anchor}{data}>{number_html}<span class="t">{states[-1]}{cut}</span></div>'
        if in_traceback and starts_traceback:  # a chained exception's traceback follows at once
            parts.append("</details>")
            in_traceback = False
        if in_traceback:
            parts.append(row)
            if not indented:
                parts.append("</details>")
                in_traceback = False
        elif starts_traceback:
            end_run()
            parts.append(f'<details class="traceback" open><summary>{row}</summary>')
            in_traceback = True
        elif fold_progress:
            if run and (bar is None or bar != key):
                end_run()
            run.append((number, states[:-1], row))
            key = bar
            if bar is None:
                end_run()
        else:
            parts.append(row)
    end_run()
    parts.append("</details>" * (in_traceback + in_section))
    return "\n".join(part for part in parts if part)


def _progress_html(run: Sequence[tuple[int, list[str], str]], bar: str | None, mark: int | None) -> str:
    """A progress bar's lines (or one line's states): the last state, the earlier ones folded
    before it, open when the marked line is among them."""
    folded = [
        *(row for _, states, last in run[:-1] for row in [*map(_state_row, states), last]),
        *map(_state_row, run[-1][1]),
    ]
    if not folded:
        return run[-1][2]
    opened = " open" if any(number == mark for number, _, _ in run[:-1]) else ""
    data = f' data-bar="{escape(bar)}"' if bar is not None else ""
    count = f"{len(folded):,} earlier state{'s' if len(folded) != 1 else ''}"
    return (
        f'<details class="progress"{data}{opened}><summary>{count}</summary>\n'
        + "\n".join(folded)
        + f"\n</details>\n{run[-1][2]}"
    )


def _state_row(state: str) -> str:
    """An earlier state of a line that carriage returns drew over: no number, no anchor of its own."""
    return f'<div class="ln state"><span class="n"></span><span class="t">{state}</span></div>'


def _section_head(sections: Sections, index: int, *, continued: bool = False) -> str:
    """The opening of a stage's section: its name, how long it took (left empty while unknown),
    and, for lines that begin inside it, where it began."""
    stage = sections.marks[index]
    following = sections.marks[index + 1] if index + 1 < len(sections.marks) else None
    if following is not None:
        duration = took(stage.at, following.at)
    else:
        duration = took(stage.at, sections.until) if sections.final else ""
    began = f' <span class="began">· began at line {stage.line:,}</span>' if continued else ""
    at = "" if stage.at is None else f"{stage.at:.3f}"
    return (
        f'<details class="stage" open data-stage="{escape(stage.name)}" data-at="{at}">'
        f'<summary class="stage-head"><span class="stage-name">{escape(stage.name)}</span>'
        f' <span class="took">{duration}</span>{began}</summary>'
    )


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
