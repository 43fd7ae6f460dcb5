"""The pure parts of benchmarks and sweeps: reading bench_serving's summary, the points of a grid,
how a point changes a preset, the bisection's choices, workloads' validation and the charts' layout."""

from __future__ import annotations

import argparse

import pytest

from app.casebook.compare import Row
from app.cli.client import sweep_request
from app.errors import InvalidInput
from app.perf import plan
from app.perf.summary import parse_summary, record_name
from app.perf.workloads import WorkloadInput
from app.web import charts

# Written here in the tool's layout, with made-up figures.
SUMMARY = """\
#Input tokens: 16384
#Output tokens: 8192
100%|##########| 64/64 [00:09<00:00,  6.71it/s]

============ Serving Benchmark Result ============
Backend:                                 sglang
Traffic request rate:                    inf
Max request concurrency:                 8
Successful requests:                     64
Benchmark duration (s):                  9.54
Total input tokens:                      16384
Total generated tokens:                  8192
Total generated tokens (retokenized):    8190
Request throughput (req/s):              6.71
Input token throughput (tok/s):          1717.40
Output token throughput (tok/s):         858.70
Total token throughput (tok/s):          2576.10
Concurrency:                             7.93
Accept length:                           2.87
----------------End-to-End Latency----------------
Mean E2E Latency (ms):                   1181.22
Median E2E Latency (ms):                 1170.05
---------------Time to First Token----------------
Mean TTFT (ms):                          61.40
Median TTFT (ms):                        55.10
P99 TTFT (ms):                           140.93
-----Time per Output Token (excl. 1st token)------
Mean TPOT (ms):                          8.81
Median TPOT (ms):                        8.79
P99 TPOT (ms):                           9.60
---------------Inter-token Latency----------------
Mean ITL (ms):                           25.30
Median ITL (ms):                         24.88
P95 ITL (ms):                            31.02
P99 ITL (ms):                            44.17
Max ITL (ms):                            60.33
==================================================
"""


def test_the_summary_block_gives_figures_under_the_record_names() -> None:
    figures = parse_summary(SUMMARY)
    assert figures["output_throughput"] == 858.70
    assert figures["request_throughput"] == 6.71
    assert figures["total_throughput"] == 2576.10
    assert figures["accept_length"] == 2.87
    assert figures["mean_ttft_ms"] == 61.40 and figures["p99_ttft_ms"] == 140.93
    assert figures["median_tpot_ms"] == 8.79 and figures["p99_itl_ms"] == 44.17
    assert figures["p95_itl_ms"] == 31.02  # a label with no table entry follows the rule
    assert figures["completed"] == 64 and figures["duration"] == 9.54
    assert figures["backend"] == "sglang" and figures["request_rate"] == "inf"


def test_a_cut_or_missing_block_gives_no_figures() -> None:
    assert parse_summary("Traceback (most recent call last):\nConnectionRefusedError: [Errno 111]\n") == {}
    assert parse_summary(SUMMARY[: SUMMARY.index("Mean TTFT")]) == {}


def test_the_last_complete_block_counts() -> None:
    second = SUMMARY.replace("858.70", "901.00")
    assert parse_summary(SUMMARY + second)["output_throughput"] == 901.00


def test_record_names() -> None:
    assert record_name("Mean E2E Latency (ms)") == "mean_e2e_latency_ms"
    assert record_name("Peak output token throughput (tok/s)") == "peak_output_token_throughput"


def test_a_grid_is_every_combination_the_first_name_slowest() -> None:
    points = plan.grid_points({"--speculative-num-steps": ["1", "3"], "--speculative-eagle-topk": ["1", "4"]})
    assert points == [
        {"--speculative-num-steps": "1", "--speculative-eagle-topk": "1"},
        {"--speculative-num-steps": "1", "--speculative-eagle-topk": "4"},
        {"--speculative-num-steps": "3", "--speculative-eagle-topk": "1"},
        {"--speculative-num-steps": "3", "--speculative-eagle-topk": "4"},
    ]


def test_a_point_sets_replaces_and_drops_arguments_and_variables() -> None:
    args = ["--speculative-num-steps", "3", "--mem-fraction-static=0.9", "--disable-radix-cache"]
    point: plan.Point = {
        "--speculative-num-steps": "5",  # replaced where it stands
        "--mem-fraction-static": "0.85",  # written as the args spell it
        "--disable-radix-cache": "false",  # a switch turned off
        "--max-running-requests": "16",  # appended
        "SGLANG_FLAG": "1",
        "OLD": None,
    }
    new_args, env = plan.apply_point(args, {"OLD": "x", "KEEP": "y"}, point)
    assert new_args == ["--speculative-num-steps", "5", "--mem-fraction-static", "0.85", "--max-running-requests", "16"]
    assert env == {"KEEP": "y", "SGLANG_FLAG": "1"}


