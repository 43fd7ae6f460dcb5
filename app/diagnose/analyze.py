"""What a launch's log says: the stage it reached, the root error and its kind, a fingerprint that
groups one cause across attempts, and the arguments SGLang changed on its own.

`Analyzer` reads the log in chunks of any size and keeps only what the answer needs, so a log of
any length is read in bounded memory and gives the same answer however it was split. It tracks the
stages and the events in the order the log shows them, and decides between events of different
kinds (the first fatal line against the first exception, a precursor, a traceback the log was cut
in); the decisions it draws on are each in their own module: what a line is (events.py), which
exception of a traceback is the root (root.py), the class and hint (lexicon.py), the arguments
behind a failure (arguments.py) and the fingerprint (fingerprint.py).
"""

from __future__ import annotations

import codecs
import re
from collections import deque
from collections.abc import Iterable
from dataclasses import dataclass, field, replace

from app.diagnose.arguments import ADJUSTMENT, ENVIRONMENT, KNOWN_CONFLICTS, argument_names
from app.diagnose.events import (
    ARGPARSE_ERROR,
    BESIDE,
    BESIDE_WORDS,
    EXCEPTION,
    FATAL_LINES,
    FRAME,
    HARMLESS,
    MAX_TRACEBACK_LINES,
    PRECURSOR,
    RETRYING,
    Evidence,
    Traceback,
    exception_message,
    sglang_frames,
    stopped,
    traceback_context,
)
from app.diagnose.figures import Figures
from app.diagnose.fingerprint import STAGE_PHASES, fingerprint, phase_of, signature_parts
from app.diagnose.hints import HYBRID_SIGN, explain, in_release_spelling
from app.diagnose.lexicon import (
    ASSERT_SOURCE,
    CONCEPT_BY_NAME,
    HINTS,
    NOT_A_LOG_HINT,
    TEACH_IT,
    UNEXPLAINED_EXIT,
    UNPLACED,
    Concept,
    hint_for,
    placed_at,
    said,
)
from app.diagnose.lines import MAX_RECORD, Line, is_binary, logical_lines, without_binary_records
from app.diagnose.root import SECONDARY, is_wrapper, root_of
from app.diagnose.stages import READY_STAGE, SERVING, StageTracker
from app.diagnose.weighing import EXIT, Observation, decide, gather, process_exit

# A line that says the process waits for something (a lock, a peer, a server): when the log ends on
# such lines, more than one (a wait said again, or by two loggers), before the server was ready,
# the wait never ended. One such line at the end is a window cut during a wait, as in any startup.
WAITING = re.compile(r"\bwaiting (?:for|on|until)\b", re.I)
# A wrapper that names SGLang: a logger's name ("WARNING:sglang.srt.server_args:"), a Ray actor's.
SGLANG_WRAPPER = re.compile(r"^\s*(?:[A-Z]+:sglang\.|\(SGLang\w* pid=)")
# A frame's source line as Python prints it, indented under the frame (not a wrapped line's rest).
SOURCE_LINE = re.compile(r"^\s{2,}\S")
CARET_LINE = re.compile(r"[~^]+$")  # Python 3.11's markers under a call
# Exit statuses of a process that ended as asked: done, or stopped (SIGTERM, by the shell or a signal).
ENDED_AS_ASKED = {0, 143, -15}
# What a kill or a crash with no error in the log is, by the class its exit status points to.
ENDINGS = {"oom": CONCEPT_BY_NAME["killed by the system"], "other": CONCEPT_BY_NAME["process crashed"]}
# How far before a traceback the log ends in a line beside it may stand, to be read as its cause.
NEARBY = 50
EXIT_WORDS = ("xit", "Killed", "SIG", "ignal", "eturn")  # before weighing.EXIT runs
# A serving log is mostly one record per line of batch statistics and request logs; once
# serving, outside a traceback, such a line is only counted (a decode line may become a chart
# sample) and not taken apart further. Recognised by plain substring tests: they run on every
# line of logs of any size. A line with a carriage return or with a "[" after the marker may
# have another record glued on, and takes the full path.
SKIMMED = ("] Decode batch", "] Prefill batch", 'HTTP/1.1" ')
# A line that shows the input is a server's log, beside SGLang's prefix and its stages (checked
# apart): the argument dump, Python's tracebacks and warnings, uvicorn's levels, SGLang by name.
RECOGNISABLE = re.compile(
    r"^server_args=|Traceback \(most recent call last\)|^\s*File \"|\b[A-Z]\w*Warning: |"
    r"^(?:DEBUG|INFO|WARNING|ERROR|CRITICAL): +\S|\b(?:sglang|sgl_kernel)[./]|\bSGLang\b|"
    r"\bsglang_\w+::"  # the router's Rust modules
)


