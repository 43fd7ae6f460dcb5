"""A scheduler process, one per tensor-parallel rank, started by the server's main process.

It loads its share of the model onto its GPU, reports ready, then runs the requests the
main process sends it over a socket (JSON lines). Rank 0 batches them as SGLang does: new
requests are prefilled while there is room under max_running_requests, the running ones decode
together, each forward taking the real time simperf gives it (never scaled by the start-up time
scale); after each forward it sends the main process the tokens every request gained, so that
responses can stream. Rank 0 logs SGLang's prefill and decode lines. A rank whose start-up fails
logs the traceback and sends SIGQUIT to its parent, as SGLang's schedulers do.

Run as `python -m sglang.srt.managers.scheduler`, with the socket's descriptor in
SGLANG_SIM_CONTROL_FD; the first line on it carries the server arguments and the rank.
"""

from __future__ import annotations

import json
import logging
import math
import os
import random
import select
import signal
import socket
import sys
import time
from dataclasses import dataclass, field
from datetime import datetime
from traceback import format_exception
from types import SimpleNamespace
from typing import Any

import simperf
from sglang.srt.configs.model_config import ModelConfig
from sglang.srt.device import Device
from sglang.srt.model_executor.model_runner import ModelRunner
from sglang.srt.utils import configure_logger, pause, rank_prefix, set_process_title

logger = logging.getLogger(__name__)

CONTROL_FD_ENV = "SGLANG_SIM_CONTROL_FD"
FAULT_ENV = "LAUNCHDECK_SIM_FAULT"
FAULT_FILE = "sim-fault"
STALE_MODEL_FAULT = "stale-model"
DEAF_FAULT = "deaf-to-sigterm"  # a server stuck in its shutdown: only SIGKILL ends it
KILL_WAIT_SECONDS = 2.0
CATCH_UP_SECONDS = 0.05  # how late a forward may start after the one before, kept on the GPU's pace
NCCL_TIMEOUT_SECONDS = 600


def fault_requested() -> bool:
    """The zombie switch: the environment at start, or a file in the working directory at any time."""
    return os.environ.get(FAULT_ENV) == "zombie" or os.path.exists(FAULT_FILE)


def check_model_copy(model_path: str) -> None:
    """A team's own check of its model mirror, run as each rank starts, which SGLang knows nothing of.
    Asked for with LAUNCHDECK_SIM_FAULT=stale-model, it fails the rank with an error no built-in rule
    places: the failure a team teaches launchdeck about."""
    if os.environ.get(FAULT_ENV) == STALE_MODEL_FAULT:
        raise RuntimeError(
            f"modelsync: the copy of {model_path} on this host is generation 41, the team's is 42; "
            "run `modelsync pull` here before serving it"
        )


