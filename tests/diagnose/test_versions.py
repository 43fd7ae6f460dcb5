"""Diagnosis across SGLang releases: the newest one's log formats (timestamped warnings, the dict
dump with its nested CUDA-graph settings) read as well as 0.5.10's, and hints that name each
release's real causes and fixes, concrete where the attempt's argv is known."""

from __future__ import annotations

from app.diagnose.analyze import diagnose
from app.diagnose.drift import Drift, drift, effective_fields
from app.diagnose.figures import parse_server_args
from app.diagnose.lines import logical_lines
from app.diagnose.stored import stored
from tests.support.sglang_logs import MODEL, NEWEST_ARGS, NEWEST_ARGV, NEWEST_OOM_LOG, OOM

SPECULATIVE = "Speculative decoding for Qwen3_5ForConditionalGeneration is not compatible with radix cache"
NO_BUFFER_ERROR = (
    f"ValueError: {SPECULATIVE} when using --mamba-scheduler-strategy no_buffer.To use radix cache with speculative "
    "decoding, please use --mamba-scheduler-strategy extra_buffer and set SGLANG_ENABLE_SPEC_V2=1."
)
# 0.5.10 resolves its arguments before its logging is set up: its warnings come bare.
OLD_NO_BUFFER_LOG = f"""\
Max running requests is reset to 48 for speculative decoding. You can override this by explicitly setting \
--max-running-requests.
Traceback (most recent call last):
  File "/home/ml/envs/sgl510/bin/sglang", line 8, in <module>
    sys.exit(main())
  File "/home/ml/envs/sgl510/lib/python3.11/site-packages/sglang/srt/server_args.py", line 6539, in \
prepare_server_args
    return ServerArgs.from_cli_args(raw_args)
  File "/home/ml/envs/sgl510/lib/python3.11/site-packages/sglang/srt/server_args.py", line 2206, in \
_handle_mamba_radix_cache
    raise ValueError(
{NO_BUFFER_ERROR}
"""
OLD_ARGV = ["python3", "-m", "sglang.launch_server", "--model-path", MODEL, "--speculative-algorithm", "EAGLE"]


def test_a_dict_dump_with_nested_settings_is_read_as_python_values() -> None:
    line = f"[2026-11-20 14:02:11] server_args={NEWEST_ARGS!r}"
    assert parse_server_args(line) == NEWEST_ARGS
    fields = effective_fields(NEWEST_ARGS)
    assert (fields["cuda_graph_max_bs_decode"], fields["cuda_graph_bs_decode"]) == (24, [1, 2, 4, 8, 12, 16, 24])
    assert (fields["cuda_graph_backend_prefill"], fields["cuda_graph_max_bs_prefill"]) == ("disabled", 4096)
    assert fields["mamba_scheduler_strategy"] == "extra_buffer"  # the old name, read under the new one


def test_a_dict_dump_cut_short_keeps_its_whole_entries_before_the_cut() -> None:
    line = f"[2026-11-20 14:02:11] server_args={NEWEST_ARGS!r}"
    inside_nested = line[: line.index("'prefill': {") + 20]
    args = parse_server_args(inside_nested)
    assert args is not None and args["cuda_graph_bs_decode"] is None and "cuda_graph_config" not in args
    inside_string = line[: line.index("{{ messages") + 3]  # a cut inside a quoted value, after a comma in it
    args = parse_server_args(inside_string)
    assert args is not None and args["mamba_radix_cache_strategy"] == "extra_buffer" and "chat_template" not in args
    assert parse_server_args("[2026-11-20 14:02:11] server_args={'model_path': 'm', 'load_format': <Fmt.AUTO: 1>}") == {
        "model_path": "m",
        "load_format": "<Fmt.AUTO: 1>",
    }
    assert parse_server_args("[2026-11-20 14:02:11] server_args={'model_pa") == {}