@dataclass
class Diagnosis:
    stage: str = "starting"
    stage_percent: int | None = None
    failure_class: str = "healthy"
    concept: str = ""  # the lexicon's name for the kind of failure; empty when none placed it
    root_error: str | None = None
    root_line: int | None = None
    fingerprint: str | None = None
    hint: str = ""
    adjustments: list[str] = field(default_factory=list)
    frames: list[str] = field(default_factory=list)  # innermost in-package frames of the root error
    error_type: str = ""  # the root error's exception type, and its message normalised
    error_message: str = ""
    figures: Figures = field(default_factory=Figures)
    # What the log says around the root error (its traceback, lines that tell the model's kind),
    # for hints that also weigh the argv the attempt ran.
    evidence: str = ""
    # False when no rule placed the failure (class `other`) or the input is no SGLang log at all
    # (no root error): the answer then says it does not know, rather than a class or "healthy".
    recognised: bool = True
    # Live: a traceback is being written and its exception has not come yet; where it has got to
    # (its last frame), so a page says so rather than show the traceback's header as the error.
    traceback_arriving: str = ""
    # The frame a traceback the log ends in was cut off at, before its exception; "" otherwise.
    cut_off: str = ""
    # What the class was decided from, each piece weighed (weighing.py), for a person to check.
    observations: list[Observation] = field(default_factory=list)


