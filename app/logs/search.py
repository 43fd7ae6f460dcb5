"""Searching mirrored log files with GNU grep.

Mirrored logs can be 1 GB+ and hold invalid UTF-8, NUL bytes and megabyte-long lines, so the scanning is
left to GNU grep run as a subprocess (never through a shell): it is far faster than a Python loop and its
memory use does not grow with the file. Python only reads grep's output, incrementally and capped.

How grep is run, in one place (`_argv`):
- the pattern always travels on stdin as a pattern file (`-f -`), never in argv, so a pattern like `-v`,
  `$(touch x)` or one holding a NUL byte is searched for as it is (GNU grep 3.8 matches NUL from a pattern file);
- `-a` reads binary as text; `LC_ALL=C` makes matching byte-wise: invalid UTF-8 never hides a match,
  offsets are bytes, and `-i` folds ASCII letters only;
- flag-aware mode (fixed strings only) makes `-` and `_` match each other, so `mamba_scheduler` finds
  `--mamba-scheduler-strategy`: the string becomes an escaped extended regex with `[-_]` in their place.

How grep is bounded, since a pattern is a program (`(.*)(.*)\2\1x` backtracks for minutes on a short line,
`(a{1,999}){1,999}` compiles into gigabytes) and a request must not start work that outlives it:
- every search runs under a `GrepLimits`: a wall-time limit over all the greps of one search, after which
  grep is killed and `SearchTooSlow` carries what was found so far (hence `--line-buffered`: each hit reaches
  us as grep finds it); an address-space limit (RLIMIT_AS), which grep meets with "memory exhausted"
  (`SearchOutOfMemory`); and at most `at_once` greps running, a further one waiting `wait_seconds` for a
  turn before `SearchBusy`;
- the memory limit is set with prlimit(2) on the new process before it is given its pattern: grep reads
  `-f -` before it compiles or allocates anything large, and a `preexec_fn` is not safe in a threaded process.
  RLIMIT_CPU just past the wall-time limit stops a grep orphaned by a dashboard that was itself killed;
- grep leads its own process group, killed whole when a search ends early (cancelled, capped, timed out).

A missing file raises FileNotFoundError in `grep_log` and `first_line` (callers check existence first);
`count_matches` skips paths that are not files.
"""

from __future__ import annotations

import asyncio
import contextlib
import math
import os
import re
import resource
import signal
from collections.abc import AsyncGenerator, AsyncIterator, Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from app.errors import InvalidInput, InvalidPattern, SearchBusy, SearchOutOfMemory, SearchTooSlow
from app.logs.store import Line, LogFile

MAX_TEXT = 4096  # bytes of a line kept in a result; longer lines are cut and flagged `truncated`
MAX_CONTEXT = 20
_KEEP = MAX_TEXT + 64  # bytes kept of an output line: the `LINE:OFFSET:` header is at most 42 bytes
_CHUNK = 1 << 16
_HEADER = re.compile(rb"(\d+)([:-])(\d+)\2")
_FLAG_AWARE_REWRITE = re.compile(rb"[-_.[\]()*+?{}|^$\\]")
_GREP_ERROR = re.compile(r"grep: (?:-:\d+: )?(.*)")
_OUT_OF_MEMORY = re.compile(r"memory exhausted|stack overflow", re.IGNORECASE)


