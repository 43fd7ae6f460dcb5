"""Diagnosing a long SGLang log: the CLI on 200 MB, and the analyzer's cost per MB streamed.

A server that served for hours and then died leaves a log of mostly decode-batch lines with the
cause at the very end; the diagnosis has to read all of it, so it must keep pace with the disk
and hold the same memory whatever the log's length. The log is generated once, deterministically,
in a temporary directory: a realistic startup, ~2 hours of serving (decode and prefill batches,
access-log lines), and a scheduler traceback ending in torch.OutOfMemoryError.

- diagnose_200mb: wall seconds of `launchdeck diagnose FILE --json` (a real subprocess, best of 3
  after a warm-up; its answer checked), and its peak RSS against the same on a 20 MB log of the
  same shape. Anchor: `LC_ALL=C grep -c "Decode batch" FILE`, best of 3 after a warm-up.
- diagnose_incremental: ms per MB to feed the same file in 64 KiB chunks to `Analyzer` in-process.
  Anchor: reading it in the same chunks and counting newlines.

A log nobody can vouch for may hold anything; whatever it holds, the diagnosis must keep the same
pace and memory. Two hostile inputs, generated from fixed seeds:

- diagnose_hostile_random: MB/s of `launchdeck diagnose FILE --json` on 50 MB of random bytes, and
  its peak RSS against the same on 5 MB. Its answer: no stage reached, no root error.
- diagnose_hostile_line: the same on a short startup followed by a traceback whose exception line
  runs on for 20 MB of printable characters and never ends (against 2 MB). Its answer: the stage
  the startup reached, the exception as the root error, cut to the length of one record.
  Anchor for both: `LC_ALL=C grep -c x FILE`, best of 3 after a warm-up.

A smoke run (`run(smoke=True)`) does all of it on files of 1 to 4 MB.
"""

from __future__ import annotations

import json
import os
import random
import string
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from app.diagnose.analyze import Analyzer
from app.diagnose.lines import MAX_RECORD

