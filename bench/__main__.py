"""Runs every benchmark module in bench/ and writes bench/results.json.

Each module named bench/bench_*.py defines `run() -> dict[str, dict]`, mapping a benchmark's
name to {"value", "unit", "anchor", "anchor_value", "ratio", "goal", "met"}, measured against
its anchor in the same run. `python -m bench api_load logs` runs bench/bench_api_load.py and
bench/bench_logs.py alone and updates their entries in bench/results.json.
"""

from __future__ import annotations

import importlib
import json
import pkgutil
import sys
from pathlib import Path

RESULTS = Path(__file__).resolve().parent / "results.json"


def main(chosen: list[str]) -> int:
    results: dict[str, dict[str, object]] = {}
    modules = sorted(m.name for m in pkgutil.iter_modules([str(RESULTS.parent)]) if m.name.startswith("bench_"))
    if chosen:
        unknown = sorted({f"bench_{name}" for name in chosen} - set(modules))
        if unknown:
            print(f"no such benchmark module: {', '.join(unknown)} (there are {', '.join(modules)})")
            return 2
        modules = [f"bench_{name}" for name in chosen]
        if RESULTS.exists():
            results = json.loads(RESULTS.read_text())
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
    sys.exit(main(sys.argv[1:]))