@dataclass
class GrepLimits:
    """What any one grep may use, and how many may run at once. The dashboard makes one for all its
    requests; a search given none gets its own with the defaults, bounded but not counted with others."""

    seconds: float = 10.0  # wall time of one search, all its greps together
    memory_bytes: int = 512 << 20  # address space of each grep
    at_once: int = 4
    wait_seconds: float = 2.0  # how long a search waits for a turn when `at_once` greps are running
    _turns: asyncio.Semaphore = field(init=False, repr=False)

    def __post_init__(self) -> None:
        self._turns = asyncio.Semaphore(self.at_once)

    @contextlib.asynccontextmanager
    async def turn(self) -> AsyncIterator[None]:
        try:
            async with asyncio.timeout(self.wait_seconds):
                await self._turns.acquire()
        except TimeoutError:
            raise SearchBusy(
                f"too many searches are running ({self.at_once} at once is the most allowed): try again in a moment."
            ) from None
        try:
            yield
        finally:
            self._turns.release()

    def too_slow(self, partial: object, found: int) -> SearchTooSlow:
        hits = f"the {found:,} matching line{'s' if found != 1 else ''} found before then" if found else "no match"
        return SearchTooSlow(
            f"the pattern took too long: grep was stopped after {self.seconds:g} s, with {hits} "
            "(a fixed string, or a regex without back-references like \\1, searches much faster).",
            partial,
        )

    def out_of_memory(self) -> SearchOutOfMemory:
        return SearchOutOfMemory(
            f"the pattern needs more memory than allowed: grep stopped at its limit of {self.memory_bytes >> 20:,} MiB "
            "(nested counted repeats such as (a{1,999}){1,999} grow exponentially: write the repeat once)."
        )


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

    @property
    def more(self) -> int:
        return self.total - len(self.matches)

    @property
    def capped(self) -> bool:
        return self.more > 0

    def stop(self) -> GrepResult:
        """Marks the result as cut short by the time limit."""
        self.timed_out = True
        self.total = max(self.total, len(self.matches))
        return self


def _argv(
    pattern: str, *, regex: bool, ignore_case: bool, flag_aware: bool, options: Sequence[str], paths: Sequence[Path]
) -> tuple[list[str], bytes]:
    """grep's argv and the pattern file to feed on its stdin; raises InvalidInput for a bad pattern."""
    if not pattern:
        raise InvalidPattern("The search pattern is empty: enter the text to search for.")
    if "\n" in pattern:
        raise InvalidPattern(
            "A search pattern is one line: it cannot contain a line break, since each log line is searched on its own."
        )
    try:
        raw = pattern.encode("utf-8", "surrogateescape")
    except UnicodeEncodeError as e:
        raise InvalidPattern("The search pattern holds a character that is not valid Unicode.") from e
    if regex:
        mode = "-E"
    elif flag_aware and (b"-" in raw or b"_" in raw):
        mode, raw = "-E", _flag_aware_ere(raw)
    else:
        mode = "-F"
    flags = [mode, "-i"] if ignore_case else [mode]
    argv = ["grep", "-a", "--color=never", "--line-buffered", *flags, *options, "-f", "-", "--"]
    return [*argv, *map(str, paths)], raw + b"\n"


def _flag_aware_ere(raw: bytes) -> bytes:
    """A fixed string as an extended regex in which `-` and `_` match each other."""
    return _FLAG_AWARE_REWRITE.sub(lambda m: b"[-_]" if m[0] in b"-_" else b"\\" + m[0], raw)


def _env() -> dict[str, str]:
    env = {key: value for key, value in os.environ.items() if key != "GREP_OPTIONS"}
    env["LC_ALL"] = "C"
    return env


@dataclass(slots=True)
class _Run:
    proc: asyncio.subprocess.Process
    stdout: asyncio.StreamReader
    stderr: asyncio.Task[bytes]  # read all along, so that grep never blocks on a full stderr pipe

    async def finish(self) -> tuple[int, str]:
        returncode = await self.proc.wait()
        return returncode, (await self.stderr).decode("utf-8", "replace")


