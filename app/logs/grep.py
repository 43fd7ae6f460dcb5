"""Running GNU grep for log search: its argv, its environment, its limits, its errors.

How grep is run, in one place (`grep_argv`):
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
"""

from __future__ import annotations

import asyncio
import contextlib
import copy
import math
import os
import re
import resource
import signal
from collections.abc import AsyncIterator, Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from app.errors import InvalidPattern, SearchBusy, SearchOutOfMemory, SearchTooSlow

CHUNK = 1 << 16
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
    person: str = ""  # whose searches these are (`of`); "" for the dashboard's own
    _turns: asyncio.Semaphore = field(init=False, repr=False)
    _held: dict[str, int] = field(init=False, repr=False)  # turns each person holds, shared by `of`'s copies

    def __post_init__(self) -> None:
        self._turns = asyncio.Semaphore(self.at_once)
        self._held = {}

    @property
    def per_person(self) -> int:
        """The turns one person may hold at once: half, so that one person's slow searches leave
        everyone else room."""
        return max(1, self.at_once // 2)

    def of(self, person: str) -> GrepLimits:
        """These limits, and their turns, for `person`'s searches."""
        mine = copy.copy(self)  # the same semaphore and counts
        mine.person = person
        return mine

    @contextlib.asynccontextmanager
    async def turn(self) -> AsyncIterator[None]:
        held = self._held.get(self.person, 0)
        if self.person and held >= self.per_person:
            raise SearchBusy(
                f"you have {held} searches running, as many as one person may at once: try again when one ends."
            )
        self._held[self.person] = held + 1
        try:
            async with self._shared_turn():
                yield
        finally:
            if (left := self._held[self.person] - 1) > 0:
                self._held[self.person] = left
            else:
                del self._held[self.person]

    @contextlib.asynccontextmanager
    async def _shared_turn(self) -> AsyncIterator[None]:
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


def grep_argv(
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
class GrepRun:
    proc: asyncio.subprocess.Process
    stdout: asyncio.StreamReader
    stderr: asyncio.Task[bytes]  # read all along, so that grep never blocks on a full stderr pipe

    async def finish(self) -> tuple[int, str]:
        returncode = await self.proc.wait()
        return returncode, (await self.stderr).decode("utf-8", "replace")


@contextlib.asynccontextmanager
async def spawn(argv: list[str], stdin: bytes, limits: GrepLimits) -> AsyncIterator[GrepRun]:
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
        run = GrepRun(proc, proc.stdout, asyncio.ensure_future(proc.stderr.read()))
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
            while await proc.stdout.read(CHUNK):  # drained to EOF, so that the pipe transport closes
                pass
            await proc.wait()
            with contextlib.suppress(Exception):
                await run.stderr


def check_exit(
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


@contextlib.asynccontextmanager
async def deadline(limits: GrepLimits, stopped: Callable[[], SearchTooSlow]) -> AsyncIterator[None]:
    """The time limit of one search: on expiry its grep is killed (by the cancellation) and
    `stopped()` is raised, carrying what was found."""
    try:
        async with asyncio.timeout(limits.seconds):
            yield
    except TimeoutError:
        raise stopped() from None
