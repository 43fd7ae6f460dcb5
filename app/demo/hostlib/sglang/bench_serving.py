"""`python -m sglang.bench_serving` on a simulated host: SGLang's online serving benchmark, in the
standard library only.

It takes the real tool's options, sends the same requests (streamed by default: /generate for the
sglang backends, /v1/completions for the OpenAI-style ones), times them with wall clocks as the real
tool does, and prints the same lines and summary block; it appends the same JSON line to its output
file. What differs, because a simulated host has no tokenizer files and no network:
- Tokens are the simulated server's (`count_tokens` and `detokenize` of its http_server), so the
  input and output totals here agree with the server's own counts.
- `random` fills prompts from the ShareGPT file when it is at --dataset-path or in the Hugging Face
  cache, and otherwise with random token ids, as `random-ids` does; `sharegpt` needs the file and
  fails without it as the hub client does offline.
- The trt, gserver and truss backends, and datasets other than sharegpt, random and random-ids, exit
  with an error saying they are not simulated.
"""

from __future__ import annotations

import argparse
import asyncio
import glob
import json
import math
import os
import random
import resource
import statistics
import sys
import time
import traceback
import warnings
import zlib
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any
from urllib.error import URLError
from urllib.parse import urlsplit
from urllib.request import Request, urlopen

from sglang.srt.configs.model_config import ModelConfig, hub_cache, resolve_model_path
from sglang.srt.entrypoints.http_server import count_tokens, detokenize
from sglang.srt.utils import ProgressBar, format_interval

BACKENDS = (
    "sglang", "sglang-native", "sglang-oai", "sglang-oai-chat", "vllm", "vllm-chat", "lmdeploy", "lmdeploy-chat",
    "trt", "gserver", "truss",
)  # fmt: skip
COMPLETIONS_BACKENDS = ("sglang-oai", "vllm", "lmdeploy")
CHAT_BACKENDS = ("sglang-oai-chat", "vllm-chat", "lmdeploy-chat")
DATASETS = (
    "sharegpt", "custom", "openai", "random", "random-ids", "generated-shared-prefix", "mmmu", "image", "mooncake",
)  # fmt: skip
SIMULATED_DATASETS = ("sharegpt", "random", "random-ids")
SHAREGPT_REPO_ID = "anon8231489123/ShareGPT_Vicuna_unfiltered"
SHAREGPT_FILENAME = "ShareGPT_V3_unfiltered_cleaned_split.json"
ASSISTANT_SUFFIX = "Assistant:"

args: argparse.Namespace


class LocalEntryNotFoundError(Exception):
    """What the hub client raises for a file it can neither download nor find in its cache."""


LocalEntryNotFoundError.__module__ = "huggingface_hub.errors"


@dataclass
class DatasetRow:
    prompt: Any
    prompt_len: int
    output_len: int


@dataclass
class RequestFuncInput:
    prompt: Any
    api_url: str
    prompt_len: int
    output_len: int
    model: str
    lora_name: str | None
    extra_request_body: dict[str, Any]


@dataclass
class RequestFuncOutput:
    generated_text: str = ""
    success: bool = False
    latency: float = 0.0
    ttft: float = 0.0
    itl: list[float] = field(default_factory=list)
    text_chunks: list[str] = field(default_factory=list)
    prompt_len: int = 0
    error: str = ""
    output_len: int = 0
    start_time: float = 0.0


class HttpResponse:
    """A response read off its own connection, as aiohttp hands it over: status, then body lines."""

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, status: int, reason: str):
        self.reader, self.writer, self.status, self.reason = reader, writer, status, reason
        self.headers: dict[str, str] = {}

    async def chunks(self) -> AsyncIterator[bytes]:
        if self.headers.get("transfer-encoding", "").lower() == "chunked":
            while size := int((await self.reader.readline()).split(b";")[0].strip() or b"0", 16):
                yield await self.reader.readexactly(size)
                await self.reader.readexactly(2)
        elif "content-length" in self.headers:
            yield await self.reader.readexactly(int(self.headers["content-length"]))
        else:
            yield await self.reader.read()

    async def lines(self) -> AsyncIterator[bytes]:
        buffer = b""
        async for chunk in self.chunks():
            buffer += chunk
            *complete, buffer = buffer.split(b"\n")
            for line in complete:
                yield line + b"\n"
        if buffer:
            yield buffer

    async def text(self) -> str:
        return b"".join([chunk async for chunk in self.chunks()]).decode(errors="replace")

    def close(self) -> None:
        self.writer.close()


