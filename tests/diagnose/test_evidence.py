"""The class is weighed from what a failure shows (weighing.py), and the evidence is listed."""

from __future__ import annotations

from app.diagnose.analyze import Analyzer, diagnose
from app.diagnose.weighing import Observation, decide

START = """[2026-04-01 09:00:00] server_args=ServerArgs(model_path='/models/m', tp_size=4)
[2026-04-01 09:00:02 TP0] Init torch distributed begin.
"""
STORE_LINE = (
    "[W401 09:10:02.551 TCPStore.cpp:125] [c10d] recvValue failed on SocketImpl(fd=31, addr=[gpu-b]:29500): "
    "Connection reset by peer"
)
CUT_IN_DIST_INIT = """[2026-04-01 09:10:03 TP2] Scheduler hit an exception: Traceback (most recent call last):
  File "/x/sglang/srt/managers/scheduler.py", line 2700, in run_scheduler_process
    scheduler = Scheduler(server_args, port_args, gpu_id, tp_rank)
  File "/x/sglang/srt/model_executor/model_runner.py", line 512, in init_torch_distributed
    init_distributed_environment(
"""


def says(result: object) -> list[str]:
    return [seen.says for seen in result.observations]  # type: ignore[attr-defined]


def test_a_traceback_cut_in_distributed_init_is_rooted_in_the_store_line_beside_it() -> None:
    result = diagnose(START + STORE_LINE + "\n" + CUT_IN_DIST_INIT)
    assert (result.failure_class, result.root_error, result.root_line) == ("nccl", STORE_LINE, 3)
    assert result.cut_off == "sglang/srt/model_executor/model_runner.py:init_torch_distributed"
    assert "the traceback is cut off in sglang/srt/model_executor/model_runner.py:init_torch_distributed, " \
        "before its exception" in says(result)  # fmt: skip
    weighed = [(seen.kind, seen.points_to) for seen in result.observations if seen.points_to]
    assert weighed == [("words", "nccl"), ("place", "nccl")]


def test_without_a_line_beside_it_the_frame_where_it_died_decides() -> None:
    result = diagnose(START + CUT_IN_DIST_INIT)
    assert result.failure_class == "nccl" and result.recognised
    assert (result.root_error, result.root_line) == ("init_distributed_environment(", 7)  # the last call shown
    assert "raised in sglang/srt/model_executor/model_runner.py:init_torch_distributed: collective communication" in (
        says(result)
    )


def test_retries_and_harmless_collective_warnings_are_no_evidence_and_no_failure() -> None:
    log = START + "\n".join(
        [
            "[W401 09:00:03.100 socket.cpp:759] [c10d] The client socket has failed to connect to [gpu-a]:29500 "
            "(errno: 111 - Connection refused).",
            "gpu-b:1234:1234 [0] NCCL INFO NET/IB : No device found.",
            "[2026-04-01 09:00:09 TP0] Init torch distributed ends. mem usage=0.61 GB",
            "[2026-04-01 09:00:10 TP0] Load weight begin. avail mem=78.20 GB",
            "[2026-04-01 09:02:10 TP0] Load weight end. type=LlamaForCausalLM, dtype=torch.bfloat16, avail mem=62.1 GB",
            "[2026-04-01 09:02:31] The server is fired up and ready to roll!",
            "",
        ]
    )
    result = diagnose(log)
    assert (result.failure_class, result.root_error, result.observations) == ("healthy", None, [])