class Scheduler:
    def __init__(self, server_args: Any, tp_rank: int, control: socket.socket):
        check_model_copy(server_args.model_path)
        self.server_args = server_args
        self.tp_rank = tp_rank
        self.control = control
        self.model_config = ModelConfig(server_args.model_path, server_args.context_length)
        tp_size_per_node = server_args.tp_size // server_args.nnodes
        self.device = Device(server_args.base_gpu_id + (tp_rank % tp_size_per_node) * server_args.gpu_id_step)
        self.model_runner = ModelRunner(server_args, self.model_config, tp_rank, self.device, report_failure)
        runner = self.model_runner
        self.max_total_num_tokens = runner.max_total_num_tokens
        self.max_running_requests = runner.max_running_requests
        self.max_prefill_tokens = 16384
        logger.info(
            f"max_total_num_tokens={self.max_total_num_tokens}, "
            f"chunked_prefill_size={server_args.chunked_prefill_size}, "
            f"max_prefill_tokens={self.max_prefill_tokens}, "
            f"max_running_requests={self.max_running_requests}, "
            f"context_len={self.model_config.context_len}, "
            f"available_gpu_mem={self.device.free_gb():.2f} GB"
        )
        self.spec = simperf.spec_shape(server_args)
        self.accept_length = simperf.accept_length(self.spec)
        self.waiting: list[Request] = []
        self.running: dict[str, Request] = {}
        self.step: Step | None = None
        self.requests_seen = 0
        self.forward_ct = 0
        self.spec_accepted = self.spec_verified = 0  # since the last decode log line
        self.cum_spec_accepted = self.cum_spec_verified = 0  # since start, for /get_server_info
        self.last_gen_throughput = 0.0
        self.logged_stats: dict[str, float] = {}  # the figures of the last logged batch, for /metrics
        self.last_spec: dict[str, float] = {}
        self.tic = time.perf_counter()
        self.generated_since_log = 0
        self.buffer = b""

    def send(self, message: dict[str, Any]) -> None:
        self.control.sendall(json.dumps(message).encode() + b"\n")

    def send_ready(self) -> None:
        runner = self.model_runner
        self.send(
            {
                "event": "ready",
                "tp_rank": self.tp_rank,
                "max_total_num_tokens": self.max_total_num_tokens,
                "max_running_requests": self.max_running_requests,
                "max_mamba_cache_size": runner.max_mamba_cache_size,
                "kvcache_gb": round(runner.token_to_kv_pool.size * runner.token_to_kv_pool.cell_size / (1 << 30), 2),
                "weight_gb": round(runner.weight_load_mem_usage, 2),
                "graph_gb": round(getattr(runner, "graph_mem_usage", 0.0), 2),
                "context_len": self.model_config.context_len,
            }
        )

    def event_loop(self) -> None:
        while True:
            timeout = max(0.0, self.step.ends_at - time.perf_counter()) if self.step else 1.0
            readable, _, _ = select.select([self.control], [], [], timeout)
            if self.requests_seen and fault_requested():
                hold_forever()  # the scheduler stops answering while HTTP stays up
            if readable:
                try:
                    data = self.control.recv(65536)
                except ConnectionResetError:  # killed with our messages unread: gone all the same
                    data = b""
                if not data:
                    hold_forever()  # orphaned: the main process is gone, the GPU memory stays booked
                self.buffer += data
                while b"\n" in self.buffer:
                    line, self.buffer = self.buffer.split(b"\n", 1)
                    self.handle(json.loads(line))
            if self.tp_rank == 0:
                self.advance()

    def handle(self, message: dict[str, Any]) -> None:
        op = message["op"]
        if op == "generate":
            self.requests_seen += 1
            if self.requests_seen > 1 and self.collectives_hang():
                self.stall_in_all_reduce()
        if self.tp_rank != 0:
            return
        if op == "generate":
            self.waiting.append(Request(message["rid"], int(message["prompt_tokens"]), int(message["max_new_tokens"])))
        elif op == "abort":
            in_flight = self.step.requests if self.step else []
            for request in [*self.waiting, *self.running.values(), *in_flight]:
                request.aborted = request.aborted or request.rid == message["rid"]
            self.waiting = [r for r in self.waiting if not r.aborted]
            self.running.pop(message["rid"], None)
        elif op == "flush_cache":
            self.send({"event": "flushed", "rid": message["rid"], "success": self.flush_cache()})

    def flush_cache(self) -> bool:
        if self.waiting or self.running:
            logger.warning(
                "Cache not flushed because there are pending requests. "
                f"#queue-req: {len(self.waiting)}, #running-req: {len(self.running)}"
            )
            return False
        logger.info("Cache flushed successfully!")
        return True

    def advance(self) -> None:
        """Ends the forward in flight once its time is up and starts the next one, as the GPU would:
        new requests are prefilled first while there is room, then the running batch decodes."""
        now = time.perf_counter()
        start = now
        if self.step is not None:
            if now < self.step.ends_at:
                return
            self.finish(self.step)
            start = max(self.step.ends_at, now - CATCH_UP_SECONDS)  # keep the pace despite late wake-ups
            self.step = None
        room = self.max_running_requests - len(self.running)
        if self.waiting and room > 0:
            batch, tokens = [], 0
            while self.waiting and len(batch) < room and (not batch or tokens < self.max_prefill_tokens):
                batch.append(self.waiting.pop(0))
                tokens += batch[-1].prompt_tokens
            seconds = simperf.prefill_seconds(self.device.name, self.model_config, self.server_args.tp_size, tokens)
            if not self.running:  # busy again: throughput counts from here, not across the idle time
                self.tic, self.generated_since_log = start, 0
            self.log_prefill(batch, tokens, seconds)
            self.step = Step(start + seconds, batch)
        elif self.running:
            batch = list(self.running.values())
            context = sum(r.prompt_tokens + len(r.ids) for r in batch) // len(batch)
            seconds = simperf.step_seconds(
                self.device.name, self.model_config, self.server_args.tp_size, self.spec, len(batch), context
            )
            self.step = Step(start + seconds, batch, decode=True)

    def finish(self, step: Step) -> None:
        """Hands out the tokens a forward produced and tells the main process, one message per step."""
        updates = []
        if step.decode:
            self.forward_ct += 1
        for request in step.requests:
            if request.aborted:
                continue
            count = 1
            if step.decode and self.spec:
                before = math.floor(request.accept_credit)
                request.accept_credit += self.accept_length
                count = math.floor(request.accept_credit) - before
                request.verify_ct += 1
                request.accepted_drafts += count - 1
                self.spec_accepted += count
                self.spec_verified += 1
                self.cum_spec_accepted += count
                self.cum_spec_verified += 1
            new = [random.randrange(1000, 30000) for _ in range(min(count, request.left))]
            request.ids.extend(new)
            request.left -= len(new)
            self.generated_since_log += len(new)
            finished = request.left <= 0
            if finished:
                self.running.pop(request.rid, None)
            elif not step.decode:
                self.running[request.rid] = request
            updates.append(
                {"rid": request.rid, "ids": new, "finished": finished, "verify_ct": request.verify_ct,
                 "accepted_drafts": request.accepted_drafts}
            )  # fmt: skip
        if step.decode and self.forward_ct % self.server_args.decode_log_interval == 0:
            self.log_decode_stats()
        if not self.running and not self.waiting:  # idle: SGLang's idle check logs the empty batch
            self.log_stats(0, gen_throughput=0.0)
        message = {"event": "step", "updates": updates, "stats": self.stats()}
        if self.logged_stats:
            message["metrics"], self.logged_stats = self.logged_stats, {}
        self.send(message)

    def stats(self) -> dict[str, Any]:
        stats: dict[str, Any] = {"last_gen_throughput": self.last_gen_throughput}
        if self.spec and self.cum_spec_verified:
            stats["avg_spec_accept_length"] = self.cum_spec_accepted / self.cum_spec_verified
        return stats

    def log_stats(self, tokens: int, **figures: float) -> None:
        """The gauges SGLang's scheduler sets where it logs a batch's stats."""
        self.logged_stats = {
            "num_running_reqs": len(self.running),
            "num_queue_reqs": len(self.waiting),
            "num_used_tokens": tokens,
            "token_usage": tokens / max(self.max_total_num_tokens, 1),
            "full_token_usage": tokens / max(self.max_total_num_tokens, 1),
            "max_total_num_tokens": self.max_total_num_tokens,
            "is_cuda_graph": float(not self.server_args.disable_cuda_graph),
            "gen_throughput": self.last_gen_throughput,
            **self.last_spec,  # kept, as the gauges are, until the next decode batch sets them
            **figures,
        }

    def token_count(self) -> int:
        return sum(r.prompt_tokens + len(r.ids) for r in self.running.values())

    def log_prefill(self, batch: list[Request], tokens: int, seconds: float) -> None:
        usage = self.token_count() / max(self.max_total_num_tokens, 1)
        logger.info(
            f"Prefill batch, #new-seq: {len(batch)}, #new-token: {tokens}, #cached-token: 0, token usage: {usage:.2f}, "
            f"#running-req: {len(self.running)}, #queue-req: {len(self.waiting)}, cuda graph: False, "
            f"input throughput (token/s): {tokens / seconds:.2f}"
        )
        self.log_stats(self.token_count())

    def log_decode_stats(self) -> None:
        elapsed = time.perf_counter() - self.tic  # decoding runs in real time, whatever the time scale
        self.last_gen_throughput = self.generated_since_log / max(elapsed, 1e-3)
        tokens = self.token_count()
        message = (
            f"Decode batch, #running-req: {len(self.running)}, #token: {tokens}, "
            f"token usage: {tokens / max(self.max_total_num_tokens, 1):.2f}, "
        )
        if self.spec:
            accept_len = self.spec_accepted / max(self.spec_verified, 1)
            message += f"accept len: {accept_len:.2f}, accept rate: {accept_len / self.spec.draft_tokens:.2f}, "
            self.last_spec = {"spec_accept_length": accept_len, "spec_accept_rate": accept_len / self.spec.draft_tokens}
            self.spec_accepted = self.spec_verified = 0
        message += (
            f"cuda graph: {not self.server_args.disable_cuda_graph}, "
            f"gen throughput (token/s): {self.last_gen_throughput:.2f}, #queue-req: {len(self.waiting)}"
        )
        logger.info(message)
        self.log_stats(tokens)
        self.tic = time.perf_counter()
        self.generated_since_log = 0

    def collectives_hang(self) -> bool:
        """NVLink SHARP needs NVSwitch: on PCIe-only GPUs the first all-reduce under load never completes."""
        return self.server_args.enable_nccl_nvls and self.server_args.tp_size > 1 and not self.device.has_nvswitch

    def stall_in_all_reduce(self) -> None:
        """The last rank never joins the collective; the others hit NCCL's watchdog and abort."""
        if self.tp_rank == self.server_args.tp_size - 1:
            hold_forever()
        timeout = self.server_args.dist_timeout or NCCL_TIMEOUT_SECONDS
        pause(timeout)
        write_nccl_watchdog_abort(self.tp_rank, timeout)
        os.abort()