async def post(url: str, payload: dict[str, Any], headers: dict[str, str]) -> HttpResponse:
    """POSTs JSON over a fresh HTTP/1.1 connection (the real tool opens a session per request)."""
    parts = urlsplit(url)
    reader, writer = await asyncio.open_connection(parts.hostname, parts.port or 80, limit=10 * 1024**2)
    body = json.dumps(payload).encode()
    head = {"Host": parts.netloc, "Content-Type": "application/json", "Content-Length": str(len(body))}
    lines = [f"POST {parts.path or '/'} HTTP/1.1", *(f"{k}: {v}" for k, v in {**head, **headers}.items())]
    writer.write(("\r\n".join([*lines, "Connection: close", "", ""])).encode() + body)
    await writer.drain()
    _, status, reason = (await reader.readline()).decode().rstrip("\r\n").split(" ", 2)
    response = HttpResponse(reader, writer, int(status), reason)
    while (line := (await reader.readline()).decode().rstrip("\r\n")) != "":
        name, _, value = line.partition(":")
        response.headers[name.strip().lower()] = value.strip()
    return response


def http_get_json(url: str, method: str = "GET") -> tuple[int, Any]:
    """The blocking calls the real tool makes with `requests`: model list, server info, cache flush."""
    request = Request(url, method=method, headers=get_request_headers())
    try:
        with urlopen(request, timeout=60) as response:
            body = response.read()
            status = response.status
    except URLError as exc:
        if not hasattr(exc, "code"):
            raise
        return int(exc.code), None
    try:
        return status, json.loads(body)
    except ValueError:
        return status, None


def get_auth_headers() -> dict[str, str]:
    if key := os.environ.get("OPENAI_API_KEY"):
        return {"Authorization": f"Bearer {key}"}
    if key := os.environ.get("API_KEY"):
        return {"Authorization": key}
    return {}


def get_request_headers() -> dict[str, str]:
    headers = get_auth_headers()
    for item in getattr(args, "header", None) or []:
        name, _, value = item.partition("=")
        headers[name.strip()] = value.strip()
    return headers


def remove_prefix(text: str, prefix: str) -> str:
    return text[len(prefix) :] if text.startswith(prefix) else text


def encoded_len(text: str) -> int:
    """The tokenizer's length of a text: the simulated server's count, 0 for no text."""
    return count_tokens(text) if text.split() else 0


async def read_stream(response: HttpResponse, output: RequestFuncOutput, chat: bool) -> None:
    """The OpenAI-style stream: a chunk with text is a token for TTFT and ITL, as the real tool counts."""
    most_recent = output.start_time
    async for raw in response.lines():
        line = raw.strip()
        if not line:
            continue
        chunk = remove_prefix(line.decode(), "data: ")
        output.latency = time.perf_counter() - output.start_time
        if chunk == "[DONE]":
            continue
        data = json.loads(chunk)
        choice = (data.get("choices") or [{}])[0]
        text = (choice.get("delta") or {}).get("content") if chat else choice.get("text")
        if text:
            timestamp = time.perf_counter()
            if output.ttft == 0.0:
                output.ttft = timestamp - output.start_time
            else:
                output.text_chunks.append(text)
                output.itl.append(timestamp - most_recent)
            most_recent = timestamp
            output.generated_text += text
        output.output_len = (data.get("usage") or {}).get("completion_tokens", output.output_len)


async def request_openai(request: RequestFuncInput, pbar: Progress | None = None) -> RequestFuncOutput:
    chat = request.api_url.endswith("chat/completions")
    payload: dict[str, Any] = {"model": request.model, "stream": not args.disable_stream}
    if chat:
        payload.update(messages=[{"role": "user", "content": request.prompt}], max_completion_tokens=request.output_len)
    else:
        payload.update(prompt=request.prompt, best_of=1, max_tokens=request.output_len)
    payload.setdefault("temperature", request.extra_request_body.get("temperature", 0.0))
    payload.setdefault("ignore_eos", request.extra_request_body.get("ignore_eos", not args.disable_ignore_eos))
    payload.update(request.extra_request_body)
    if request.lora_name:
        payload["model"] = payload["lora_path"] = request.lora_name
    output = RequestFuncOutput(prompt_len=request.prompt_len, output_len=request.output_len)
    output.start_time = time.perf_counter()
    try:
        response = await post(request.api_url, payload, get_request_headers())
        try:
            if response.status != 200:
                output.error = response.reason + ": " + await response.text()
            elif chat and args.disable_stream:
                data = json.loads(await response.text())
                output.generated_text = data["choices"][0]["message"]["content"]
                output.latency = output.ttft = time.perf_counter() - output.start_time
                output.output_len = data.get("usage", {}).get("completion_tokens", output.output_len)
                output.success = True
            else:
                await read_stream(response, output, chat)
                output.success = True
        finally:
            response.close()
    except Exception:
        output.success = False
        output.error = "".join(traceback.format_exception(*sys.exc_info()))
    if pbar:
        pbar.update()
    return output