def test_an_error_no_words_name_raised_while_a_kernel_is_compiled_is_a_kernel_build_failure() -> None:
    log = (
        START
        + """[2026-04-01 09:20:00 TP0] Scheduler hit an exception: Traceback (most recent call last):
  File "/x/sglang/srt/layers/attention/triton_ops/decode_attention.py", line 640, in decode_attention_fwd
  File "/venv/lib/python3.12/site-packages/triton/runtime/jit.py", line 591, in run
    kernel = self.compile(src, target=target, options=options.__dict__)
  File "/venv/lib/python3.12/site-packages/triton/compiler/compiler.py", line 287, in compile
    next_module = compile_ir(module, metadata)
RuntimeError: PassManager::run failed
"""
    )
    result = diagnose(log)
    assert (result.failure_class, result.root_error) == ("driver", "RuntimeError: PassManager::run failed")
    assert "raised in /venv/lib/python3.12/site-packages/triton/compiler/compiler.py:compile: kernel build failed" in (
        says(result)
    )


def test_how_the_process_ended_counts_before_the_error_and_is_only_told_after_it() -> None:
    killed_first = START + "[2026-04-01 09:30:00] worker 3 exited with code 137\nRuntimeError: worker 3 is gone\n"
    result = diagnose(killed_first)
    assert result.failure_class == "oom" and "the process was killed (137)" in says(result)
    killed_after = START + "RuntimeError: worker 3 is gone\n[2026-04-01 09:30:01] worker 3 exited with code 137\n"
    result = diagnose(killed_after)
    assert result.failure_class == "other" and "then the process ended (137)" in says(result)


def test_the_words_outweigh_everything_else_together_and_ties_go_to_the_stronger_evidence() -> None:
    words = Observation("words", "the error says: memory exhausted", "oom")
    rest = [
        Observation("place", "raised in x", "nccl"),
        Observation("beside", "c10d", "nccl"),
        Observation("exit", "killed", "nccl"),
    ]
    assert decide([words, *rest]) == "oom"
    repeated = [Observation("beside", "NCCL WARN a", "nccl"), Observation("beside", "NCCL WARN b", "nccl")]
    assert decide([Observation("place", "raised in y", "model-load"), *repeated]) == "model-load"  # a kind counts once
    assert decide([Observation("stage", "reached serving")]) is None


def test_a_cut_traceback_is_rooted_in_the_last_call_it_shows_never_markers_or_a_frame_cut_mid_line() -> None:
    log = (
        START
        + """[2026-04-01 09:10:03 TP0] Scheduler hit an exception: Traceback (most recent call last):
  File "/x/sglang/srt/managers/scheduler.py", line 2700, in run_scheduler_process
    scheduler = Scheduler(server_args, port_args, gpu_id, tp_rank)
                ^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^
  File "/x/sglang/srt/model_exec"""
    )
    result = diagnose(log)
    assert (result.root_error, result.root_line) == (
        "scheduler = Scheduler(server_args, port_args, gpu_id, tp_rank)",
        5,
    )
    assert result.cut_off == "sglang/srt/managers/scheduler.py:run_scheduler_process"


def test_where_a_cut_traceback_was_going_places_it_the_loader_or_an_import() -> None:
    loader = (
        START
        + """Traceback (most recent call last):
  File "/x/sglang/srt/model_executor/model_runner.py", line 387, in initialize
    self.load_model()
"""
    )
    assert diagnose(loader).failure_class == "model-load"
    importing = (
        START
        + """Traceback (most recent call last):
  File "/x/sglang/srt/entrypoints/engine.py", line 40, in <module>
    import outlines.generate
"""
    )
    assert diagnose(importing).failure_class == "import-error"


def test_lines_that_end_a_process_below_python_are_roots_before_the_traceback_that_reports_them() -> None:
    kernel_assert = (
        "/src/aten/native/cuda/IndexKernel.cu:92: operator(): block: [0,0,0], thread: [4,0,0] Assertion "
        '`-sizes[i] <= index && index < sizes[i] && "index out of bounds"` failed.'
    )
    log = START + kernel_assert + "\nRuntimeError: CUDA error: device-side assert triggered\n"
    assert (diagnose(log).root_error, diagnose(log).failure_class) == (kernel_assert, "other")
    saver = "[torch_memory_saver.cpp] CUresult error: 2 (out of memory)  file=csrc/utils.h func=create line=88"
    assert (diagnose(START + saver + "\n").root_error, diagnose(START + saver + "\n").failure_class) == (saver, "oom")
    stuck = "Pyspy dump for PID 3096:"
    assert diagnose(START + stuck + "\nThread 3096 (idle): MainThread\n").failure_class == "timeout"


