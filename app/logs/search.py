"""Searching mirrored log files with GNU grep.

Mirrored logs can be 1 GB+ and hold invalid UTF-8, NUL bytes and megabyte-long lines, so the scanning is
left to GNU grep run as a subprocess (never through a shell): it is far faster than a Python loop and its
memory use does not grow with the file. Python only reads grep's output, incrementally and capped.
How grep is run and bounded in time, memory and number is in app/logs/grep.py; every function here takes
the `GrepLimits` to run under (the dashboard passes its one shared set).

A missing file raises FileNotFoundError in `grep_log` and `first_line` (callers check existence first);
`count_matches` skips paths that are not files.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import re
import tempfile
from collections.abc import AsyncGenerator, Sequence
from dataclasses import dataclass, field
from itertools import accumulate
from pathlib import Path
from typing import Any

from app.errors import InvalidInput, SearchTooSlow
from app.logs.grep import CHUNK, GrepLimits, check_exit, deadline, grep_argv, spawn
from app.logs.store import Line, LogFile

MAX_TEXT = 4096  # bytes of a line kept in a result; longer lines are cut and flagged `truncated`
MAX_CONTEXT = 20
_KEEP = MAX_TEXT + 64  # bytes kept of an output line: the `LINE:OFFSET:` header is at most 42 bytes
_HEADER = re.compile(rb"(\d+)([:-])(\d+)\2")


@dataclass(slots=True)
class ContextLine:
    line: int  # 1-based
    offset: int  # byte offset of the line's start in the file
    text: bytes  # without the newline, at most MAX_TEXT bytes
    truncated: bool = False  # the line was longer than MAX_TEXT


@dataclass(slots=True)
class Match:
    """A matching line. A context line between two nearby matches is attached once: to the earlier
    match's `after` when it lies within `context` lines of it, otherwise to the later match's `before`."""

    line: int
    offset: int
    text: bytes
    truncated: bool = False
    before: list[ContextLine] = field(default_factory=list)
    after: list[ContextLine] = field(default_factory=list)


@dataclass(slots=True)
class GrepResult:
    matches: list[Match]  # at most `limit`, in file order
    total: int  # matching lines in the whole file; when timed out, those seen before then
    searched_bytes: int  # the file's size when the search started
    timed_out: bool = False  # the search was stopped by its time limit: matches and total are partial
    skipped: int = 0  # matching lines at or before the line the search started after

    @property
    def more(self) -> int:
        """Matching lines after the last one in `matches`."""
        return self.total - self.skipped - len(self.matches)

    @property
    def capped(self) -> bool:
        return self.more > 0

    def stop(self) -> GrepResult:
        """Marks the result as cut short by the time limit."""
        self.timed_out = True
        self.total = max(self.total, self.skipped + len(self.matches))
        return self


async def _lines(stream: asyncio.StreamReader) -> AsyncGenerator[tuple[bytes, bool], None]:
    """grep's output lines without newline, each cut to _KEEP bytes, with whether it was cut."""
    buf, cut = bytearray(), False
    while chunk := await stream.read(CHUNK):
        start = 0
        while True:
            end = chunk.find(b"\n", start)
            stop = len(chunk) if end < 0 else end
            room = _KEEP - len(buf)
            if stop - start > room:
                buf += chunk[start : start + room]
                cut = True
            else:
                buf += chunk[start:stop]
            if end < 0:
                break
            yield bytes(buf), cut
            buf, cut = bytearray(), False
            start = end + 1
    if buf or cut:
        yield bytes(buf), cut


async def _collect(
    stdout: asyncio.StreamReader, matches: list[Match], limit: int, context: int, after: int = 0
) -> tuple[bool, int]:
    """Parses `-n -b` output (`LINE:OFFSET:text`, context `LINE-OFFSET-text`, groups split by `--`)
    into at most `limit` matches after line `after`, appended as they come (a search stopped early
    keeps what it found); whether a further match was seen, and how many came at or before `after`."""
    pending: list[ContextLine] = []
    skipped = 0
    async with contextlib.aclosing(_lines(stdout)) as lines:
        async for raw, cut in lines:
            if raw == b"--":
                continue  # a separator; context lines are placed by their line numbers
            header = _HEADER.match(raw)
            if header is None:
                raise RuntimeError(f"unexpected grep output: {raw[:100]!r}")
            number, offset, text = int(header[1]), int(header[3]), raw[header.end() :]
            truncated, text = cut or len(text) > MAX_TEXT, text[:MAX_TEXT]
            if number <= after:
                skipped += header[2] == b":"
            elif header[2] == b":":
                if len(matches) == limit:
                    return True, skipped
                matches.append(Match(number, offset, text, truncated, before=pending))
                pending = []
            elif matches and number <= matches[-1].line + context:
                matches[-1].after.append(ContextLine(number, offset, text, truncated))
            else:
                pending.append(ContextLine(number, offset, text, truncated))
    return False, skipped