async def request_sglang_generate(request: RequestFuncInput, pbar: Progress | None = None) -> RequestFuncOutput:
    """/generate: each chunk repeats the whole text and the completion count, so a chunk's gap is
    shared out over the tokens it added."""
    payload = {
        ("text" if isinstance(request.prompt, str) else "input_ids"): request.prompt,
        "sampling_params": {
            "temperature": 0.0,
            "max_new_tokens": request.output_len,
            "ignore_eos": not args.disable_ignore_eos,
        },
        "stream": not args.disable_stream,
        "lora_path": request.lora_name,
        "return_logprob": args.return_logprob,
        "return_routed_experts": args.return_routed_experts,
        "logprob_start_len": -1,
        **request.extra_request_body,
    }
    output = RequestFuncOutput(prompt_len=request.prompt_len, output_len=request.output_len)
    output.start_time = st = most_recent = time.perf_counter()
    last_output_len = 0
    try:
        response = await post(request.api_url, payload, get_request_headers())
        try:
            if response.status != 200:
                output.error = response.reason + ": " + await response.text()
            else:
                async for raw in response.lines():
                    line = raw.strip()
                    if not line:
                        continue
                    chunk = remove_prefix(line.decode(), "data: ")
                    output.latency = time.perf_counter() - st
                    if chunk == "[DONE]":
                        continue
                    data = json.loads(chunk)
                    if not data.get("text"):
                        continue
                    timestamp = time.perf_counter()
                    output.generated_text = data["text"]
                    output.output_len = data["meta_info"]["completion_tokens"]
                    if output.ttft == 0.0:
                        output.ttft = timestamp - st
                    else:
                        new_tokens = output.output_len - last_output_len
                        if new_tokens == 0:
                            continue
                        output.itl.extend([(timestamp - most_recent) / new_tokens] * new_tokens)
                    most_recent = timestamp
                    last_output_len = output.output_len
                output.success = True
        finally:
            response.close()
    except Exception:
        output.success = False
        output.error = "".join(traceback.format_exception(*sys.exc_info()))
        print(f"{output.error=}")
    if pbar:
        pbar.update()
    return output


class Progress(ProgressBar):
    """tqdm's default meter over the requests, with real elapsed time and rate, redrawn at most
    ten times a second."""

    def __init__(self, total: int):
        super().__init__("", total)
        self.started = self.drawn = time.monotonic()
        self.drawn_n = 0
        self.start()

    def update(self, desc: str | None = None) -> None:
        self.n += 1
        if time.monotonic() - self.drawn >= 0.1:
            self.redraw()

    def redraw(self) -> None:
        self.drawn, self.drawn_n = time.monotonic(), self.n
        self._write(self._frame())

    def close(self) -> None:
        if self.drawn_n != self.n:
            self.redraw()
        super().close()

    def _frame(self) -> str:
        percent = 100 * self.n / self.total if self.total else 100
        elapsed = time.monotonic() - self.started
        if self.n and elapsed > 0:
            rate = self.n / elapsed
            remaining = format_interval((self.total - self.n) / rate)
            rate_text = f"{rate:5.2f}it/s" if rate >= 1 else f"{1 / rate:5.2f}s/it"
        else:
            remaining, rate_text = "?", "?it/s"
        stats = f"{self.n}/{self.total} [{format_interval(elapsed)}<{remaining}, {rate_text}]"
        return f"{percent:3.0f}%|{self._bar(percent / 100)}| {stats}"


def compute_random_lens(full_len: int, range_ratio: float, num: int) -> list[int]:
    if full_len <= 0:
        return [0] * num
    return [random.randint(max(int(full_len * range_ratio), 1), full_len) for _ in range(num)]


def sharegpt_file(dataset_path: str) -> str | None:
    """--dataset-path when it holds valid JSON, else the copy in the Hugging Face cache, if any."""
    if os.path.isfile(dataset_path):
        try:
            with open(dataset_path) as f:
                json.load(f)
            return dataset_path
        except (ValueError, UnicodeDecodeError) as e:
            print(f"{dataset_path} exists but is not valid JSON ({e}), re-downloading.")
    folder = os.path.join(hub_cache(), "datasets--" + SHAREGPT_REPO_ID.replace("/", "--"))
    found = sorted(glob.glob(os.path.join(folder, "snapshots", "*", SHAREGPT_FILENAME)))
    return found[0] if found else None


def load_conversations(path: str) -> list[tuple[str, str]]:
    with open(path) as f:
        dataset = json.load(f)
    turns = [data.get("conversations", data.get("conversation", [])) for data in dataset]
    pairs = [(turn[0]["value"], turn[1]["value"]) for turn in turns if len(turn) >= 2]
    random.shuffle(pairs)
    return pairs


def apply_chat_template(prompt: str, model: str) -> str:
    if "llama" in model.lower():
        return (
            f"<|start_header_id|>user<|end_header_id|>\n\n{prompt}<|eot_id|>"
            "<|start_header_id|>assistant<|end_header_id|>\n\n"
        )
    return f"<|im_start|>user\n{prompt}<|im_end|>\n<|im_start|>assistant\n"