@dataclass
class Request:
    """A request as the scheduler tracks it; `accept_credit` carries the fractional accept length
    over from step to step, so that the tokens per verify average the model's accept length exactly."""

    rid: str
    prompt_tokens: int
    left: int
    ids: list[int] = field(default_factory=list)
    accept_credit: float = 0.5
    verify_ct: int = 0
    accepted_drafts: int = 0
    aborted: bool = False


@dataclass
class Step:
    """The forward in flight: when it ends, and which requests it serves."""

    ends_at: float
    requests: list[Request]
    decode: bool = False


def hold_forever() -> None:
    while True:
        time.sleep(3600)


def write_nccl_watchdog_abort(rank: int, timeout_s: int) -> None:
    """torch's ProcessGroupNCCL watchdog report, written straight to stderr as its C++ code does."""
    seq = 40
    ms = timeout_s * 1000
    work = (
        f"WorkNCCL(SeqNum={seq}, OpType=ALLREDUCE, NumelIn=17153024, NumelOut=17153024, Timeout(ms)={ms}) "
        f"ran for {ms + 40} milliseconds before timing out."
    )
    pg = f"PG ID 2 PG GUID 3 Rank {rank}"

    def stamp(line: int) -> str:
        now = datetime.now()
        return f"[rank{rank}]:[E{now:%m%d} {now:%H:%M:%S}.{now.microsecond * 1000:09d} ProcessGroupNCCL.cpp:{line}]"

    frames = (
        "frame #0: c10::Error::Error(c10::SourceLocation, std::__cxx11::basic_string<char, std::char_traits<char>, "
        "std::allocator<char> >) + 0x98 (0x7f3a8c56b1b8 in "
        "/usr/local/lib/python3.12/dist-packages/torch/lib/libc10.so)\n"
        "frame #1: c10d::ProcessGroupNCCL::WorkNCCL::checkTimeout(std::optional<std::chrono::duration<long, "
        "std::ratio<1l, 1000l> > >) + 0x23d (0x7f3a8d8a1a2d in "
        "/usr/local/lib/python3.12/dist-packages/torch/lib/libtorch_cuda.so)\n"
        "frame #2: c10d::ProcessGroupNCCL::watchdogHandler() + 0xc80 (0x7f3a8d8a3470 in "
        "/usr/local/lib/python3.12/dist-packages/torch/lib/libtorch_cuda.so)\n"
        "frame #3: <unknown function> + 0xd8198 (0x7f3b2e6d8198 in /lib/x86_64-linux-gnu/libstdc++.so.6)\n"
    )
    sys.stderr.write(
        f"{stamp(632)} [Rank {rank}] Watchdog caught collective operation timeout: {work}\n"
        f"{stamp(2271)} [{pg}]  failure detected by watchdog at work sequence id: {seq} PG status: "
        f"last enqueued work: {seq}, last completed work: {seq - 1}\n"
        f"{stamp(684)} [Rank {rank}] Some NCCL operations have failed or timed out. Due to the asynchronous nature "
        "of CUDA kernels, subsequent GPU operations might run on corrupted/incomplete data.\n"
        f"{stamp(698)} [Rank {rank}] To avoid data inconsistency, we are taking the entire process down.\n"
        f"{stamp(1899)} [{pg}] Process group watchdog thread terminated with exception: [Rank {rank}] "
        f"Watchdog caught collective operation timeout: {work}\n"
        "Exception raised from checkTimeout at /pytorch/torch/csrc/distributed/c10d/ProcessGroupNCCL.cpp:635 "
        f"(most recent call first):\n{frames}\n"
        "terminate called after throwing an instance of 'c10::DistBackendError'\n"
        f"  what():  [{pg}] Process group watchdog thread terminated with exception: [Rank {rank}] "
        f"Watchdog caught collective operation timeout: {work}\n"
    )
    sys.stderr.flush()


