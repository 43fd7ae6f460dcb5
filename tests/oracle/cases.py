"""The oracle table: argument combinations that real SGLang and the simulator must resolve alike.

Every combination runs on each of the demo's models and on both GPU sizes of the simulated
cluster. The combinations cover what decides whether a launch serves: speculative decoding,
the mamba cache strategies of hybrid models, the radix cache, memory fractions, tensor
parallelism, flags renamed or removed between releases, and values argparse refuses.

`python -m tests.oracle.cases` prints the table as the JSON that tests/oracle/resolve.py reads.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

from app.demo.inventory import B200, DEFAULT_HOSTS, GPU_MODELS, RTX_PRO_6000, GpuModel
from tests.support.paths import MODEL_FILES

MODELS = {
    "Qwen3.6-27B": MODEL_FILES / "Qwen--Qwen3.6-27B",
    "Llama-3.1-8B": MODEL_FILES / "meta-llama--Llama-3.1-8B-Instruct",
    "Qwen3-235B-A22B": MODEL_FILES / "Qwen--Qwen3-235B-A22B-Instruct-2507",
}
GPUS = {"RTX PRO 6000": RTX_PRO_6000, "B200": B200}
# How many of each GPU a demo host has: a case sees the host it would run on.
GPU_COUNTS = {GPU_MODELS[host.gpu_model].name: host.gpu_count for host in DEFAULT_HOSTS}

SPEC_V2 = {"SGLANG_ENABLE_SPEC_V2": "1"}


def eagle(steps: int, topk: int, draft_tokens: int, algorithm: str = "EAGLE") -> list[str]:
    return [
        "--speculative-algorithm", algorithm, "--speculative-num-steps", str(steps),
        "--speculative-eagle-topk", str(topk), "--speculative-num-draft-tokens", str(draft_tokens),
    ]  # fmt: skip


MTP = eagle(3, 1, 4)
SCHEDULER = "--mamba-scheduler-strategy"  # the mamba strategy's name up to 0.5.19
RADIX = "--mamba-radix-cache-strategy"  # its name from 0.5.14 on


@dataclass(frozen=True)
class Combination:
    name: str
    args: list[str]
    env: dict[str, str] = field(default_factory=dict)


COMBINATIONS = [
    Combination("defaults", []),
    # Speculative decoding
    Combination("MTP 3/1/4", MTP),
    Combination("MTP 3/1/4, spec v2", MTP, SPEC_V2),
    Combination("EAGLE, steps left to defaults", ["--speculative-algorithm", "EAGLE"]),
    Combination("EAGLE 5/4/8 (topk > 1)", eagle(5, 4, 8)),
    Combination("EAGLE 5/4/8 (topk > 1), spec v2", eagle(5, 4, 8), SPEC_V2),
    Combination("EAGLE 3/1/8 (draft tokens adjusted)", eagle(3, 1, 8)),
    Combination("EAGLE steps only", ["--speculative-algorithm", "EAGLE", "--speculative-num-steps", "2"]),
    Combination("EAGLE3 3/1/4", eagle(3, 1, 4, "EAGLE3")),
    Combination("NEXTN 3/1/4", eagle(3, 1, 4, "NEXTN")),
    Combination("NEXTN 3/1/4, spec v2", eagle(3, 1, 4, "NEXTN"), SPEC_V2),
    # Mamba strategies, under the old flag and the new one
    Combination("scheduler strategy auto", [SCHEDULER, "auto"]),
    Combination("scheduler strategy no_buffer", [SCHEDULER, "no_buffer"]),
    Combination("scheduler strategy extra_buffer", [SCHEDULER, "extra_buffer"]),
    Combination(
        "scheduler strategy extra_buffer, radix cache off", [SCHEDULER, "extra_buffer", "--disable-radix-cache"]
    ),
    Combination("radix cache strategy no_buffer", [RADIX, "no_buffer"]),
    Combination("radix cache strategy auto", [RADIX, "auto"]),
    Combination("radix cache strategy extra_buffer", [RADIX, "extra_buffer"]),
    Combination("radix cache strategy extra_buffer, radix cache off", [RADIX, "extra_buffer", "--disable-radix-cache"]),
    Combination("MTP, scheduler strategy auto", [*MTP, SCHEDULER, "auto"]),
    Combination("MTP, scheduler strategy no_buffer", [*MTP, SCHEDULER, "no_buffer"]),
    Combination(
        "MTP, scheduler strategy no_buffer, radix cache off", [*MTP, SCHEDULER, "no_buffer", "--disable-radix-cache"]
    ),
    Combination("MTP, scheduler strategy extra_buffer", [*MTP, SCHEDULER, "extra_buffer"]),
    Combination("MTP, scheduler strategy extra_buffer, spec v2", [*MTP, SCHEDULER, "extra_buffer"], SPEC_V2),
    Combination(
        "MTP, scheduler strategy extra_buffer, radix cache off",
        [*MTP, SCHEDULER, "extra_buffer", "--disable-radix-cache"],
    ),
    Combination("MTP, radix cache strategy no_buffer", [*MTP, RADIX, "no_buffer"]),
    Combination("MTP, radix cache strategy extra_buffer", [*MTP, RADIX, "extra_buffer"]),
    Combination("MTP, radix cache strategy extra_buffer, spec v2", [*MTP, RADIX, "extra_buffer"], SPEC_V2),
    Combination(
        "MTP, radix cache strategy extra_buffer, radix cache off",
        [*MTP, RADIX, "extra_buffer", "--disable-radix-cache"],
    ),
    Combination(
        "MTP, extra_buffer, track interval 2", [*MTP, SCHEDULER, "extra_buffer", "--mamba-track-interval", "2"]
    ),
    # Radix cache, overlap schedule
    Combination("radix cache off", ["--disable-radix-cache"]),
    Combination("MTP, radix cache off", [*MTP, "--disable-radix-cache"]),
    Combination("overlap schedule off", ["--disable-overlap-schedule"]),
    # Memory
    Combination("mem fraction 0.7", ["--mem-fraction-static", "0.7"]),
    Combination("MTP, mem fraction 0.9", [*MTP, "--mem-fraction-static", "0.9"]),
    Combination("max total tokens 100000", ["--max-total-tokens", "100000"]),
    Combination("context length 32768", ["--context-length", "32768"]),
    Combination("mamba full memory ratio 0.5", ["--mamba-full-memory-ratio", "0.5"]),
    Combination("max mamba cache size 64", ["--max-mamba-cache-size", "64"]),
    # Tensor parallelism
    Combination("tp 2", ["--tp-size", "2"]),
    Combination("tp 4", ["--tp-size", "4"]),
    Combination("tp 8", ["--tp-size", "8"]),
    Combination("tp 4, MTP", ["--tp-size", "4", *MTP]),
    Combination("tp 8, MTP, scheduler strategy extra_buffer", ["--tp-size", "8", *MTP, SCHEDULER, "extra_buffer"]),
    # Several nodes: tp is the total across nodes
    Combination(
        "two nodes, tp 8, node 1",
        ["--tp-size", "8", "--nnodes", "2", "--node-rank", "1", "--dist-init-addr", "127.0.0.1:29500"],
    ),
    Combination(
        "two nodes, tp 8, old address flag, dist timeout 60",
        ["--tp", "8", "--nnodes", "2", "--nccl-init-addr", "10.0.0.1:5000", "--dist-timeout", "60"],
    ),
    Combination("two nodes, tp 3 (not divisible)", ["--tp-size", "3", "--nnodes", "2", "--node-rank", "0"]),
    Combination("nodes not a number", ["--nnodes", "two"]),
    # Scheduling
    Combination("max running requests 64", ["--max-running-requests", "64"]),
    Combination("MTP, max running requests 16", [*MTP, "--max-running-requests", "16"]),
    Combination("chunked prefill 4096", ["--chunked-prefill-size", "4096"]),
    Combination("chunked prefill off", ["--chunked-prefill-size", "-1"]),
    # Flags renamed, deprecated or removed between releases
    Combination("cuda graph max bs 128", ["--cuda-graph-max-bs", "128"]),
    Combination("cuda graph max bs decode 128", ["--cuda-graph-max-bs-decode", "128"]),
    Combination("cuda graph off", ["--disable-cuda-graph"]),
    Combination("decode cuda graph backend disabled", ["--cuda-graph-backend-decode", "disabled"]),
    Combination("kv cache fp8_e4m3", ["--kv-cache-dtype", "fp8_e4m3"]),
    Combination("kv cache fp4_e2m1", ["--kv-cache-dtype", "fp4_e2m1"]),
    # Found by drawn cases (tests/oracle/drawn.py), kept as written ones
    Combination("context length above the model's", ["--context-length", "1048576"]),
    Combination(
        "context length above the model's, allowed",
        ["--context-length", "1048576"],
        {"SGLANG_ALLOW_OVERWRITE_LONGER_CONTEXT_LEN": "1"},
    ),
    Combination("chunked prefill not a multiple of the page size", ["--chunked-prefill-size", "1000"]),
    Combination("trtllm_mha asked for", ["--attention-backend", "trtllm_mha"]),
    Combination("fa4 attention", ["--attention-backend", "fa4"]),
    Combination("torch native attention", ["--attention-backend", "torch_native"]),
    Combination("flex attention with MTP", ["--attention-backend", "flex_attention", *MTP]),
    Combination("eagle in lower case", ["--speculative-algorithm", "eagle"]),
    Combination("NGRAM with its defaults", ["--speculative-algorithm", "NGRAM"]),
    Combination("NGRAM on triton attention", ["--speculative-algorithm", "NGRAM", "--attention-backend", "triton"]),
    Combination(
        "mixed chunk with STANDALONE",
        [
            "--enable-mixed-chunk",
            "--speculative-algorithm",
            "STANDALONE",
            "--speculative-draft-model-path",
            str(MODEL_FILES / "meta-llama--Llama-3.1-8B-Instruct"),
        ],
    ),
    Combination("dp attention, dp 2, tp 2", ["--enable-dp-attention", "--dp-size", "2", "--tp-size", "2"]),
    Combination("dp attention alone", ["--enable-dp-attention"]),
    Combination("renamed tool-call parser, awq", ["--tool-call-parser", "qwen25", "--quantization", "awq"]),
    Combination("TRT-LLM MoE runner with awq", ["--moe-runner-backend", "flashinfer_trtllm", "--quantization", "awq"]),
    Combination("cutlass MoE runner, ep 2", ["--moe-runner-backend", "flashinfer_cutlass", "--ep-size", "2"]),
    Combination("bf16 mamba state", ["--mamba-ssm-dtype", "bfloat16"]),
    Combination(
        "tp 2 with all-reduce fusion forced off", ["--tp-size", "2", "--enforce-disable-flashinfer-allreduce-fusion"]
    ),
    Combination("draft MoE runner on TensorRT-LLM", ["--speculative-moe-runner-backend", "flashinfer_trtllm"]),
    Combination(
        "draft MoE runner on routed TensorRT-LLM", ["--speculative-moe-runner-backend", "flashinfer_trtllm_routed"]
    ),
    Combination("decode CUDA graphs off", ["--disable-decode-cuda-graph"]),
    Combination("weights cast to float16", ["--dtype", "half"]),
    # Values argparse refuses
    Combination("tp size not a number", ["--tp-size", "two"]),
    Combination("mem fraction not a number", ["--mem-fraction-static", "most"]),
    Combination("unknown speculative algorithm", ["--speculative-algorithm", "MEDUSA"]),
    Combination("unknown scheduler strategy", [SCHEDULER, "double_buffer"]),
    Combination("unknown flag", ["--enable-warp-drive"]),
]


@dataclass(frozen=True)
class OracleCase:
    name: str
    argv: list[str]
    gpu: GpuModel
    env: dict[str, str]

    def to_json(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "argv": self.argv,
            "gpu_mib": self.gpu.memory_total_mib,
            "gpu_name": self.gpu.name,
            "gpu_compute_cap": self.gpu.compute_cap,
            "gpu_count": GPU_COUNTS[self.gpu.name],
            "env": self.env,
        }


def oracle_cases() -> list[OracleCase]:
    return [
        OracleCase(
            name=f"{combination.name} · {model} · {gpu_label}",
            argv=["--model-path", str(model_path), *combination.args],
            gpu=gpu,
            env=combination.env,
        )
        for combination in COMBINATIONS
        for model, model_path in MODELS.items()
        for gpu_label, gpu in GPUS.items()
    ]


if __name__ == "__main__":
    print(json.dumps([case.to_json() for case in oracle_cases()], indent=1))
