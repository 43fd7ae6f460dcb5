"""The figures a log states: effective arguments, memory per stage, decode metrics; read as they
stream, from the formats SGLang has printed over its versions."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from app.diagnose.analyze import Analyzer, diagnose
from app.diagnose.figures import parse_server_args

DUMP = (
    "[2026-01-05 10:00:00] server_args=ServerArgs(model_path='Qwen/Qwen3.6-27B', tokenizer_path='Qwen/Qwen3.6-27B', "
    "tp_size=1, mem_fraction_static=0.8712345678901234, random_seed=982341, max_queued_requests=9223372036854775807, "
    "speculative_algorithm='EAGLE', speculative_num_draft_tokens=4, mamba_scheduler_strategy='no_buffer', "
    "disable_radix_cache=False, model_loader_extra_config='{}', json_model_override_args='{\"a\": [1, 2]}', "
    "attention_backend=None, load_format=<LoadFormat.AUTO: 'auto'>, cuda_graph_bs=[1, 2, 4, 8])"
)
STARTUP = """\
[2026-01-05 10:00:01 TP0] Load weight begin. avail mem=94.12 GB
[2026-01-05 10:00:01 TP1] Load weight begin. avail mem=94.10 GB
[2026-01-05 10:00:31 TP0] Load weight end. elapsed=30.12 s, type=Qwen3_5ForConditionalGeneration, \
dtype=torch.bfloat16, avail mem=42.51 GB, mem usage=51.61 GB.
[2026-01-05 10:00:32 TP0] KV Cache is allocated. #tokens: 412345, K size: 15.73 GB, V size: 15.73 GB
[2026-01-05 10:00:32 TP0] Memory pool end. avail mem=10.87 GB
[2026-01-05 10:00:45 TP0] Capture cuda graph end. Time elapsed: 13.50 s. mem usage=1.50 GB. avail mem=9.36 GB.
[2026-01-05 10:00:45 TP0] max_total_num_tokens=412345, chunked_prefill_size=8192, max_prefill_tokens=16384, \
max_running_requests=48, context_len=262144, available_gpu_mem=9.36 GB
[2026-01-05 10:01:00 TP0] Decode batch, #running-req: 3, #token: 1200, token usage: 0.01, accept len: 2.71, \
accept rate: 0.68, cuda graph: True, gen throughput (token/s): 210.55, #queue-req: 0
[2026-01-05 10:01:10 TP0] Decode batch. #running-req: 5, #token: 2400, token usage: 0.02, \
gen throughput (token/s): 330.10, #queue-req: 1
"""


def test_the_server_args_dump_is_read_as_python_values() -> None:
    args = parse_server_args(DUMP)
    assert args is not None
    assert args["mamba_scheduler_strategy"] == "no_buffer" and args["speculative_num_draft_tokens"] == 4
    assert args["mem_fraction_static"] == 0.8712345678901234 and args["disable_radix_cache"] is False
    assert args["json_model_override_args"] == '{"a": [1, 2]}' and args["cuda_graph_bs"] == [1, 2, 4, 8]
    assert args["attention_backend"] is None and args["load_format"] == "<LoadFormat.AUTO: 'auto'>"
    assert parse_server_args("[10:00:00] server_args={'model_path': 'm', 'tp_size': 2}") == {
        "model_path": "m",
        "tp_size": 2,
    }
    assert parse_server_args("[10:00:00] Load weight begin. avail mem=1.00 GB") is None


def test_a_dump_cut_short_keeps_the_fields_before_the_cut() -> None:
    args = parse_server_args(DUMP[: DUMP.index("disable_radix_cache") + 8])
    assert args is not None and args["mamba_scheduler_strategy"] == "no_buffer" and "disable_radix_cache" not in args
    args = parse_server_args(DUMP[: DUMP.index("[1, 2, 4") + 5])  # inside a value
    assert args is not None and args["load_format"] == "<LoadFormat.AUTO: 'auto'>" and "cuda_graph_bs" not in args


def test_memory_and_decode_figures_come_from_their_lines() -> None:
    figures = diagnose(DUMP + "\n" + STARTUP).figures
    assert figures.server_args and figures.server_args["tp_size"] == 1
    assert figures.memory == {
        "avail_before_weights_gb": 94.12,
        "avail_after_weights_gb": 42.51,
        "weights_gb": 51.61,
        "kv_tokens": 412345,
        "kv_k_gb": 15.73,
        "kv_v_gb": 15.73,
        "avail_after_kv_gb": 10.87,
        "cuda_graph_gb": 1.5,
        "avail_after_cuda_graph_gb": 9.36,
        "max_total_num_tokens": 412345,
        "max_running_requests": 48,
        "context_len": 262144,
    }
    assert figures.decode == [
        {"running_requests": 3, "tokens": 1200, "token_usage": 0.01, "gen_throughput": 210.55, "accept_length": 2.71},
        {"running_requests": 5, "tokens": 2400, "token_usage": 0.02, "gen_throughput": 330.1},
    ]


def test_a_long_serving_log_keeps_a_bounded_decode_series() -> None:
    line = "[10:01:00 TP0] Decode batch, #running-req: 1, #token: 5, token usage: 0.00, gen throughput (token/s): 9.0\n"
    figures = diagnose(line * 10_000).figures
    assert 1000 <= len(figures.decode) <= 2000


@given(st.lists(st.integers(min_value=1, max_value=200), min_size=1, max_size=30))
def test_figures_are_the_same_however_the_log_is_cut_into_chunks(cuts: list[int]) -> None:
    text = DUMP + "\n" + STARTUP
    analyzer, position = Analyzer(), 0
    for size in cuts:
        analyzer.feed(text[position : position + size])
        position += size
    analyzer.feed(text[position:])
    assert analyzer.finish().figures == diagnose(text).figures


def test_a_failure_after_hours_of_serving_is_found_among_the_batch_lines() -> None:
    decode = "[2026-01-05 11:00:00 TP{rank}] Decode batch, #running-req: 8, #token: 9000, token usage: 0.40, \
gen throughput (token/s): 800.00, #queue-req: 0\n"
    log = STARTUP + "[2026-01-05 10:01:20] The server is fired up and ready to roll!\n"
    log += (
        decode.format(rank=0) * 50_000
        + (
            "[2026-01-05 11:00:01 TP1] Scheduler hit an exception: Traceback (most recent call last):\n"
            '  File "/sgl/python/sglang/srt/managers/scheduler.py", line 2100, in run_scheduler_process\n'
            + decode.format(rank=0)
            + "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. GPU 1 has a total capacity of "
            "94.97 GiB of which 1.02 GiB is free.\n"
        )
        + decode.format(rank=0) * 1000
    )
    result = diagnose(log)
    assert result.stage == "serving" and result.failure_class == "oom"
    assert result.root_error is not None and result.root_error.startswith("torch.OutOfMemoryError: CUDA out of memory.")
    assert result.root_line == log[: log.index("torch.OutOfMemoryError")].count("\n") + 1
    assert result.figures.decode_lines == 51_003 and len(result.figures.decode) < 2000


def test_the_root_error_keeps_its_innermost_sglang_frames() -> None:
    args = "/opt/venv/lib/python3.12/site-packages/sglang/srt/server_args.py"
    log = (
        "Traceback (most recent call last):\n"
        '  File "<frozen runpy>", line 198, in _run_module_as_main\n'
        '  File "/opt/venv/lib/python3.12/site-packages/sglang/launch_server.py", line 19, in <module>\n'
        "    server_args = prepare_server_args(sys.argv[1:])\n"
        f'  File "{args}", line 80, in __post_init__\n'
        f'  File "{args}", line 126, in _handle_model_specific_adjustments\n'
        f'  File "{args}", line 144, in _handle_mamba_radix_cache\n'
        '  File "/usr/lib/python3.12/enum.py", line 1, in __call__\n'
        "ValueError: Speculative decoding for Qwen3_5ForConditionalGeneration is not compatible with radix cache\n"
    )
    assert diagnose(log).frames == [
        "sglang/srt/server_args.py:__post_init__",
        "sglang/srt/server_args.py:_handle_model_specific_adjustments",
        "sglang/srt/server_args.py:_handle_mamba_radix_cache",
    ]
