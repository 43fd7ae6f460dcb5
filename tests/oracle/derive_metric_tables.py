"""Derives the Prometheus metrics the simulated SGLang serves at /metrics from each real release.

    python -m tests.oracle.derive_metric_tables [VERSION ...]

For each release it writes app/demo/hostlib/sglang/srt/releases/<version>-metrics.json: every
metric the release's scheduler and tokenizer collectors register (`sglang:` name, type, help text,
label names, histogram buckets), and whether the collector registers it always or only under some
option (`conditional`). Read from the release's source with `ast`, not by importing it: the
collectors' module imports the model executor, which needs a GPU build of torch. The label sets
are the dict literals the release builds for each collector (`model_name`, `engine_type`, ...).
Do not edit those files by hand: run this again.
"""

from __future__ import annotations

import argparse
import ast
import json
from pathlib import Path
from typing import Any

from tests.oracle.environment import ORACLE_VERSIONS, oracle_environment
from tests.support.paths import HOSTLIB, ROOT

TABLES = HOSTLIB / "sglang" / "srt" / "releases"
COLLECTORS = {"SchedulerMetricsCollector": "scheduler", "TokenizerMetricsCollector": "tokenizer"}
METRIC_TYPES = {"Gauge": "gauge", "Counter": "counter", "Histogram": "histogram", "Summary": "summary"}


def _string(node: ast.expr | None) -> str | None:
    """A string constant, implicitly concatenated or not; None for anything computed."""
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return node.value
    return None


def _literal(node: ast.expr, assigned: dict[str, ast.expr]) -> Any:
    """A literal value, following one plain name to the literal assigned to it in the function."""
    if isinstance(node, ast.BoolOp):  # `buckets or default_buckets`: the default is what runs
        node = node.values[-1]
    if isinstance(node, ast.Name) and node.id in assigned:
        node = assigned[node.id]
    try:
        return ast.literal_eval(node)
    except ValueError:
        return None


def _extra_labels(node: ast.expr) -> list[str]:
    """Label names added to the collector's own (`[*labels.keys(), "stage"]`, `... + ["le"]`)."""
    return [sub.value for sub in ast.walk(node) if isinstance(sub, ast.Constant) and isinstance(sub.value, str)]


def _metrics_of(init: ast.FunctionDef) -> list[dict[str, Any]]:
    assigned: dict[str, ast.expr] = {}
    conditional: set[int] = set()
    for node in ast.walk(init):
        if isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name):
            assigned[node.targets[0].id] = node.value
        if isinstance(node, ast.If | ast.For | ast.Try):
            conditional.update(id(sub) for stmt in [*node.body, *getattr(node, "orelse", [])] for sub in ast.walk(stmt))
    metrics = []
    for node in ast.walk(init):
        if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in METRIC_TYPES):
            continue
        keywords = {keyword.arg: keyword.value for keyword in node.keywords if keyword.arg}
        name = _string(keywords.get("name"))
        if name is None or not name.startswith("sglang:"):
            continue
        metric: dict[str, Any] = {
            "name": name,
            "type": METRIC_TYPES[node.func.id],
            "help": _string(keywords.get("documentation")) or "",
            "extra_labels": _extra_labels(keywords["labelnames"]) if "labelnames" in keywords else [],
            "conditional": id(node) in conditional,
        }
        if metric["type"] == "histogram":
            buckets = _literal(keywords["buckets"], assigned) if "buckets" in keywords else None
            metric["buckets"] = [float(bound) for bound in buckets] if isinstance(buckets, list | tuple) else None
        metrics.append(metric)
    return metrics


def _label_sets(tree_files: list[Path]) -> dict[str, list[str]]:
    """The keys of the `labels = {...}` literals the release builds: with `tp_rank` for the
    scheduler's collector, without it for the tokenizer's."""
    found: dict[str, list[str]] = {}
    for path in tree_files:
        for node in ast.walk(ast.parse(path.read_text())):
            if not (isinstance(node, ast.Assign) and isinstance(node.value, ast.Dict)):
                continue
            if not any(isinstance(t, ast.Name) and t.id == "labels" for t in node.targets):
                continue
            keys = [key for key in (_string(k) for k in node.value.keys if k is not None) if key]
            if "model_name" in keys:
                found.setdefault("scheduler" if "tp_rank" in keys else "tokenizer", keys)
    return found


def derive(source: Path, version: str) -> dict[str, Any]:
    srt = source / "sglang" / "srt"
    collector_file = next(srt.glob("*/metrics_collector.py"), None) or srt / "metrics" / "collector.py"
    tree = ast.parse(collector_file.read_text())
    families: dict[str, list[dict[str, Any]]] = {}
    for node in tree.body:
        if isinstance(node, ast.ClassDef) and node.name in COLLECTORS:
            init = next(f for f in node.body if isinstance(f, ast.FunctionDef) and f.name == "__init__")
            families[COLLECTORS[node.name]] = _metrics_of(init)
    mentions = [
        path
        for path in sorted(srt.rglob("*.py"))
        if "test" not in path.parts and any(name in path.read_text() for name in COLLECTORS)
    ]
    labels = _label_sets([collector_file, *mentions])
    return {
        "about": f"SGLang {version}'s /metrics families, derived by tests/oracle/derive_metric_tables.py from "
        f"{collector_file.relative_to(source)}. Do not edit by hand: run it again.",
        "version": version,
        "labels": labels,
        **families,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("versions", nargs="*", default=list(ORACLE_VERSIONS), metavar="VERSION")
    options = parser.parse_args()
    environment = oracle_environment()
    for version in options.versions:
        table = derive(Path(environment.pythonpath(version)), version)
        path = TABLES / f"{version}-metrics.json"
        path.write_text(json.dumps(table, indent=1) + "\n")
        always = {role: sum(not m["conditional"] for m in table[role]) for role in COLLECTORS.values()}
        print(
            f"{path.relative_to(ROOT)}: scheduler {len(table['scheduler'])} ({always['scheduler']} always), "
            f"tokenizer {len(table['tokenizer'])} ({always['tokenizer']} always), labels {table['labels']}"
        )


if __name__ == "__main__":
    main()
