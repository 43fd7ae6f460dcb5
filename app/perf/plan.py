"""What a sweep tries, decided without touching a host: the points of a grid or a list, how a point
changes the preset's arguments and environment, and the bisection of one numeric argument.

A point maps names to values: `--flag` names an argument (a value of None drops it; for a switch,
"true" adds it and "false" drops it), any other name an environment variable (None unsets it).

Bisection assumes what is true of the limits people search (`--mem-fraction-static`,
`--max-running-requests`, `--max-mamba-cache-size`): below the limit a server starts, above it it
does not (or the reverse, for the smallest value that starts). Every outcome known, launched or
predicted, narrows the interval; the next value tried is the middle of what is left, so a range of
N values takes about log2(N) launches where a scan takes up to N.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Mapping
from dataclasses import dataclass
from decimal import Decimal
from typing import Any

from app.diagnose.hints import SuggestedChange
from app.errors import InvalidInput
from app.launch.preflight import OVERHEAD_BYTES, memory_need
from app.launch.relaunch import apply_change
from app.presets.revisions import FIELD_BY_OPTION

MAX_POINTS = 200
Point = dict[str, str | None]


def apply_point(args: list[str], env: Mapping[str, str], point: Point) -> tuple[list[str], dict[str, str]]:
    """The preset's arguments and environment with the point's values."""
    args, env = list(args), dict(env)
    for name, value in point.items():
        if name.startswith("--"):
            known = FIELD_BY_OPTION.get(name)
            if known is not None and known.kind is bool:
                change = SuggestedChange(name, None, remove=value in (None, "false"))
            else:
                change = SuggestedChange(name, value, remove=value is None)
            args = apply_change(args, change)
        elif value is None:
            env.pop(name, None)
        else:
            env[name] = value
    return args, env


def grid_points(grid: Mapping[str, list[str | None]]) -> list[Point]:
    """Every combination, the first name's values varying slowest."""
    names = list(grid)
    return [dict(zip(names, values, strict=True)) for values in itertools.product(*(grid[name] for name in names))]


def describe(point: Point) -> str:
    return " ".join(f"{name} {'(unset)' if value is None else value}" for name, value in point.items()) or "(base)"


@dataclass(frozen=True)
class Bisection:
    """The values `low`, `low + step`, ... `high` of `flag`; `goal` "max" looks for the largest
    that starts, "min" for the smallest."""

    flag: str
    low: float
    high: float
    step: float
    goal: str = "max"

    def validate(self) -> None:
        if not self.flag.startswith("--"):
            raise InvalidInput(f"bisect: {self.flag!r} is not an argument (give it as --name)")
        if self.goal not in ("max", "min"):
            raise InvalidInput("bisect: goal is max (the largest value that starts) or min (the smallest)")
        numbers = (self.low, self.high, self.step)
        if not all(math.isfinite(n) for n in numbers) or self.step <= 0 or self.low >= self.high:
            raise InvalidInput("bisect: give low < high and a step above 0")
        if len(self.values()) > 100_000:
            raise InvalidInput("bisect: more than 100,000 values between low and high; take a larger step")

    def values(self) -> list[str]:
        """The candidate values as text, in the step's own decimals (0.005 gives 0.805, not 0.80500001)."""
        low, high, step = (Decimal(str(n)) for n in (self.low, self.high, self.step))
        count = int((high - low) / step) + 1
        return [str(low + step * i) for i in range(count)]

    def next_value(self, outcomes: Mapping[str, bool]) -> str | None:
        """The next value to try given what is known (value -> it started), or None once decided."""
        ordered = self._ordered()
        good, bad = self._bounds(ordered, outcomes)
        if bad - good <= 1:
            return None
        return ordered[(good + bad) // 2]

    def answer(self, outcomes: Mapping[str, bool]) -> str | None:
        """The limit found so far: the furthest value known to start on the side of the goal."""
        ordered = self._ordered()
        good, _ = self._bounds(ordered, outcomes)
        return ordered[good] if good >= 0 else None

    def _ordered(self) -> list[str]:
        """Values ordered so that those that start come first."""
        values = self.values()
        return values if self.goal == "max" else values[::-1]

    @staticmethod
    def _bounds(ordered: list[str], outcomes: Mapping[str, bool]) -> tuple[int, int]:
        """The last index known to start and the first known to fail after it (-1 and len when none).
        A start seen past a failure (the limit is not sharp) counts: the search goes on above it."""
        good = max((i for i, value in enumerate(ordered) if outcomes.get(value) is True), default=-1)
        bad = min(
            (i for i, value in enumerate(ordered) if outcomes.get(value) is False and i > good), default=len(ordered)
        )
        return good, bad


def predicted_failure(
    fraction: float, *, weight_bytes_per_gpu: float, total_bytes: float, free_bytes: float
) -> str | None:
    """Why a --mem-fraction-static surely fails on a GPU, from preflight's memory model; None when
    only a launch can tell."""
    if fraction * total_bytes < weight_bytes_per_gpu + OVERHEAD_BYTES:
        return (
            f"{fraction} of {total_bytes / 2**30:.1f} GiB leaves no room beside "
            f"{weight_bytes_per_gpu / 2**30:.1f} GiB of weights per GPU"
        )
    need = memory_need(weight_bytes_per_gpu, fraction, total_bytes)
    if need > free_bytes:
        return f"{fraction} of {total_bytes / 2**30:.1f} GiB is more than the {free_bytes / 2**30:.1f} GiB free"
    return None


def as_point(flag: str, value: Any) -> Point:
    return {flag: None if value is None else str(value)}