async def _search(
    argv: list[str],
    stdin: bytes,
    path: Path,
    limits: GrepLimits,
    *,
    regex: bool,
    into: list[Match],
    limit: int,
    context: int,
    after: int = 0,
) -> tuple[bool, int]:
    async with spawn(argv, stdin, limits) as run:
        capped, skipped = await _collect(run.stdout, into, limit, context, after)
        if capped:
            return capped, skipped  # grep is killed on leaving
        returncode, stderr = await run.finish()
    check_exit(returncode, stderr, [path], limits, regex=regex, skip_files=False)
    return False, skipped


async def _output(
    argv: list[str],
    stdin: bytes,
    paths: Sequence[Path],
    limits: GrepLimits,
    into: bytearray,
    *,
    regex: bool,
    skip_files: bool,
) -> None:
    """grep's stdout, appended to `into` as it comes, for small outputs (counts)."""
    async with spawn(argv, stdin, limits) as run:
        while chunk := await run.stdout.read(CHUNK):
            into += chunk
        returncode, stderr = await run.finish()
    check_exit(returncode, stderr, paths, limits, regex=regex, skip_files=skip_files)


_LINE_OPTIONS = ("-n", "-b", "--no-filename")


async def _grep_into(
    result: GrepResult,
    path: Path,
    pattern: str,
    limits: GrepLimits,
    *,
    regex: bool = False,
    ignore_case: bool = False,
    context: int = 0,
    flag_aware: bool = True,
    limit: int = 200,
    after: int = 0,
) -> None:
    if not 0 <= context <= MAX_CONTEXT:
        raise InvalidInput(f"Context must be between 0 and {MAX_CONTEXT} lines, not {context}.")
    if limit < 1:
        raise InvalidInput(f"The number of matches to show must be at least 1, not {limit}.")
    # After a line, the hits before it are read and dropped (in a log that is fast next to the request);
    # `-m` stops grep only when the page starts at the first hit.
    stop = ("-m", str(limit + 1)) if after <= 0 else ()
    options = (*_LINE_OPTIONS, "-C", str(context), *stop)
    query = {"regex": regex, "ignore_case": ignore_case, "flag_aware": flag_aware}
    argv, stdin = grep_argv(pattern, **query, options=options, paths=[path])
    result.searched_bytes = path.stat().st_size
    found = result.matches
    capped, result.skipped = await _search(
        argv, stdin, path, limits, regex=regex, into=found, limit=limit, context=context, after=after
    )
    result.total = result.skipped + len(found) + capped  # what a count stopped by the time limit leaves
    if capped:
        argv, stdin = grep_argv(pattern, **query, options=("-c", "--no-filename"), paths=[path])
        counted = bytearray()
        await _output(argv, stdin, [path], limits, counted, regex=regex, skip_files=False)
        result.total = max(int(counted), result.skipped + limit + 1)  # the file may have changed in between


async def grep_log(
    path: Path,
    pattern: str,
    *,
    regex: bool = False,
    ignore_case: bool = False,
    context: int = 0,
    flag_aware: bool = True,
    limit: int = 200,
    after: int = 0,
    limits: GrepLimits | None = None,
) -> GrepResult:
    """The first `limit` matching lines of a file after line `after`, with `context` lines around each,
    and the total count.

    When more than `limit` lines match, grep is stopped and a second `grep -c` counts them all. When the
    time limit stops it, SearchTooSlow carries the result so far."""
    limits = limits or GrepLimits()
    result = GrepResult([], 0, 0)
    async with deadline(limits, lambda: limits.too_slow(result.stop(), result.total)):
        await _grep_into(
            result,
            path,
            pattern,
            limits,
            regex=regex,
            ignore_case=ignore_case,
            context=context,
            flag_aware=flag_aware,
            limit=limit,
            after=after,
        )
    return result


async def count_matches(
    paths: Sequence[Path],
    pattern: str,
    *,
    regex: bool = False,
    ignore_case: bool = False,
    flag_aware: bool = True,
    limits: GrepLimits | None = None,
) -> dict[Path, int]:
    """Matching-line counts per file, in one grep run; paths that are not existing files are left out,
    files without a match count 0. Paths must not contain a newline. When the time limit stops it,
    SearchTooSlow carries the counts of the files grep had finished."""
    limits = limits or GrepLimits()
    present = list(dict.fromkeys(p for p in paths if p.is_file()))
    query = {"regex": regex, "ignore_case": ignore_case, "flag_aware": flag_aware}
    argv, stdin = grep_argv(pattern, **query, options=("-c", "-H"), paths=present)
    if not present:
        return {}
    by_name = {os.fsencode(str(p)): p for p in present}
    out = bytearray()

    def counts() -> dict[Path, int]:
        found: dict[Path, int] = {}
        for line in out.splitlines()[: out.count(b"\n")]:  # whole lines only
            name, _, count = bytes(line).rpartition(b":")
            if name in by_name and count.isdigit():
                found[by_name[name]] = int(count)
        return found

    def stopped() -> SearchTooSlow:
        partial = counts()
        return limits.too_slow(partial, sum(partial.values()))

    async with deadline(limits, stopped):
        await _output(argv, stdin, present, limits, out, regex=regex, skip_files=True)
    return counts()


