"""Benchmarking a ready attempt: SGLang's own `bench_serving`, run on the server's host with the
preset's Python against the server's port, over the host's SSH connection.

Decisions:
- SGLang's tool, not one of ours: its figures are the ones people quote and compare, and it runs
  where the server is, so the network between the dashboard and the host is not measured.
- The command is a constant script with positional values (as the launch's commands are): it caps
  the process's address space (`ulimit -v`) and its time (`timeout`, then KILL), and it runs under
  the connection's stream wrapper, so it dies with its channel: a dashboard that stops or restarts
  takes its benchmarks down with it instead of leaving load on a server someone else may be using.
  A benchmark found running at start-up is therefore marked failed, not resumed.
- Its output (stdout and stderr, the progress bar included) is appended to
  `<data_dir>/benchmarks/<id>.log` as it arrives, which the pages and the CLI follow by offset; the
  summary block at its end gives the figures (app.perf.summary).
- Under speculative decoding the accept rate is the accept length over the draft tokens verified
  per step, as SGLang's decode lines compute it.
"""

from __future__ import annotations

import asyncio
import logging
from collections import deque
from pathlib import Path
from typing import Any

from sqlalchemy import select, update
from sqlalchemy.ext.asyncio import AsyncSession

from app import audit
from app.clock import utcnow
from app.db import Sessions
from app.db.history import load_attempt
from app.db.models import Attempt, Benchmark, Host, PresetRevision
from app.errors import Conflict, HostError, NotFound
from app.host_calls import HostCalls
from app.launch.attempts import HOST_WAIT
from app.launch.guards import LaunchPermission
from app.launch.nodes import option_value
from app.leases import LeaseLost
from app.perf.summary import parse_summary
from app.perf.workloads import DEFAULT_WORKLOAD, get_workload, settings_of
from app.ssh.manager import SSHManager
from app.states import AttemptStatus, BenchmarkStatus

log = logging.getLogger(__name__)

INTERRUPTED = "the dashboard stopped while it ran"  # the error of a run a restart found running
MAX_OUTPUT = 16 << 20  # bytes kept of one benchmark's output; past it only the tail is read for the summary
TAIL = 256 << 10

# $1: address-space limit in KiB, $2: seconds (then TERM, and KILL 10 s later); the rest is the command.
BENCH = 'exec 2>&1; ulimit -v "$1" || exit 125; seconds=$2; shift 2; exec timeout -k 10 "$seconds" "$@"'


def bench_argv(attempt: Attempt, workload: dict[str, Any]) -> list[str]:
    """bench_serving's command line for the attempt's server and the workload's settings."""
    args = attempt.effective_args or {}
    host = str(args.get("host") or option_value(attempt.argv, "--host") or "127.0.0.1")
    if host in ("0.0.0.0", "::", "[::]"):
        host = "127.0.0.1"
    rate = workload.get("request_rate")
    argv = [
        attempt.revision.python, "-m", "sglang.bench_serving",
        "--backend", "sglang",
        "--host", host,
        "--port", str(attempt.port),
        "--model", attempt.revision.model_path,
        "--dataset-name", str(workload["dataset"]),
        "--num-prompts", str(workload["num_prompts"]),
        "--random-input-len", str(workload["input_len"]),
        "--random-output-len", str(workload["output_len"]),
        "--random-range-ratio", str(workload["range_ratio"]),
        "--request-rate", "inf" if rate is None else str(rate),
    ]  # fmt: skip
    if workload.get("max_concurrency"):
        argv += ["--max-concurrency", str(workload["max_concurrency"])]
    return argv


def accept_rate(figures: dict[str, Any], attempt: Attempt) -> float | None:
    length = figures.get("accept_length")
    draft = (attempt.effective_args or {}).get("speculative_num_draft_tokens") or option_value(
        attempt.argv, "--speculative-num-draft-tokens"
    )
    try:
        return round(float(length) / float(draft), 4) if length and draft else None
    except (TypeError, ValueError):
        return None