ROOT = Path(__file__).resolve().parents[1]
GNU_TIME = "/usr/bin/time"
CHUNK = 64 * 1024
HOSTILE_GOAL_MB_S = 50
MINUTES = 119  # of serving, 10:01 to 11:59; the traceback comes at 12:00:00
ROOT_ERROR = (
    "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. "
    "GPU 0 has a total capacity of 95.00 GiB of which 100.00 MiB is free."
)
STARTUP = """\
[2026-05-01 10:00:00] server_args=ServerArgs(model_path='Qwen/Qwen3.6-27B', tokenizer_path='Qwen/Qwen3.6-27B', \
tokenizer_mode='auto', load_format='auto', trust_remote_code=False, dtype='auto', kv_cache_dtype='auto', \
context_length=None, host='127.0.0.1', port=30000, mem_fraction_static=0.88, max_running_requests=None, \
chunked_prefill_size=8192, max_prefill_tokens=16384, schedule_policy='fcfs', tp_size=1, dp_size=1, \
random_seed=42, log_level='info', cuda_graph_max_bs=256, disable_cuda_graph=False, attention_backend='fa3', \
speculative_algorithm=None, enable_metrics=False)
[2026-05-01 10:00:02] Attention backend not set. Use fa3 backend by default.
[2026-05-01 10:00:03] Init torch distributed begin.
[2026-05-01 10:00:04] Init torch distributed ends. mem usage=0.00 GB
[2026-05-01 10:00:05] Load weight begin. avail mem=94.12 GB
Loading safetensors checkpoint shards:   0% Completed | 0/12 [00:00<?, ?it/s]
Loading safetensors checkpoint shards: 100% Completed | 12/12 [00:14<00:00,  1.20s/it]
[2026-05-01 10:00:19] Load weight end. type=Qwen3ForCausalLM, dtype=torch.bfloat16, avail mem=43.61 GB, \
mem usage=50.51 GB.
[2026-05-01 10:00:19] KV Cache is allocated. #tokens: 612345, K size: 17.52 GB, V size: 17.52 GB
[2026-05-01 10:00:19] Memory pool end. avail mem=7.95 GB
[2026-05-01 10:00:20] Capture cuda graph begin. This can take up to several minutes. avail mem=7.31 GB
[2026-05-01 10:00:20] Capture cuda graph bs [1, 2, 4, 8, 16, 24, 32, 40, 48, 56, 64, 128, 256]
[2026-05-01 10:00:27] Capture cuda graph end. Time elapsed: 7.12 s. mem usage=1.21 GB. avail mem=6.10 GB.
[2026-05-01 10:00:28] max_total_num_tokens=612345, chunked_prefill_size=8192, max_prefill_tokens=16384, \
max_running_requests=256, context_len=262144, available_gpu_mem=6.10 GB
[2026-05-01 10:00:28] INFO:     Started server process [4242]
[2026-05-01 10:00:28] INFO:     Waiting for application startup.
[2026-05-01 10:00:28] INFO:     Application startup complete.
[2026-05-01 10:00:28] INFO:     Uvicorn running on http://127.0.0.1:30000 (Press CTRL+C to quit)
[2026-05-01 10:00:29] INFO:     127.0.0.1:39998 - "GET /get_model_info HTTP/1.1" 200 OK
[2026-05-01 10:00:30] The server is fired up and ready to roll!
"""
ENDING = f"""\
[2026-05-01 12:00:00] Scheduler hit an exception: Traceback (most recent call last):
  File "/usr/lib/python3/dist-packages/sglang/srt/managers/scheduler.py", line 2950, in run_scheduler_process
    scheduler.event_loop_normal()
  File "/usr/lib/python3/dist-packages/sglang/srt/managers/scheduler.py", line 123, in event_loop_normal
    result = self.run_batch(batch)
{ROOT_ERROR}
"""
DECODE = (
    b"[2026-05-01 HH:MM:%02d] Decode batch, #running-req: %d, #token: %d, token usage: 0.%02d, "
    b"accept len: %d.%02d, cuda graph: True, gen throughput (token/s): %d.%02d, #queue-req: %d\n"
)
PREFILL = (
    b"[2026-05-01 HH:MM:%02d] Prefill batch. #new-seq: %d, #new-token: %d, #cached-token: %d, "
    b"token usage: 0.%02d, #running-req: %d, #queue-req: %d\n"
)
ACCESS = b'INFO:     127.0.0.1:%d - "POST /generate HTTP/1.1" 200 OK\n'


@dataclass(frozen=True)
class Sizes:
    """Bytes of each file, and of the smaller one of the same shape its peak RSS is held against.
    The hostile files are written a whole MB at a time."""

    log: int
    small_log: int
    random: int
    small_random: int
    line: int
    small_line: int


FULL = Sizes(200_000_000, 20_000_000, 50_000_000, 5_000_000, 20_000_000, 2_000_000)
SMOKE = Sizes(4_000_000, 2_000_000, 2_000_000, 1_000_000, 2_000_000, 1_000_000)


def run(smoke: bool = False) -> dict[str, dict[str, Any]]:
    sizes = SMOKE if smoke else FULL
    with tempfile.TemporaryDirectory(prefix="bench-diagnose-") as tmp:
        big, small = Path(tmp) / "server.log", Path(tmp) / "server-small.log"
        began = time.perf_counter()
        _write_log(big, sizes.log)
        _write_log(small, sizes.small_log)
        size_mb = big.stat().st_size / 1e6
        small_mb, elapsed = small.stat().st_size / 1e6, time.perf_counter() - began
        _say(f"wrote {size_mb:.0f} MB and {small_mb:.0f} MB logs in {elapsed:.1f} s")
        results = {**_cli(big, small, size_mb, small_mb), **_incremental(big, size_mb)}
        big.unlink()
        small.unlink()
        return {**results, **_hostile(Path(tmp), sizes)}


def _say(message: str) -> None:
    print(f"[bench_diagnose {time.strftime('%H:%M:%S')}] {message}", file=sys.stderr, flush=True)


