"""Argument drift: requested argv against what SGLang's dump, warnings and errors say it used."""

from __future__ import annotations

from app.diagnose.analyze import diagnose
from app.diagnose.drift import Drift, drift, requested_args

ARGV = [
    "python", "-m", "sglang.launch_server", "--model-path", "Qwen/Qwen3.6-27B", "--mem-fraction-static", "0.80",
    "--speculative-algorithm", "EAGLE", "--speculative-num-draft-tokens", "4", "--enable-mixed-chunk",
    "--mamba-scheduler-strategy=extra_buffer", "--cuda-graph-bs", "1", "2", "4",
]  # fmt: skip


def test_argv_is_read_by_field() -> None:
    assert requested_args(ARGV) == {
        "model_path": "Qwen/Qwen3.6-27B",
        "mem_fraction_static": "0.80",
        "speculative_algorithm": "EAGLE",
        "speculative_num_draft_tokens": "4",
        "enable_mixed_chunk": True,
        "mamba_scheduler_strategy": "extra_buffer",
        "cuda_graph_bs": ["1", "2", "4"],
    }


def test_the_dump_shows_what_differs_and_equal_values_in_other_spellings_do_not() -> None:
    effective = {
        "model_path": "Qwen/Qwen3.6-27B", "mem_fraction_static": 0.8, "speculative_algorithm": "EAGLE",
        "speculative_num_draft_tokens": 2, "enable_mixed_chunk": True, "mamba_scheduler_strategy": "no_buffer",
        "cuda_graph_bs": [1, 2, 4], "disable_overlap_schedule": True,
    }  # fmt: skip
    assert drift(ARGV, effective) == [
        Drift("speculative_num_draft_tokens", 4, 2, "server_args"),
        Drift("mamba_scheduler_strategy", "extra_buffer", "no_buffer", "server_args"),
    ]


def test_warnings_and_the_error_name_what_sglang_changed() -> None:
    overlap = "Overlap scheduler is disabled because of using eagle speculative decoding."
    reduced = "Automatically reduce --mem-fraction-static to 0.712 because this is a multimodal model."
    error = (
        "ValueError: Speculative decoding for Qwen3_5ForConditionalGeneration is not compatible with radix cache "
        "when using --mamba-scheduler-strategy no_buffer.To use radix cache with speculative decoding, please use "
        "--mamba-scheduler-strategy extra_buffer and set SGLANG_ENABLE_SPEC_V2=1."
    )
    found = drift(ARGV, None, [overlap, reduced], error)
    assert found == [
        Drift("disable_overlap_schedule", None, True, "warning", overlap),
        Drift("mem_fraction_static", 0.8, 0.712, "warning", reduced),
        Drift("mamba_scheduler_strategy", "extra_buffer", "no_buffer", "error", error),
    ]


def test_the_seed_story_shows_its_override_from_a_log_that_never_printed_its_arguments() -> None:
    log = (
        "[2026-01-05 10:00:00] WARNING server_args.py:900: Overlap scheduler is disabled because of using eagle "
        "speculative decoding.\n"
        "Traceback (most recent call last):\n"
        '  File "/sgl/python/sglang/srt/server_args.py", line 1200, in _handle_mamba_radix_cache\n'
        "ValueError: Speculative decoding for Qwen3_5ForConditionalGeneration is not compatible with radix cache "
        "when using --mamba-scheduler-strategy no_buffer.To use radix cache with speculative decoding, please use "
        "--mamba-scheduler-strategy extra_buffer and set SGLANG_ENABLE_SPEC_V2=1.\n"
    )
    result = diagnose(log)
    changes = {
        (d.name, d.requested, d.effective)
        for d in drift(ARGV, result.figures.server_args, result.adjustments, result.root_error)
    }
    assert ("mamba_scheduler_strategy", "extra_buffer", "no_buffer") in changes
    assert ("disable_overlap_schedule", None, True) in changes


def test_the_live_server_wins_and_preflight_misses_are_shown() -> None:
    dumped = {"mem_fraction_static": 0.8, "speculative_num_draft_tokens": 4, "mamba_scheduler_strategy": "extra_buffer"}
    live = {"mem_fraction_static": 0.8, "speculative_num_draft_tokens": 2, "mamba_scheduler_strategy": "extra_buffer"}
    predicted = {
        "mem_fraction_static": 0.75,
        "speculative_num_draft_tokens": 4,
        "mamba_scheduler_strategy": "extra_buffer",
    }
    found = drift(ARGV, dumped, server_info=live, predicted=predicted)
    assert found == [
        Drift("mem_fraction_static", 0.8, 0.8, "server_info", predicted=0.75),
        Drift("speculative_num_draft_tokens", 4, 2, "server_info", predicted=4),
    ]
    assert [(d.changed, d.unforeseen) for d in found] == [(False, True), (True, True)]


def test_a_warning_that_names_its_argument_in_words_is_read() -> None:
    warning = (
        "Max running requests is reset to 48 for speculative decoding. You can override this by explicitly setting"
    )
    assert drift(ARGV, None, [warning]) == [Drift("max_running_requests", None, 48, "warning", warning)]
