"""Reading bench_serving's summary block: the lines between "Serving Benchmark Result" and the
closing rule of `=`, each "Label:   value".

The figures are named as bench_serving names them in its --output-file records (`output_throughput`,
`mean_ttft_ms`, `accept_length`, ...): the few labels whose record name differs from their words are
in a table, the others follow one rule ("P99 ITL (ms)" -> `p99_itl_ms`). Labels a newer release
adds are kept under the same rule, so nothing printed is lost; a value that is not a finite number (the
backend's name, an `inf` rate) stays text.
"""

from __future__ import annotations

import math
import re

BLOCK_START = re.compile(r"=+ Serving Benchmark Result =+")
BLOCK_END = re.compile(r"^=+\s*$")
LINE = re.compile(r"^\s*([^:]+?)\s*:\s+(\S.*?)\s*$")

RECORD_NAMES = {
    "successful requests": "completed",
    "benchmark duration (s)": "duration",
    "total generated tokens": "total_output_tokens",
    "total generated tokens (retokenized)": "total_output_tokens_retokenized",
    "request throughput (req/s)": "request_throughput",
    "input token throughput (tok/s)": "input_throughput",
    "output token throughput (tok/s)": "output_throughput",
    "total token throughput (tok/s)": "total_throughput",
    "traffic request rate": "request_rate",
    "max request concurrency": "max_concurrency",
}


def record_name(label: str) -> str:
    label = label.strip().lower()
    if label in RECORD_NAMES:
        return RECORD_NAMES[label]
    unit = re.search(r"\((ms|s)\)$", label)
    words = re.sub(r"\([^)]*\)", " ", label)
    name = "_".join(re.findall(r"[a-z0-9]+", words))
    return f"{name}_{unit.group(1)}" if unit else name


def parse_summary(text: str) -> dict[str, float | str]:
    """The last complete summary block's figures; {} when the output has none (the run failed, or
    was cut before the block's closing rule)."""
    figures: dict[str, float | str] = {}
    complete: dict[str, float | str] = {}
    inside = False
    for line in text.splitlines():
        line = line.rstrip("\r")
        if BLOCK_START.search(line):
            inside, figures = True, {}
        elif inside and BLOCK_END.match(line):
            inside, complete = False, figures
        elif inside and (match := LINE.match(line)):
            value = match.group(2)
            try:
                number = float(value)
            except ValueError:
                number = math.nan
            # inf (an unbounded rate) stays text: JSON, and so the database, has no infinity.
            figures[record_name(match.group(1))] = number if math.isfinite(number) else value
    return complete