def sample_sharegpt_requests(vocab_size: int, model: str) -> list[DatasetRow]:
    if args.sharegpt_output_len is not None and args.sharegpt_output_len < 4:
        raise ValueError("output_len too small")
    path = args.dataset_path or sharegpt_file("")  # a path given is opened as it is
    if path is None:
        raise LocalEntryNotFoundError(
            "An error happened while trying to locate the file on the Hub and we cannot find the requested files "
            "in the local cache. Please check your connection and try again or make sure your Internet connection "
            "is on."
        )
    rows: list[DatasetRow] = []
    for prompt, completion in load_conversations(path):
        if len(rows) == args.num_prompts:
            break
        if args.prompt_suffix:
            prompt = remove_suffix(prompt, ASSISTANT_SUFFIX) + args.prompt_suffix + ASSISTANT_SUFFIX
        if args.apply_chat_template:
            prompt = apply_chat_template(prompt, model)
        prompt_len = encoded_len(prompt)
        output_len = encoded_len(completion) if args.sharegpt_output_len is None else args.sharegpt_output_len
        if prompt_len < 2 or output_len < 2:
            continue
        if args.sharegpt_context_len and prompt_len + output_len > args.sharegpt_context_len:
            continue
        rows.append(DatasetRow(prompt, prompt_len, output_len))
    print(f"#Input tokens: {sum(row.prompt_len for row in rows)}")
    print(f"#Output tokens: {sum(row.output_len for row in rows)}")
    return rows


def remove_suffix(text: str, suffix: str) -> str:
    return text[: -len(suffix)] if suffix and text.endswith(suffix) else text


