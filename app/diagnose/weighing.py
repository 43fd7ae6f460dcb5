"""The evidence a failure's kind is decided from, each piece with its weight, listed on the card and
in `diagnose --json` so that a person sees why.

Separate because it is the decision, not the reading: the analyzer gathers what the log shows (the
stage reached, the exception and its chain, where it was raised, the lines printed beside it, how
the process ended), the lexicon says what each piece points to, and here they are weighed. A
failure's own words name its kind most surely; where they name nothing the lexicon knows, where it
was raised tells (a frame of distributed set-up, of a kernel being compiled, of graph capture),
then what the log says beside it (a c10d store that timed out, a CUDA error line, a compiler's
error), then how the process ended. The weights make that order: the words outweigh all the rest
together, a place outweighs a line beside it, and each kind of evidence counts once for a class
however many lines repeat it.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from app.diagnose.events import EXCEPTION, Evidence
from app.diagnose.lexicon import Concept
from app.diagnose.lines import Line

WEIGHTS = {"words": 12, "place": 4, "beside": 3, "exit": 2}  # what a kind of evidence counts for
# How a process ended, as launchers, shells and SGLang's own watchdog print it.
EXIT = re.compile(
    r"\b(?:exit(?:ed)?(?: with)? ?(?:code|status)|exitcode|returncode|return code)[:= ]+(-?\d+)|"
    r"\b(?:signal|signum)[:= ]+(\d+)|\b(SIGKILL|SIGSEGV|SIGABRT|SIGBUS|SIGILL)\b|^Killed$",
    re.I,
)
KILLED = {"-9", "137", "9", "SIGKILL", "Killed"}
CRASHED = {"-11", "139", "11", "-6", "134", "6", "-7", "135", "SIGSEGV", "SIGABRT", "SIGBUS", "SIGILL", "-4", "132"}


@dataclass(frozen=True)
class Observation:
    """One piece of evidence as a person reads it, and the class it argues for."""

    kind: str  # stage, exception, words, place, beside, exit
    says: str  # "raised in sglang/srt/model_executor/model_runner.py:init_torch_distributed"
    points_to: str = ""  # the failure class it argues for; "" where it only tells where or what
    line: int | None = None  # the log line it was read from, where it is one
    weight: int = field(init=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "weight", WEIGHTS.get(self.kind, 0) if self.points_to else 0)

    @classmethod
    def from_json(cls, value: Mapping[str, Any]) -> Observation:
        return cls(str(value["kind"]), str(value["says"]), str(value.get("points_to") or ""), value.get("line"))


def exit_of(line: Line, root_at: int) -> Observation | None:
    """What a line that reports a process's end says of the failure: killed (most often by the
    host's OOM killer), crashed on a signal, or only that it exited. After the root error it says
    nothing of the cause: SGLang kills its own processes once one has failed."""
    found = EXIT.search(line.text.strip())
    if found is None:
        return None
    code = next(group for group in found.groups() if group is not None) if any(found.groups()) else "Killed"
    if line.number > root_at:
        return Observation("exit", f"then the process ended ({code})", line=line.number)
    return process_exit(code, line.number)


def process_exit(code: int | str, line: int | None = None) -> Observation:
    """What an exit status or signal says: a kill (128 + 9, -9, SIGKILL), a crash on a signal, or
    only that the process exited."""
    if str(code) in KILLED:
        return Observation("exit", f"the process was killed ({code})", "oom", line)
    if str(code) in CRASHED:
        return Observation("exit", f"the process crashed ({code})", "other", line)
    return Observation("exit", f"the process exited with {code}", line=line)


def gather(
    *,
    stage: str,
    message: str,
    evidence: Evidence,
    words: Concept | None,
    place: Concept | None,
    beside: Iterable[tuple[Line, Concept | None]],
    ended: Line | None,
    root_at: int,
    cut_in: str = "",
) -> list[Observation]:
    """What a failure shows, strongest first: its stage, its exception and chain, what its words
    name, where it was raised, the lines beside it and how the process ended."""
    found = [Observation("stage", f"reached {stage}")]
    if cut_in:
        found.append(Observation("exception", f"the traceback is cut off in {cut_in}, before its exception"))
    elif typed := EXCEPTION.match(message):
        chain = [kind for kind in dict.fromkeys(evidence.chain_types) if kind != typed.group(1)]
        found.append(
            Observation("exception", typed.group(1) + (f", in a chain with {', '.join(chain)}" if chain else ""))
        )
    if words is not None:
        found.append(Observation("words", f"the error says: {words.name}", words.failure_class))
    if evidence.frames:
        where = f"raised in {evidence.frames[-1]}"
        found.append(
            Observation("place", f"{where}: {place.name}", place.failure_class)
            if place
            else Observation("place", where)
        )
    for line, concept in {seen.text.strip(): (seen, named) for seen, named in beside}.values():  # a repeat once
        text = line.text.strip()
        says = f"beside it: {text[:160]}" + (f" ({concept.name})" if concept else "")
        found.append(Observation("beside", says, concept.failure_class if concept else "", line.number))
    if ended is not None and (exit_seen := exit_of(ended, root_at)) is not None:
        found.append(exit_seen)
    return found


def decide(observations: Sequence[Observation]) -> str | None:
    """The class with the most weight behind it, each kind of evidence counted once for a class;
    None when nothing points anywhere. On a tie the stronger evidence, listed first, wins."""
    counted: set[tuple[str, str]] = set()
    totals: Counter[str] = Counter()
    for seen in observations:
        if seen.points_to and (seen.kind, seen.points_to) not in counted:
            counted.add((seen.kind, seen.points_to))
            totals[seen.points_to] += seen.weight
    return totals.most_common(1)[0][0] if totals else None
