"""Runs every benchmark module in bench/ and writes bench/results.json.

Each module named bench/bench_*.py defines `run() -> dict[str, dict]`, mapping a benchmark's
name to {"value", "unit", "anchor", "anchor_value", "ratio", "goal", "met"}, measured against
its anchor in the same run.
"""

from __future__ import annotations

import importlib
import json
import pkgutil
import sys
from pathlib import Path

RESULTS = Path(__file__).resolve().parent / "results.json"


def main() -> int:
    results: dict[str, dict[str, object]] = {}
    modules = sorted(m.name for m in pkgutil.iter_modules([str(RESULTS.parent)]) if m.name.startswith("bench_"))
    for name in modules:
        results.update(importlib.import_module(f"bench.{name}").run())
    RESULTS.write_text(json.dumps(results, indent=2) + "\n")
    if not results:
        print("no benchmarks defined yet; wrote an empty bench/results.json")
    for name, result in results.items():
        status = "met" if result["met"] else "NOT MET"
        print(
            f"{name:20} {result['value']} {result['unit']} (anchor {result['anchor']}: "
            f"{result['anchor_value']}; ratio {result['ratio']}; goal {result['goal']}) {status}"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