def sample_random_requests(vocab_size: int) -> list[DatasetRow]:
    input_lens = compute_random_lens(args.random_input_len, args.random_range_ratio, args.num_prompts)
    output_lens = compute_random_lens(args.random_output_len, args.random_range_ratio, args.num_prompts)
    path = sharegpt_file(args.dataset_path) if args.dataset_name == "random" else None
    rows = []
    if path is not None:  # token ids of ShareGPT prompts, repeated or cut to each length
        for prompt, _ in load_conversations(path):
            i = len(rows)
            if i == args.num_prompts:
                break
            words = [zlib.crc32(word.encode()) % vocab_size for word in prompt.split()]
            if not words:
                continue
            ids = (words * (input_lens[i] // len(words) + 1))[: input_lens[i]]
            rows.append(DatasetRow(ids if args.tokenize_prompt else detokenize(ids), input_lens[i], output_lens[i]))
    else:
        offsets = [random.randrange(vocab_size) for _ in range(args.num_prompts)]
        for i in range(args.num_prompts):
            ids = [(offsets[i] + i + j) % vocab_size for j in range(input_lens[i])]
            rows.append(DatasetRow(ids if args.tokenize_prompt else detokenize(ids), input_lens[i], output_lens[i]))
    print(f"#Input tokens: {sum(input_lens)}")
    print(f"#Output tokens: {sum(output_lens)}")
    return rows


async def get_request(rows: list[DatasetRow], request_rate: float) -> AsyncIterator[DatasetRow]:
    """All at once for an infinite rate, else with exponential gaps: a Poisson process."""
    for row in rows:
        yield row
        if request_rate != float("inf"):
            await asyncio.sleep(random.expovariate(request_rate))


def percentile(values: list[float], q: float) -> float:
    """numpy's default (linear) percentile."""
    ordered = sorted(values)
    position = (len(ordered) - 1) * q / 100
    low = math.floor(position)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (position - low)


def summarize(values: list[float]) -> dict[str, float]:
    """Mean, median, std, percentiles in ms; an empty list counts as [0], as numpy reads `values or 0`."""
    values = values or [0.0]
    ms = [v * 1000 for v in values]
    return {
        "mean": statistics.fmean(ms),
        "median": statistics.median(ms),
        "std": statistics.pstdev(ms),
        "p90": percentile(ms, 90),
        "p95": percentile(ms, 95),
        "p99": percentile(ms, 99),
        "max": max(ms),
    }


def calculate_metrics(
    rows: list[DatasetRow], outputs: list[RequestFuncOutput], duration: float, accept_length: float | None
) -> tuple[dict[str, Any], list[int]]:
    output_lens, retokenized, itls, tpots, ttfts, e2e = [], [], [], [], [], []
    total_input = completed = 0
    retokenized_itl = bool(accept_length) and args.backend in ("sglang-oai", "sglang-oai-chat")
    for row, output in zip(rows, outputs, strict=True):
        if not output.success:
            output_lens.append(0)
            retokenized.append(0)
            continue
        output_lens.append(output.output_len)
        retokenized.append(encoded_len(output.generated_text))
        total_input += row.prompt_len
        if output.output_len > 1:
            tpots.append((output.latency - output.ttft) / (output.output_len - 1))
        if retokenized_itl:
            for gap, text in zip(output.itl, output.text_chunks, strict=False):
                tokens = max(1, encoded_len(text))
                itls += [gap / tokens] * tokens
        else:
            itls += output.itl
        ttfts.append(output.ttft)
        e2e.append(output.latency)
        completed += 1
    if completed == 0:
        warnings.warn(
            "All requests failed. This is likely due to a misconfiguration on the benchmark arguments.", stacklevel=2
        )
    peak_tokens, peak_requests = peak_rates(outputs)
    total_output = sum(output_lens)
    ttft, tpot, itl, latency = summarize(ttfts), summarize(tpots), summarize(itls), summarize(e2e)
    metrics = {
        "completed": completed,
        "total_input": total_input,
        "total_output": total_output,
        "total_output_retokenized": sum(retokenized),
        "request_throughput": completed / duration,
        "input_throughput": total_input / duration,
        "output_throughput": total_output / duration,
        "total_throughput": (total_input + total_output) / duration,
        "ttft": ttft,
        "tpot": tpot,
        "itl": itl,
        "e2e": latency,
        "concurrency": sum(e2e) / duration,
        "max_output_tokens_per_s": peak_tokens,
        "max_concurrent_requests": peak_requests,
    }
    return metrics, output_lens


def peak_rates(outputs: list[RequestFuncOutput]) -> tuple[float, int]:
    """The busiest second's output tokens and running requests, from each request's token times."""
    done = [o for o in outputs if o.success]
    if not done:
        return 0.0, 0
    first = min(o.start_time for o in done)
    seconds = math.ceil(max(o.start_time + o.latency for o in done) - first) + 1
    tokens, running = [0] * seconds, [0] * seconds
    for output in done:
        stamp = output.start_time + output.ttft
        for gap in [0.0, *output.itl]:
            stamp += gap
            if 0 <= int(stamp - first) < seconds:
                tokens[int(stamp - first)] += 1
        end = min(int(output.start_time + output.latency - first) + 1, seconds)
        for second in range(int(output.start_time - first), end):
            running[second] += 1
    return float(max(tokens)), max(running)


def print_summary(metrics: dict[str, Any], duration: float, accept_length: float | None) -> None:
    def line(label: str, value: Any, spec: str = "") -> None:
        print(f"{label:<40} {value:<10{spec}}")

    print("\n{s:{c}^{n}}".format(s=" Serving Benchmark Result ", n=50, c="="))
    line("Backend:", args.backend)
    line("Traffic request rate:", args.request_rate)
    line("Max request concurrency:", args.max_concurrency if args.max_concurrency else "not set")
    line("Successful requests:", metrics["completed"])
    line("Benchmark duration (s):", duration, ".2f")
    line("Total input tokens:", metrics["total_input"])
    line("Total input text tokens:", metrics["total_input"])
    line("Total generated tokens:", metrics["total_output"])
    line("Total generated tokens (retokenized):", metrics["total_output_retokenized"])
    line("Request throughput (req/s):", metrics["request_throughput"], ".2f")
    line("Input token throughput (tok/s):", metrics["input_throughput"], ".2f")
    line("Output token throughput (tok/s):", metrics["output_throughput"], ".2f")
    line("Peak output token throughput (tok/s):", metrics["max_output_tokens_per_s"], ".2f")
    line("Peak concurrent requests:", metrics["max_concurrent_requests"])
    line("Total token throughput (tok/s):", metrics["total_throughput"], ".2f")
    line("Concurrency:", metrics["concurrency"], ".2f")
    if accept_length:
        line("Accept length:", accept_length, ".2f")
    for title, key, name, stats in (
        ("End-to-End Latency", "e2e", "E2E Latency", ("mean", "median", "p90", "p99")),
        ("Time to First Token", "ttft", "TTFT", ("mean", "median", "p99")),
        ("Time per Output Token (excl. 1st token)", "tpot", "TPOT", ("mean", "median", "p99")),
        ("Inter-Token Latency", "itl", "ITL", ("mean", "median", "p95", "p99", "max")),
    ):
        print("{s:{c}^{n}}".format(s=title, n=50, c="-"))
        for stat in stats:
            label = {"mean": "Mean", "median": "Median", "max": "Max"}.get(stat, stat.upper())
            line(f"{label} {name} (ms):", metrics[key][stat], ".2f")
    print("=" * 50)


def server_accept_length(base_url: str) -> float | None:
    """The server's running average accept length, which an sglang server reports in its first
    internal state (a disaggregated one under "decode")."""
    status, info = http_get_json(base_url + "/get_server_info")
    if status != 200 or not isinstance(info, dict):
        return None
    if "decode" in info:
        info = info["decode"][0]
    states = info.get("internal_states")
    return states[0].get("avg_spec_accept_length") if states else None


async def benchmark(api_url: str, base_url: str, model_id: str, rows: list[DatasetRow], extra: dict[str, Any]) -> None:
    request_func = request_sglang_generate if args.backend in ("sglang", "sglang-native") else request_openai
    semaphore = asyncio.Semaphore(args.max_concurrency) if args.max_concurrency else None
    lora_names = args.lora_name or []

    async def limited(request: RequestFuncInput, pbar: Progress | None) -> RequestFuncOutput:
        if semaphore is None:
            return await request_func(request, pbar)
        async with semaphore:
            return await request_func(request, pbar)

    def func_input(row: DatasetRow, output_len: int, lora: str | None) -> RequestFuncInput:
        return RequestFuncInput(row.prompt, api_url, row.prompt_len, output_len, model_id, lora, extra)

    print(f"Starting warmup with {args.warmup_requests} sequences...")
    first = rows[0]
    warmup = func_input(first, min(first.output_len, 32), lora_names[0] if lora_names else None)
    warmup_outputs = await asyncio.gather(*(request_func(warmup) for _ in range(args.warmup_requests)))
    if args.warmup_requests > 0 and not any(output.success for output in warmup_outputs):
        raise ValueError(
            "Warmup failed - Please make sure benchmark arguments "
            f"are correctly specified. Error: {warmup_outputs[0].error}"
        )
    print(f"Warmup completed with {args.warmup_requests} sequences. Starting main benchmark run...")
    if ("sglang" in args.backend and os.environ.get("SGLANG_IS_IN_CI", "false").lower() in ("true", "1")) or (
        args.flush_cache
    ):
        http_get_json(base_url + "/flush_cache", method="POST")
    await asyncio.sleep(1.0)
    if args.profile:
        print("Starting profiler...")
        if http_get_json(base_url + "/start_profile", method="POST")[0] == 200:
            print("Profiler started")

    started = time.perf_counter()
    pbar = None if args.disable_tqdm else Progress(len(rows))
    tasks = []
    async for row in get_request(rows, args.request_rate):
        lora = random.choice(lora_names) if lora_names else None
        tasks.append(asyncio.create_task(limited(func_input(row, row.output_len, lora), pbar)))
    outputs = list(await asyncio.gather(*tasks))
    if args.profile:
        print("Stopping profiler...")
        if http_get_json(base_url + "/stop_profile", method="POST")[0] == 200:
            print("Profiler stopped")
    if pbar is not None:
        pbar.close()

    accept_length = server_accept_length(base_url) if "sglang" in args.backend else None
    duration = time.perf_counter() - started
    metrics, output_lens = calculate_metrics(rows, outputs, duration, accept_length)
    print_summary(metrics, duration, accept_length)
    write_result(metrics, duration, accept_length, outputs, output_lens, http_get_json(base_url + "/get_server_info"))


def write_result(
    metrics: dict[str, Any],
    duration: float,
    accept_length: float | None,
    outputs: list[RequestFuncOutput],
    output_lens: list[int],
    server_info: tuple[int, Any],
) -> None:
    """Appends the run's JSON line to --output-file, or to a file named after the run, as the real tool."""
    result = {
        "tag": args.tag,
        "backend": args.backend,
        "dataset_name": args.dataset_name,
        "request_rate": args.request_rate,
        "max_concurrency": args.max_concurrency,
        "sharegpt_output_len": args.sharegpt_output_len,
        "random_input_len": args.random_input_len,
        "random_output_len": args.random_output_len,
        "random_range_ratio": args.random_range_ratio,
        "server_info": server_info[1] if server_info[0] == 200 else None,
        "duration": duration,
        "completed": metrics["completed"],
        "total_input_tokens": metrics["total_input"],
        "total_input_text_tokens": metrics["total_input"],
        "total_input_vision_tokens": 0,
        "total_output_tokens": metrics["total_output"],
        "total_output_tokens_retokenized": metrics["total_output_retokenized"],
        "request_throughput": metrics["request_throughput"],
        "input_throughput": metrics["input_throughput"],
        "output_throughput": metrics["output_throughput"],
        "total_throughput": metrics["total_throughput"],
        **{f"{stat}_e2e_latency_ms": metrics["e2e"][stat] for stat in ("mean", "median", "std", "p90", "p99")},
        **{f"{stat}_ttft_ms": metrics["ttft"][stat] for stat in ("mean", "median", "std", "p99")},
        **{f"{stat}_tpot_ms": metrics["tpot"][stat] for stat in ("mean", "median", "std", "p99")},
        **{f"{stat}_itl_ms": metrics["itl"][stat] for stat in ("mean", "median", "std", "p95", "p99")},
        "concurrency": metrics["concurrency"],
        "accept_length": accept_length,
        "max_output_tokens_per_s": metrics["max_output_tokens_per_s"],
        "max_concurrent_requests": metrics["max_concurrent_requests"],
    }
    if args.output_file:
        name = args.output_file
    elif args.dataset_name.startswith("random"):
        lengths = f"{args.random_input_len}_{args.random_output_len}"
        name = f"{args.backend}_{datetime.now():%m%d}_{args.num_prompts}_{lengths}.jsonl"
    else:
        name = f"{args.backend}_{datetime.now():%m%d}_{args.num_prompts}_{args.dataset_name}.jsonl"
    if args.output_details:
        result |= {
            "input_lens": [o.prompt_len for o in outputs],
            "output_lens": output_lens,
            "ttfts": [o.ttft for o in outputs],
            "itls": [o.itl for o in outputs],
            "generated_texts": [o.generated_text for o in outputs],
            "errors": [o.error for o in outputs],
        }
    with open(name, "a") as file:
        file.write(json.dumps(result) + "\n")


def set_ulimit(target_soft_limit: int = 65535) -> None:
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft < target_soft_limit:
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (min(target_soft_limit, hard), hard))
        except ValueError as e:
            print(f"Fail to set RLIMIT_NOFILE: {e}")


def run_benchmark(parsed: argparse.Namespace) -> None:
    global args
    args = parsed
    print(f"benchmark_args={args}")
    set_ulimit()
    random.seed(args.seed)
    extra = json.loads(args.extra_request_body) if args.extra_request_body else {}
    if args.tokenize_prompt:
        assert args.backend == "sglang", "`--tokenize-prompt` only compatible with `--backend sglang` currently"
    if args.backend in ("trt", "gserver", "truss"):
        sys.exit(f"bench_serving: the {args.backend} backend is not simulated; use sglang, sglang-oai or vllm")
    if args.dataset_name not in SIMULATED_DATASETS:
        sys.exit(f"bench_serving: the {args.dataset_name} dataset is not simulated; use sharegpt, random or random-ids")
    if args.port is None:
        args.port = {"sglang": 30000, "sglang-native": 30000, "sglang-oai": 30000, "lmdeploy": 23333}.get(
            args.backend, 8000 if args.backend.startswith("vllm") else 30000
        )
    base_url = args.base_url or f"http://{args.host}:{args.port}"
    if args.backend in ("sglang", "sglang-native"):
        api_url = f"{base_url}/generate"
    elif args.backend in COMPLETIONS_BACKENDS:
        api_url = f"{base_url}/v1/completions"
    else:
        api_url = f"{base_url}/v1/chat/completions"
    if args.model is None:
        model_url = f"{base_url}/v1/models"
        try:
            _, models = http_get_json(model_url)
            data = (models or {}).get("data", [])
            args.model = data[0]["id"] if data else None
        except Exception as e:
            print(f"Failed to fetch model from {model_url}. Error: {e}")
            print("Please specify the correct host and port using `--host` and `--port`.")
            sys.exit(1)
    if args.model is None:
        print("No model specified or found. Please provide a model using `--model`.")
        sys.exit(1)
    print(f"{args}\n")
    tokenizer_path = resolve_model_path(args.tokenizer if args.tokenizer is not None else args.model)
    try:
        vocab_size = ModelConfig(tokenizer_path).vocab_size
    except (OSError, KeyError, ValueError):
        vocab_size = 32000
    if args.dataset_name == "sharegpt":
        rows = sample_sharegpt_requests(vocab_size, args.model)
    else:
        rows = sample_random_requests(vocab_size)
    asyncio.run(benchmark(api_url, base_url, args.served_model_name or args.model, rows, extra))


FLAG = "store_true"
# The real tool's options: (names, argparse keywords, group); help texts shortened.
OPTIONS: list[tuple[str, dict[str, Any], str]] = [
    ("--backend", {"type": str, "choices": list(BACKENDS), "default": "sglang", "help": "The serving engine."}, ""),
    ("--base-url", {"type": str, "default": None, "help": "Server or API base url instead of host and port."}, ""),
    ("--host", {"type": str, "default": "0.0.0.0", "help": "Default host is 0.0.0.0."}, ""),
    ("--port", {"type": int, "help": "If not set, the backend's usual port."}, ""),
    ("--dataset-name", {"type": str, "default": "sharegpt", "choices": list(DATASETS), "help": "The dataset."}, ""),
    ("--dataset-path", {"type": str, "default": "", "help": "Path to the dataset."}, ""),
    ("--model", {"type": str, "help": "Name or path of the model; if not set, asked of /v1/models."}, ""),
    ("--served-model-name", {"type": str, "help": "The model's name as served; defaults to --model."}, ""),
    ("--tokenizer", {"type": str, "help": "Name or path of the tokenizer; defaults to the model's."}, ""),
    ("--num-prompts", {"type": int, "default": 1000, "help": "Number of prompts to process."}, ""),
    ("--sharegpt-output-len", {"type": int, "default": None, "help": "Output length of each ShareGPT request."}, ""),
    ("--sharegpt-context-len", {"type": int, "default": None, "help": "Drop ShareGPT requests longer than this."}, ""),
    ("--random-input-len", {"type": int, "default": 1024, "help": "Input tokens per random request."}, ""),
    ("--random-output-len", {"type": int, "default": 1024, "help": "Output tokens per random request."}, ""),
    ("--random-range-ratio", {"type": float, "default": 0.0, "help": "Range of sampled input/output lengths."}, ""),
    ("--image-count", {"type": int, "default": 1, "help": "Images per request (image dataset)."}, ""),
    ("--image-resolution", {"type": str, "default": "1080p", "help": "Image resolution (image dataset)."}, ""),
    ("--random-image-count", {"action": FLAG, "help": "Enable Random Image Count"}, ""),
    ("--image-format", {"type": str, "default": "jpeg", "help": "Image format (image dataset)."}, ""),
    ("--image-content", {"type": str, "default": "random", "help": "Image content (image dataset)."}, ""),
    ("--request-rate", {"type": float, "default": float("inf"), "help": "Requests per second; inf sends all."}, ""),
    ("--use-trace-timestamps", {"action": FLAG, "help": "Replay the mooncake trace's timestamps."}, ""),
    ("--max-concurrency", {"type": int, "default": None, "help": "Maximum number of concurrent requests."}, ""),
    ("--output-file", {"type": str, "help": "Output JSONL file name."}, ""),
    ("--output-details", {"action": FLAG, "help": "Output details of benchmarking."}, ""),
    ("--print-requests", {"action": FLAG, "help": "Print requests immediately during benchmarking."}, ""),
    ("--disable-tqdm", {"action": FLAG, "help": "Specify to disable tqdm progress bar."}, ""),
    ("--disable-stream", {"action": FLAG, "help": "Disable streaming mode."}, ""),
    ("--return-logprob", {"action": FLAG, "help": "Return logprob."}, ""),
    ("--return-routed-experts", {"action": FLAG, "help": "Return routed experts."}, ""),
    ("--seed", {"type": int, "default": 1, "help": "The random seed."}, ""),
    ("--disable-ignore-eos", {"action": FLAG, "help": "Disable ignoring EOS."}, ""),
    ("--extra-request-body", {"metavar": '{"key1": "value1", "key2": "value2"}', "type": str,
                              "help": "Append given JSON object to the request payload."}, ""),
    ("--apply-chat-template", {"action": FLAG, "help": "Apply chat template"}, ""),
    ("--profile", {"action": FLAG, "help": "Use Torch Profiler."}, ""),
    ("--plot-throughput", {"action": FLAG, "help": "Plot throughput and concurrent requests over time."}, ""),
    ("--profile-activities", {"type": str, "nargs": "+", "default": ["CPU", "GPU"],
                              "choices": ["CPU", "GPU", "CUDA_PROFILER"]}, ""),
    ("--profile-num-steps", {"type": int, "default": None}, ""),
    ("--profile-by-stage", {"action": FLAG, "default": False}, ""),
    ("--profile-stages", {"nargs": "+", "default": None}, ""),
    ("--profile-output-dir", {"type": str, "default": None, "help": "Output directory for profile traces."}, ""),
    ("--profile-prefix", {"type": str, "default": None, "help": "Prefix for profile trace filenames."}, ""),
    ("--lora-name", {"type": str, "nargs": "*", "default": None, "help": "The names of LoRA adapters."}, ""),
    ("--lora-request-distribution", {"type": str, "default": "uniform",
                                     "choices": ["uniform", "distinct", "skewed"]}, ""),
    ("--lora-zipf-alpha", {"type": float, "default": 1.5}, ""),
    ("--prompt-suffix", {"type": str, "default": "", "help": "Suffix applied to the end of all user prompts."}, ""),
    ("--pd-separated", {"action": FLAG, "help": "Benchmark PD disaggregation server"}, ""),
    ("--profile-prefill-url", {"type": str, "nargs": "*", "default": None}, "profile-urls"),
    ("--profile-decode-url", {"type": str, "nargs": "*", "default": None}, "profile-urls"),
    ("--flush-cache", {"action": FLAG, "help": "Flush the cache before running the benchmark"}, ""),
    ("--warmup-requests", {"type": int, "default": 1, "help": "Number of warmup requests before the benchmark"}, ""),
    ("--tokenize-prompt", {"action": FLAG, "help": "Use integer ids instead of string for inputs."}, ""),
    ("--gsp-num-groups", {"type": int, "default": 64}, "gsp"),
    ("--gsp-prompts-per-group", {"type": int, "default": 16}, "gsp"),
    ("--gsp-system-prompt-len", {"type": int, "default": 2048}, "gsp"),
    ("--gsp-question-len", {"type": int, "default": 128}, "gsp"),
    ("--gsp-output-len", {"type": int, "default": 256}, "gsp"),
    ("--gsp-range-ratio", {"type": float, "default": 1.0}, ""),
    ("--gsp-fast-prepare", {"action": FLAG}, "gsp"),
    ("--gsp-send-routing-key", {"action": FLAG}, "gsp"),
    ("--gsp-num-turns", {"type": int, "default": 1}, "gsp"),
    ("--gsp-ordered", {"action": FLAG}, "gsp"),
    ("--mooncake-slowdown-factor", {"type": float, "default": 1.0}, "mooncake"),
    ("--mooncake-num-rounds", {"type": int, "default": 1}, "mooncake"),
    ("--mooncake-workload", {"type": str, "default": "conversation",
                             "choices": ["mooncake", "conversation", "synthetic", "toolagent"]}, "mooncake"),
    ("--tag", {"type": str, "default": None, "help": "The tag to be dumped to output."}, ""),
    ("--header", {"type": str, "nargs": "+", "default": None, "help": "Custom HTTP headers as Key=Value."}, ""),
]  # fmt: skip


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description="Benchmark the online serving throughput.")
    groups: dict[str, Any] = {
        "": parser,
        "profile-urls": parser.add_mutually_exclusive_group(),
        "gsp": parser.add_argument_group("generated-shared-prefix dataset arguments"),
        "mooncake": parser.add_argument_group("mooncake dataset arguments"),
    }
    for name, options, group in OPTIONS:
        groups[group].add_argument(name, **options)
    return parser


if __name__ == "__main__":
    run_benchmark(build_parser().parse_args())