def test_newest_prefixes_are_read_with_milliseconds_and_named_roles() -> None:
    (line,) = logical_lines("[2026-11-20 14:02:11.204 DP1 ATTN_CP0 TP3 EP3] Load weight begin. avail mem=93.41 GB", 1)
    assert (line.ranks, line.text) == ("DP1 ATTN_CP0 TP3 EP3", "Load weight begin. avail mem=93.41 GB")
    (line,) = logical_lines("[2026-11-20 14:02:12 encode_dp_worker[2]] Encoder ready", 2)
    assert (line.prefixed, line.ranks, line.text) == (True, "encode_dp_worker[2]", "Encoder ready")
    glued = "Capturing batches (bs=24 avail_mem=4.10 GB):   0%|     | 0/7[2026-11-20 14:03:05.017 TP0] Load weight end."
    assert [piece.text for piece in logical_lines(glued, 3)][-1] == "Load weight end."


def test_the_newest_log_gives_stage_adjustments_and_drift_from_its_dict_dump() -> None:
    result = diagnose(NEWEST_OOM_LOG)
    assert (result.failure_class, result.stage) == ("oom", "cuda graph capture")
    assert result.root_error == OOM
    assert result.adjustments == [
        "Attention backend not specified. Use triton backend by default.",
        "Max running requests is reset to 48 for speculative decoding. You can override this by explicitly setting "
        "--max-running-requests.",
    ]
    assert result.figures.server_args == NEWEST_ARGS
    found = drift(NEWEST_ARGV, result.figures.server_args, result.adjustments, result.root_error)
    assert found == [
        Drift("attention_backend", None, "triton", "warning", result.adjustments[0]),
        Drift("max_running_requests", None, 48, "warning", result.adjustments[1]),
        Drift("mem_fraction_static", 0.85, 0.7712349018554687, "server_args"),
        Drift("cuda_graph_backend_prefill", "breakable", "disabled", "server_args"),
    ]


OLD_DUMP = (
    f"server_args=ServerArgs(model_path='{MODEL}', tp_size=2, mem_fraction_static=0.7712349018554687, "
    "speculative_algorithm='EAGLE', mamba_scheduler_strategy='extra_buffer', disable_radix_cache=False)"
)


def test_out_of_memory_on_a_hybrid_model_names_the_mamba_state_cache() -> None:
    for log in (NEWEST_OOM_LOG, NEWEST_OOM_LOG.replace(f"server_args={NEWEST_ARGS!r}", OLD_DUMP)):
        result = diagnose(log)
        assert result.failure_class == "oom"
        assert "mamba state cache" in result.hint and "extra_buffer does not add memory" in result.hint
        for fix in ("--max-mamba-cache-size", "--mamba-full-memory-ratio", "lower --mem-fraction-static"):
            assert fix in result.hint
    # Out of memory with no hybrid model in view (dump, weights' type, mamba cache) is the plain case.
    no_mamba = "\n".join(line for line in NEWEST_OOM_LOG.split("\n") if "Mamba" not in line)
    no_mamba = no_mamba.replace("type=Qwen3_5ForConditionalGeneration", "type=Qwen3ForCausalLM")
    no_mamba = no_mamba.replace("'uses_mamba_radix_cache': True", "'uses_mamba_radix_cache': False")
    plain = diagnose(no_mamba)
    assert plain.failure_class == "oom" and "mamba" not in plain.hint and "--mem-fraction-static" in plain.hint


def test_the_no_buffer_refusal_says_whether_the_argv_asked_for_the_strategy() -> None:
    result = diagnose(OLD_NO_BUFFER_LOG)
    assert result.root_error == NO_BUFFER_ERROR and result.failure_class == "arg-conflict"

    never_asked = stored(result, OLD_ARGV)
    assert never_asked.failure_class == "arg-conflict"
    assert never_asked.hint.startswith(
        "The attempt's argv has no --mamba-scheduler-strategy: the strategy was never requested, so SGLang's "
        "default auto became no_buffer"
    )
    assert "Fix: pass --mamba-scheduler-strategy extra_buffer" in never_asked.hint
    assert "--disable-radix-cache" in never_asked.hint
    assert drift(OLD_ARGV, None, result.adjustments, result.root_error)[-1] == Drift(
        "mamba_scheduler_strategy", None, "no_buffer", "error", NO_BUFFER_ERROR
    )

    asked = stored(result, [*OLD_ARGV, "--mamba-scheduler-strategy=extra_buffer"])
    assert asked.failure_class == "arg-conflict"  # SGLang did not override it: it never got it
    assert asked.hint.startswith(
        "The attempt's argv has --mamba-scheduler-strategy extra_buffer, yet SGLang ran no_buffer: 0.5.10 to 0.5.13 "
        "never override an explicit extra_buffer, so the flag did not reach this server"
    )
    auto = stored(result, [*OLD_ARGV, "--mamba-scheduler-strategy", "auto"]).hint
    assert auto.startswith(
        "The attempt's argv asks for --mamba-scheduler-strategy auto, which 0.5.10 to 0.5.13 turn into"
    )