class Benchmarks:
    """Owned by the app's lifespan: one background task per running benchmark."""

    def __init__(
        self,
        sessions: Sessions,
        ssh: SSHManager,
        directory: Path,
        *,
        timeout: float,
        memory_mib: int,
        calls: HostCalls | None = None,
    ):
        self.sessions = sessions
        self.ssh = ssh
        self.directory = directory
        self.timeout = timeout
        self.memory_mib = memory_mib
        # A benchmark runs from the controller that owns its server's host (app.host_calls).
        self.calls = calls or HostCalls(sessions)
        self.calls.handle("benchmark", self._run_here)
        self.calls.handle("benchmark-stop", self._stop_here)
        self._tasks: dict[int, asyncio.Task[None]] = {}
        self._host_of: dict[int, str] = {}

    def output_path(self, benchmark_id: int) -> Path:
        return self.directory / f"{benchmark_id}.log"

    async def follow_hosts(self, hosts: list[str]) -> None:
        """Marks the benchmarks left running on `hosts` as failed, as this controller takes them
        (at start, or from another): their processes ended with the connections that ran them."""
        self.directory.mkdir(parents=True, exist_ok=True)
        on_hosts = select(Attempt.id).join(Host, Attempt.host_id == Host.id).where(Host.name.in_(hosts))
        async with self.sessions.write.begin() as session:
            await session.execute(
                update(Benchmark)
                .where(
                    Benchmark.status == BenchmarkStatus.RUNNING,
                    Benchmark.attempt_id.in_(on_hosts),
                    Benchmark.id.not_in(list(self._tasks)),
                )
                .values(status=BenchmarkStatus.FAILED, error=INTERRUPTED, ended_at=utcnow())
            )

    async def let_go(self, hosts: list[str]) -> None:
        """Ends the runs on `hosts`, whose lease this controller lost, without a word: the new
        owner marks them as interrupted."""
        tasks = [task for benchmark_id, task in self._tasks.items() if self._host_of.get(benchmark_id) in hosts]
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)

    async def close(self) -> None:
        tasks = list(self._tasks.values())
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)

    async def run(
        self, attempt_id: int, *, workload: str | None, actor: str, permission: LaunchPermission | None = None
    ) -> Benchmark:
        """Starts a benchmark of a ready attempt in the background and returns its row; it loads the
        attempt's host, so it needs the same permission as a launch there."""
        async with self.sessions.write.begin() as session:
            attempt = await load_attempt(session, attempt_id)
            if permission is not None:
                permission.check(attempt.host.name, self.ssh.get(attempt.host.name).spec.labels)
            if attempt.part_of_id is not None:
                raise Conflict(f"attempt {attempt_id} is one node of attempt {attempt.part_of_id}: benchmark that")
            if attempt.status is not AttemptStatus.READY:
                raise Conflict(f"attempt {attempt_id} is {attempt.status}: only a ready server can be benchmarked")
            if attempt.job_id is not None:
                raise Conflict(
                    f"attempt {attempt_id} runs as a Slurm job: benchmarks run over SSH on the server's host, "
                    "and a job's node is not reachable that way"
                )
            running = await session.scalar(
                select(Benchmark.id).where(
                    Benchmark.attempt_id == attempt_id, Benchmark.status == BenchmarkStatus.RUNNING
                )
            )
            if running is not None:
                raise Conflict(f"benchmark {running} of attempt {attempt_id} is still running: wait for it or stop it")
            chosen = await get_workload(session, workload or DEFAULT_WORKLOAD)
            settings = settings_of(chosen)
            argv = bench_argv(attempt, settings)
            benchmark = Benchmark(
                attempt_id=attempt_id,
                preset_id=attempt.preset_id,
                workload_id=chosen.id,
                workload=settings,
                argv=argv,
                started_by=actor,
            )
            session.add(benchmark)
            await session.flush()
            audit.record(
                session,
                actor=actor,
                action="benchmark-start",
                target=f"attempt {attempt_id}",
                detail={"benchmark": benchmark.id, "workload": chosen.name},
            )
            host = attempt.host.name
        await self.calls.on_host(host, "benchmark", {"benchmark": benchmark.id}, wait=HOST_WAIT)
        return benchmark

    async def _run_here(self, payload: dict[str, Any]) -> dict[str, Any]:
        benchmark_id = payload["benchmark"]
        async with self.sessions.read() as session:
            benchmark = await session.get(Benchmark, benchmark_id)
            assert benchmark is not None
            attempt = await load_attempt(session, benchmark.attempt_id)
        host = attempt.host.name
        self._host_of[benchmark_id] = host
        task = asyncio.create_task(self._run(benchmark_id, attempt.id, host, list(benchmark.argv)))
        self._tasks[benchmark_id] = task

        def ended(_: object) -> None:
            self._tasks.pop(benchmark_id, None)
            self._host_of.pop(benchmark_id, None)

        task.add_done_callback(ended)
        return {}

    async def wait(self, benchmark_id: int) -> Benchmark:
        """The benchmark once it has ended."""
        if task := self._tasks.get(benchmark_id):
            await asyncio.wait({task})  # neither cancels the run nor raises its cancellation
        return await self.get(benchmark_id)

    async def get(self, benchmark_id: int) -> Benchmark:
        async with self.sessions.read() as session:
            benchmark = await session.get(Benchmark, benchmark_id)
        if benchmark is None:
            raise NotFound(f"no benchmark {benchmark_id}")
        return benchmark

    async def stop(self, benchmark_id: int, *, actor: str, permission: LaunchPermission | None = None) -> Benchmark:
        """Ends a running benchmark; `permission` must cover its attempt's host, as for launching there."""
        benchmark = await self.get(benchmark_id)
        async with self.sessions.read() as session:
            attempt = await load_attempt(session, benchmark.attempt_id)
        if permission is not None:
            permission.check(attempt.host.name, self.ssh.get(attempt.host.name).spec.labels)
        if benchmark.status != BenchmarkStatus.RUNNING:
            raise Conflict(f"benchmark {benchmark_id} is {benchmark.status}: there is nothing to stop")
        call = {"benchmark": benchmark_id, "actor": actor}
        await self.calls.on_host(attempt.host.name, "benchmark-stop", call, wait=HOST_WAIT)
        return await self.get(benchmark_id)

    async def _stop_here(self, payload: dict[str, Any]) -> dict[str, Any]:
        benchmark_id, actor = payload["benchmark"], payload["actor"]
        task = self._tasks.get(benchmark_id)
        if task is None:
            raise Conflict(f"benchmark {benchmark_id} is not running any more: there is nothing to stop")
        task.cancel()
        await asyncio.wait({task})
        async with self.sessions.write.begin() as session:
            await self._finish(session, benchmark_id, BenchmarkStatus.FAILED, error=f"stopped by {actor}")
            audit.record(session, actor=actor, action="benchmark-stop", target=f"benchmark {benchmark_id}")
        return {}

    def read_output(self, benchmark_id: int, offset: int, limit: int = 1 << 20) -> bytes:
        try:
            with self.output_path(benchmark_id).open("rb") as output:
                output.seek(0, 2)
                output.seek(min(max(offset, 0), output.tell()))  # past the end reads nothing, as a file does
                return output.read(limit)
        except FileNotFoundError:
            return b""

    def output_tail(self, benchmark_id: int, size: int) -> bytes:
        """The output's last `size` bytes (what a page shows of a run in progress)."""
        try:
            with self.output_path(benchmark_id).open("rb") as output:
                output.seek(0, 2)
                output.seek(max(0, output.tell() - size))
                return output.read(size)
        except FileNotFoundError:
            return b""

    async def _run(self, benchmark_id: int, attempt_id: int, host: str, argv: list[str]) -> None:
        fence = self.calls.ownership.fence(host)
        tail: deque[bytes] = deque()
        tail_size = written = 0
        status: int | None = None
        error = ""
        command = ["sh", "-c", BENCH, "sh", str(self.memory_mib << 10), str(int(self.timeout)), *argv]
        try:
            with self.output_path(benchmark_id).open("ab") as output:
                async with self.ssh.get(host).stream(command) as process:
                    while chunk := await process.stdout.read(65536):
                        if written < MAX_OUTPUT:
                            output.write(chunk[: MAX_OUTPUT - written])
                            output.flush()
                        written += len(chunk)
                        tail.append(chunk)
                        tail_size += len(chunk)
                        while tail_size - len(tail[0]) >= TAIL:
                            tail_size -= len(tail.popleft())
                    status = (await process.wait()).exit_status
        except asyncio.CancelledError:
            raise
        except HostError as exc:
            error = str(exc)
        except OSError as exc:
            error = f"cannot keep its output: {exc.strerror or exc}"
        text = b"".join(tail).decode(errors="replace")
        figures: dict[str, Any] = dict(parse_summary(text))
        if not error and (status != 0 or not figures):
            error = _failure(status, text, self.timeout)
        try:
            async with self.sessions.write.begin() as session:
                if fence is not None:
                    await fence.check(session)
                attempt = await session.get(Attempt, attempt_id)
                if figures and attempt is not None and (rate := accept_rate(figures, attempt)) is not None:
                    figures["accept_rate"] = rate
                await self._finish(
                    session,
                    benchmark_id,
                    BenchmarkStatus.FAILED if error else BenchmarkStatus.DONE,
                    error=error,
                    figures=figures,
                )
        except LeaseLost as exc:  # the host's new owner marked it interrupted
            log.info("benchmark %d: not written: %s", benchmark_id, exc)

    @staticmethod
    async def _finish(
        session: AsyncSession, benchmark_id: int, status: str, *, error: str = "", figures: Any = None
    ) -> None:
        values: dict[str, Any] = {"status": status, "error": error, "ended_at": utcnow()}
        if figures:
            values["figures"] = figures
        await session.execute(
            update(Benchmark)
            .where(Benchmark.id == benchmark_id, Benchmark.status == BenchmarkStatus.RUNNING)
            .values(**values)
        )


