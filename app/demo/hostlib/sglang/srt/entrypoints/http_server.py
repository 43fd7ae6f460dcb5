"""The server's main process: starts one scheduler per rank of its node, then serves HTTP on loopback.

As in SGLang, the HTTP port is bound only once every scheduler is ready, a warmup request
runs before the ready line, a child's SIGQUIT tears the whole tree down, and the endpoints
that only read the server's own state answer even when the schedulers no longer do. On several
nodes (`--nnodes`), node i runs TP ranks i*tp/n to (i+1)*tp/n - 1 on its GPUs 0 to tp/n - 1; only
node 0 runs the API, the others serve SGLang's dummy health check (/health, /health_generate and
/ping) on --port and wait on their schedulers. How the nodes' ranks meet is sglang.srt.distributed's.

Rank 0 reports after every forward which tokens each request gained; /generate and /v1/completions
with `"stream": true` pass them on as server-sent events (chunked), ending with `data: [DONE]`.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import os
import queue
import select
import signal
import socket
import subprocess
import sys
import threading
import time
import uuid
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from types import SimpleNamespace
from typing import Any
from urllib.request import Request, urlopen

import sglang
from sglang.srt.configs.model_config import ModelConfig
from sglang.srt.managers.scheduler import CONTROL_FD_ENV, DEAF_FAULT, FAULT_ENV
from sglang.srt.observability.metrics_collector import MetricsCollector
from sglang.srt.utils import configure_logger, kill_process_tree, pause, time_scale

logger = logging.getLogger(__name__)

HEALTH_CHECK_TIMEOUT = int(os.environ.get("SGLANG_HEALTH_CHECK_TIMEOUT", "20"))
LOOPBACK = ("127.0.0.1", "localhost", "::1")


class Engine:
    """The schedulers as the main process sees them: processes and their sockets."""

    def __init__(self, server_args: Any):
        self.server_args = server_args
        self.processes: list[subprocess.Popen[bytes]] = []
        self.sockets: list[socket.socket] = []
        self.scheduler_info: dict[str, Any] = {}
        self.streams: dict[str, queue.Queue[dict[str, Any]]] = {}
        self.internal_stats: dict[str, Any] = {}  # the scheduler's figures for /get_server_info
        self.lock = threading.Lock()
        self.last_heartbeat = time.time()
        self.warmed_up = False  # /health answers 503 until the warmup request has run
        self.metrics = MetricsCollector(server_args) if getattr(server_args, "enable_metrics", False) else None

    def launch_schedulers(self) -> None:
        """One scheduler per TP rank of this node: node i of n runs ranks i*tp/n to (i+1)*tp/n - 1."""
        args = {**vars(self.server_args), "dist_port": free_port()}
        per_node = self.server_args.tp_size // self.server_args.nnodes
        first = per_node * self.server_args.node_rank
        for tp_rank in range(first, first + per_node):
            ours, theirs = socket.socketpair()
            title = f"sglang::scheduler{'_TP' + str(tp_rank) if self.server_args.tp_size > 1 else ''}"
            process = subprocess.Popen(
                [title, "-m", "sglang.srt.managers.scheduler"],
                executable=sys.executable,
                pass_fds=[theirs.fileno()],
                env={**os.environ, CONTROL_FD_ENV: str(theirs.fileno())},
            )
            theirs.close()
            ours.sendall(json.dumps({"server_args": args, "tp_rank": tp_rank}).encode() + b"\n")
            self.processes.append(process)
            self.sockets.append(ours)

    def wait_until_ready(self) -> None:
        """Blocks until every rank reports ready; a failing rank SIGQUITs us before that."""
        pending = set(range(len(self.sockets)))
        buffers = {rank: b"" for rank in pending}
        while pending:
            readable, _, _ = select.select([self.sockets[r] for r in pending], [], [], 1.0)
            for sock in readable:
                rank = self.sockets.index(sock)
                data = sock.recv(65536)
                if not data:
                    pending.discard(rank)
                    continue
                buffers[rank] += data
                if b"\n" in buffers[rank]:
                    info = json.loads(buffers[rank].split(b"\n", 1)[0])
                    if rank == 0:
                        self.scheduler_info = info
                    pending.discard(rank)

    def watch_subprocesses(self) -> None:
        """SGLang's subprocess watchdog: a scheduler that dies without a word still takes the server down.

        A scheduler ended by SIGTERM went with its process group: this process has the same signal
        pending and exits with it (143), so that is a stop, not a crash to answer with SIGQUIT."""
        while True:
            for tp_rank, process in enumerate(self.processes):
                code = process.poll()
                if code not in (None, 0, -signal.SIGTERM):
                    logger.error(
                        f"Subprocess scheduler_{self.first_rank() + tp_rank} (pid={process.pid}) crashed with "
                        f"exit code {code}. "
                        "Triggering SIGQUIT for cleanup..."
                    )
                    os.kill(os.getpid(), signal.SIGQUIT)
                    return
            time.sleep(0.2)

    def first_rank(self) -> int:
        return self.server_args.tp_size // self.server_args.nnodes * self.server_args.node_rank

    def read_results(self) -> None:
        """Collects what rank 0 (playing the detokenizer's part) reports after each forward, and hands
        every request its new tokens; the last update of a request, or a reply, ends its stream."""
        buffer = b""
        while data := self.sockets[0].recv(65536):
            buffer += data
            while b"\n" in buffer:
                line, buffer = buffer.split(b"\n", 1)
                message = json.loads(line)
                self.last_heartbeat = time.time()
                self.internal_stats.update(message.get("stats", {}))
                if self.metrics is not None and "metrics" in message:
                    self.metrics.scheduler_stats(message["metrics"])
                for update in message.get("updates", [message]):
                    with self.lock:
                        stream = self.streams.get(update.get("rid", ""))
                        if stream is not None and update.get("finished", True):
                            del self.streams[update["rid"]]
                    if stream is not None:
                        stream.put(update)

    def submit(self, prompt_tokens: int, max_new_tokens: int) -> tuple[str, queue.Queue[dict[str, Any]]]:
        """Queues a request on every rank; its updates (new ids, `finished`) arrive on the returned queue."""
        rid = uuid.uuid4().hex
        stream: queue.Queue[dict[str, Any]] = queue.Queue()
        message = {"op": "generate", "rid": rid, "prompt_tokens": prompt_tokens, "max_new_tokens": max_new_tokens}
        with self.lock:
            self.streams[rid] = stream
            for sock in self.sockets:
                sock.sendall(json.dumps(message).encode() + b"\n")
        return rid, stream

    def abort(self, rid: str) -> None:
        with self.lock:
            self.streams.pop(rid, None)
            self.sockets[0].sendall(json.dumps({"op": "abort", "rid": rid}).encode() + b"\n")

    def generate(self, prompt_tokens: int, max_new_tokens: int, timeout: float | None = None) -> dict[str, Any] | None:
        """The whole output of one request, or None (and the request aborted) after `timeout` seconds."""
        arrived = time.time()
        rid, stream = self.submit(prompt_tokens, max_new_tokens)
        deadline = None if timeout is None else time.monotonic() + timeout
        result: dict[str, Any] = {"id": rid, "output_ids": []}
        chunks: list[tuple[float, int]] = []
        while True:
            try:
                update = stream.get(timeout=None if deadline is None else max(0.0, deadline - time.monotonic()))
            except queue.Empty:
                self.abort(rid)
                return None
            result["output_ids"] += update["ids"]
            chunks.append((time.time(), len(update["ids"])))
            result.update(verify_ct=update["verify_ct"], accepted_drafts=update["accepted_drafts"])
            if update["finished"]:
                self.finished(prompt_tokens, arrived, chunks, streaming=False)
                return result

    def finished(self, prompt_tokens: int, arrived: float, chunks: list[tuple[float, int]], *, streaming: bool) -> None:
        """A request's counts and latencies, for /metrics: `chunks` are its outputs' (time, new tokens)."""
        if self.metrics is not None:
            self.metrics.request_finished(prompt_tokens, arrived, [chunk for chunk in chunks if chunk[1]], streaming)

    def flush_cache(self) -> bool:
        """SGLang's cache flush, refused by the scheduler while requests are queued or running."""
        rid = uuid.uuid4().hex
        reply: queue.Queue[dict[str, Any]] = queue.Queue()
        with self.lock:
            self.streams[rid] = reply
            self.sockets[0].sendall(json.dumps({"op": "flush_cache", "rid": rid}).encode() + b"\n")
        try:
            return bool(reply.get(timeout=HEALTH_CHECK_TIMEOUT)["success"])
        except queue.Empty:
            return False


WORDS = ("the", "of", "and", "to", "in", "is", "that", "for", "it", "as", "with", "was", "on", "be", "by", "this")
VOCABULARY = frozenset(WORDS)


def count_tokens(text: str) -> int:
    """The simulated tokenizer's count: one token for each of its own words (what `detokenize`
    writes), and 1.3 for any other word, about what a BPE tokenizer averages on English."""
    words = text.split()
    known = sum(1 for word in words if word in VOCABULARY)
    return max(1, known + round((len(words) - known) * 1.3))


def detokenize(ids: list[int]) -> str:
    return " " + " ".join(WORDS[i % len(WORDS)] for i in ids) if ids else ""


@dataclasses.dataclass
class GenerateRequest:
    """One /generate or /v1/completions call and how its responses (whole or streamed) are shaped."""

    path: str
    body: dict[str, Any]
    prompt_tokens: int
    started: float
    rid: str = ""
    draft_tokens: int = 0  # set under speculative decoding: the meta_info then reports acceptance

    def output(self, ids: list[int], progress: dict[str, Any], finished: bool, delta: list[int] | None) -> Any:
        """The response body, or with `delta` a stream chunk: /generate repeats the whole text and ids
        in each chunk, the completions API sends only the new text."""
        if self.path == "/generate":
            meta_info = self.meta_info(ids, progress, finished)
            return {"text": detokenize(ids), "output_ids": list(ids), "meta_info": meta_info}
        text = detokenize(ids if delta is None else delta)
        output = {
            "id": self.rid,
            "object": "text_completion",
            "created": int(self.started),
            "model": self.body.get("model", "default"),
            "choices": [
                {
                    "index": 0,
                    "text": text,
                    "logprobs": None,
                    "finish_reason": "length" if finished else None,
                    "matched_stop": None,
                }
            ],
            "usage": None,
        }
        if delta is None or not delta:
            output["usage"] = {
                "prompt_tokens": self.prompt_tokens,
                "total_tokens": self.prompt_tokens + len(ids),
                "completion_tokens": len(ids),
                "prompt_tokens_details": None,
                "reasoning_tokens": 0,
            }
        if delta is None:
            output["metadata"] = {"weight_version": "default"}
        return output

    def meta_info(self, ids: list[int], progress: dict[str, Any], finished: bool) -> dict[str, Any]:
        meta: dict[str, Any] = {
            "id": self.rid,
            "finish_reason": {"type": "length", "length": len(ids)} if finished else None,
            "prompt_tokens": self.prompt_tokens,
            "weight_version": "default",
            "completion_tokens": len(ids),
            "cached_tokens": 0,
        }
        if finished and self.draft_tokens:
            verify_ct, accepted = progress.get("verify_ct", 0), progress.get("accepted_drafts", 0)
            meta.update(spec_accept_rate=0.0, spec_accept_length=0, spec_verify_ct=verify_ct)
            if verify_ct:
                drafted = verify_ct * (self.draft_tokens - 1)
                meta.update(
                    spec_accept_rate=accepted / drafted if drafted else 0.0,
                    spec_accept_length=len(ids) / verify_ct,
                    spec_accept_token_num=accepted,
                    spec_draft_token_num=drafted,
                )
        if finished:
            meta["e2e_latency"] = round(time.time() - self.started, 4)
        return meta


def make_handler(
    server_args: Any, engine: Engine, model_config: ModelConfig, reported_args: dict[str, Any]
) -> type[BaseHTTPRequestHandler]:
    served_name = server_args.served_model_name or server_args.model_path
    draft_tokens = (server_args.speculative_num_draft_tokens or 0) if server_args.speculative_algorithm else 0

    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"
        server_version = "uvicorn"
        sys_version = ""

        def log_message(self, format: str, *args: Any) -> None:
            pass

        def log_request(self, code: int | str = "-", size: int | str = "-") -> None:
            status = int(code)
            reason = self.responses.get(status, ("",))[0]
            logger.info(
                f'INFO:     {self.client_address[0]}:{self.client_address[1]} - "{self.requestline}" {status} {reason}'
            )

        def reply(self, status: int, body: Any = None) -> None:
            data = b"" if body is None else json.dumps(body).encode()
            self.send_response(status)
            self.send_header("content-type", "application/json")
            self.send_header("content-length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def read_json(self) -> dict[str, Any] | None:
            length = int(self.headers.get("content-length") or 0)
            try:
                body = json.loads(self.rfile.read(length) or b"{}")
            except ValueError:
                body = None
            if not isinstance(body, dict):
                self.reply(
                    400,
                    {
                        "object": "error",
                        "message": "Invalid JSON body",
                        "type": "Bad Request",
                        "param": None,
                        "code": 400,
                    },
                )
                return None
            return body

        def do_GET(self) -> None:
            path = self.path.split("?", 1)[0]
            if path in ("/health", "/health_generate"):
                self.health()
            elif path in ("/get_model_info", "/model_info"):
                if path == "/get_model_info":
                    logger.info(
                        "Endpoint '/get_model_info' is deprecated and will be removed in a future version. "
                        "Please use '/model_info' instead."
                    )
                self.reply(
                    200,
                    {
                        "model_path": server_args.model_path,
                        "tokenizer_path": server_args.tokenizer_path,
                        "is_generation": True,
                        "preferred_sampling_params": None,
                        "weight_version": "default",
                        "has_image_understanding": model_config.is_multimodal,
                        "has_audio_understanding": False,
                    },
                )
            elif path in ("/get_server_info", "/server_info"):
                info = {key: value for key, value in engine.scheduler_info.items() if key != "event"}
                self.reply(
                    200,
                    {
                        **reported_args,
                        "status": "ready",
                        "max_total_num_tokens": info.get("max_total_num_tokens"),
                        "internal_states": [
                            {
                                **engine.internal_stats,
                                "max_running_requests": info.get("max_running_requests"),
                                "memory_usage": {
                                    "weight": info.get("weight_gb"),
                                    "kvcache": info.get("kvcache_gb"),
                                    "graph": info.get("graph_gb"),
                                    "token_capacity": info.get("max_total_num_tokens"),
                                },
                            }
                        ],
                        "version": sglang.__version__,
                    },
                )
            elif path == "/v1/models":
                self.reply(
                    200,
                    {
                        "object": "list",
                        "data": [
                            {
                                "id": served_name,
                                "object": "model",
                                "created": int(time.time()),
                                "owned_by": "sglang",
                                "root": served_name,
                                "parent": None,
                                "max_model_len": model_config.context_len,
                            }
                        ],
                    },
                )
            elif path == "/ping":
                self.reply(200)
            elif path == "/metrics" and engine.metrics is not None:
                body = engine.metrics.render().encode()
                self.send_response(200)
                self.send_header("content-type", "text/plain; version=0.0.4; charset=utf-8")
                self.send_header("content-length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)
            elif path == "/flush_cache":
                self.flush_cache()
            else:
                self.reply(404, {"detail": "Not Found"})

        def do_POST(self) -> None:
            path = self.path.split("?", 1)[0]
            if path == "/flush_cache":
                self.flush_cache()
                return
            if path not in ("/generate", "/v1/completions"):
                self.reply(404, {"detail": "Not Found"})
                return
            body = self.read_json()
            if body is None:
                return
            prompt = body.get("text") if path == "/generate" else body.get("prompt")
            input_ids = body.get("input_ids") if path == "/generate" else None
            if prompt is None and isinstance(input_ids, list):
                prompt = detokenize(input_ids)
            params = body.get("sampling_params") or {} if path == "/generate" else body
            try:
                max_new_tokens = int(
                    params.get("max_new_tokens", params.get("max_tokens", 128 if path == "/generate" else 16))
                )
            except (TypeError, ValueError):
                max_new_tokens = -1
            if not isinstance(prompt, str) or max_new_tokens < 0:
                self.reply(
                    400,
                    {
                        "object": "error",
                        "message": "prompt must be a string and max tokens >= 0",
                        "type": "Bad Request",
                        "param": None,
                        "code": 400,
                    },
                )
                return
            request = GenerateRequest(path, body, count_tokens(prompt), time.time(), draft_tokens=draft_tokens)
            if body.get("stream"):
                self.stream(request, max_new_tokens)
                return
            result = engine.generate(request.prompt_tokens, max_new_tokens)
            assert result is not None
            request.rid = result["id"]
            self.reply(200, request.output(result["output_ids"], result, finished=True, delta=None))

        def stream(self, request: GenerateRequest, max_new_tokens: int) -> None:
            """Server-sent events, one per forward that gave the request tokens, then [DONE]; a client
            that hangs up has its request aborted, as SGLang does."""
            request.rid, updates = engine.submit(request.prompt_tokens, max_new_tokens)
            self.send_response(200)
            self.send_header("content-type", "text/event-stream; charset=utf-8")
            self.send_header("transfer-encoding", "chunked")
            self.end_headers()
            ids: list[int] = []
            chunks: list[tuple[float, int]] = []
            try:
                while True:
                    update = updates.get()
                    ids += update["ids"]
                    chunks.append((time.time(), len(update["ids"])))
                    self.send_event(json.dumps(request.output(ids, update, update["finished"], update["ids"])))
                    if update["finished"]:
                        break
                usage = (request.body.get("stream_options") or {}).get("include_usage")
                if request.path == "/v1/completions" and usage:
                    self.send_event(json.dumps({**request.output(ids, update, True, []), "choices": []}))
                self.send_event("[DONE]")
                self.wfile.write(b"0\r\n\r\n")
                engine.finished(request.prompt_tokens, request.started, chunks, streaming=True)
            except OSError:
                engine.abort(request.rid)

        def send_event(self, data: str) -> None:
            payload = f"data: {data}\n\n".encode()
            self.wfile.write(f"{len(payload):x}\r\n".encode() + payload + b"\r\n")

        def flush_cache(self) -> None:
            flushed = engine.flush_cache()
            body = (
                b"Cache flushed.\nPlease check backend logs for more details. "
                b"(When there are running or waiting requests, the operation will not be performed.)\n"
            )
            self.send_response(200 if flushed else 400)
            self.send_header("content-type", "text/plain; charset=utf-8")
            self.send_header("content-length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def health(self) -> None:
            """Healthy once the scheduler reports anything after the check began, SGLang's own test:
            a busy server answers through the requests it is already running."""
            if not engine.warmed_up:
                self.reply(503)
                return
            tic = time.time()
            rid, _ = engine.submit(1, 1)
            deadline = time.monotonic() + HEALTH_CHECK_TIMEOUT * time_scale()
            while engine.last_heartbeat <= tic and time.monotonic() < deadline:
                time.sleep(0.005)
            engine.abort(rid)
            if engine.last_heartbeat <= tic:
                started = time.strftime("%H:%M:%S", time.localtime(tic))
                heartbeat = time.strftime("%H:%M:%S", time.localtime(engine.last_heartbeat))
                logger.info(
                    f"Health check failed. Server couldn't get a response from detokenizer for last "
                    f"{HEALTH_CHECK_TIMEOUT} seconds. tic start time: {started}. last_heartbeat time: {heartbeat}"
                )
                self.reply(503)
                return
            self.reply(200)

    return Handler


def sigquit_handler(signum: int, frame: Any) -> None:
    logger.error("Received sigquit from a child process. It usually means the child failed.")
    kill_process_tree(os.getpid())


def running_phase_sigquit_handler(signum: int, frame: Any) -> None:
    logger.error("SIGQUIT received. signum=None, frame=None. It usually means one child failed.")
    kill_process_tree(os.getpid())


def sigterm_handler(signum: int, frame: Any) -> None:
    kill_process_tree(os.getpid(), include_parent=False)
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    os.kill(os.getpid(), signal.SIGTERM)


def bind_address(host: str) -> str:
    """The simulated server listens on loopback only, whatever --host asks for."""
    return host if host in LOOPBACK or host.startswith("127.") else "127.0.0.1"


def bind_http(server_args: Any, handler: type[BaseHTTPRequestHandler]) -> ThreadingHTTPServer:
    """The HTTP server on --host and --port; a port that cannot be bound is logged in uvicorn's words."""
    ThreadingHTTPServer.address_family = socket.AF_INET6 if ":" in bind_address(server_args.host) else socket.AF_INET
    try:
        httpd = ThreadingHTTPServer((bind_address(server_args.host), server_args.port), handler)
    except OSError as exc:
        logger.error(
            f"ERROR:    [Errno {exc.errno}] error while attempting to bind on address "
            f"('{server_args.host}', {server_args.port}): {exc.strerror.lower() if exc.strerror else exc}"
        )
        raise
    httpd.daemon_threads = True
    return httpd


def effective_args(record: Any) -> dict[str, Any]:
    """The effective arguments as the release reports them (its log line, /server_info)."""
    if hasattr(record, "resolved_dict"):
        return dict(record.resolved_dict())
    return dataclasses.asdict(record)


def server_args_dump(record: Any) -> str:
    """The arguments line as each release logs it: 0.5.10 the record's repr, newer releases the
    resolved values as a dict (CUDA-graph sizes under `cuda_graph_config`)."""
    return repr(effective_args(record)) if hasattr(record, "resolved_dict") else repr(record)


def launch_server(record: Any) -> None:
    """Starts the server from the parsed record; releases that resolve late resolve here."""
    configure_logger(record.log_level)
    signal.signal(signal.SIGQUIT, sigquit_handler)
    # LAUNCHDECK_SIM_FAULT=deaf-to-sigterm: ignored here and in the schedulers, which inherit it.
    signal.signal(signal.SIGTERM, signal.SIG_IGN if os.environ.get(FAULT_ENV) == DEAF_FAULT else sigterm_handler)
    if hasattr(record, "resolve_once"):
        record.resolve_once()
    record.check_server_args()
    logger.info(f"server_args={server_args_dump(record)}")
    server_args = SimpleNamespace(**record.runtime_view())
    engine = Engine(server_args)
    engine.launch_schedulers()
    model_config = record.get_model_config()
    engine.wait_until_ready()
    if server_args.node_rank >= 1:
        serve_health_only(server_args, engine)
        return
    threading.Thread(target=engine.watch_subprocesses, daemon=True).start()
    threading.Thread(target=engine.read_results, daemon=True).start()

    handler = make_handler(server_args, engine, model_config, effective_args(record))
    logger.info(f"INFO:     Started server process [{os.getpid()}]")
    logger.info("INFO:     Waiting for application startup.")
    logger.info("INFO:     Application startup complete.")
    try:
        httpd = bind_http(server_args, handler)
    except OSError:
        kill_process_tree(os.getpid(), include_parent=False)
        sys.exit(3)  # uvicorn's exit status for a failed startup
    signal.signal(signal.SIGQUIT, running_phase_sigquit_handler)
    logger.info(f"INFO:     Uvicorn running on http://{server_args.host}:{server_args.port} (Press CTRL+C to quit)")
    threading.Thread(target=warmup, args=(server_args, engine), daemon=True).start()
    httpd.serve_forever()


def serve_health_only(server_args: Any, engine: Engine) -> None:
    """A node other than node 0 runs no tokenizer and serves only SGLang's dummy health check
    (/health, /health_generate and /ping answer 200 while the process lives; uvicorn logs
    warnings only), then waits on its schedulers."""

    class HealthOnly(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"
        server_version = "uvicorn"
        sys_version = ""

        def log_message(self, format: str, *args: Any) -> None:
            pass

        def do_GET(self) -> None:
            known = self.path.split("?", 1)[0] in ("/health", "/health_generate", "/ping")
            body = b"" if known else b'{"detail":"Not Found"}'
            self.send_response(200 if known else 404)
            self.send_header("content-length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

    address = f"[{server_args.host}]" if ":" in server_args.host else server_args.host
    where = f"{address}:{server_args.port}"

    def run_server() -> None:
        try:
            httpd = bind_http(server_args, HealthOnly)
        except OSError:
            logger.info(f"Dummy health check server stopped at {where}")
            return
        httpd.serve_forever()

    threading.Thread(target=run_server, name="health-check-server", daemon=True).start()
    logger.info(f"Dummy health check server started in background thread at {where}")
    engine.watch_subprocesses()
    hold_until_killed()


def hold_until_killed() -> None:
    """The schedulers' crash took the tree down through SIGQUIT; nothing is left to do but wait."""
    while True:
        time.sleep(3600)


def free_port() -> int:
    """A port free on this host's loopback now, as SGLang picks its NCCL port."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def warmup(server_args: Any, engine: Engine) -> None:
    url = f"http://{bind_address(server_args.host)}:{server_args.port}"
    if not server_args.skip_server_warmup:
        pause(1.0)
        with urlopen(url + "/get_model_info", timeout=5) as response:
            assert response.status == 200
        body = json.dumps(
            {"sampling_params": {"temperature": 0, "max_new_tokens": 8}, "text": "The capital city of France is"}
        ).encode()
        request = Request(url + "/generate", data=body, headers={"content-type": "application/json"})
        with urlopen(request, timeout=600) as response:
            assert response.status == 200
    engine.warmed_up = True
    logger.info("The server is fired up and ready to roll!")