class Analyzer:
    def __init__(self) -> None:
        self._pending = ""  # the last line, until its newline arrives
        self._partial = False  # its first records, ended by carriage returns, were read already
        self._skipping = False  # the rest of a record longer than MAX_RECORD is being skipped
        self._number = 0
        self._stages = StageTracker()
        self.reached: list[str] = []  # the stages the log has shown, in order
        self._current: Traceback | None = None
        self._root: tuple[Line, Evidence] | None = None  # the first fatal exception, with what its traceback says
        self._orphan = False  # the root is an exception line seen without its traceback
        self._secondary: tuple[Line, Evidence] | None = None  # a rank's error caused by another's failure
        self._fatal_line: Line | None = None  # the first fatal line that is not an exception
        self._precursor: Line | None = None
        self._cut: Traceback | None = None  # a traceback the log ended in, before its exception
        self._progress: Line | None = None  # the last line that showed the launch moving on
        self._waiting: Line | None = None  # the first of the lines the log ends on that say it waits
        self._waits = 0  # how many lines the log ends on that say it waits
        self._adjustments: list[Line] = []
        # The last lines that may say something beside the failure, before its root: which of them
        # do is decided when an answer is asked for, so a log of error lines costs no more per line.
        self._maybe_beside: deque[Line] = deque(maxlen=16)
        self._ended: Line | None = None  # the last line that says how a process ended
        self._exit_code: int | None = None  # how the server's process ended, where the dashboard saw it
        self._environment: set[str] = set()  # SGLANG_* settings the log shows (an echoed command line)
        self._hybrid_lines: list[str] = []  # the first lines that show a hybrid (mamba) model, if any
        self._figures = Figures()
        self._recognisable = False  # a line read so far shows the input is a server's log
        self._decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")

    def feed_bytes(self, chunk: bytes) -> None:
        """Raw log bytes: a character split between chunks is joined, invalid bytes become U+FFFD,
        records of binary data are skipped."""
        self.feed(self._decoder.decode(without_binary_records(chunk)))

    def feed(self, chunk: str) -> None:
        if self._skipping:  # the rest of a record too long to read, up to its end
            ends = [at for at in (chunk.find("\r"), chunk.find("\n")) if at >= 0]
            if not ends:
                return
            chunk, self._skipping = chunk[min(ends) :], False
        text = self._pending + chunk
        physical = text.split("\n")
        self._pending = physical.pop()  # a line is read once its newline has arrived
        if self._partial and physical:
            self._partial = False  # the end of a line whose first records were read before it ended
            self._read(physical.pop(0), self._number)
        for line in physical:
            self._number += 1
            # (a line too long for one record, or one with a NUL, is read as any other, the same
            # whether it arrived whole or in pieces)
            skim = "\r" not in line and len(line) <= MAX_RECORD
            if skim and "\ufffd" in line and is_binary(line):
                continue  # a record of binary data, as logical_lines would find, without taking it apart
            if skim and self._stages.index == SERVING and (self._current is None or self._current.ended):
                decode = line.find(SKIMMED[0])
                if decode >= 0 and line.find("[", decode + 1) < 0 and "\x00" not in line:
                    self._figures.see_decode(line)
                    continue
                if any((at := line.find(marker)) >= 0 and line.find("[", at + 1) < 0 for marker in SKIMMED[1:]):
                    continue
            if line:
                self._read(line, self._number)
        if len(self._pending) > MAX_RECORD:
            self._read_unfinished()

    def _read(self, physical: str, number: int) -> None:
        for record in logical_lines(physical, number):
            self._see(record)

    def _read_unfinished(self) -> None:
        """A line longer than a record can be, still without its newline: the records that have
        ended (at a carriage return) are read now, and one that is too long is cut (see MAX_RECORD)."""
        if not self._partial:
            self._number += 1
            self._partial = True
        ended, carriage_return, self._pending = self._pending.rpartition("\r")
        if carriage_return:
            self._read(ended, self._number)
        if len(self._pending) > MAX_RECORD:
            self._read(self._pending[:MAX_RECORD], self._number)
            self._pending, self._skipping = "", True

    def finish(self, *, file_alone: bool = True) -> Diagnosis:
        """The answer for the whole log. A log with no error that ends before the server was ready is
        no failure: it says where it ends. From a file alone (`file_alone`) nothing else says whether
        the process hung or the window was cut, except the log's own words: one that ends on a wait
        said more than once is a hang. In the dashboard the live process and its silence decide."""
        self.feed(self._decoder.decode(b"", final=True))
        if self._pending or self._partial:
            self._number += 0 if self._partial else 1
            self._read(self._pending, self._number)
            self._pending, self._partial, self._skipping = "", False, False
        if self._current is not None and not self._current.exceptions:
            self._cut = self._current  # the log ends inside this traceback
        self._close_traceback()
        result = self.snapshot()
        before_ready = self._stages.index < READY_STAGE
        if file_alone and result.root_error is None and self._waits > 1 and before_ready:
            return self.hung()
        if result.failure_class == "healthy" and result.recognised and before_ready and self._stages.index >= 0:
            result.hint = ends_during(result.stage, result.stage_percent, file_alone=file_alone)
        return result

    def snapshot(self) -> Diagnosis:
        """The answer so far, for a log that is still growing; the analyzer reads on unchanged."""
        root, current = self._root, self._current
        if current is not None and not stopped(current.exceptions) and (found := root_of(current)):
            root = _preferred(root, found)
        fatal = self._fatal_line
        if fatal is not None and (root is None or fatal.number < root[0].number or is_wrapper(root[0])):
            root = (fatal, Evidence())  # a fatal line logged before any exception, or what a wrapper reports
        if root is None and self._precursor is not None:
            root = (self._precursor, Evidence())
        if root is None and self._cut is not None:
            return self._with_exit(self._cut_off(self._cut))
        result = self._diagnosis(root or self._secondary)
        if result.root_error is None and current is not None and not current.ended and not current.exceptions:
            frames = traceback_context(current, None).frames
            result.traceback_arriving = frames[-1] if frames else "its first lines"
        return self._with_exit(result)

    def exited(self, code: int) -> None:
        """The server's process ended by itself with `code` (the dashboard knows it; a file does not)."""
        self._exit_code = code

    def _with_exit(self, result: Diagnosis) -> Diagnosis:
        """How the process ended is evidence too: beside a root error it is only told (SGLang ends
        its processes once one failed); with no error in the log, a kill or a crash is the failure."""
        code = self._exit_code
        if code is None or code in ENDED_AS_ASKED:
            return result
        ending = process_exit(code)
        if result.root_error is not None:
            result.observations.append(replace(ending, says=f"then {ending.says}", points_to=""))
            return result
        result.failure_class = ending.points_to or "other"
        concept = ENDINGS.get(ending.points_to)  # a kill or a crash; an exit status alone names no cause
        result.recognised = concept is not None
        result.hint = concept.hint if concept else UNEXPLAINED_EXIT.format(code=code)
        result.observations = [Observation("stage", f"reached {result.stage}"), ending]
        result.error_message = f"the server exited with {code}"
        phase = STAGE_PHASES.get(result.stage, "starting")
        result.fingerprint = fingerprint(result.failure_class, f"exited with {code} while {phase}")
        return result

    def landmarks(self) -> tuple[object, ...]:
        """What the answer's stage, progress, root error and adjustments rest on: it changes
        whenever they may have, and is cheap enough to take after every chunk (the answer is not)."""
        current = self._current
        return (
            self._stages.index, self._stages.percent, self._root, self._secondary, self._fatal_line, self._precursor,
            current, len(current.exceptions) if current else 0, len(self._adjustments),
            self._figures.server_args is not None,
        )  # fmt: skip

    def hung(self) -> Diagnosis:
        """The answer for a launch that stopped making progress: rooted in the wait it ended on, or
        in its last progress line."""
        result = self.snapshot()
        line = self._waiting if self._waits > 1 else self._progress
        if result.root_error is not None or line is None:
            return result
        result.failure_class, result.hint = "timeout", HINTS["timeout"]
        result.root_error, result.root_line = line.raw.strip(), line.number
        message = f"no progress during {result.stage}"
        if line is self._waiting:  # what it waited for tells one hang from another
            message = f"{message}, {signature_parts(line.text.strip())[1]}"
        result.fingerprint = fingerprint("timeout", message)
        result.error_type, result.error_message = "", message
        return result

    def _cut_off(self, tb: Traceback) -> Diagnosis:
        """A log that ends inside a traceback, before its exception (a window cut short, a process
        killed while printing): the most specific line it shows stands for the error, a line beside
        it that names a cause, else the last call it shows, never the traceback's header. Without
        such a line its fingerprint is the whole traceback it shows, not where it stopped:
        unrelated failures cut off in one frame must not share one."""
        evidence = traceback_context(tb, None)
        cut_in = evidence.frames[-1] if evidence.frames else "no frame"
        nearby = [pair for pair in self._beside() if pair[0].number >= tb.lines[0].number - NEARBY]
        specific = [*nearby, *_beside(tb.lines)]
        named = next((seen for seen, concept in reversed(specific) if concept is not None), None)
        if named is not None:  # what the lines printed with it say is more than where it stopped
            result = self._diagnosis((named, evidence), cut_in=cut_in)
        else:
            last = _last_call(tb)
            result = self._diagnosis(
                (replace(last, text=f"{last.text.strip()} (cut off in {cut_in})"), evidence), cut_in=cut_in
            )
            result.fingerprint = fingerprint(result.failure_class, f"cut off in:\n{evidence.where}")
        return result

    def _see(self, line: Line) -> None:
        text = line.text.strip()
        entered, moved = self._stages.see(text)
        self.reached += entered
        if moved:
            self._progress = line
        if not self._recognisable:
            self._recognisable = line.prefixed or self._stages.index >= 0 or _recognisable(line, text)
        if "aiting" not in text or not WAITING.search(text):
            self._waiting, self._waits = None, 0
        else:
            self._waiting, self._waits = self._waiting or line, self._waits + 1
        self._figures.see(text)
        if any(word in text for word in EXIT_WORDS) and EXIT.search(text):
            self._ended = line
        # The substring tests spare the regular expression on the many lines that cannot match.
        hybrid_sign = "Mamba Cache" in text or "type=" in text
        if hybrid_sign and len(self._hybrid_lines) < 2 and HYBRID_SIGN.search(text):
            self._hybrid_lines.append(text)
        if "SGLANG_" in text and len(self._environment) < 50:
            self._environment.update(ENVIRONMENT.findall(text))
        adjusted = ADJUSTMENT.search(text) and not EXCEPTION.match(text) and not PRECURSOR.search(text)
        if adjusted and len(self._adjustments) < 50 and all(text != seen.text.strip() for seen in self._adjustments):
            self._adjustments.append(line)
        # A window that starts inside a traceback: its first frame opens it.
        outside = self._current is None or self._current.ended
        headless = outside and not line.prefixed and 'File "' in text and FRAME.match(line.text)
        if "Traceback (most recent call last)" in text or headless:
            if self._current and not self._current.ended:
                self._current.lines.append(line)
            else:
                self._close_traceback()
                self._current = Traceback([line])
            return
        if self._current is not None and not self._current.ended:
            if FRAME.match(line.text):
                pass
            elif EXCEPTION.match(text):
                self._current.exceptions.append(line)
            elif text.startswith(("During handling of the above exception", "The above exception was the direct")):
                pass
            elif line.prefixed and not line.ranks and self._current.exceptions:
                self._current.ended = True  # the main process logs again: this traceback is over
            if len(self._current.lines) < MAX_TRACEBACK_LINES:
                self._current.lines.append(line)
            return
        if EXCEPTION.match(text) and not line.prefixed:
            # An exception line whose traceback lies outside the window; one with an empty message
            # may give its cause in the lines below, read as the rest of its traceback.
            self._close_traceback()  # a traceback that ended before it comes first
            if self._root is not None and not is_wrapper(self._root[0]):
                return
            if exception_message(line) and not stopped([line]):
                self._root, self._orphan = _preferred(self._root, (line, Evidence())), True
            else:
                self._current = Traceback([line], [line])
            return
        if self._root is None and self._fatal_line is None and any(word in text for word in BESIDE_WORDS):
            self._maybe_beside.append(line)
        if self._fatal_line is None and not HARMLESS.search(text):
            if ARGPARSE_ERROR.match(text) or any(pattern.search(text) for pattern in FATAL_LINES):
                self._fatal_line = line
            elif self._precursor is None and PRECURSOR.search(text):
                self._precursor = line

    def _close_traceback(self) -> None:
        tb, self._current = self._current, None
        if tb is None or (found := root_of(tb)) is None or stopped(tb.exceptions):
            return
        if SECONDARY.search(found[0].text):
            self._secondary = self._secondary or found
            return
        if self._orphan and self._root is not None and found[0].text.strip() == self._root[0].text.strip():
            # An exception line printed before its own traceback (output of several processes
            # interleaved): the traceback, with its frames, takes the root's place.
            self._root, self._orphan = found, False
            return
        self._root = _preferred(self._root, found)

    def _diagnosis(self, root: tuple[Line, Evidence] | None, *, cut_in: str = "") -> Diagnosis:
        figures = replace(self._figures, memory=dict(self._figures.memory), decode=list(self._figures.decode))
        result = Diagnosis(adjustments=[line.text.strip() for line in self._adjustments], figures=figures)
        if self._stages.name is not None:
            result.stage = self._stages.name
            result.stage_percent = self._stages.percent
        if root is None:
            if not self._recognisable:
                result.failure_class, result.hint, result.recognised = "other", NOT_A_LOG_HINT, False
            return result
        line, evidence = root
        frames = sglang_frames(list(evidence.frames))
        message = signed = line.text.strip()
        words = said(message, evidence)
        placed = placed_at(message, evidence)
        result.observations = gather(
            stage=result.stage,
            message=message,
            evidence=evidence,
            words=words,
            place=placed,
            beside=[pair for pair in self._beside() if pair[0].number < line.number][-3:],
            ended=self._ended,
            root_at=line.number,
            cut_in=cut_in,
        )
        result.cut_off = cut_in
        result.failure_class = decide(result.observations) or "other"
        concept = words or placed
        if concept is not None and concept.failure_class != result.failure_class:
            concept = None
        result.concept = concept.name if concept else ""
        hint = hint_for(concept, result.failure_class)
        if result.failure_class in ("arg-conflict", "other") and (override := self._override_behind(message)):
            # The failure names an argument SGLang changed on its own: the change is the cause.
            line, message, result.failure_class = override, override.text.strip(), "arg-override"
            signed, hint = message, HINTS["arg-override"]
        elif not exception_message(line) and (source := ASSERT_SOURCE.search(evidence.where)):
            signed = f"{message} {source.group(0)}"  # a bare assertion is known by its assert
        if result.failure_class in ("other", "cuda-graph") and (conflict := self._known_conflict(frames)):
            result.failure_class = "arg-conflict"
            hint = f"SGLang accepts {conflict} at start-up but fails with it later: change one of them."
        result.evidence = "\n".join([message, evidence.text(), *self._hybrid_lines])
        if explained := explain(
            message,
            result.failure_class,
            server_args=figures.server_args,
            context=result.evidence,
            memory=figures.memory,
        ):
            result.failure_class, hint = explained.failure_class, explained.hint
        else:
            hint = in_release_spelling(hint, figures.server_args)
        if hint == HINTS["other"]:
            hint = unplaced_hint(result.stage, frames)
        result.root_error = line.raw.strip()
        result.frames = list(frames)
        result.root_line = line.number
        result.hint = hint
        result.recognised = concept is not None or result.failure_class != "other"
        phase = phase_of(evidence.frames, result.stage, message)
        signed_concept = concept if result.failure_class == (concept.failure_class if concept else "") else None
        result.fingerprint = fingerprint(result.failure_class, signed, signed_concept, phase)
        result.error_type, result.error_message = signature_parts(signed)
        return result

    def _beside(self) -> list[tuple[Line, Concept | None]]:
        return _beside(self._maybe_beside)

    def _known_conflict(self, frames: list[str]) -> str | None:
        args = self._figures.server_args
        if not args:
            return None
        evidence = " ".join([*frames, *self._environment])
        return next((name for name, applies in KNOWN_CONFLICTS if applies(args, evidence)), None)

    def _override_behind(self, message: str) -> Line | None:
        named = argument_names(message)
        return next((line for line in self._adjustments if argument_names(line.text) & named), None)