async def benchmarks_of(session: AsyncSession, attempt_id: int, limit: int = 20) -> list[Benchmark]:
    """The attempt's benchmarks, newest first."""
    query = select(Benchmark).where(Benchmark.attempt_id == attempt_id).order_by(Benchmark.id.desc()).limit(limit)
    return list((await session.scalars(query)).all())


async def preset_benchmarks(session: AsyncSession, preset_id: int, limit: int = 500) -> list[tuple[int, Benchmark]]:
    """The preset's benchmarks that gave figures, newest last, each with its attempt's revision number."""
    query = (
        select(PresetRevision.number, Benchmark)
        .join(Attempt, Benchmark.attempt_id == Attempt.id)
        .join(PresetRevision, Attempt.preset_revision_id == PresetRevision.id)
        .where(Benchmark.preset_id == preset_id, Benchmark.status == BenchmarkStatus.DONE)
        .order_by(Benchmark.id.desc())
        .limit(limit)
    )
    return [(number, benchmark) for number, benchmark in reversed((await session.execute(query)).all())]


def _failure(status: int | None, text: str, timeout: float) -> str:
    """Why a run gave no figures, in its own last words where it has some."""
    if status in (124, 137):
        return f"it ran past its time limit of {timeout:.0f} s and was stopped"
    if status == 125:
        return "its host refused the memory limit (ulimit -v)"
    last = next((line.strip() for line in reversed(text.replace("\r", "\n").splitlines()) if line.strip()), "")
    said = f": {last[:300]}" if last else ""
    if status == 0:
        return f"it ended without a summary{said}"
    return f"bench_serving exited with {status}{said}"
