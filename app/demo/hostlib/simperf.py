"""How fast, and within how much memory, the simulated SGLang server runs: pure functions.

Speed. Decoding is bound by memory bandwidth: a step streams every weight a forward pass needs
once, plus each running request's KV cache (and, for hybrid models, its recurrent state), and then
pays for the arithmetic of the tokens it processes. Under speculative decoding (EAGLE/MTP) a step
is `steps` draft forwards, one target forward that verifies `draft_tokens` tokens per request, and
one draft forward over those tokens; it yields the accept length in tokens per request, which
follows a per-depth acceptance model. Step times are real seconds, never scaled by the start-up
time scale, with a floor of MIN_STEP_SECONDS so that a busy test machine's jitter stays small
beside them.

Memory. The plan of the memory pool and of CUDA graph capture that the model runner books stage by
stage lives here too, so that `largest_starting_fraction` can find where --mem-fraction-static
stops fitting from the very arithmetic the server uses. `python -m simperf cliff ARGS...` resolves
`sglang serve` arguments on a simulated host and prints that fraction. Standard library only.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass
from types import SimpleNamespace
from typing import Any

MiB = 1 << 20
GiB = 1 << 30

# (name part, memory bandwidth in bytes/s, dense bf16 tensor FLOP/s): the datasheet figures.
GPU_SPECS = (
    ("B300", 8.0e12, 2.5e15),
    ("B200", 8.0e12, 2.25e15),
    ("H200", 4.8e12, 0.99e15),
    ("H100", 3.35e12, 0.99e15),
    ("A100", 2.0e12, 0.312e15),
    ("RTX PRO 6000", 1.8e12, 0.5e15),
    ("L40S", 0.864e12, 0.362e15),
)
OTHER_GPU = (1.0e12, 0.2e15)
MEMORY_EFFICIENCY = 0.8  # share of peak bandwidth that decode kernels reach
COMPUTE_EFFICIENCY = 0.5
TARGET_OVERHEAD_SECONDS = 1.5e-3  # launch, sampling and scheduling around a target forward
DRAFT_OVERHEAD_SECONDS = 0.8e-3  # the same around a draft forward
TREE_OVERHEAD_SECONDS = 0.4e-3  # per draft step and per extra candidate of a top-k tree
ALL_REDUCE_SECONDS = {True: 8e-6, False: 25e-6}  # per all-reduce, with NVSwitch or over PCIe
MIN_STEP_SECONDS = 0.008
DEFAULT_CONTEXT_TOKENS = 2048

# Acceptance: the draft's best guess at depth d (1-based) is right with FIRST_ACCEPT * DEPTH_DECAY**(d-1)
# given the depths before it were; each extra top-k candidate verified at a depth catches a share
# (1 - ALTERNATIVE_MISS) of the remaining misses there.
FIRST_ACCEPT = 0.82
DEPTH_DECAY = 0.86
ALTERNATIVE_MISS = 0.7

GRAPH_POOL_BYTES = 256 << 20
PREFILL_ACTIVATION_VECTORS = 10  # bf16 vectors of hidden width and of MLP width kept per prefill token


@dataclass(frozen=True)
class SpecShape:
    """An EAGLE/MTP draft: steps, candidates per step, and tokens verified per request."""

    steps: int
    topk: int
    draft_tokens: int


def spec_shape(args: Any) -> SpecShape | None:
    """The draft shape of resolved server arguments, or None without speculative decoding."""
    if getattr(args, "speculative_algorithm", None) in (None, "NGRAM"):
        return None
    return SpecShape(args.speculative_num_steps, args.speculative_eagle_topk, args.speculative_num_draft_tokens)


def gpu_rates(gpu_name: str) -> tuple[float, float]:
    """(bytes/s, FLOP/s) a GPU model reaches in decode, its datasheet scaled by the efficiencies."""
    bandwidth, flops = next(((bw, fl) for part, bw, fl in GPU_SPECS if part in gpu_name), OTHER_GPU)
    return bandwidth * MEMORY_EFFICIENCY, flops * COMPUTE_EFFICIENCY


def accept_length(spec: SpecShape | None) -> float:
    """Expected tokens a request gains per verify: 1 (the target's own) plus the accepted draft depth.

    The verified drafts (draft_tokens - 1) first cover a chain as deep as the steps allow; any left
    over become alternatives at the shallowest depths, up to topk - 1 per depth."""
    if spec is None:
        return 1.0
    nodes = max(0, spec.draft_tokens - 1)
    depth = min(spec.steps, nodes)
    spare = min(nodes - depth, (spec.topk - 1) * depth)
    length, reach = 1.0, 1.0
    for d in range(depth):
        alternatives = min(spec.topk - 1, spare)
        spare -= alternatives
        miss = (1 - FIRST_ACCEPT * DEPTH_DECAY**d) * ALTERNATIVE_MISS**alternatives
        reach *= 1 - miss
        length += reach
    return length


def _text(config: Any) -> dict[str, Any]:
    return dict(config.text)


def _embedding_bytes(config: Any) -> int:
    return int(config.vocab_size) * int(config.hidden_size) * 2


def _expert_bytes(config: Any) -> int:
    """Bytes of all routed experts (bf16), 0 for a dense model."""
    text = _text(config)
    experts = int(text.get("num_experts") or 0)
    if not experts:
        return 0
    return experts * 3 * int(config.hidden_size) * int(text["moe_intermediate_size"]) * 2 * int(config.num_layers)


def _layer_bytes(config: Any) -> float:
    """An average decoder layer's bytes: what one draft (MTP) layer weighs."""
    text = _text(config)
    untied = 0 if text.get("tie_word_embeddings") else _embedding_bytes(config)
    body = config.weight_bytes - _embedding_bytes(config) - untied
    return float(body / (config.num_layers + config.nextn_layers))


def _draft_bytes(config: Any, tp_size: int) -> float:
    """One draft forward per rank: a decoder layer and the LM head."""
    return (_layer_bytes(config) + _embedding_bytes(config)) / tp_size


def target_bytes(config: Any, tp_size: int, tokens: int) -> float:
    """Weight bytes one rank streams in a target forward over `tokens` tokens: all but the embedding
    table and the draft layers, and of a MoE's experts only those the tokens route to."""
    text = _text(config)
    untied = 0 if text.get("tie_word_embeddings") else _embedding_bytes(config)
    dense = config.weight_bytes - untied - config.nextn_layers * _layer_bytes(config)
    experts = _expert_bytes(config)
    if experts:
        count, chosen = int(text["num_experts"]), int(text["num_experts_per_tok"])
        touched = 1 - (1 - chosen / count) ** max(1, tokens)
        dense = dense - experts + experts * touched
    return float(dense / tp_size)


def _flops_per_token(config: Any, tp_size: int) -> float:
    """Two FLOPs per active bf16 parameter: numerically the bytes a single token streams."""
    return target_bytes(config, tp_size, 1)


def _state_bytes_per_request(config: Any, tp_size: int, context_tokens: int, verified: int) -> float:
    """KV cache read, and for hybrid models the recurrent state read once and written per verified token."""
    kv = config.kv_cell_bytes(tp_size) * context_tokens
    conv, ssm = config.mamba_state_bytes(tp_size)
    return float(kv + (conv + ssm) * (1 + verified))


def _all_reduce_seconds(config: Any, tp_size: int, nvswitch: bool) -> float:
    return 0.0 if tp_size == 1 else 2 * config.num_layers * ALL_REDUCE_SECONDS[nvswitch]


def step_seconds(
    gpu_name: str,
    config: Any,
    tp_size: int,
    spec: SpecShape | None = None,
    batch: int = 1,
    context_tokens: int = DEFAULT_CONTEXT_TOKENS,
) -> float:
    """Seconds of one decode step for `batch` running requests of `context_tokens` tokens each."""
    bandwidth, flops = gpu_rates(gpu_name)
    verified = spec.draft_tokens if spec else 1
    tokens = batch * verified
    memory = target_bytes(config, tp_size, tokens) + batch * _state_bytes_per_request(
        config, tp_size, context_tokens, verified if spec else 0
    )
    seconds = memory / bandwidth + tokens * _flops_per_token(config, tp_size) / flops + TARGET_OVERHEAD_SECONDS
    seconds += _all_reduce_seconds(config, tp_size, "RTX" not in gpu_name)
    if spec:
        draft = _draft_bytes(config, tp_size)
        per_step = draft / bandwidth + batch * spec.topk * draft / flops + DRAFT_OVERHEAD_SECONDS
        per_step += TREE_OVERHEAD_SECONDS * (spec.topk - 1)
        extend = draft / bandwidth + tokens * draft / flops + DRAFT_OVERHEAD_SECONDS
        seconds += spec.steps * per_step + extend
    return max(seconds, MIN_STEP_SECONDS)


def decode_speed(
    gpu_name: str,
    config: Any,
    tp_size: int,
    spec: SpecShape | None = None,
    batch: int = 1,
    context_tokens: int = DEFAULT_CONTEXT_TOKENS,
) -> tuple[float, float]:
    """(tokens per second for each running request, accept length) of steady decoding."""
    length = accept_length(spec)
    return length / step_seconds(gpu_name, config, tp_size, spec, batch, context_tokens), length


def output_throughput(
    gpu_name: str,
    config: Any,
    tp_size: int,
    spec: SpecShape | None,
    concurrency: int,
    max_running_requests: int,
    context_tokens: int = DEFAULT_CONTEXT_TOKENS,
) -> float:
    """Output tokens per second of a server kept `concurrency` requests busy; it runs at most
    `max_running_requests` at once and queues the rest."""
    batch = max(1, min(concurrency, max_running_requests))
    per_request, _ = decode_speed(gpu_name, config, tp_size, spec, batch, context_tokens)
    return batch * per_request


def prefill_seconds(gpu_name: str, config: Any, tp_size: int, tokens: int) -> float:
    """A prefill forward over `tokens` prompt tokens: compute bound once prompts are long."""
    bandwidth, flops = gpu_rates(gpu_name)
    seconds = target_bytes(config, tp_size, tokens) / bandwidth + tokens * _flops_per_token(config, tp_size) / flops
    return seconds + TARGET_OVERHEAD_SECONDS + _all_reduce_seconds(config, tp_size, "RTX" not in gpu_name)


@dataclass(frozen=True)
class PoolPlan:
    """What the memory pool holds on one rank, as SGLang sizes it from the rest of the static budget."""

    cell_size: int
    max_total_num_tokens: int
    max_mamba_cache_size: int
    max_running_requests: int
    conv_bytes: int
    ssm_bytes: int
    intermediate_bytes: int
    req_to_token_bytes: int


MAMBA_CACHE_SIZE_MAX_RUNNING_REQUESTS_RATIO = 3


def plan_memory_pool(
    args: Any, config: Any, tp_size: int, available_gb: float, pre_model_load_gb: float, fraction: float
) -> PoolPlan:
    """The KV budget is the free memory after the weights minus the share `fraction` leaves free
    (of the memory free before the weights); hybrid models first take their mamba states from it."""
    spec = args.speculative_algorithm is not None
    rest_memory = available_gb - pre_model_load_gb * (1 - fraction)
    cell_size = config.kv_cell_bytes(tp_size)
    if spec and config.nextn_layers:
        cell_size = cell_size * (config.full_attention_layers + config.nextn_layers) // config.full_attention_layers
    max_mamba_cache_size = 0
    conv_bytes, ssm_bytes = config.mamba_state_bytes(tp_size)
    mamba_per_req = conv_bytes + ssm_bytes
    intermediate_bytes = 0
    if config.is_hybrid_gdn:
        if spec:  # every running request keeps a state per draft token while verifying
            intermediate_bytes = mamba_per_req * args.max_running_requests * args.speculative_num_draft_tokens
            rest_memory -= intermediate_bytes / GiB
        if args.max_mamba_cache_size is not None:
            max_mamba_cache_size = args.max_mamba_cache_size
        elif args.disable_radix_cache and args.max_running_requests is not None:
            max_mamba_cache_size = args.max_running_requests
        else:
            ratio = args.mamba_full_memory_ratio
            max_mamba_cache_size = max(0, int(rest_memory * ratio / (1 + ratio) * GiB // mamba_per_req))
        rest_memory -= max_mamba_cache_size * mamba_per_req / GiB
    max_total_num_tokens = int(rest_memory * GiB) // cell_size
    max_running_requests = args.max_running_requests or min(
        max(int(max_total_num_tokens / config.context_len * 512), 2048), 4096
    )
    if config.is_hybrid_gdn:
        ratio = MAMBA_CACHE_SIZE_MAX_RUNNING_REQUESTS_RATIO
        if args.disable_radix_cache:
            ratio = 1
        elif args.mamba_extra_buffer:  # ping-pong track buffers: two with the overlap scheduler, else one
            ratio += 1 if args.disable_overlap_schedule else 2
        max_running_requests = max(1, min(max_running_requests, max_mamba_cache_size // ratio))
    return PoolPlan(
        cell_size=cell_size,
        max_total_num_tokens=max_total_num_tokens,
        max_mamba_cache_size=max_mamba_cache_size,
        max_running_requests=max_running_requests,
        conv_bytes=conv_bytes,
        ssm_bytes=ssm_bytes,
        intermediate_bytes=intermediate_bytes,
        req_to_token_bytes=(max_running_requests + 1) * (config.context_len + 4) * 4,
    )


def kv_buffer_bytes(plan: PoolPlan, layer_num: int, page_size: int = 1) -> int:
    """One of the 2 * layer_num K and V buffers of the KV pool."""
    return (plan.max_total_num_tokens + page_size) * plan.cell_size // 2 // layer_num


def decode_capture_sizes(args: Any, max_running_requests: int) -> list[int]:
    """Decode batch sizes captured as CUDA graphs, up to --cuda-graph-max-bs and the running limit."""
    max_bs = args.cuda_graph_max_bs
    if args.speculative_algorithm is None:
        sizes = [1, 2, 4, 8, 12, *range(16, 257, 8), *range(272, 512, 16), *range(512, max_bs + 1, 32)]
    else:
        sizes = [*range(1, 9), *range(10, 33, 2), *range(40, 65, 4), *range(72, 257, 8), *range(272, max_bs + 1, 16)]
    sizes = [bs for bs in sizes if bs <= min(max_bs, max_running_requests)]
    if max_running_requests < max_bs and max_running_requests not in sizes:
        sizes.append(max_running_requests)
    return sizes


def decode_graph_bytes(config: Any, args: Any, tp_size: int, bs: int) -> int:
    """Memory one captured decode batch size keeps in the graph pool: activations and fp32 logits
    for every token the batch verifies, on this rank (twice that with a draft model's graphs)."""
    spec = args.speculative_algorithm is not None
    tokens = bs * (args.speculative_num_draft_tokens if spec else 1)
    per_token = (config.vocab_size * 4 + config.hidden_size * 2 * 256) // tp_size
    return int(tokens * per_token * (2 if spec else 1))


def prefill_graph_tokens(args: Any) -> int:
    """The largest token count a release captures prefill CUDA graphs for (0: none): 0.5.10's
    piecewise graphs, the newest release's breakable prefill graphs."""
    config = getattr(args, "cuda_graph_config", None)
    if config is not None:
        prefill = config["prefill"]
        return max(prefill["bs"], default=0) if prefill["backend"] != "disabled" else 0
    if getattr(args, "disable_piecewise_cuda_graph", True):
        return 0
    tokens = int(args.chunked_prefill_size)
    if args.max_total_tokens is not None:
        tokens = min(tokens, args.max_total_tokens)
    if "llama-2" in args.model_path.lower():
        tokens = min(tokens, 4096)
    return tokens


def prefill_graph_bytes(config: Any, tp_size: int, tokens: int) -> int:
    """The activations of the largest prefill graph: per token, PREFILL_ACTIVATION_VECTORS bf16
    vectors of the hidden width and as many of the MLP width (a MoE's routed experts together)."""
    text = _text(config)
    mlp = int(text.get("num_experts_per_tok") or 1) * int(text.get("moe_intermediate_size") or 0)
    width = config.hidden_size + (mlp or int(text.get("intermediate_size") or 4 * config.hidden_size))
    return int(tokens * width * 2 * PREFILL_ACTIVATION_VECTORS // tp_size)


def graph_bookings(config: Any, args: Any, tp_size: int, capture_sizes: list[int]) -> list[int]:
    """What CUDA graph capture allocates, in order: the pool with the largest decode batch (smaller
    batches reuse most of it), then the largest prefill graph's activations."""
    bookings = []
    for i, bs in enumerate(reversed(capture_sizes)):
        nbytes = decode_graph_bytes(config, args, tp_size, bs)
        bookings.append(GRAPH_POOL_BYTES + nbytes if i == 0 else nbytes // 16)
    tokens = prefill_graph_tokens(args)
    if tokens:
        bookings.append(prefill_graph_bytes(config, tp_size, tokens))
    return bookings


def first_failing_stage(
    config: Any,
    args: Any,
    fraction: float,
    total_mib: int,
    reserved_mib: int = 533,
    context_bytes: int = 544 * MiB,
) -> str | None:
    """The stage ("weights", "pool", "kv", "graphs") where one rank's start-up on an empty GPU of
    `total_mib` runs out of memory, or None when it starts."""
    return simulate_start(config, args, fraction, total_mib, reserved_mib, context_bytes)[0]


def simulate_start(
    config: Any,
    args: Any,
    fraction: float,
    total_mib: int,
    reserved_mib: int = 533,
    context_bytes: int = 544 * MiB,
) -> tuple[str | None, PoolPlan | None]:
    """Books one rank's start-up as the server does, MiB by MiB: (failing stage or None, pool plan)."""
    tp_size = args.tp_size
    free = total_mib - reserved_mib

    def book(nbytes: int) -> bool:
        nonlocal free
        mib = -(-nbytes // MiB)
        if mib > free:
            return False
        free -= mib
        return True

    book(context_bytes)
    pre_model_load_gb = free * MiB / GiB
    shard_bytes = config.weight_bytes // tp_size // config.shard_count
    if not all(book(shard_bytes) for _ in range(config.shard_count)):
        return "weights", None
    plan = plan_memory_pool(args, config, tp_size, free * MiB / GiB, pre_model_load_gb, fraction)
    if plan.max_total_num_tokens <= 0 or not book(plan.req_to_token_bytes):
        return "pool", plan
    mamba_bytes = plan.max_mamba_cache_size * (plan.conv_bytes + plan.ssm_bytes) + plan.intermediate_bytes
    if config.is_hybrid_gdn and not book(mamba_bytes):
        return "pool", plan
    layers = config.full_attention_layers
    if not all(book(kv_buffer_bytes(plan, layers)) for _ in range(2 * layers)):
        return "kv", plan
    if not args.disable_cuda_graph:
        sizes = decode_capture_sizes(args, plan.max_running_requests)
        if not all(book(nbytes) for nbytes in graph_bookings(config, args, tp_size, sizes)):
            return "graphs", plan
    return None, plan


def largest_starting_fraction(config: Any, args: Any, total_mib: int, **device: int) -> float:
    """The --mem-fraction-static above which start-up fails, to float precision: the lowest fraction
    that fails after one that starts, found on a 0.001 grid and then bisected."""
    grid = [i / 1000 for i in range(300, 1001)]
    outcomes = [first_failing_stage(config, args, f, total_mib, **device) is None for f in grid]
    if True not in outcomes:
        raise ValueError("no --mem-fraction-static starts this configuration")
    first_start = outcomes.index(True)
    fails_after = [i for i in range(first_start, len(grid)) if not outcomes[i]]
    if not fails_after:
        return 1.0
    low, high = grid[fails_after[0] - 1], grid[fails_after[0]]
    for _ in range(60):
        middle = (low + high) / 2
        if first_failing_stage(config, args, middle, total_mib, **device) is None:
            low = middle
        else:
            high = middle
    return high


def main(argv: list[str]) -> None:
    """`python -m simperf cliff ARGS...`: the cliff of `sglang serve ARGS` on this simulated host's
    first visible GPU (resolved as the server would; any --mem-fraction-static given is ignored)."""
    if argv[:1] != ["cliff"]:
        sys.exit("usage: python -m simperf cliff SGLANG_SERVE_ARGS...")
    import simgpu
    from sglang.srt.configs.model_config import ModelConfig
    from sglang.srt.device import CONTEXT_BYTES, visible_gpus
    from sglang.srt.server_args import prepare_server_args

    record = prepare_server_args(argv[1:])
    args = record.runtime_view()
    namespace = SimpleNamespace(**args)
    config = ModelConfig(args["model_path"], args["context_length"])
    gpu = next(g for g in simgpu.read()["gpus"] if g["index"] == visible_gpus()[args["base_gpu_id"]])
    reserved = int(gpu.get("reserved_mib", simgpu.RESERVED_MIB))
    cliff = largest_starting_fraction(
        config, namespace, gpu["memory_total_mib"], reserved_mib=reserved, context_bytes=CONTEXT_BYTES
    )
    print(f"{cliff:.9f}")


if __name__ == "__main__":
    main(sys.argv[1:])