def _minute_block(rng: random.Random, lines: int) -> bytes:
    """One minute of serving, its hour and minute left as HH:MM: decode batches, with a prefill
    batch and an access-log line now and then."""
    out = []
    for i in range(lines):
        second, kind, r = i * 60 // lines, rng.random(), rng.randrange(1 << 30)
        running, usage = 1 + r % 64, 5 + r % 90
        if kind < 0.06:
            out.append(PREFILL % (second, 1 + r % 3, 64 + r % 4000, r % 2048, usage, running, r % 4))
        elif kind < 0.12:
            out.append(ACCESS % (32768 + r % 28000))
        else:
            values = (second, running, 1000 + r % 200_000, usage, 1 + r % 3, r % 100, 200 + r % 1800, r % 100, r % 5)
            out.append(DECODE % values)
    return b"".join(out)


def _write_log(path: Path, size: int) -> None:
    """A log of about `size` bytes, the same for the same size: serving from 10:01 to 11:59,
    each minute one of a few generated blocks, then the fatal traceback."""
    rng = random.Random(20260501)
    line_bytes = len(_minute_block(random.Random(0), 1000)) / 1000
    per_minute = int((size - len(STARTUP) - len(ENDING)) / MINUTES / line_bytes)
    blocks = [_minute_block(rng, per_minute) for _ in range(8)]
    with open(path, "wb") as f:
        f.write(STARTUP.encode())
        for minute in range(1, MINUTES + 1):
            stamp = b"%02d:%02d" % (10 + minute // 60, minute % 60)
            f.write(blocks[minute % len(blocks)].replace(b"HH:MM", stamp))
        f.write(ENDING.encode())


def _run_child(command: list[str], env: dict[str, str] | None = None) -> tuple[float, float, bytes]:
    """Wall seconds, peak RSS in MiB and stdout of one run of `command`. The peak is GNU time's
    report where it is installed: a child of this process starts as a copy of it, and its own
    rusage (os.wait4's, the fallback) counts those pages, so it never reads below this process's size."""
    measured = [GNU_TIME, "-f", "%M", *command] if os.path.exists(GNU_TIME) else command
    with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
        began = time.perf_counter()
        child = subprocess.Popen(measured, stdout=out, stderr=err, env=env, cwd=ROOT)
        _, status, usage = os.wait4(child.pid, 0)
        seconds = time.perf_counter() - began
        child.returncode = os.waitstatus_to_exitcode(status)
        err.seek(0)
        errors = err.read().decode(errors="replace")
        # 1 is an answer: `launchdeck diagnose` found a failure (its output is checked), grep counted none
        if child.returncode not in (0, 1):
            raise RuntimeError(f"{command} exited with {child.returncode}: {errors[-500:]}")
        peak_kib = int(errors.split()[-1]) if measured is not command else usage.ru_maxrss
        out.seek(0)
        return seconds, peak_kib / 1024, out.read()


def _best_of_3(command: list[str], env: dict[str, str] | None = None) -> tuple[float, float, bytes]:
    """After a warm-up: the fastest of 3 runs, the peak RSS over them, the last output."""
    _run_child(command, env)
    runs = [_run_child(command, env) for _ in range(3)]
    return min(r[0] for r in runs), max(r[1] for r in runs), runs[-1][2]


def _check(output: bytes) -> list[str]:
    """What is wrong with the CLI's answer, if anything."""
    try:
        result = json.loads(output)
    except ValueError:
        return [f"not JSON: {output[:200]!r}"]
    expected = {"class": "oom", "root_error": ROOT_ERROR, "stage": "serving"}
    return [
        f"{key} is {result.get(key)!r}, expected {value!r}"
        for key, value in expected.items()
        if result.get(key) != value
    ]


def _cli(big: Path, small: Path, size_mb: float, small_mb: float) -> dict[str, dict[str, Any]]:
    launchdeck = Path(sys.executable).with_name("launchdeck")
    command = [str(launchdeck)] if launchdeck.exists() else [sys.executable, "-m", "app.cli"]
    seconds, rss, out = _best_of_3([*command, "diagnose", str(big), "--json"])
    problems = _check(out)
    small_seconds, small_rss, small_out = _best_of_3([*command, "diagnose", str(small), "--json"])
    problems += [f"{small_mb:.0f} MB log: {p}" for p in _check(small_out)]
    grep = ["grep", "-c", "Decode batch", str(big)]
    grep_seconds, _, _ = _best_of_3(grep, {**os.environ, "LC_ALL": "C"})
    flat = rss <= max(1.25 * small_rss, small_rss + 20)
    _say(f"diagnose_200mb: CLI {seconds:.2f} s, peak RSS {rss:.0f} MiB")
    _say(f"diagnose_200mb: {small_mb:.0f} MB log {small_seconds:.2f} s, peak RSS {small_rss:.0f} MiB")
    _say(f"diagnose_200mb: grep -c {grep_seconds:.3f} s")
    for problem in problems:
        _say(f"diagnose_200mb: wrong answer: {problem}")
    return {
        "diagnose_200mb": {
            "value": round(seconds, 2),
            "unit": f"s (best of 3 after a warm-up), `launchdeck diagnose FILE --json` as a subprocess on a "
            f"{size_mb:.0f} MB SGLang log ending in a CUDA OOM traceback; peak RSS {rss:.0f} MiB "
            f"({small_mb:.0f} MB log of the same shape: {small_rss:.0f} MiB); "
            f"answer {'correct' if not problems else 'WRONG'}",
            "anchor": 'LC_ALL=C grep -c "Decode batch" FILE (best of 3 after a warm-up)',
            "anchor_value": round(grep_seconds, 3),
            "ratio": round(seconds / grep_seconds, 2),
            "goal": "<= 2 s and flat memory",
            "met": seconds <= 2.0 and flat and not problems,
            "peak_rss_mib": round(rss, 1),
            "peak_rss_mib_20mb": round(small_rss, 1),
            "seconds_20mb": round(small_seconds, 2),
            "memory_flat": flat,
            "correct": not problems,
        }
    }


def _incremental(path: Path, size_mb: float) -> dict[str, dict[str, Any]]:
    began = time.perf_counter()
    analyzer = Analyzer()
    with open(path, "rb") as f:
        while chunk := f.read(CHUNK):
            analyzer.feed_bytes(chunk)
    diagnosis = analyzer.finish()
    seconds = time.perf_counter() - began
    anchor_s = []
    for _ in range(3):
        began, lines = time.perf_counter(), 0
        with open(path, "rb") as f:
            while chunk := f.read(CHUNK):
                lines += chunk.count(b"\n")
        anchor_s.append(time.perf_counter() - began)
    ms_mb, anchor_ms_mb = seconds * 1000 / size_mb, min(anchor_s) * 1000 / size_mb
    correct = diagnosis.failure_class == "oom" and diagnosis.root_error == ROOT_ERROR
    _say(f"diagnose_incremental: Analyzer {ms_mb:.2f} ms/MB, class {diagnosis.failure_class}")
    _say(f"diagnose_incremental: newline count {anchor_ms_mb:.3f} ms/MB")
    return {
        "diagnose_incremental": {
            "value": round(ms_mb, 2),
            "unit": f"ms/MB (one run, {size_mb / seconds:.0f} MB/s), Analyzer.feed_bytes over 64 KiB chunks of the "
            f"{size_mb:.0f} MB log, then finish(), in-process; class {diagnosis.failure_class!r}, "
            f"root error {'correct' if correct else 'WRONG'}",
            "anchor": "the same 64 KiB reads with chunk.count(b'\\n') (best of 3)",
            "anchor_value": round(anchor_ms_mb, 3),
            "ratio": round(ms_mb / anchor_ms_mb, 1),
            "goal": "<= 10 ms/MB (>= 100 MB/s) and class oom",
            "met": ms_mb <= 10 and correct,
            "correct": correct,
        }
    }


def write_random_bytes(path: Path, size: int) -> None:
    """`size` random bytes, the same for the same size: what a binary file written to the log looks like."""
    rng = random.Random(15)
    with open(path, "wb") as f:  # in pieces: a child started from a large parent would count its pages
        for _ in range(size // 1_000_000):
            f.write(rng.randbytes(1_000_000))


def write_endless_line(path: Path, size: int) -> None:
    """A startup, then a traceback whose exception line runs on for `size` printable characters
    (a tensor or a request printed whole into a message) and never ends."""
    rng = random.Random(15)
    alphabet = (string.ascii_letters + string.digits + string.punctuation + " " * 10).encode()
    header = ENDING.rsplit("\n", 2)[0] + "\nValueError: "
    with open(path, "wb") as f:
        f.write(STARTUP.encode() + header.encode())
        for _ in range(size // 1_000_000):
            f.write(bytes(rng.choices(alphabet, k=1_000_000)))


def _hostile(tmp: Path, sizes: Sizes) -> dict[str, dict[str, Any]]:
    launchdeck = Path(sys.executable).with_name("launchdeck")
    command = [str(launchdeck)] if launchdeck.exists() else [sys.executable, "-m", "app.cli"]
    results = {}
    for name, write, size, small_size, expected in (
        ("diagnose_hostile_random", write_random_bytes, sizes.random, sizes.small_random, _nothing_found),
        ("diagnose_hostile_line", write_endless_line, sizes.line, sizes.small_line, _cut_exception),
    ):
        big, small = tmp / f"{name}.log", tmp / f"{name}-small.log"
        write(big, size)
        write(small, small_size)
        size_mb, small_mb = big.stat().st_size / 1e6, small.stat().st_size / 1e6
        seconds, rss, out = _best_of_3([*command, "diagnose", str(big), "--json"])
        small_seconds, small_rss, small_out = _best_of_3([*command, "diagnose", str(small), "--json"])
        problems = expected(out) + [f"{small_mb:.0f} MB: {p}" for p in expected(small_out)]
        grep_seconds, _, _ = _best_of_3(["grep", "-c", "x", str(big)], {**os.environ, "LC_ALL": "C"})
        mb_s, flat = size_mb / seconds, rss <= max(1.25 * small_rss, small_rss + 20)
        _say(f"{name}: CLI {seconds:.2f} s ({mb_s:.0f} MB/s), peak RSS {rss:.0f} MiB")
        _say(f"{name}: {small_mb:.0f} MB: {small_seconds:.2f} s, peak RSS {small_rss:.0f} MiB")
        _say(f"{name}: grep -c {grep_seconds:.3f} s")
        for problem in problems:
            _say(f"{name}: wrong answer: {problem}")
        results[name] = {
            "value": round(mb_s, 1),
            "unit": f"MB/s (best of 3 after a warm-up), `launchdeck diagnose FILE --json` as a subprocess on "
            f"{size_mb:.0f} MB of {'random bytes' if 'random' in name else 'log ending in a line without a newline'}"
            f"; peak RSS {rss:.0f} MiB ({small_mb:.0f} MB: {small_rss:.0f} MiB); "
            f"answer {'as expected' if not problems else 'WRONG'}",
            "anchor": "LC_ALL=C grep -c x FILE (best of 3 after a warm-up)",
            "anchor_value": round(grep_seconds, 3),
            "ratio": round(seconds / grep_seconds, 2),
            "goal": f">= {HOSTILE_GOAL_MB_S} MB/s and flat memory",
            "met": mb_s >= HOSTILE_GOAL_MB_S and flat and not problems,
            "seconds": round(seconds, 2),
            "peak_rss_mib": round(rss, 1),
            "peak_rss_mib_small": round(small_rss, 1),
            "seconds_small": round(small_seconds, 2),
            "memory_flat": flat,
            "correct": not problems,
        }
        big.unlink()
        small.unlink()
    return results


def _nothing_found(output: bytes) -> list[str]:
    """Random bytes hold no stage and no error."""
    result = json.loads(output)
    expected = {"stage": "starting", "root_error": None, "adjustments": []}
    return [
        f"{key} is {result.get(key)!r}, expected {value!r}"
        for key, value in expected.items()
        if result.get(key) != value
    ]


def _cut_exception(output: bytes) -> list[str]:
    """The startup's stage, and the exception cut to one record's length as the root error."""
    result = json.loads(output)
    root = result.get("root_error") or ""
    problems = [] if result.get("stage") == "ready" else [f"stage is {result.get('stage')!r}, expected 'ready'"]
    if not root.startswith("ValueError: ") or len(root) > MAX_RECORD:
        problems.append(f"root error is {root[:80]!r}... ({len(root)} characters)")
    return problems


if __name__ == "__main__":
    print(json.dumps(run(), indent=2))
