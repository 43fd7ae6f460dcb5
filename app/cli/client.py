"""`launchdeck launch`, `relaunch`, `stop`, `attempts`, `logs`, `compare`, `bench`, `sweep` and
`rules`: the dashboard's HTTP API from a terminal (app.cli.remote finds it)."""

from __future__ import annotations

import json
import sys
import time
from collections.abc import Callable
from typing import IO, Any

import httpx

from app.cli.remote import ApiClient, check, refusal
from app.cli.shared import table
from app.errors import InvalidInput, LaunchdeckError
from app.states import FINISHED_STATUSES, AttemptStatus

# Where following a launch from the terminal stops: it ended, or it is serving (well or not).
FINAL = FINISHED_STATUSES | {AttemptStatus.READY, AttemptStatus.UNHEALTHY}


def parse_gpus(text: str) -> list[int]:
    try:
        return [int(part) for part in text.split(",") if part.strip()]
    except ValueError:
        raise InvalidInput(f"--gpus: {text!r} is not a comma-separated list of GPU indices, e.g. 0,1") from None


def launch(
    client: ApiClient,
    *,
    preset: str,
    host: str | None,
    gpus: list[int],
    port: int | None,
    override: str,
    wait: bool,
    confirm_failed_before: bool = False,
    hosts: list[str] | None = None,
    label: str | None = None,
    dist_port: int | None = None,
    out: Callable[[str], None] = print,
    err: Callable[[str], None] = lambda line: print(line, file=sys.stderr),
) -> int:
    """Launches and, with `wait`, follows the attempt; exit status 0 when it reaches ready, 3 when a
    guard refused the launch (the answer's `guard`), 1 when it failed. A preset with --nnodes N runs
    on `hosts` (node 0 first) or N hosts with `label`."""
    body = {
        "preset": preset,
        "host": host,
        "hosts": hosts,
        "label": label,
        "dist_port": dist_port,
        "gpus": gpus,
        "port": port,
        "override_reason": override,
        "confirm_failed_before": confirm_failed_before,
    }
    response = _post(client, "/api/attempts", body)
    if (refused := refusal(response)) is not None:
        err(f"launchdeck: {refused['detail']}")
        if refused.get("suggested_port"):
            on = host or (hosts or [""])[0]
            err(f"launchdeck: port {refused['suggested_port']} is free on {on} (--port {refused['suggested_port']})")
        return 3
    check(response)
    attempt = response.json()
    out(f"attempt {attempt['id']}: {client.url}/attempts/{attempt['id']}")
    return follow(client, attempt["id"], out=out) if wait else 0


def relaunch(
    client: ApiClient,
    attempt_id: int,
    *,
    body: dict[str, Any],
    wait: bool,
    out: Callable[[str], None] = print,
    err: Callable[[str], None] = lambda line: print(line, file=sys.stderr),
) -> int:
    """Launches the attempt's choices again (`body` as POST /api/attempts/{id}/relaunch takes it)
    and, with `wait`, follows the new attempt; exit status as `launch`'s."""
    response = _post(client, f"/api/attempts/{attempt_id}/relaunch", body)
    if (refused := refusal(response)) is not None:
        err(f"launchdeck: {refused['detail']}")
        return 3
    check(response)
    again = response.json()
    revision = f"revision {again['revision']}{', saved for it' if again['saved'] else ''}"
    out(f"attempt {again['id']} (relaunch of {attempt_id}, {revision}): {client.url}/attempts/{again['id']}")
    return follow(client, again["id"], out=out) if wait else 0


def _post(client: ApiClient, path: str, body: dict[str, Any]) -> httpx.Response:
    """A POST whose error answers the caller reads itself (a guard's refusal)."""
    try:
        return client.http.post(path, json=body)
    except httpx.TransportError as exc:
        raise LaunchdeckError(f"cannot reach the dashboard at {client.url}: {exc}") from None


