"""One rank's start-up: distributed init, weights, memory pools, CUDA graphs.

Memory is really booked on the rank's GPU, stage by stage, with SGLang's budget rules:
the KV budget is the free memory after the weights minus the share that
`--mem-fraction-static` leaves free (measured before the weights), and CUDA graphs (decode
batches, then the prefill graphs a release captures) live in what is left. So an out-of-memory
error happens at the stage where the numbers stop fitting. The arithmetic is simperf's, which can
replay it without a server to find where a fraction stops fitting.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from typing import Any

import simperf
from sglang.srt.configs.model_config import SUPPORTED_ARCHITECTURES, ModelConfig
from sglang.srt.device import Device
from sglang.srt.distributed import init_process_group, parse_address
from sglang.srt.utils import GiB, OutOfMemoryError, ProgressBar, elapsed_since, pause
from sglang.version import release

logger = logging.getLogger(__name__)

LOAD_BYTES_PER_SECOND = 2.5 * GiB
CAPTURE_SECONDS_PER_BS = 0.35
TORCH_COMPILE_SECONDS = 240.0

# What to try when graph capture runs out of memory, in each release's words and flags.
CUDA_GRAPH_CAPTURE_FAILED_MSG = {
    "0.5.10": (
        "Possible solutions:\n"
        "1. set --mem-fraction-static to a smaller value (e.g., 0.8 or 0.7)\n"
        "2. set --cuda-graph-max-bs to a smaller value (e.g., 16)\n"
        "3. disable torch compile by not using --enable-torch-compile\n"
        "4. disable CUDA graph by --disable-cuda-graph. (Not recommended. Huge performance loss)\n"
        "Open an issue on GitHub https://github.com/sgl-project/sglang/issues/new/choose \n"
    ),
    "0.5.23": (
        "Possible solutions:\n"
        "1. set --mem-fraction-static to a smaller value (e.g., 0.8 or 0.7)\n"
        "2. set --cuda-graph-max-bs-decode to a smaller value (e.g., 16)\n"
        "3. disable decode CUDA graph by --cuda-graph-backend-decode=disabled. "
        "(Not recommended. Huge performance loss)\n"
        "Open an issue on GitHub https://github.com/sgl-project/sglang/issues/new/choose \n"
    ),
}


def log_info_on_rank0(tp_rank: int, message: str) -> None:
    if tp_rank == 0:
        logger.info(message)


class ModelRunner:
    def __init__(
        self,
        server_args: Any,
        model_config: ModelConfig,
        tp_rank: int,
        device: Device,
        on_link_lost: Callable[[BaseException], None],
    ):
        self.server_args = server_args
        self.model_config = model_config
        self.tp_rank = tp_rank
        self.tp_size = server_args.tp_size
        self.device = device
        self.on_link_lost = on_link_lost
        self.spec = server_args.speculative_algorithm is not None
        self.initialize()

    def initialize(self) -> None:
        self.init_torch_distributed()
        self.load_model()
        self.init_memory_pool()
        if not self.server_args.disable_cuda_graph:
            self.init_device_graphs()

    def init_torch_distributed(self) -> None:
        logger.info("Init torch distributed begin.")
        before = self.device.free_gb()
        self.device.init_context()
        self.join_other_nodes()
        pause(2.0 if self.tp_size > 1 else 0.5)
        self.pre_model_load_memory = self.device.free_gb()
        logger.info(f"Init torch distributed ends. mem usage={before - self.pre_model_load_memory:.2f} GB")

    def join_other_nodes(self) -> None:
        """Ranks on several nodes meet at the dist-init address and stay linked (see
        sglang.srt.distributed); the ranks of one node need no network to meet."""
        timeout = self.server_args.dist_timeout
        if timeout is not None:
            assert timeout > 0, "timeout must be positive"
        if self.server_args.nnodes == 1:
            return
        if self.server_args.dist_init_addr:
            address, between_hosts = parse_address(self.server_args.dist_init_addr), True
        else:  # each node's own address: the nodes never meet
            address, between_hosts = (self.server_args.host or "127.0.0.1", self.server_args.dist_port), False
        group = init_process_group(address, self.tp_rank, self.tp_size, timeout, between_hosts)
        group.watch(self.on_link_lost)

    def load_model(self) -> None:
        tic = time.perf_counter()
        before = self.device.free_gb()
        logger.info(f"Load weight begin. avail mem={before:.2f} GB")
        if self.model_config.architecture not in SUPPORTED_ARCHITECTURES:
            raise ValueError(
                f"Model architectures ['{self.model_config.architecture}'] are not supported for now. "
                f"Supported architectures: dict_keys({list(SUPPORTED_ARCHITECTURES)})"
            )
        log_info_on_rank0(self.tp_rank, "Using model weights format ['*.safetensors']")
        shards = self.model_config.shard_count
        shard_bytes = self.model_config.weight_bytes // self.tp_size // shards
        seconds_per_shard = shard_bytes / LOAD_BYTES_PER_SECOND
        bar = ProgressBar(
            "Loading safetensors checkpoint shards", shards, newline_frames=True, step_seconds=seconds_per_shard
        )
        if self.tp_rank == 0:
            bar.start()
        for _ in range(shards):
            self.load_weights(shard_bytes)
            pause(seconds_per_shard)
            if self.tp_rank == 0:
                bar.update()
        after = self.device.free_gb()
        self.weight_load_mem_usage = before - after
        logger.info(
            f"Load weight end. elapsed={elapsed_since(tic):.2f} s, type={self.model_config.architecture}, "
            f"dtype={self.model_config.dtype}, avail mem={after:.2f} GB, mem usage={self.weight_load_mem_usage:.2f} GB."
        )

    def load_weights(self, nbytes: int) -> None:
        self.device.allocate(nbytes)

    def init_memory_pool(self) -> None:
        args = self.server_args
        config = self.model_config
        plan = simperf.plan_memory_pool(
            args, config, self.tp_size, self.device.free_gb(), self.pre_model_load_memory, args.mem_fraction_static
        )
        self.max_mamba_cache_size = plan.max_mamba_cache_size
        self.max_total_num_tokens = plan.max_total_num_tokens
        if self.max_total_num_tokens <= 0:
            raise RuntimeError(
                "Not enough memory. Please try to increase --mem-fraction-static. "
                f"Current value: mem_fraction_static={args.mem_fraction_static}"
            )
        self.max_running_requests = plan.max_running_requests
        self.device.allocate(plan.req_to_token_bytes)
        log_info_on_rank0(self.tp_rank, f"Using KV cache dtype: {config.dtype}")
        if config.is_hybrid_gdn:
            self.init_mamba_pool(plan.conv_bytes, plan.ssm_bytes, plan.intermediate_bytes)
        self.token_to_kv_pool = MHATokenToKVPool(
            self.max_total_num_tokens, plan.cell_size, config.full_attention_layers, config.dtype, self.device
        )
        pause(1.0)
        logger.info(f"Memory pool end. avail mem={self.device.free_gb():.2f} GB")

    def init_mamba_pool(self, conv_bytes: int, ssm_bytes: int, intermediate_bytes: int) -> None:
        size = self.max_mamba_cache_size
        self.device.allocate(size * (conv_bytes + ssm_bytes) + intermediate_bytes)
        message = (
            f"Mamba Cache is allocated. max_mamba_cache_size: {size}, "
            f"conv_state size: {size * conv_bytes / GiB:.2f}GB, ssm_state size: {size * ssm_bytes / GiB:.2f}GB "
        )
        if intermediate_bytes:
            share = intermediate_bytes / (conv_bytes + ssm_bytes)
            message += (
                f"intermediate_ssm_state_cache size: {share * ssm_bytes / GiB:.2f}GB "
                f"intermediate_conv_window_cache size: {share * conv_bytes / GiB:.2f}GB "
            )
        logger.info(message)

    def init_device_graphs(self) -> None:
        tic = time.perf_counter()
        before = self.device.free_gb()
        logger.info(f"Capture cuda graph begin. This can take up to several minutes. avail mem={before:.2f} GB")
        self.graph_runner = CudaGraphRunner(self)
        after = self.device.free_gb()
        self.graph_mem_usage = before - after
        logger.info(
            f"Capture cuda graph end. Time elapsed: {elapsed_since(tic):.2f} s. "
            f"mem usage={self.graph_mem_usage:.2f} GB. avail mem={after:.2f} GB."
        )


class MHATokenToKVPool:
    def __init__(self, size: int, cell_size: int, layer_num: int, dtype: str, device: Device, page_size: int = 1):
        self.size = size
        self.page_size = page_size
        self.cell_size = cell_size
        self.layer_num = layer_num
        self.device = device
        self._create_buffers()
        k_size = (size + page_size) * cell_size / 2 / GiB
        logger.info(
            f"KV Cache is allocated. dtype: {dtype}, #tokens: {size}, K size: {k_size:.2f} GB, V size: {k_size:.2f} GB"
        )

    def _create_buffers(self) -> None:
        per_layer = (self.size + self.page_size) * self.cell_size // 2 // self.layer_num  # simperf.kv_buffer_bytes
        for _ in range(2 * self.layer_num):  # one K and one V buffer per layer
            self.device.allocate(per_layer)


class CudaGraphRunner:
    def __init__(self, model_runner: ModelRunner):
        self.model_runner = model_runner
        self.capture_bs = simperf.decode_capture_sizes(model_runner.server_args, model_runner.max_running_requests)
        log_info_on_rank0(model_runner.tp_rank, f"Capture cuda graph bs {self.capture_bs}")
        try:
            self.capture()
        except OutOfMemoryError as e:
            raise Exception(f"Capture cuda graph failed: {e}\n{CUDA_GRAPH_CAPTURE_FAILED_MSG[release()]}")

    def capture(self) -> None:
        """The decode batches, largest first, then the prefill graphs that the release captures
        (their progress is not shown)."""
        runner = self.model_runner
        device = runner.device
        show = runner.tp_rank == 0
        sizes = list(reversed(self.capture_bs))
        bookings = simperf.graph_bookings(runner.model_config, runner.server_args, runner.tp_size, self.capture_bs)
        bar = ProgressBar("", len(sizes), step_seconds=CAPTURE_SECONDS_PER_BS)
        for i, bs in enumerate(sizes):
            bar.desc = f"Capturing batches (bs={bs} avail_mem={device.free_gb():.2f} GB)"
            if show:
                bar.start() if i == 0 else bar.update()
            if i == 0 and runner.server_args.enable_torch_compile:
                pause(TORCH_COMPILE_SECONDS)  # compiling the largest batch prints nothing
            self.capture_one_batch_size(bookings[i])
            pause(CAPTURE_SECONDS_PER_BS)
        for nbytes in bookings[len(sizes) :]:
            self.capture_one_batch_size(nbytes)
        if show:
            bar.update()
            bar.close()

    def capture_one_batch_size(self, nbytes: int) -> None:
        self.model_runner.device.allocate(nbytes)