def test_extra_buffer_with_the_radix_cache_off_says_keep_one_or_use_no_buffer() -> None:
    error = (
        "ValueError: mamba extra_buffer is not compatible with --disable-radix-cache Overlap scheduling is already "
        "supported with no_buffer + disable_radix_cache. Please use --mamba-scheduler-strategy no_buffer instead."
    )
    result = diagnose(
        f'Traceback (most recent call last):\n  File "/o/sglang/srt/server_args.py", line 2168\n{error}\n'
    )
    assert (result.failure_class, result.root_error) == ("arg-conflict", error)
    assert "keep the radix cache (drop --disable-radix-cache) with extra_buffer" in result.hint
    assert "no_buffer with the radix cache off" in result.hint


def test_the_newest_no_buffer_assertion_offers_extra_buffer_or_no_overlap() -> None:
    log = """\
[2026-11-20 15:10:40] Attention backend not specified. Use triton backend by default.
Traceback (most recent call last):
  File "/srv/sgl/lib/python3.12/site-packages/sglang/srt/entrypoints/engine.py", line 1153, in _launch_subprocesses
    server_args.resolve_once()
  File "/srv/sgl/lib/python3.12/site-packages/sglang/srt/arg_groups/mamba_hook.py", line 158, in \
validate_mamba_no_buffer
    assert view.disable_overlap_schedule, (
AssertionError: no_buffer do not support overlap schedule. Try to set disable_overlap_schedule=True.
"""
    result = diagnose(log)
    assert result.failure_class == "arg-conflict"
    assert result.root_error == (
        "AssertionError: no_buffer do not support overlap schedule. Try to set disable_overlap_schedule=True."
    )
    assert "use extra_buffer (the default for hybrid models there" in result.hint
    assert "--disable-overlap-schedule" in result.hint


USAGE = """\
usage: sglang serve [-h] --model-path MODEL_PATH
                    [--tokenizer-path TOKENIZER_PATH]
                    [--mamba-radix-cache-strategy {auto,no_buffer,extra_buffer}]
                    [--cuda-graph-max-bs-decode CUDA_GRAPH_MAX_BS_DECODE]
                    [--cuda-graph-max-bs-prefill CUDA_GRAPH_MAX_BS_PREFILL]
"""


def test_a_flag_the_newest_parser_does_not_know_is_named_with_its_replacement() -> None:
    renamed = diagnose(USAGE + "sglang serve: error: unrecognized arguments: --mamba-scheduler-strategy extra_buffer\n")
    assert renamed.failure_class == "arg-conflict"
    assert renamed.root_error == "sglang serve: error: unrecognized arguments: --mamba-scheduler-strategy extra_buffer"
    assert renamed.hint == (
        "The host's SGLang does not know --mamba-scheduler-strategy: a misspelling, or a flag its version renamed or "
        "removed. --mamba-scheduler-strategy was renamed to --mamba-radix-cache-strategy in 0.5.14, removed in 0.5.20: "
        "use --mamba-radix-cache-strategy."
    )
    split = diagnose(
        USAGE + "sglang serve: error: ambiguous option: --cuda-graph-max-bs could match --cuda-graph-max-bs-decode, "
        "--cuda-graph-max-bs-prefill\n"
    )
    assert split.failure_class == "arg-conflict"
    assert "has no --cuda-graph-max-bs of its own" in split.hint and "use --cuda-graph-max-bs-decode" in split.hint
    misspelt = diagnose(USAGE + "sglang serve: error: unrecognized arguments: --tp-szie 2\n")
    assert misspelt.hint.startswith("The host's SGLang does not know --tp-szie: a misspelling, or a flag its version")
    assert "use " not in misspelt.hint
    choice = diagnose(
        USAGE + "sglang serve: error: argument --kv-cache-dtype: invalid choice: 'fp4_e2m1' (choose from 'auto', "
        "'fp8_e4m3', 'bf16')\n"
    )
    assert choice.failure_class == "arg-conflict" and "does not offer 'fp4_e2m1' for --kv-cache-dtype" in choice.hint