@pytest.mark.parametrize("cliff", [0.8, 0.8137, 0.873, 0.9449, 0.95])
def test_bisection_finds_the_largest_value_that_starts_in_log2_launches(cliff: float) -> None:
    search = plan.Bisection("--mem-fraction-static", 0.80, 0.95, 0.005)
    outcomes: dict[str, bool] = {}
    while (value := search.next_value(outcomes)) is not None:
        outcomes[value] = float(value) <= cliff + 1e-9
    found = search.answer(outcomes)
    assert found is not None and 0 <= cliff - float(found) < 0.005
    assert len(outcomes) <= 6  # 31 values: a linear scan may launch all of them


def test_bisection_for_the_smallest_value_and_when_nothing_starts() -> None:
    search = plan.Bisection("--max-running-requests", 1, 64, 1, goal="min")
    outcomes: dict[str, bool] = {}
    while (value := search.next_value(outcomes)) is not None:
        outcomes[value] = float(value) >= 23
    assert search.answer(outcomes) == "23"
    never = plan.Bisection("--mem-fraction-static", 0.8, 0.9, 0.05)
    outcomes = {}
    while (value := never.next_value(outcomes)) is not None:
        outcomes[value] = False
    assert never.answer(outcomes) is None and len(outcomes) == 2


def test_predictions_narrow_the_bisection_before_any_launch() -> None:
    search = plan.Bisection("--mem-fraction-static", 0.80, 0.95, 0.005)
    gib = 2**30
    predicted = {
        value: False
        for value in search.values()
        if plan.predicted_failure(
            float(value), weight_bytes_per_gpu=52 * gib, total_bytes=96 * gib, free_bytes=84 * gib
        )
    }
    assert min(predicted, key=float) == "0.880"  # 0.88 of 96 GiB is more than the 84 GiB free
    outcomes = dict(predicted)
    launches = 0
    while (value := search.next_value(outcomes)) is not None:
        outcomes[value] = float(value) <= 0.86
        launches += 1
    assert search.answer(outcomes) == "0.860" and launches <= 4


@pytest.mark.parametrize(
    "bad",
    [
        {"flag": "mem", "low": 0.8, "high": 0.9, "step": 0.01},
        {"flag": "--m", "low": 0.9, "high": 0.8, "step": 0.01},
        {"flag": "--m", "low": 0.8, "high": 0.9, "step": 0},
        {"flag": "--m", "low": 0.8, "high": 0.9, "step": 0.01, "goal": "best"},
    ],
)
def test_a_bad_bisection_is_refused_with_a_sentence(bad: dict[str, object]) -> None:
    with pytest.raises(InvalidInput, match="bisect: "):
        plan.Bisection(**bad).validate()  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"name": "two words"}, "name: "),
        ({"num_prompts": 0}, "num_prompts: 0 is out of range"),
        ({"dataset": "imagenet"}, "dataset: choose one of"),
        ({"request_rate": 0.0}, "request_rate: "),
        ({"range_ratio": 1.5}, "range_ratio: "),
    ],
)
def test_a_bad_workload_is_refused_with_the_field_named(change: dict[str, object], message: str) -> None:
    values: dict[str, object] = {"name": "mine", "num_prompts": 8, "input_len": 128, "output_len": 64, **change}
    with pytest.raises(InvalidInput, match=message):
        WorkloadInput(**values).validate()  # type: ignore[arg-type]


def test_the_comparison_says_each_figure_as_a_change_from_the_first_side() -> None:
    assert Row("output_throughput", (800.0, 1000.0, None)).change_pct() == [0.0, 25.0, None]
    assert Row("workload", ("chat-short", "chat-short")).change_pct() == [None, None]


def test_a_chart_scales_to_round_ticks_and_colours_each_group() -> None:
    marks = [charts.Mark(1.0, 400.0, "steps 1"), charts.Mark(2.5, 950.0, "steps 3"), charts.Mark(3.2, 700.0, "steps 5")]
    chart = charts.layout(marks, "accept length", "output tokens/s")
    assert [text for _, text in chart.y_ticks][:2] == ["0", "200"]
    assert len({mark["colour"] for mark in chart.marks}) == 3 and len(chart.legend) == 3
    top = min(chart.marks, key=lambda mark: float(str(mark["cy"])))
    assert top["cx"] == max(mark["cx"] for mark in chart.marks if mark["colour"] == top["colour"])
    assert charts.layout([], "x", "y").marks == []


def test_the_sweep_command_line_becomes_the_api_request() -> None:
    def options(**given: object) -> argparse.Namespace:
        defaults = {"preset": "p", "host": "h", "gpus": "0", "workload": None, "max_points": 50, "max_minutes": None}
        return argparse.Namespace(**{**defaults, "vary": [], "bisect": None, **given})

    body = sweep_request(options(vary=["--speculative-num-steps=1,2,3", "SGLANG_X=a,b"]))
    assert body["grid"] == {"--speculative-num-steps": ["1", "2", "3"], "SGLANG_X": ["a", "b"]}
    body = sweep_request(options(bisect="--mem-fraction-static=0.8:0.95:0.005"))
    assert body["bisect"] == {"flag": "--mem-fraction-static", "low": 0.8, "high": 0.95, "step": 0.005, "goal": "max"}
    for bad in ("--m=0.8:0.9", "--m=a:b:c", "--m=0.8:0.9:0.1:best"):
        with pytest.raises(InvalidInput, match="--bisect"):
            sweep_request(options(bisect=bad))