def follow(client: ApiClient, attempt_id: int, *, out: Callable[[str], None] = print) -> int:
    """Prints each status and stage the attempt reaches until it is ready or ended; exit status 0
    when ready, else 1."""
    shown = ""
    while True:
        attempt = client.call("GET", f"/api/attempts/{attempt_id}")
        stage = f"{attempt['status']} ({attempt['stage']})"
        if stage != shown:
            out(f"  {stage}")
            shown = stage
        if attempt["status"] in FINAL:
            break
        time.sleep(1)
    if attempt["status"] == AttemptStatus.READY:
        out(f"ready after {attempt['time_to_ready_s']:.1f} s on port {attempt['port']}")
        return 0
    out(f"{attempt['status']}: {attempt['error'] or 'no error recorded'}")
    return 1


# How long `launchdeck stop` waits for the attempt to end: the dashboard's grace period before
# SIGKILL (LAUNCHDECK_STOP_GRACE_SECONDS, 15 by default), and its follower's notice after.
STOP_WAIT = 120.0


def stop(
    client: ApiClient, attempt_id: int, *, wait: bool, out: Callable[[str], None] = print, poll: float = 0.5
) -> int:
    """Asks the dashboard to stop the attempt (SIGTERM to its processes, SIGKILL after the grace
    period) and, with `wait`, waits until it has ended; exit status 1 when it has not by STOP_WAIT."""
    attempt = client.call("POST", f"/api/attempts/{attempt_id}/stop")
    deadline = time.monotonic() + STOP_WAIT
    while wait and attempt["status"] not in FINISHED_STATUSES and time.monotonic() < deadline:
        time.sleep(poll)
        attempt = client.call("GET", f"/api/attempts/{attempt_id}")
    if attempt["status"] in FINISHED_STATUSES:
        out(f"attempt {attempt_id}: {attempt['status']}")
        return 0
    out(f"attempt {attempt_id}: stopping (still {attempt['status']})")
    return 1 if wait else 0


def export_rules(client: ApiClient, path: str | None, *, out: Callable[[str], None] = print) -> int:
    """The dashboard's rules as a rules file, written to `path` or printed."""
    text = client.request("GET", "/api/rules/export").text
    if path is None:
        out(text.rstrip("\n"))
        return 0
    try:
        with open(path, "w", encoding="utf-8") as rules_file:
            rules_file.write(text)
    except OSError as exc:
        raise LaunchdeckError(f"cannot write {path}: {exc.strerror or exc}") from None
    count = text.count("[[rule]]")
    out(f"{count} rule{'s' if count != 1 else ''} written to {path}")
    return 0


def import_rules(client: ApiClient, text: str, *, name: str, out: Callable[[str], None] = print) -> int:
    """Adds the rules of a rules file (already checked here) to the dashboard's, after them."""
    added = client.call(
        "POST", "/api/rules/import", content=text.encode(), headers={"Content-Type": "application/toml"}
    )
    ids = ", ".join(str(rule["id"]) for rule in added)
    out(f"{len(added)} rule{'s' if len(added) != 1 else ''} imported from {name} (ids {ids})")
    return 0


# A root error as the attempts table shows it; --json, `compare` and the attempt's page show it whole.
ROOT_WIDTH = 100


def list_attempts(
    client: ApiClient, *, params: dict[str, Any], as_json: bool, out: Callable[[str], None] = print
) -> int:
    """Newest first; a failure's class and its root error line (else the dashboard's error) beside."""
    rows = client.call("GET", "/api/attempts", params={k: v for k, v in params.items() if v})
    if as_json:
        out(json.dumps(rows, indent=2))
        return 0
    if not rows:
        out("no attempts")
        return 0
    header = ("ID", "PRESET", "HOST", "GPUS", "STATUS", "STAGE", "CREATED", "CLASS", "ROOT ERROR")
    for line in table(header, (_attempt_row(attempt) for attempt in rows)):
        out(line)
    return 0


