"""The dashboard's log as JSON lines (LAUNCHDECK_LOG_FORMAT=json): each record one object with its
time, level, logger and message, and the request, attempt and host it is about; uvicorn's access
log alike. Checked on records, and on a real `launchdeck serve` that answers a request and loses
its host."""

from __future__ import annotations

import asyncio
import json
import logging
import sys
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import httpx

from app.logging_setup import JsonFormatter, RequestContext, current_request_id, serving
from tests.support.faults import AUTH, TOKEN, Dashboard, HostProcess
from tests.support.waiting import wait_until

# What `launchdeck serve` prints for a person rather than logs: the only lines not in JSON.
PRINTED = ("launchdeck dashboard: ", "no accounts yet; ")


def make_record(
    msg: str, *args: object, name: str = "app.ssh.connection", level: int = logging.WARNING, **extra: Any
) -> logging.LogRecord:
    return logging.getLogger(name).makeRecord(name, level, __file__, 1, msg, args, None, extra=extra)


def formatted(record: logging.LogRecord) -> dict[str, Any]:
    line = JsonFormatter().format(record)
    assert "\n" not in line
    entry: dict[str, Any] = json.loads(line)
    return entry


def test_a_record_is_one_line_of_json_with_its_time_in_utc() -> None:
    entry = formatted(make_record("%s: connection lost: %s", "gpu-01", "reset\nby peer", host="gpu-01"))
    when = datetime.fromisoformat(entry.pop("time"))
    assert when.utcoffset() == timedelta(0)
    assert abs(datetime.now(UTC) - when) < timedelta(seconds=10)
    assert entry == {
        "level": "WARNING",
        "logger": "app.ssh.connection",
        "message": "gpu-01: connection lost: reset\nby peer",
        "host": "gpu-01",
    }


def test_fields_a_record_does_not_know_are_left_out() -> None:
    assert set(formatted(make_record("launchdeck: %d host(s)", 3, name="app.web.app"))) == {
        "time",
        "level",
        "logger",
        "message",
    }


def test_an_exception_is_written_with_its_traceback() -> None:
    try:
        raise ValueError("boom")
    except ValueError:
        record = make_record("attempt %d: following it failed", 7, level=logging.ERROR, attempt_id=7)
        record.exc_info = sys.exc_info()
    entry = formatted(record)
    assert entry["attempt_id"] == 7
    assert entry["exception"].startswith("Traceback (most recent call last):")
    assert entry["exception"].endswith("ValueError: boom")


def test_an_access_line_has_the_request_as_fields() -> None:
    access = make_record(
        '%s - "%s %s HTTP/%s" %d', "127.0.0.1:5000", "GET", "/api/hosts?x=1", "1.1", 200, name="uvicorn.access"
    )
    entry = formatted(access)
    assert entry["message"] == '127.0.0.1:5000 - "GET /api/hosts?x=1 HTTP/1.1" 200'
    assert {key: entry[key] for key in ("client", "method", "path", "status")} == {
        "client": "127.0.0.1:5000",
        "method": "GET",
        "path": "/api/hosts?x=1",
        "status": 200,
    }


def test_records_name_the_request_being_served_and_no_other() -> None:
    context = RequestContext()
    before = make_record("before")
    with serving("req-1"):
        during = make_record("attempt %d: cannot record", 7, attempt_id=7)
        context.filter(during)
    context.filter(before)
    assert "request_id" not in formatted(before)
    assert formatted(during)["request_id"] == "req-1"


async def test_a_task_that_outlives_its_request_stops_naming_it() -> None:
    ended = asyncio.Event()

    async def follower() -> tuple[str | None, str | None]:
        while_served = current_request_id()
        await ended.wait()
        return while_served, current_request_id()

    with serving("req-2"):
        task = asyncio.create_task(follower())
        await asyncio.sleep(0)
    ended.set()
    assert await task == ("req-2", None)


def test_serve_logs_json_lines_naming_the_request_and_the_host(tmp_path: Path) -> None:
    host = HostProcess.create(tmp_path / "cluster", "fa-b200", time_scale=0.05)
    dashboard = Dashboard.create(tmp_path / "data", host.cluster / "hosts.toml", log_format="json")
    try:
        host.start()
        dashboard.start()
        answer = httpx.get(f"{dashboard.url}/api/hosts", headers={**AUTH, "X-Request-ID": "probe-42"}, timeout=10)
        assert answer.status_code == 200 and answer.headers["x-request-id"] == "probe-42"
        host.stop()
        wait_until(lambda: "connection lost" in dashboard.output.read_text(), 30, "the dashboard did not log the loss")
    finally:
        host.stop()
        dashboard.stop()

    output = dashboard.output.read_text()
    assert TOKEN not in output
    lines = output.splitlines()
    assert [line for line in lines if line and not line.startswith(("{", *PRINTED))] == []
    entries = [json.loads(line) for line in lines if line.startswith("{")]
    assert all({"time", "level", "logger", "message"} <= set(entry) for entry in entries)
    access = [entry for entry in entries if entry["logger"] == "uvicorn.access"]
    assert access and all(entry["request_id"] for entry in access)
    probe = [entry for entry in entries if entry.get("request_id") == "probe-42"]
    assert [(e["logger"], e["path"], e["status"]) for e in probe] == [("uvicorn.access", "/api/hosts", 200)]
    lost = [entry for entry in entries if "connection lost" in entry["message"]]
    assert [(entry["logger"], entry["host"]) for entry in lost] == [("app.ssh.connection", "fa-b200")]