def report_failure(error: BaseException) -> None:
    """What a scheduler does with an exception: logs its traceback and SIGQUITs the main process,
    which takes the node's processes down."""
    traceback = "".join(format_exception(error))
    logger.error(f"Scheduler hit an exception: {traceback}")
    os.kill(os.getppid(), signal.SIGQUIT)
    # The main process SIGKILLs the node's ranks at once; a rank that exited first would close its
    # links, and its siblings could log the lost peer before that kill reaches them.
    time.sleep(KILL_WAIT_SECONDS)


def run_scheduler_process(server_args: Any, tp_rank: int, control: socket.socket) -> None:
    prefix = rank_prefix(server_args.tp_size, tp_rank)
    configure_logger(server_args.log_level, prefix)
    set_process_title(f"sglang::scheduler{prefix.replace(' ', '_')}")
    try:
        scheduler = Scheduler(server_args, tp_rank, control)
        scheduler.send_ready()
        scheduler.event_loop()
    except Exception as error:
        report_failure(error)


def main() -> None:
    control = socket.socket(fileno=int(os.environ.pop(CONTROL_FD_ENV)))
    data = b""
    while not data.endswith(b"\n"):  # nothing else is sent before this rank reports ready
        chunk = control.recv(65536)
        if not chunk:
            return
        data += chunk
    first = json.loads(data)
    run_scheduler_process(SimpleNamespace(**first["server_args"]), first["tp_rank"], control)


if __name__ == "__main__":
    main()