@contextlib.asynccontextmanager
async def _spawn(argv: list[str], stdin: bytes, limits: GrepLimits) -> AsyncIterator[_Run]:
    """Runs grep in its turn, within its limits; on leaving, even by cancellation or error, its process
    group is killed if grep still runs, and grep is reaped."""
    pipe = asyncio.subprocess.PIPE
    async with limits.turn():
        try:
            proc = await asyncio.create_subprocess_exec(
                *argv, stdin=pipe, stdout=pipe, stderr=pipe, env=_env(), start_new_session=True
            )
        except FileNotFoundError as e:  # not to be taken for a missing log file
            raise RuntimeError("GNU grep is not installed: log search needs it") from e
        assert proc.stdin is not None and proc.stdout is not None and proc.stderr is not None
        run = _Run(proc, proc.stdout, asyncio.ensure_future(proc.stderr.read()))
        try:
            cpu = math.ceil(limits.seconds) + 1
            resource.prlimit(proc.pid, resource.RLIMIT_AS, (limits.memory_bytes, limits.memory_bytes))
            resource.prlimit(proc.pid, resource.RLIMIT_CPU, (cpu, cpu + 1))
            proc.stdin.write(stdin)
            with contextlib.suppress(BrokenPipeError, ConnectionResetError):
                await proc.stdin.drain()
            proc.stdin.close()
            yield run
        finally:
            if proc.returncode is None:  # not reaped yet, so its group id is still its own
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(proc.pid, signal.SIGKILL)
            while await proc.stdout.read(_CHUNK):  # drained to EOF, so that the pipe transport closes
                pass
            await proc.wait()
            with contextlib.suppress(Exception):
                await run.stderr


def _check(
    returncode: int, stderr: str, paths: Sequence[Path], limits: GrepLimits, *, regex: bool, skip_files: bool
) -> None:
    """Raises for grep's errors: SearchOutOfMemory at the memory limit (where the stack cannot grow
    either, grep may die of SIGSEGV), InvalidInput for the pattern, OSError for a file (unless `skip_files`)."""
    if returncode in (0, 1):
        return
    if _OUT_OF_MEMORY.search(stderr) or returncode == -signal.SIGSEGV:
        raise limits.out_of_memory()
    for line in stderr.splitlines():
        reason = m[1] if (m := _GREP_ERROR.fullmatch(line)) else line
        if reason.startswith("warning:"):
            continue
        name = next((str(p) for p in paths if reason.startswith(f"{p}: ")), None)
        if name is None:
            if regex:
                raise InvalidPattern(
                    reason if reason.startswith("Invalid") else f"Invalid regular expression: {reason}"
                )
            raise InvalidPattern(f"grep could not use this pattern: {reason}")
        why = reason[len(name) + 2 :]
        if not skip_files:
            raise (FileNotFoundError if why == "No such file or directory" else OSError)(f"{name}: {why}")
    if not skip_files or returncode != 2:
        raise RuntimeError(f"grep exited with status {returncode}: {stderr.strip() or 'no message'}")


async def _lines(stream: asyncio.StreamReader) -> AsyncGenerator[tuple[bytes, bool], None]:
    """grep's output lines without newline, each cut to _KEEP bytes, with whether it was cut."""
    buf, cut = bytearray(), False
    while chunk := await stream.read(_CHUNK):
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


async def _collect(stdout: asyncio.StreamReader, matches: list[Match], limit: int, context: int) -> bool:
    """Parses `-n -b` output (`LINE:OFFSET:text`, context `LINE-OFFSET-text`, groups split by `--`)
    into at most `limit` matches, appended as they come (a search stopped early keeps what it found);
    True when a further match was seen."""
    pending: list[ContextLine] = []
    async with contextlib.aclosing(_lines(stdout)) as lines:
        async for raw, cut in lines:
            if raw == b"--":
                continue  # a separator; context lines are placed by their line numbers
            header = _HEADER.match(raw)
            if header is None:
                raise RuntimeError(f"unexpected grep output: {raw[:100]!r}")
            number, offset, text = int(header[1]), int(header[3]), raw[header.end() :]
            truncated, text = cut or len(text) > MAX_TEXT, text[:MAX_TEXT]
            if header[2] == b":":
                if len(matches) == limit:
                    return True
                matches.append(Match(number, offset, text, truncated, before=pending))
                pending = []
            elif matches and number <= matches[-1].line + context:
                matches[-1].after.append(ContextLine(number, offset, text, truncated))
            else:
                pending.append(ContextLine(number, offset, text, truncated))
    return False


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
) -> bool:
    async with _spawn(argv, stdin, limits) as run:
        if await _collect(run.stdout, into, limit, context):
            return True  # grep is killed on leaving
        returncode, stderr = await run.finish()
    _check(returncode, stderr, [path], limits, regex=regex, skip_files=False)
    return False


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
    async with _spawn(argv, stdin, limits) as run:
        while chunk := await run.stdout.read(_CHUNK):
            into += chunk
        returncode, stderr = await run.finish()
    _check(returncode, stderr, paths, limits, regex=regex, skip_files=skip_files)