def _last_call(tb: Traceback) -> Line:
    """Where a traceback cut before its exception stopped: the last call it shows (a frame's source
    line, printed indented under it; the one before, when the log ends on a frame whose call it
    did not print), else its last frame, else its first line."""
    frames = [line for line in tb.lines if FRAME.match(line.text)]
    calls = [line for line in tb.lines if SOURCE_LINE.match(line.text) and not _not_a_call(line.text.strip())]
    if calls and frames and calls[-1].number >= frames[-1].number - 1:
        return calls[-1]
    return frames[-1] if frames else tb.lines[0]


def _not_a_call(text: str) -> bool:
    """A frame cut mid-line (as short as its first letter), or the markers under a call."""
    return text.startswith('File "') or 'File "'.startswith(text) or CARET_LINE.match(text) is not None


def _beside(lines: Iterable[Line]) -> list[tuple[Line, Concept | None]]:
    """The lines that say something of a failure's cause, not a retry or a warning, each with the
    concept its words name: the kinds events.BESIDE knows, and error lines the lexicon names."""
    found = []
    for line in lines:
        text = line.text.strip()
        if not any(word in text for word in BESIDE_WORDS) or RETRYING.search(text) or HARMLESS.search(text):
            continue
        concept = said(text)
        if BESIDE.search(text) or (concept is not None and ("rror" in text or "RROR" in text)):
            found.append((line, concept))
    return found