def test_the_newest_releases_adjustment_wordings_are_listed_and_read_as_drift() -> None:
    log = """\
[2026-11-21 08:30:02] SM100+ detected with mamba-ssm-dtype=bfloat16, defaulting --linear-attn-decode-backend to \
flashinfer.
[2026-11-21 08:30:02] Kernel io backend does not support page first direct layout, switching to direct io backend
[2026-11-21 08:30:02] Enable deterministic inference because of rl_on_policy_target.
[2026-11-21 08:30:03] Load weight begin. avail mem=177.20 GB
"""
    result = diagnose(log)
    assert [line.split(",")[0] for line in result.adjustments] == [
        "SM100+ detected with mamba-ssm-dtype=bfloat16",
        "Kernel io backend does not support page first direct layout",
        "Enable deterministic inference because of rl_on_policy_target.",
    ]
    argv = ["sglang", "serve", "--model-path", MODEL, "--mamba-ssm-dtype", "bfloat16"]
    assert drift(argv, None, result.adjustments)[0] == Drift(
        "linear_attn_decode_backend", None, "flashinfer", "warning", result.adjustments[0]
    )


def test_general_hints_spell_flags_as_the_release_that_wrote_the_log() -> None:
    capture = """\
[2026-11-22 11:00:04 TP0] Scheduler hit an exception: Traceback (most recent call last):
  File "/srv/sgl/lib/python3.12/site-packages/sglang/srt/model_executor/runner_backend/full_cuda_graph_backend.py", \
line 233, in capture_one
    out = forward()
Exception: Capture cuda graph failed: operation failed due to a previous error during capture
"""
    newest = diagnose(f"[2026-11-22 11:00:01] server_args={NEWEST_ARGS!r}\n{capture}")
    assert newest.failure_class == "cuda-graph"
    assert "--cuda-graph-backend-decode disabled --cuda-graph-backend-prefill disabled" in newest.hint
    assert "--cuda-graph-max-bs-decode" in newest.hint
    assert "--disable-cuda-graph" not in newest.hint
    oldest = diagnose(f"[2026-11-22 11:00:01] server_args=ServerArgs(model_path='m', cuda_graph_max_bs=32)\n{capture}")
    assert "--disable-cuda-graph to confirm" in oldest.hint and "-decode" not in oldest.hint
    untold = diagnose(capture)
    assert "--cuda-graph-max-bs (--cuda-graph-max-bs-decode in the newest releases)" in untold.hint


def test_a_preflight_prediction_in_the_newest_dict_is_compared_setting_by_setting() -> None:
    predicted = {**NEWEST_ARGS, "cuda_graph_config": {"prefill": {"backend": "breakable"}}}
    found = drift(NEWEST_ARGV, NEWEST_ARGS, predicted=predicted)
    row = next(item for item in found if item.name == "cuda_graph_backend_prefill")
    assert (row.requested, row.predicted, row.effective, row.unforeseen) == ("breakable", "breakable", "disabled", True)


def test_the_no_buffer_refusal_under_a_config_file_points_at_the_file() -> None:
    hint = stored(diagnose(OLD_NO_BUFFER_LOG), [*OLD_ARGV, "--config", "/srv/presets/mtp.yaml"]).hint
    assert hint.startswith(
        "The attempt's argv has no --mamba-scheduler-strategy, and its --config file /srv/presets/mtp.yaml leaves "
        "the strategy to auto or asks for no_buffer"
    )