async def _first_line(
    path: Path,
    pattern: str,
    limits: GrepLimits,
    *,
    regex: bool = False,
    ignore_case: bool = False,
    flag_aware: bool = True,
) -> int | None:
    query = {"regex": regex, "ignore_case": ignore_case, "flag_aware": flag_aware}
    argv, stdin = grep_argv(pattern, **query, options=(*_LINE_OPTIONS, "-m", "1"), paths=[path])
    matches: list[Match] = []
    await _search(argv, stdin, path, limits, regex=regex, into=matches, limit=1, context=0)
    return matches[0].line if matches else None


async def match_ranges(
    texts: Sequence[bytes],
    pattern: str,
    *,
    regex: bool = False,
    ignore_case: bool = False,
    flag_aware: bool = True,
    limits: GrepLimits | None = None,
) -> list[list[tuple[int, int]]]:
    """The byte ranges that the pattern matches in each of `texts` (lines without newline), found by
    `grep -o` with the search's own options, so they are exactly what grep matched: a regex can
    backtrack for minutes in Python's engine, and grep's own limits bound it here."""
    limits = limits or GrepLimits()
    ranges: list[list[tuple[int, int]]] = [[] for _ in texts]
    if not texts:
        return ranges
    starts = [0, *accumulate(len(text) + 1 for text in texts)]
    query = {"regex": regex, "ignore_case": ignore_case, "flag_aware": flag_aware}
    with tempfile.NamedTemporaryFile(prefix="launchdeck-marks-") as lines:
        lines.write(b"".join(text + b"\n" for text in texts))
        lines.flush()
        path = Path(lines.name)
        argv, stdin = grep_argv(pattern, **query, options=("-o", *_LINE_OPTIONS), paths=[path])
        async with deadline(limits, lambda: limits.too_slow(ranges, 0)):
            out = bytearray()
            await _output(argv, stdin, [path], limits, out, regex=regex, skip_files=False)
    for found in out.split(b"\n")[:-1]:  # a match may hold a \r
        header = _HEADER.match(found)
        if header is None:
            raise RuntimeError(f"unexpected grep output: {bytes(found[:100])!r}")
        index = int(header[1]) - 1
        start = int(header[3]) - starts[index]
        ranges[index].append((start, start + len(found) - header.end()))
    return ranges


async def first_line(
    path: Path,
    pattern: str,
    *,
    regex: bool = False,
    ignore_case: bool = False,
    flag_aware: bool = True,
    limits: GrepLimits | None = None,
) -> int | None:
    """The 1-based number of the first matching line (`grep -m1`), or None when no line matches."""
    limits = limits or GrepLimits()
    async with deadline(limits, lambda: limits.too_slow(None, 0)):
        return await _first_line(path, pattern, limits, regex=regex, ignore_case=ignore_case, flag_aware=flag_aware)


TRACEBACK = "Traceback (most recent call last):"
# The first line worth opening a log at when it failed: a traceback, or an error record.
FIRST_ERROR = r"Traceback \(most recent call last\)|[A-Za-z]+(Error|Exception): | (ERROR|CRITICAL|FATAL)[: ]"
TAIL_LINES = 50


@dataclass
class LogSearch:
    """A search of one mirrored log. With no hits it carries what to look at instead: the log's
    last lines and its first traceback."""

    result: GrepResult
    searched_lines: int
    tail: list[Line]
    first_traceback: int | None


async def search_log(log: LogFile, pattern: str, *, limits: GrepLimits | None = None, **options: Any) -> LogSearch:
    """`grep_log` over the mirror of one attempt; options as for `grep_log`. One time limit covers
    the search and the look for the first traceback; SearchTooSlow carries the LogSearch so far."""
    limits = limits or GrepLimits()
    if not log.exists:
        return LogSearch(GrepResult([], 0, 0), 0, [], None)
    search = LogSearch(GrepResult([], 0, 0), log.total_lines, [], None)
    result = search.result

    def stopped() -> SearchTooSlow:
        result.stop()
        return limits.too_slow(search, result.total)

    async with deadline(limits, stopped):
        await _grep_into(result, log.path, pattern, limits, **options)
        if result.total:
            return search
        search.first_traceback = await _first_line(log.path, TRACEBACK, limits, flag_aware=False)
    search.tail = log.last_lines(TAIL_LINES).lines
    return search
