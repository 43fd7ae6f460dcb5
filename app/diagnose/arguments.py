"""Failures the server's arguments explain: an argument SGLang changed on its own, or a combination
it accepts at start-up and fails with later.

Separate because it weighs the arguments, not the error's words: which lines report an adjustment,
which arguments a line names, and which known combinations apply given the server_args dump and
the SGLANG_* settings the log shows. The analyzer (analyze.py) then lets such a cause take the
place of a failure that reads like a plain conflict or bug.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

from app.diagnose.drift import field_name

# A line in which SGLang reports changing an argument on its own (or turning a feature off).
ADJUSTMENT = re.compile(
    r"is (?:adjusted|reset|set) to |(?:is|are) disabled (?:because|when|since)|^Disabl(?:e|ing) |^Automatically |"
    r"is turned on|turn off --|Use the profiled value instead|is not supported.*disabl|will be automatically selected|"
    r"not (?:set|specified)\. Use .* by default|^Inferred .* from |"
    r"^(?:Setting|Overriding|Forcing) \S.* to \S|^Set \S.*(?: to |: \w+=)|"
    # the newest releases' wordings: "defaulting --linear-attn-decode-backend to flashinfer", "falling back
    # --linear-attn-verify-backend to triton", "switching to direct io backend", "aligning 24 -> 32"
    r"\bdefaulting --[\w-]+ to |\bfalling back --[\w-]+ to |, switching to \w|\baligning .+ -> \S|"
    r"^Enabl(?:e|ing) \S.* because ",
    re.I,
)
# An SGLANG_* setting as an echoed command line or environment dump shows it.
ENVIRONMENT = re.compile(r"\bSGLANG_\w+=[\w.-]+")
SPEC_V2 = re.compile(r"SGLANG_ENABLE_SPEC_V2=(?:1|true)\b|_v2\.py:", re.I)  # the setting, or its worker's frames


def _number(args: dict[str, Any], name: str) -> float:
    value = args.get(name)
    return value if isinstance(value, int | float) and not isinstance(value, bool) else 0


# Combinations SGLang accepts at start-up that fail later with an error that reads like a plain bug
# (a tensor shape, a capture error): with one of them in the effective arguments, such a failure
# is the combination's. Each: the arguments as a user would write them, and when they apply given
# the server_args dump and what else the log shows (environment, the failing frames).
KNOWN_CONFLICTS: tuple[tuple[str, Callable[[dict[str, Any], str], bool]], ...] = (
    (
        "--speculative-eagle-topk > 1 with the spec v2 worker (SGLANG_ENABLE_SPEC_V2=1)",
        lambda args, evidence: _number(args, "speculative_eagle_topk") > 1 and bool(SPEC_V2.search(evidence)),
    ),
    (
        "EAGLE --speculative-num-steps >= 2 with --enable-expert-distribution-metrics",
        lambda args, evidence: (
            str(args.get("speculative_algorithm")).startswith("EAGLE")
            and _number(args, "speculative_num_steps") >= 2
            and bool(args.get("enable_expert_distribution_metrics"))
        ),
    ),
)
FLAG = re.compile(r"--([a-z][a-z0-9]*(?:-[a-z0-9]+)+)")
FIELD = re.compile(r"\b([a-z][a-z0-9]*(?:_[a-z0-9]+){1,5})\b")


def argument_names(text: str) -> set[str]:
    """The server arguments a line names, as fields: `--max-running-requests` and
    `max_running_requests` both give max_running_requests."""
    return {field_name(flag) for flag in FLAG.findall(text)} | set(FIELD.findall(text))
