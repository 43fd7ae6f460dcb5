"""Runs every benchmark module in bench/ and writes bench/results.json.

Each module named bench/bench_*.py defines `run(smoke: bool = False) -> dict[str, dict]`, mapping a
benchmark's name to {"value", "unit", "anchor", "anchor_value", "ratio", "goal", "met"}, measured
against its anchor in the same run. `python -m bench api_load logs` runs bench/bench_api_load.py and
bench/bench_logs.py alone and updates their entries in bench/results.json.

`python -m bench --smoke [NAME...]` runs the chosen harnesses (all by default) at tiny sizes, end to
end, so that CI sees a harness break; their goals are not judged. It writes only this run's results
to bench/smoke-results.json (an entry left from an earlier run would hide a harness that now fails),
never bench/results.json. When a harness raises, it prints the traceback, goes on with the others
and exits 1, naming each one that failed.
"""

from __future__ import annotations

import argparse
import importlib
import json
import pkgutil
import sys
import traceback
from pathlib import Path

RESULTS = Path(__file__).resolve().parent / "results.json"
SMOKE_RESULTS = RESULTS.with_name("smoke-results.json")
FIELDS = ("value", "unit", "anchor", "anchor_value", "ratio", "goal", "met")


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench", description="Run launchdeck's benchmarks.")
    parser.add_argument("--smoke", action="store_true", help="tiny sizes, goals not judged: does each harness run?")
    parser.add_argument("names", nargs="*", metavar="NAME", help="e.g. logs for bench/bench_logs.py (default: all)")
    args = parser.parse_args(argv)
    results: dict[str, dict[str, object]] = {}
    modules = sorted(m.name for m in pkgutil.iter_modules([str(RESULTS.parent)]) if m.name.startswith("bench_"))
    if args.names:
        unknown = sorted({f"bench_{name}" for name in args.names} - set(modules))
        if unknown:
            print(f"no such benchmark module: {', '.join(unknown)} (there are {', '.join(modules)})")
            return 2
        modules = [f"bench_{name}" for name in args.names]
        if RESULTS.exists() and not args.smoke:
            results = json.loads(RESULTS.read_text())
    failed = []
    for name in modules:
        if not args.smoke:
            results.update(importlib.import_module(f"bench.{name}").run())
            continue
        # A smoke run goes on past a broken harness so that one CI run names every broken one.
        try:
            measured = importlib.import_module(f"bench.{name}").run(smoke=True)
            _check_fields(measured)
            results.update(measured)
        except Exception:
            traceback.print_exc()
            failed.append(name)
    path = SMOKE_RESULTS if args.smoke else RESULTS
    path.write_text(json.dumps(results, indent=2) + "\n")
    if not results:
        print(f"no benchmarks measured; wrote an empty bench/{path.name}")
    for name, result in results.items():
        status = "(smoke run: goal not judged)" if args.smoke else "met" if result["met"] else "NOT MET"
        print(
            f"{name:20} {result['value']} {result['unit']} (anchor {result['anchor']}: "
            f"{result['anchor_value']}; ratio {result['ratio']}; goal {result['goal']}) {status}"
        )
    if failed:
        print(f"smoke run failed: these harnesses raised (tracebacks above): {', '.join(failed)}", file=sys.stderr)
        return 1
    return 0


def _check_fields(measured: dict[str, dict[str, object]]) -> None:
    """A harness that leaves out a field breaks the line printed for it and the readers of the results."""
    for benchmark, result in measured.items():
        missing = [field for field in FIELDS if field not in result]
        if missing:
            raise ValueError(f"{benchmark} has no {', '.join(missing)}")


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