def _attempt_row(attempt: dict[str, Any]) -> tuple[object, ...]:
    # (.get: a dashboard from before root errors came with the list sends none)
    why = (attempt.get("root_error") or attempt["error"] or "").replace("\n", " ") or None
    return (
        attempt["id"], attempt["preset"], attempt["host"], ",".join(map(str, attempt["gpus"])), attempt["status"],
        attempt["stage"], attempt["created_at"][:19].replace("T", " "), attempt["failure_class"],
        why if why is None or len(why) <= ROOT_WIDTH else why[: ROOT_WIDTH - 1] + "…",
    )  # fmt: skip


def compare(client: ApiClient, a: int, b: int, *, as_json: bool, out: Callable[[str], None] = print) -> int:
    """Two attempts side by side; only the rows that differ, unless there is nothing else."""
    result = client.call("GET", "/api/compare", params={"a": a, "b": b})
    if as_json:
        out(json.dumps(result, indent=2))
        return 0
    left, right = result["a"], result["b"]
    rows = [("", f"#{a}", f"#{b}")]
    rows += [(key, left[key], right[key]) for key in ("status", "failure_class", "fingerprint", "host", "gpus")]
    for section in ("revision", "argv", "env", "gpus", "memory"):
        rows += [(item["name"], item["a"], item["b"]) for item in result[section] if item["differs"]]
    for item in result["performance"]:  # measured figures: all of them, with the change from #a
        change = item["change_pct"][1]
        after = f"{item['b']} ({change:+.1f} %)" if change is not None else item["b"]
        rows.append((item["name"], item["a"], after))
    label, width = max(len(name) for name, _, _ in rows), 30
    for name, first, second in rows:
        first, second = "-" if first is None else str(first), "-" if second is None else str(second)
        out(f"{name:<{label}}  {first[:width]:<{width}} {second[:width]}".rstrip())
    for side in (left, right):
        stages = ", ".join(f"{s['stage']} {s['after_s']:.1f}s" for s in side["stages"])
        out(f"\n#{side['id']} stages: {stages}")
        for item in side["drift"]:
            out(f"#{side['id']} drift: --{item['name'].replace('_', '-')} {item['requested']} -> {item['effective']}")
        if side["root_error"]:
            out(f"#{side['id']} root error (line {side['root_line']}): {side['root_error']}")
    return 0


LOG_READ = 4 << 20


def show_log(
    client: ApiClient, attempt_id: int, *, follow: bool, out: IO[bytes], err: Callable[[str], None] = print
) -> int:
    """Writes the attempt's log byte for byte; with `follow`, then what it gains until it ends,
    resuming after a dropped connection where it left off."""
    offset = 0
    while True:
        response = client.request(
            "GET", f"/api/attempts/{attempt_id}/log", params={"offset": offset, "limit": LOG_READ}
        )
        out.write(response.content)
        offset += len(response.content)
        if offset >= int(response.headers["X-Log-Size"]):
            break
    out.flush()
    if not follow or response.headers["X-Log-Complete"] == "true":
        return 0
    last_id = str(offset)
    while True:
        try:
            for event, event_id, data in client.events(f"/api/attempts/{attempt_id}/events", last_event_id=last_id):
                last_id = event_id or last_id
                if event == "log":
                    out.write(json.loads(data)["text"].encode(errors="surrogateescape"))
                    out.flush()
                elif event == "skipped":
                    err(f"launchdeck: skipped {json.loads(data)['lines']:,} lines to keep up")
                elif event == "end":
                    return 0
        except (httpx.TransportError, LaunchdeckError) as exc:
            err(f"launchdeck: stream interrupted ({exc}); resuming at byte {last_id}")
            time.sleep(1)