def _recognisable(line: Line, text: str) -> bool:
    """A line that shows the input is a server's log (see RECOGNISABLE), or an exception's. (A
    fatal line need not be looked for: it becomes the root error, which no log of nothing has.)"""
    return bool(
        RECOGNISABLE.search(text) or EXCEPTION.match(text) or FRAME.match(line.text) or SGLANG_WRAPPER.search(line.raw)
    )


def unplaced_hint(stage: str, frames: list[str]) -> str:
    """The hint for a failure no rule places: it still says where the launch died, from the stage
    and the innermost frame, so a person knows where to look."""
    places = ([f"during {stage}"] if stage != Diagnosis.stage else []) + ([f"in {frames[-1]}"] if frames else [])
    return f"{UNPLACED} It was raised {', '.join(places)}. {TEACH_IT}" if places else HINTS["other"]


def ends_during(stage: str, percent: int | None, *, file_alone: bool) -> str:
    """What a log with no error that ends mid-start-up says: where it ends, and, read from a file,
    that nothing there tells a hang from a window cut short."""
    at = f" ({percent}%)" if percent is not None else ""
    said = f"No error seen; the log ends during {stage}{at}."
    if file_alone:
        said += (
            " A log alone does not say whether the server hung there or the window was cut: in the "
            "dashboard the process's state and its silence decide."
        )
    return said


def diagnose(text: str) -> Diagnosis:
    analyzer = Analyzer()
    analyzer.feed(text)
    return analyzer.finish()


def _preferred(root: tuple[Line, Evidence] | None, found: tuple[Line, Evidence]) -> tuple[Line, Evidence]:
    """The root error once another fatal exception is seen after it: the first stays, unless it
    only reports a failure that the later one is (root.py's precedence)."""
    if root is None or (is_wrapper(root[0]) and not is_wrapper(found[0])):
        return found
    return root