def test_torchs_cpp_log_location_is_a_wrapper_so_a_watchdog_is_classed_by_what_it_caught() -> None:
    watchdog = (
        "[rank1]:[E1209 02:28:15.281862353 ProcessGroupNCCL.cpp:2057] [PG ID 2 PG GUID 3 Rank 1] Process group "
        "watchdog thread terminated with exception: CUDA error: an illegal memory access was encountered"
    )
    result = diagnose(START + watchdog + "\n")
    assert (result.root_error, result.failure_class) == (watchdog, "other")


def test_families_no_phrase_table_held_peer_access_readiness_and_versions() -> None:
    peer = "Failed: Cuda error /src/csrc/custom_all_reduce.cuh:307 'peer access is not supported between these devices'"
    assert diagnose(START + peer + "\n").failure_class == "nccl"
    waited = "Exception: the sglang server did not become ready after 600 seconds."
    assert diagnose(START + waited + "\n").failure_class == "timeout"
    versions = "ImportError: kernel pack needs to work with torch 2.8.*, but torch 2.9.1 is found."
    assert diagnose(START + versions + "\n").failure_class == "import-error"


def test_wrappers_of_loggers_and_pastes_are_read_through() -> None:
    python_logging = "WARNING:sglang.srt.server_args:Attention backend not explicitly specified.\n"
    assert diagnose(python_logging).recognised  # a logger named after SGLang: its log, not "no log"
    ray = (
        ' (SGLangEngine pid=12589) [2026-03-25 16:16:10] INFO:     10.0.0.2:38372 - "POST /generate HTTP/1.1" 200 OK\n'
    )
    assert diagnose(ray).recognised
    cloud = "ERROR 2026-02-18T14:43:05.821Z [severity: ERROR] RuntimeError: CUDA error: an illegal memory access\n"
    assert diagnose(cloud).error_message == "CUDA error: an illegal memory access"
    bullet = "> * ImportError: libnvrtc.so.12: cannot open shared object file: No such file or directory\n"
    assert diagnose(bullet).failure_class == "import-error"


def test_the_routers_rust_log_is_an_sglang_log_and_a_docs_link_is_no_hub_failure() -> None:
    router = "2026-01-04 10:05:37  INFO sglang_router_rs::server: src/server.rs:830: Starting router on 0.0.0.0:8000\n"
    assert (diagnose(router).failure_class, diagnose(router).recognised) == ("healthy", True)
    template = (
        "ValueError: Cannot use chat template functions because tokenizer.chat_template is not set. For "
        "information about writing templates, see https://huggingface.co/docs/transformers/main/en/chat_templating\n"
    )
    assert diagnose(START + template).failure_class == "other"


def test_a_tensor_op_failing_in_the_weight_loader_is_weights_that_do_not_fit_the_model() -> None:
    log = (
        START
        + """Failed to import pynvml with ModuleNotFoundError("No module named 'pynvml'")
Failed to import pynvml with ModuleNotFoundError("No module named 'pynvml'")
Traceback (most recent call last):
  File "/x/sglang/srt/layers/moe/fused_moe_triton/layer.py", line 610, in weight_loader
    self._load_w2(shard_id=shard_id, loaded_weight=loaded_weight)
  File "/x/sglang/srt/layers/moe/fused_moe_triton/layer.py", line 455, in _load_w2
    loaded_weight = loaded_weight.narrow(shard_dim, shard_size * tp_rank, shard_size)
RuntimeError: start (12) + length (12) exceeds dimension size (12).
"""
    )
    result = diagnose(log)  # where it was raised outweighs an optional import's warning beside it
    assert result.failure_class == "model-load"
    assert [seen.says for seen in result.observations if seen.kind == "beside"] == [
        "beside it: Failed to import pynvml with ModuleNotFoundError(\"No module named 'pynvml'\") (packages disagree)"
    ]
    compiled = (
        START
        + """Traceback (most recent call last):
  File "/venv/lib/python3.12/site-packages/triton/compiler/compiler.py", line 287, in compile
    module = src.make_ir(options, codegen_fns, module_map, context)
AssertionError: initial value for `acc` is of type fp16, but the then block redefines it as bf16
"""
    )
    assert diagnose(compiled).failure_class == "other"  # the kernel's own code, not the toolchain