def grep_log(
    client: ApiClient, attempt_id: int, pattern: str, *, regex: bool, ignore_case: bool,
    out: Callable[[str], None] = print, err: Callable[[str], None] = print,
) -> int:  # fmt: skip
    """Prints matching lines as `LINE:text`, like grep -n; exit status 1 when nothing matches."""
    params = {"q": pattern, "regex": regex, "ignore_case": ignore_case, "limit": 5000}
    result = client.call("GET", f"/api/attempts/{attempt_id}/grep", params=params)
    for match in result["matches"]:
        out(f"{match['line']}:{match['text']}")
    if result["more"]:
        err(f"launchdeck: {result['more']:,} more matching lines; open the attempt's log page for all")
    if result["total"]:
        return 0
    where = f"; first traceback at line {result['first_traceback_line']}" if result["first_traceback_line"] else ""
    searched = f"{result['searched_lines']:,} lines, {result['searched_bytes']:,} bytes"
    err(f"launchdeck: no line matches: searched {searched}{where}")
    return 1


# The figures `launchdeck bench` prints, in order, with their labels.
BENCH_FIGURES = (
    ("request_throughput", "requests/s"),
    ("output_throughput", "output tokens/s"),
    ("total_throughput", "total tokens/s"),
    ("mean_ttft_ms", "TTFT mean ms"),
    ("median_ttft_ms", "TTFT median ms"),
    ("p99_ttft_ms", "TTFT p99 ms"),
    ("mean_tpot_ms", "TPOT mean ms"),
    ("median_tpot_ms", "TPOT median ms"),
    ("p99_tpot_ms", "TPOT p99 ms"),
    ("mean_itl_ms", "ITL mean ms"),
    ("median_itl_ms", "ITL median ms"),
    ("p99_itl_ms", "ITL p99 ms"),
    ("accept_length", "accept length"),
    ("accept_rate", "accept rate"),
)


def bench(
    client: ApiClient, attempt_id: int, *, workload: str | None, out: IO[bytes], err: Callable[[str], None] = print
) -> int:
    """Benchmarks a ready attempt, writing bench_serving's output as it comes, then the figures
    stored on the attempt. Interrupted (Ctrl-C), it stops the benchmark on the host. Exit status 1
    when the benchmark failed."""
    started = client.call("POST", f"/api/attempts/{attempt_id}/benchmarks", json={"workload": workload})
    benchmark_id, offset = started["id"], 0
    err(f"launchdeck: benchmark {benchmark_id} of attempt {attempt_id} ({started['workload']['name']})")
    try:
        while True:
            response = client.request("GET", f"/api/benchmarks/{benchmark_id}/output", params={"offset": offset})
            out.write(response.content)
            out.flush()
            offset += len(response.content)
            if response.headers["X-Benchmark-Status"] != "running" and not response.content:
                break
            if not response.content:
                time.sleep(0.5)
    except KeyboardInterrupt:
        client.call("POST", f"/api/benchmarks/{benchmark_id}/stop")
        err(f"launchdeck: benchmark {benchmark_id} stopped")
        return 130
    result = client.call("GET", f"/api/benchmarks/{benchmark_id}")
    if result["status"] != "done":
        err(f"launchdeck: benchmark {benchmark_id} {result['status']}: {result['error']}")
        return 1
    figures = result["figures"]
    for key, label in BENCH_FIGURES:
        if key in figures:
            out.write(f"{label:<18}{figures[key]:>12,.2f}\n".encode())
    out.flush()
    return 0


