"""The class is weighed from what a failure shows (weighing.py), and the evidence is listed."""

from __future__ import annotations

from app.diagnose.analyze import diagnose
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
    assert result.root_error and result.root_error.startswith('File "/x/sglang/srt/model_executor/model_runner.py"')
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
