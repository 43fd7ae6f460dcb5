"""The server's Prometheus metrics under --enable-metrics, as the release serves them at /metrics.

Names, types, help texts, label names and histogram buckets are the release's own (derived from
its source into releases/<version>-metrics.json). As in SGLang, the scheduler's gauges are set
each time it logs a batch's stats, and every one of them appears once it has; counters and
histograms appear with their first request. Metrics the simulation has no figure for keep their
HELP and TYPE lines and no sample, as a labelled metric never set does in prometheus_client.
"""

from __future__ import annotations

import bisect
import itertools
import json
import math
import threading
from pathlib import Path
from typing import Any

from sglang.version import release

TABLES = Path(__file__).resolve().parents[1] / "releases"


def metric_table(version: str) -> dict[str, Any]:
    table: dict[str, Any] = json.loads((TABLES / f"{version}-metrics.json").read_text())
    return table


class Histogram:
    def __init__(self, bounds: list[float]):
        self.bounds = bounds
        self.counts = [0] * (len(bounds) + 1)  # the last one: above every bound (+Inf)
        self.total = 0.0

    def observe(self, value: float) -> None:
        self.counts[bisect.bisect_left(self.bounds, value)] += 1
        self.total += value

    def samples(self, name: str, labels: str) -> list[str]:
        lines, running = [], 0
        for bound, count in zip([*self.bounds, math.inf], self.counts, strict=True):
            running += count
            le = "+Inf" if bound == math.inf else _number(bound)
            lines.append(f'{name}_bucket{{{labels},le="{le}"}} {_number(running)}')
        lines.append(f"{name}_count{{{labels}}} {_number(running)}")
        lines.append(f"{name}_sum{{{labels}}} {_number(self.total)}")
        return lines


class MetricsCollector:
    """The tokenizer's and the rank-0 scheduler's metrics of one server."""

    def __init__(self, server_args: Any, version: str | None = None):
        self.table = metric_table(version or release())
        self.families = {
            metric["name"]: metric
            for role in ("scheduler", "tokenizer")
            for metric in self.table[role]
            if not metric["conditional"]
        }
        self.scheduler_gauges = [
            m["name"]
            for m in self.table["scheduler"]
            if m["type"] == "gauge" and not (m["extra_labels"] or m["conditional"])
        ]
        served = server_args.served_model_name or server_args.model_path
        values = {"model_name": served, "engine_type": "unified", "tp_rank": "0", "pp_rank": "0", "moe_ep_rank": "0"}
        self.labels = {role: {key: values[key] for key in keys} for role, keys in self.table["labels"].items()}
        self.gauges: dict[str, float] = {}
        self.counters: dict[tuple[str, str], float] = {}
        self.histograms: dict[tuple[str, str], Histogram] = {}
        self.lock = threading.Lock()

    def scheduler_stats(self, gauges: dict[str, float]) -> None:
        """Rank 0's figures at a logged batch: every scheduler gauge is set, to 0 where unknown."""
        with self.lock:
            for name in self.scheduler_gauges:
                self.gauges[name] = float(gauges.get(name.removeprefix("sglang:"), 0.0))

    def request_finished(
        self, prompt_tokens: int, arrived: float, chunks: list[tuple[float, int]], streaming: bool
    ) -> None:
        """A request's counts and latencies at its end, as the tokenizer records them: each output
        chunk's wait shared by its tokens (several at once under speculative decoding)."""
        if not chunks:
            return
        output_tokens = sum(count for _, count in chunks)
        (first, _), (last, _) = chunks[0], chunks[-1]
        with self.lock:
            self._count("prompt_tokens_total", prompt_tokens, streaming)
            self._count("generation_tokens_total", output_tokens, streaming)
            self._count("num_requests_total", 1, streaming)
            self._observe("time_to_first_token_seconds", first - arrived, streaming)
            for (before, _), (at, count) in itertools.pairwise(chunks):
                for _ in range(count):
                    self._observe("inter_token_latency_seconds", (at - before) / count, streaming)
            if output_tokens > 1:
                per_token = (last - first) / (output_tokens - 1)
                self._observe("request_time_per_output_token_seconds", per_token, streaming)
            self._observe("e2e_request_latency_seconds", last - arrived, streaming)

    def _series(self, short: str, streaming: bool) -> tuple[str, str] | None:
        metric = self.families.get(f"sglang:{short}")
        if metric is None:
            return None
        labels = dict(self.labels["tokenizer"])
        if "is_streaming" in metric["extra_labels"]:
            labels["is_streaming"] = "true" if streaming else "false"
        return metric["name"], ",".join(f'{key}="{_escape(value)}"' for key, value in labels.items())

    def _count(self, short: str, amount: float, streaming: bool) -> None:
        if series := self._series(short, streaming):
            self.counters[series] = self.counters.get(series, 0.0) + amount

    def _observe(self, short: str, value: float, streaming: bool) -> None:
        if (series := self._series(short, streaming)) and self.families[series[0]].get("buckets"):
            if series not in self.histograms:
                self.histograms[series] = Histogram(self.families[series[0]]["buckets"])
            self.histograms[series].observe(value)

    def render(self) -> str:
        """The Prometheus text exposition format, families in the order the release registers them."""
        scheduler_labels = ",".join(f'{key}="{_escape(value)}"' for key, value in self.labels["scheduler"].items())
        lines = []
        with self.lock:
            for name, metric in self.families.items():
                # prometheus_client shows a counter under its name with `_total`, added where it lacks it.
                shown = f"{name}_total" if metric["type"] == "counter" and not name.endswith("_total") else name
                lines.append(f"# HELP {shown} {metric['help']}")
                lines.append(f"# TYPE {shown} {metric['type']}")
                if name in self.gauges:
                    lines.append(f"{name}{{{scheduler_labels}}} {_number(self.gauges[name])}")
                for (counted, labels), value in self.counters.items():
                    if counted == name:
                        lines.append(f"{shown}{{{labels}}} {_number(value)}")
                for (observed, labels), histogram in self.histograms.items():
                    if observed == name:
                        lines.extend(histogram.samples(name, labels))
        return "\n".join(lines) + "\n"


def _number(value: float) -> str:
    return repr(float(value))


def _escape(value: Any) -> str:
    return str(value).replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")