@contextlib.asynccontextmanager
async def _deadline(limits: GrepLimits, stopped: Callable[[], SearchTooSlow]) -> AsyncIterator[None]:
    """The time limit of one search: on expiry its grep is killed (by the cancellation) and
    `stopped()` is raised, carrying what was found."""
    try:
        async with asyncio.timeout(limits.seconds):
            yield
    except TimeoutError:
        raise stopped() from None


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
) -> None:
    if not 0 <= context <= MAX_CONTEXT:
        raise InvalidInput(f"Context must be between 0 and {MAX_CONTEXT} lines, not {context}.")
    if limit < 1:
        raise InvalidInput(f"The number of matches to show must be at least 1, not {limit}.")
    options = (*_LINE_OPTIONS, "-C", str(context), "-m", str(limit + 1))
    query = {"regex": regex, "ignore_case": ignore_case, "flag_aware": flag_aware}
    argv, stdin = _argv(pattern, **query, options=options, paths=[path])
    result.searched_bytes = path.stat().st_size
    capped = await _search(argv, stdin, path, limits, regex=regex, into=result.matches, limit=limit, context=context)
    result.total = len(result.matches) + capped  # what a count stopped by the time limit leaves
    if capped:
        argv, stdin = _argv(pattern, **query, options=("-c", "--no-filename"), paths=[path])
        counted = bytearray()
        await _output(argv, stdin, [path], limits, counted, regex=regex, skip_files=False)
        result.total = max(int(counted), limit + 1)  # the file may have changed in between


async def grep_log(
    path: Path,
    pattern: str,
    *,
    regex: bool = False,
    ignore_case: bool = False,
    context: int = 0,
    flag_aware: bool = True,
    limit: int = 200,
    limits: GrepLimits | None = None,
) -> GrepResult:
    """The first `limit` matching lines of a file, with `context` lines around each, and the total count.

    When more than `limit` lines match, grep is stopped and a second `grep -c` counts them all. When the
    time limit stops it, SearchTooSlow carries the result so far."""
    limits = limits or GrepLimits()
    result = GrepResult([], 0, 0)
    async with _deadline(limits, lambda: limits.too_slow(result.stop(), result.total)):
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
    argv, stdin = _argv(pattern, **query, options=("-c", "-H"), paths=present)
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

    async with _deadline(limits, stopped):
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
    argv, stdin = _argv(pattern, **query, options=(*_LINE_OPTIONS, "-m", "1"), paths=[path])
    matches: list[Match] = []
    await _search(argv, stdin, path, limits, regex=regex, into=matches, limit=1, context=0)
    return matches[0].line if matches else None


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
    async with _deadline(limits, lambda: limits.too_slow(None, 0)):
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

    async with _deadline(limits, stopped):
        await _grep_into(result, log.path, pattern, limits, **options)
        if result.total:
            return search
        search.first_traceback = await _first_line(log.path, TRACEBACK, limits, flag_aware=False)
    search.tail = log.last_lines(TAIL_LINES).lines
    return search