def sweep_request(args: Any) -> dict[str, Any]:
    """The POST /api/sweeps body from `launchdeck sweep start`'s options."""
    body: dict[str, Any] = {
        "preset": args.preset, "host": args.host, "gpus": parse_gpus(args.gpus), "workload": args.workload,
        "max_points": args.max_points, "max_minutes": args.max_minutes,
    }  # fmt: skip
    if args.vary and args.bisect:
        raise InvalidInput("sweep: give --vary (a grid) or --bisect, not both")
    for item in args.vary:
        name, equals, values = item.partition("=")
        if not equals or not values:
            raise InvalidInput(f"--vary {item!r}: give NAME=V1,V2,...")
        body.setdefault("grid", {})[name] = values.split(",")
    if args.bisect:
        flag, equals, bounds = args.bisect.partition("=")
        parts = bounds.split(":")
        try:
            low, high, step = (float(part) for part in parts[:3])
        except ValueError:
            raise InvalidInput(f"--bisect {args.bisect!r}: give FLAG=LOW:HIGH:STEP[:min]") from None
        if not equals or len(parts) not in (3, 4) or (len(parts) == 4 and parts[3] not in ("min", "max")):
            raise InvalidInput(f"--bisect {args.bisect!r}: give FLAG=LOW:HIGH:STEP[:min]")
        goal = parts[3] if len(parts) == 4 else "max"
        body["bisect"] = {"flag": flag, "low": low, "high": high, "step": step, "goal": goal}
    return body


def start_sweep(client: ApiClient, args: Any, *, out: Callable[[str], None] = print, poll: float = 2.0) -> int:
    """Starts the sweep and, unless told not to wait, prints each point as it is decided until the
    sweep ends. Exit status 1 when it failed or no point served."""
    sweep = client.call("POST", "/api/sweeps", json=sweep_request(args))
    out(f"sweep {sweep['id']}: {len(sweep['points']) or 'bisecting'} points of {sweep['preset']} on {sweep['host']}")
    if args.no_wait:
        return 0
    shown: set[tuple[int, str]] = set()
    while True:
        sweep = client.call("GET", f"/api/sweeps/{sweep['id']}")
        for point in sweep["points"]:
            if point["status"] not in ("to do", "running") and (point["index"], point["status"]) not in shown:
                shown.add((point["index"], point["status"]))
                out(_point_line(point))
        if sweep["status"] != "running":
            break
        time.sleep(poll)
    return _sweep_summary(sweep, out)


def show_sweep(client: ApiClient, sweep_id: int, *, out: Callable[[str], None] = print) -> int:
    sweep = client.call("GET", f"/api/sweeps/{sweep_id}")
    out(f"sweep {sweep['id']} ({sweep['mode']}) of {sweep['preset']} r{sweep['revision']} on {sweep['host']}: "
        f"{sweep['status']}")  # fmt: skip
    for point in sweep["points"]:
        out(_point_line(point))
    return _sweep_summary(sweep, out)


def _point_line(point: dict[str, Any]) -> str:
    values = " ".join(f"{name} {value}" for name, value in point["values"].items())
    attempt = f"#{point['attempt_id']}" if point["attempt_id"] else "-"
    figures = point["figures"]
    measured = "  ".join(
        f"{label} {figures[key]:.2f}"
        for key, label in (("output_throughput", "out tok/s"), ("accept_length", "accept"), ("mean_ttft_ms", "TTFT ms"))
        if key in figures
    )
    why = f"  {point['error'][:160]}" if point["error"] and not figures else ""
    return f"{attempt:>6}  {values:<50} {point['status']:<18} {measured}{why}".rstrip()


def _sweep_summary(sweep: dict[str, Any], out: Callable[[str], None]) -> int:
    if sweep["error"]:
        out(f"sweep {sweep['id']} {sweep['status']}: {sweep['error']}")
    if ended_by := sweep["note"].get("ended_by"):
        out(f"ended by the {ended_by}")
    if sweep["mode"] == "bisect":
        out(f"limit: {sweep['limit'] or 'no value started'} after {sweep['launches']} launches")
        if model := sweep["note"].get("memory_model"):
            out(model)
        return 0 if sweep["limit"] else 1
    if best := sweep["best"]:
        out(f"best: #{best['attempt_id']} {' '.join(f'{k} {v}' for k, v in best['values'].items())} "
            f"({best['figures']['output_throughput']:.2f} output tokens/s)")  # fmt: skip
        return 0 if sweep["status"] != "failed" else 1
    out("no point served its workload")
    return 1