def test_nccl_losing_a_peer_is_a_root_though_no_exception_follows_and_its_setup_warnings_are_not() -> None:
    lost = (
        "gpu-c:1201:1388 [3] transport/net_ib.cc:2453 NCCL WARN NET/IB: Got completion from peer 10.2.0.7<51022> "
        "with status=12 opcode=0 len=0 vendor err 129 (Recv)"
    )
    result = diagnose(START + lost + "\n")
    assert (result.failure_class, result.root_error) == ("nccl", lost)
    setup = START + "gpu-c:1201:1201 [0] NCCL WARN Failed to open libibverbs.so[.1]\n"
    assert diagnose(setup).failure_class == "healthy"


def ended_with(log: str, code: int) -> object:
    analyzer = Analyzer()
    analyzer.feed(log)
    analyzer.exited(code)
    return analyzer.finish(file_alone=False)


def test_the_exit_the_dashboard_saw_is_evidence_only_where_the_log_shows_no_error() -> None:
    loading = START + "[2026-04-01 09:00:10 TP0] Load weight begin. avail mem=78.20 GB\n"
    crashed = ended_with(loading, 139)
    assert (crashed.failure_class, crashed.root_error, crashed.recognised) == ("other", None, True)
    assert says(crashed) == ["reached weights loading", "the process crashed (139)"]
    unexplained = ended_with(loading, 1)
    assert (unexplained.failure_class, unexplained.recognised) == ("other", False)
    assert unexplained.hint.startswith("The server exited with 1 and its log shows no error")
    assert ended_with(loading, 143).failure_class == "healthy"  # stopped, as asked
    with_error = ended_with(loading + "RuntimeError: shard 3 of 4 is truncated\n", 137)
    assert with_error.failure_class == "other" and says(with_error)[-1] == "then the process was killed (137)"


def test_triton_without_a_gpu_driver_and_a_model_type_transformers_does_not_know() -> None:
    no_driver = START + "RuntimeError: 0 active drivers ([]). There should only be one.\n"
    assert diagnose(no_driver).failure_class == "driver"
    unknown_type = (
        START
        + """Traceback (most recent call last):
  File "/venv/lib/transformers/models/auto/configuration_auto.py", line 1021, in from_pretrained
    config_class = CONFIG_MAPPING[config_dict["model_type"]]
KeyError: 'lark_vision'
"""
    )
    assert diagnose(unknown_type).failure_class == "model-load"


def test_a_collectors_month_day_stamp_is_a_wrapper_so_its_traceback_is_read() -> None:
    log = (
        '04-20 13:32:25.784  File "/app/sglang/srt/managers/tp_worker.py", line 260, in __init__\n'
        "04-20 13:32:25.784    self.model_runner = ModelRunner(\n"
    )
    assert diagnose(log).root_error == "04-20 13:32:25.784    self.model_runner = ModelRunner("


def test_a_frame_cut_after_its_first_letter_is_no_call() -> None:
    log = (
        START
        + """Traceback (most recent call last):
  File "/x/sglang/srt/managers/scheduler.py", line 999, in event_loop_overlap
    batch_result = self.run_batch(batch)
                   ^^^^^^^^^^^^^^^^^^^^^
  F"""
    )
    assert diagnose(log).root_error == "batch_result = self.run_batch(batch)"
