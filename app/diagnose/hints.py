"""Hints that name a failure's real cause and its real fix where the error alone misleads, per
SGLang version: the mamba cache strategies, flags a release renamed or removed, and the memory
pools of hybrid models.

Each rule is a kind of failure, not one log: it reads the root error, the effective arguments
(the `server_args=` dump) and, where the caller knows it, the argv the attempt ran, which is
what tells "the flag never reached SGLang" from "SGLang chose otherwise".
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from app.diagnose import flag_history
from app.diagnose.capacity import largest_fraction
from app.diagnose.drift import requested_args

# The mamba strategy's flag, by release: renamed in 0.5.14, the old name an alias until 0.5.20.
OLD_STRATEGY_FLAG, NEW_STRATEGY_FLAG = "--mamba-scheduler-strategy", "--mamba-radix-cache-strategy"
STRATEGY_FIELDS = ("mamba_scheduler_strategy", "mamba_radix_cache_strategy")
FLAG = re.compile(r"--[a-z][a-z0-9]*(?:-[a-z0-9]+)*")
# argparse's refusals, after "<prog>: error: ".
UNRECOGNIZED = re.compile(r": error: unrecognized arguments: (.+)$")
AMBIGUOUS = re.compile(r": error: ambiguous option: (--\S+?)(?:=\S*)? could match (.+)$")
INVALID_CHOICE = re.compile(r": error: argument (--[\w-]+)(?:/-\w+)?: invalid choice: '([^']*)'")
NO_BUFFER_WITH_SPECULATIVE = re.compile(r"not compatible with radix cache when using --mamba-[\w-]+ no_buffer", re.I)
EXTRA_BUFFER_WITHOUT_RADIX = re.compile(r"extra_buffer is not compatible with --disable-radix-cache", re.I)
# A log line that shows a hybrid (mamba) model: its mamba state cache, or the weights of a hybrid
# architecture ("Load weight end. ... type=Qwen3_5ForConditionalGeneration").
HYBRID_SIGN = re.compile(
    r"Mamba Cache is allocated|type=\w*(?:Qwen3Next|Qwen3_5|NemotronH|FalconH1|Jamba|Lfm2|KimiLinear|Mamba)"
)
POOL_DOES_NOT_FIT = re.compile(r"Not enough memory\. Please try to increase --mem-fraction-static")
NO_BUFFER_REFUSES = re.compile(r"\bno_buffer (?:do|does) not support (.+?)[.]|\bno_buffer only supports (.+?)[.]", re.I)
GENERIC_OOM_CONCEPT = "memory exhausted"  # the lexicon's concept whose hint is the oom class's own
# Fields only a dump of one side has: the newest groups the CUDA-graph settings, 0.5.10 does not.
NEWEST_FIELDS, OLDEST_FIELDS = ("cuda_graph_config", "cuda_graph_max_bs_decode"), ("cuda_graph_max_bs",)


# How far a suggested change moves --mem-fraction-static, and the bounds it keeps to.
MEM_FRACTION_STEP, MEM_FRACTION_MIN, MEM_FRACTION_MAX = 0.1, 0.1, 0.95


@dataclass(frozen=True)
class SuggestedChange:
    """The one argument a hint's fix names, typed so that an editor can apply it: `flag` set to
    `value` (None: a switch to add), or dropped when `remove`."""

    flag: str
    value: str | None = None
    remove: bool = False

    def __str__(self) -> str:
        if self.remove:
            return f"drop {self.flag}"
        return self.flag if self.value is None else f"{self.flag} {self.value}"


@dataclass(frozen=True)
class Explanation:
    failure_class: str
    hint: str
    change: SuggestedChange | None = None


@dataclass(frozen=True)
class Evidence:
    """What the caller knows beside the root error."""

    message: str  # the root error
    failure_class: str  # as the error's wording placed it
    server_args: dict[str, Any]  # the dump, empty when the log has none
    argv: Sequence[str] | None  # the argv the attempt ran, None when unknown (a log file alone)
    context: str  # the traceback and lines around the root error, and other log lines that matter
    memory: Mapping[str, Any] = field(default_factory=dict)  # the log's memory figures (figures.MEMORY)

    def requested(self) -> dict[str, Any]:
        return requested_args(self.argv or ())

    def strategy_asked(self) -> tuple[str, Any] | None:
        """The mamba strategy flag in the argv and its value; None when the argv has neither name."""
        requested = self.requested()
        return next(((f"--{f.replace('_', '-')}", requested[f]) for f in STRATEGY_FIELDS if f in requested), None)

    def strategy_flag(self, default: str) -> str:
        """The strategy flag as the argv spells it, else `default`."""
        asked = self.strategy_asked()
        return asked[0] if asked else default

    def mem_fraction(self) -> float | None:
        """The static memory fraction SGLang ran with (the dump's), else the one asked for."""
        for source in (self.server_args, self.requested()):
            try:
                return float(source["mem_fraction_static"])
            except (KeyError, TypeError, ValueError):
                continue
        return None

    def strategy_used(self) -> Any:
        """The mamba strategy SGLang ran: the dump's, else the one asked for."""
        for source in (self.server_args, self.requested()):
            if found := next((source[f] for f in STRATEGY_FIELDS if source.get(f)), None):
                return found
        return None


def strategy_flag(value: str) -> str:
    """The flag that sets the mamba strategy to `value`, in each release's spelling."""
    return f"{OLD_STRATEGY_FLAG} {value} on 0.5.10 to 0.5.13, {NEW_STRATEGY_FLAG} {value} from 0.5.14"


def in_release_spelling(hint: str, server_args: dict[str, Any] | None) -> str:
    """A general hint's flags as the release that wrote the log spells them (its dump tells which),
    or both spellings when the log does not tell."""
    args = server_args or {}
    newest, oldest = any(f in args for f in NEWEST_FIELDS), any(f in args for f in OLDEST_FIELDS)
    for old in sorted(set(FLAG.findall(hint))):
        if (found := flag_history.story(old)) is None or not found[1]:
            continue
        new = " ".join(found[1])
        spelled = new if newest else old if oldest else f"{old} ({new} in the newest releases)"
        hint = re.sub(re.escape(old) + r"(?![\w-])", spelled, hint)
    return hint


def explain(
    message: str,
    failure_class: str,
    *,
    server_args: dict[str, Any] | None = None,
    argv: Sequence[str] | None = None,
    context: str = "",
    memory: Mapping[str, Any] | None = None,
) -> Explanation | None:
    """The class and hint for a failure one of the rules knows, or None."""
    evidence = Evidence(message, failure_class, server_args or {}, argv, context, memory or {})
    return next((found for rule in RULES if (found := rule(evidence)) is not None), None)


def _no_buffer_with_speculative(evidence: Evidence) -> Explanation | None:
    """0.5.10 to 0.5.13 refuse speculative decoding with the radix cache under no_buffer. They switch
    the strategy to no_buffer only from `auto`, never from an explicit extra_buffer."""
    if not NO_BUFFER_WITH_SPECULATIVE.search(evidence.message):
        return None
    fix = f"Fix: pass {OLD_STRATEGY_FLAG} extra_buffer ({NEW_STRATEGY_FLAG} from 0.5.14), or --disable-radix-cache."
    change: SuggestedChange | None = SuggestedChange(evidence.strategy_flag(OLD_STRATEGY_FLAG), "extra_buffer")
    if evidence.argv is None:
        cause = (
            "The mamba strategy reached SGLang as auto (the default) or no_buffer: SGLang 0.5.10 to 0.5.13 turn auto "
            "into no_buffer and never override an explicit extra_buffer. If the launch script asked for "
            "extra_buffer, the flag never reached the server: check the argv the attempt recorded."
        )
        return Explanation("arg-conflict", f"{cause} {fix}")
    asked = evidence.strategy_asked()
    config = evidence.requested().get("config")
    if asked is None and config:
        cause = (
            f"The attempt's argv has no {OLD_STRATEGY_FLAG}, and its --config file {config} leaves the strategy "
            "to auto or asks for no_buffer: SGLang 0.5.10 to 0.5.13 turn auto into no_buffer and never override "
            "an explicit extra_buffer."
        )
    elif asked is None:
        cause = (
            f"The attempt's argv has no {OLD_STRATEGY_FLAG}: the strategy was never requested, so SGLang's default "
            "auto became no_buffer (0.5.10 to 0.5.13 do that to auto, and never to an explicit extra_buffer)."
        )
    elif asked[1] == "extra_buffer":
        cause = (
            f"The attempt's argv has {asked[0]} extra_buffer, yet SGLang ran no_buffer: 0.5.10 to 0.5.13 never "
            "override an explicit extra_buffer, so the flag did not reach this server (a wrapper or config file in "
            "between, or another sglang than the preset's python)."
        )
    else:
        became = ", which 0.5.10 to 0.5.13 turn into no_buffer" if asked[1] == "auto" else ""
        cause = f"The attempt's argv asks for {asked[0]} {asked[1]}{became}."
    if asked is not None and asked[1] == "extra_buffer":
        change = None  # the preset asks for the fix already: no argument of it can help
    return Explanation("arg-conflict", f"{cause} {fix}", change)


def _extra_buffer_without_radix(evidence: Evidence) -> Explanation | None:
    if not EXTRA_BUFFER_WITHOUT_RADIX.search(evidence.message):
        return None
    return Explanation(
        "arg-conflict",
        "The mamba extra_buffer strategy keeps extra state for the radix cache, so SGLang refuses it with "
        "--disable-radix-cache. Fix: keep the radix cache (drop --disable-radix-cache) with extra_buffer, or use "
        f"no_buffer with the radix cache off ({strategy_flag('no_buffer')}).",
        SuggestedChange("--disable-radix-cache", remove=True),
    )


def _no_buffer_refuses(evidence: Evidence) -> Explanation | None:
    """The newest releases assert what no_buffer cannot run with, instead of switching it off."""
    found = NO_BUFFER_REFUSES.search(evidence.message)
    if found is None:
        return None
    refused = found[1] or found[2]
    if "overlap" in refused:
        fix = (
            f"use extra_buffer (the default for hybrid models there: leave {NEW_STRATEGY_FLAG} out or set it to "
            "extra_buffer), or add --disable-overlap-schedule"
        )
    else:
        fix = f"use extra_buffer ({NEW_STRATEGY_FLAG} extra_buffer), or change the setting it names"
    return Explanation(
        "arg-conflict",
        f"SGLang's mamba no_buffer strategy does not run with {refused}; the newest releases refuse it rather than "
        f"turn that setting off. Fix: {fix}.",
        SuggestedChange(evidence.strategy_flag(NEW_STRATEGY_FLAG), "extra_buffer"),
    )


def _flag_not_known(evidence: Evidence) -> Explanation | None:
    """argparse refused a flag or a value: a misspelling, or a name the host's release changed."""
    message = evidence.message
    if found := UNRECOGNIZED.search(message):
        flags = FLAG.findall(found[1])
        if not flags:
            return None
        said = (
            f"The host's SGLang does not know {', '.join(flags)}: a misspelling, or a flag its version renamed or "
            "removed."
        )
    elif found := AMBIGUOUS.search(message):
        flags = [found[1]]
        said = (
            f"The host's SGLang has no {found[1]} of its own: argparse read it as the start of {found[2]}, so its "
            "version renamed or split that flag."
        )
    elif found := INVALID_CHOICE.search(message):
        return Explanation(
            "arg-conflict",
            f"The host's SGLang does not offer {found[2]!r} for {found[1]}: the choices argparse lists are its "
            "version's (a later release may have dropped or renamed a value).",
        )
    else:
        return None
    known = [
        f"{flag} was {said}" + (f": use {' '.join(instead)}." if instead else ".")
        for flag in flags
        if (history := flag_history.story(flag)) is not None
        for said, instead in [history]
    ]
    return Explanation("arg-conflict", " ".join([said, *known]))


def _pool_does_not_fit(evidence: Evidence) -> Explanation | None:
    """SGLang's own refusal to build the memory pools: the static fraction leaves nothing for them
    beside the weights. The fix is the opposite of a runtime out-of-memory's."""
    if not POOL_DOES_NOT_FIT.search(evidence.message):
        return None
    states = ""
    if _hybrid(evidence) and _speculative(evidence):
        states = (
            " On a hybrid (mamba) model under speculative decoding, SGLang first sets aside one mamba state per "
            "draft token for every running request (--max-running-requests, 48 by default there, times "
            "--speculative-num-draft-tokens), before any cache."
        )
    others = "--max-running-requests" + (" or --speculative-num-draft-tokens" if states else "")
    fix, change = _useful_fraction(evidence)
    return Explanation(
        "oom",
        "SGLang could not build its memory pools: the static memory (--mem-fraction-static of the GPU) leaves "
        f"too little beside the weights.{states} Fix: {fix} Or lower {others}, or raise --tp-size.",
        change,
    )


def _useful_fraction(evidence: Evidence) -> tuple[str, SuggestedChange | None]:
    """The fix for a static share too small, aimed at the most the server can hold: the largest
    fraction the log's memory figures admit, not a step up that may leave room for one request."""
    sizing = largest_fraction(evidence.memory)
    current = evidence.mem_fraction()
    bisect = "a bisection of --mem-fraction-static finds the largest that starts."
    if sizing is None:
        step = mem_fraction_change(evidence, +1)
        guess = f" ({step} is one step up, a guess)" if step else ""
        said = (
            "raise --mem-fraction-static, as SGLang says; the log does not show the memory available before the "
            f"weights and their size, so the largest fraction that fits is not known{guess}: {bisect}"
        )
        return said, step
    figures = f"{sizing.available_gb:.2f} GB available before the {sizing.weights_gb:.2f} GB of weights"
    if sizing.fraction is None or (current is not None and sizing.fraction <= current):
        said = (
            f"no larger --mem-fraction-static leaves {sizing.headroom_gb:.2f} GB for CUDA graphs and activations "
            f"of the {figures}, so it cannot help; if you try, {bisect}"
        )
        return said, None
    said = (
        f"raise --mem-fraction-static to {sizing.fraction:g}, the largest that leaves {sizing.headroom_gb:.2f} GB "
        f"for CUDA graphs and activations of the {figures}: the KV cache gets the rest. Or {bisect}"
    )
    return said, SuggestedChange("--mem-fraction-static", f"{sizing.fraction:g}")


def _hybrid_out_of_memory(evidence: Evidence) -> Explanation | None:
    """Out of memory at run time on a hybrid (mamba) model, whose mamba state cache takes a share of
    the memory after the weights that the generic advice does not name."""
    if evidence.failure_class != "oom" or not _hybrid(evidence):
        return None
    buffer = (
        " extra_buffer does not add memory: it spends more of those slots on each running request."
        if evidence.strategy_used() == "extra_buffer"
        else ""
    )
    return Explanation(
        "oom",
        "GPU memory ran out on a hybrid (mamba) model: after the weights, SGLang splits its static memory between "
        f"the KV cache and the mamba state cache by --mamba-full-memory-ratio (0.9 by default).{buffer} Fix: lower "
        "--mem-fraction-static to leave more for activations and CUDA graphs, lower --cuda-graph-max-bs or "
        "--max-running-requests, or cap the mamba cache (--max-mamba-cache-size, --mamba-full-memory-ratio).",
        mem_fraction_change(evidence, -1),
    )


def mem_fraction_change(evidence: Evidence, direction: int) -> SuggestedChange | None:
    """--mem-fraction-static one step up (+1) or down (-1) from what SGLang ran with, within its
    bounds; None when that is unknown or already at the bound."""
    current = evidence.mem_fraction()
    if current is None:
        return None
    wanted = min(MEM_FRACTION_MAX, max(MEM_FRACTION_MIN, round(current + direction * MEM_FRACTION_STEP, 2)))
    return None if wanted == round(current, 2) else SuggestedChange("--mem-fraction-static", f"{wanted:g}")


def generic_change(failure_class: str, concept: str, evidence: Evidence) -> SuggestedChange | None:
    """The change a class's own hint names where no rule above explained the failure: memory
    exhausted at run time, whose hint says first to lower --mem-fraction-static."""
    if failure_class == "oom" and concept == GENERIC_OOM_CONCEPT:
        return mem_fraction_change(evidence, -1)
    return None


def _hybrid(evidence: Evidence) -> bool:
    return evidence.server_args.get("uses_mamba_radix_cache") is True or bool(HYBRID_SIGN.search(evidence.context))


def _speculative(evidence: Evidence) -> bool:
    return bool(evidence.server_args.get("speculative_algorithm") or evidence.requested().get("speculative_algorithm"))


RULES: tuple[Callable[[Evidence], Explanation | None], ...] = (
    _no_buffer_with_speculative,
    _extra_buffer_without_radix,
    _no_buffer_refuses,
    _flag_not_known,
    _pool_does_not_fit,
    _hybrid_out_of_memory,
)
