"""`launchdeck launch`, `attempts` and `logs`: the dashboard's HTTP API from a terminal."""

from __future__ import annotations

import json
import os
import stat
import sys
import time
import tomllib
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import IO, Any

import httpx

from app.config import Settings
from app.errors import InvalidInput, LaunchdeckError
from app.states import FINISHED_STATUSES, AttemptStatus

# Where following a launch from the terminal stops: it ended, or it is serving (well or not).
FINAL = FINISHED_STATUSES | {AttemptStatus.READY, AttemptStatus.UNHEALTHY}


class ApiClient:
    """The dashboard at `url`, else the client file's, else LAUNCHDECK_BIND/PORT's; with the token
    in LAUNCHDECK_TOKEN, else the client file's, else the data dir's access token."""

    def __init__(self, settings: Settings, url: str | None = None):
        host = settings.bind if settings.bind not in ("0.0.0.0", "::") else "127.0.0.1"
        configured = read_client_file(client_file())
        self.url = (url or configured.get("url") or f"http://{host}:{settings.port}").rstrip("/")
        if settings.token:
            token = settings.token.get_secret_value()
        else:
            token = configured.get("token") or _token_file(settings)
        self.http = httpx.Client(base_url=self.url, headers={"Authorization": f"Bearer {token}"}, timeout=60)

    def call(self, method: str, path: str, **kwargs: Any) -> Any:
        return self.request(method, path, **kwargs).json()

    def request(self, method: str, path: str, **kwargs: Any) -> httpx.Response:
        try:
            response = self.http.request(method, path, **kwargs)
        except httpx.TransportError as exc:
            raise LaunchdeckError(f"cannot reach the dashboard at {self.url}: {exc}") from None
        _check(response)
        return response

    def events(self, path: str, *, last_event_id: str | None = None) -> Iterator[tuple[str, str, str]]:
        """Server-sent events as (event, id, data) until the server ends the stream."""
        headers = {"Last-Event-ID": last_event_id} if last_event_id else {}
        with self.http.stream("GET", path, headers=headers, timeout=httpx.Timeout(60, read=None)) as response:
            if response.status_code >= 400:
                response.read()
                _check(response)
            event, event_id, data = "message", "", list[str]()
            for line in response.iter_lines():
                if not line:
                    if data:
                        yield event, event_id, "\n".join(data)
                    event, data = "message", []
                    continue
                field, _, value = line.partition(":")
                value = value.removeprefix(" ")
                if field == "event":
                    event = value
                elif field == "id":
                    event_id = value
                elif field == "data":
                    data.append(value)


def _check(response: httpx.Response) -> None:
    if response.status_code >= 400:
        try:
            detail = response.json().get("detail", response.text)
        except ValueError:
            detail = response.text
        raise LaunchdeckError(f"{response.status_code}: {detail}")


def _refusal(response: httpx.Response) -> dict[str, Any] | None:
    """A guard's refusal of a launch (409 or 422 with `guard`), else None."""
    if response.status_code not in (409, 422):
        return None
    try:
        answer = response.json()
    except ValueError:
        return None
    return answer if isinstance(answer, dict) and answer.get("guard") else None


def client_file() -> Path:
    """$XDG_CONFIG_HOME/launchdeck/client.toml (~/.config/… by default)."""
    base = os.environ.get("XDG_CONFIG_HOME") or Path.home() / ".config"
    return Path(base) / "launchdeck" / "client.toml"


def read_client_file(path: Path) -> dict[str, str]:
    """The `url` and `token` a person keeps for the command; {} when there is no file. A file that
    others may read is refused, as ssh refuses such a key: the token in it is as good as a password."""
    try:
        with path.open("rb") as file:
            mode = os.fstat(file.fileno()).st_mode
            if mode & 0o077:
                raise InvalidInput(
                    f"{path} may be read by other users (mode {stat.S_IMODE(mode):o}): "
                    f"`chmod 600 {path}`; it was not used"
                )
            values = tomllib.load(file)
    except FileNotFoundError:
        return {}
    except OSError as exc:
        raise InvalidInput(f"cannot read {path}: {exc.strerror or exc}") from None
    except tomllib.TOMLDecodeError as exc:
        raise InvalidInput(f"{path} is not TOML: {exc}") from None
    unknown = set(values) - {"url", "token"}
    if unknown or not all(isinstance(value, str) for value in values.values()):
        raise InvalidInput(f"{path} holds `url` and `token`, both strings, and nothing else")
    return {key: value.strip() for key, value in values.items()}


def _token_file(settings: Settings) -> str:
    path = settings.data_dir / "access-token"
    try:
        return path.read_text().strip()
    except OSError:
        raise InvalidInput(
            f"no token: set LAUNCHDECK_TOKEN, put one in {client_file()}, or run from the data dir ({path})"
        ) from None


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
    try:
        response = client.http.post("/api/attempts", json=body)
    except httpx.TransportError as exc:
        raise LaunchdeckError(f"cannot reach the dashboard at {client.url}: {exc}") from None
    refusal = _refusal(response)
    if refusal is not None:
        err(f"launchdeck: {refusal['detail']}")
        if refusal.get("suggested_port"):
            on = host or (hosts or [""])[0]
            err(f"launchdeck: port {refusal['suggested_port']} is free on {on} (--port {refusal['suggested_port']})")
        return 3
    _check(response)
    attempt = response.json()
    out(f"attempt {attempt['id']}: {client.url}/attempts/{attempt['id']}")
    if not wait:
        return 0
    shown = ""
    while True:
        attempt = client.call("GET", f"/api/attempts/{attempt['id']}")
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


def list_attempts(client: ApiClient, *, params: dict[str, Any], out: Callable[[str], None] = print) -> int:
    rows = client.call("GET", "/api/attempts", params={k: v for k, v in params.items() if v})
    if not rows:
        out("no attempts")
        return 0
    out(f"{'ID':>5}  {'PRESET':<28} {'HOST':<12} {'GPUS':<8} {'STATUS':<10} {'STAGE':<16} CREATED")
    for a in rows:
        gpus = ",".join(map(str, a["gpus"]))
        created = a["created_at"][:19].replace("T", " ")
        out(f"{a['id']:>5}  {a['preset']:<28} {a['host']:<12} {gpus:<8} {a['status']:<10} {a['stage']:<16} {created}")
    return 0


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
