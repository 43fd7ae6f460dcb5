"""How the dashboard's log is written: as text (the default), or as one JSON object per line for a
log collector (LAUNCHDECK_LOG_FORMAT=json), uvicorn's access log included.

A JSON line carries, besides the time, level, logger and message, what the record is about where
that is known: the request being served (`request_id`, from RequestIds in app.web.request_ids),
and the attempt and host that a log call names (`extra={"attempt_id": ..., "host": ...}`). The
messages are the text format's own, so a secret kept out of one is kept out of the other."""

from __future__ import annotations

import json
import logging
from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

# Fields a log call may name with `extra=`, written when a record has them.
FIELDS = ("request_id", "attempt_id", "host")


@dataclass
class _Serving:
    request_id: str
    ended: bool = False


_serving: ContextVar[_Serving | None] = ContextVar("serving", default=None)


@contextmanager
def serving(request_id: str) -> Iterator[None]:
    """Records logged inside the block, and by tasks it starts until it ends, name `request_id`.
    A task that outlives the request (an attempt's follower) stops naming it then: it would
    otherwise carry the id of the request that launched it for hours."""
    current = _Serving(request_id)
    reset = _serving.set(current)
    try:
        yield
    finally:
        current.ended = True
        _serving.reset(reset)


def current_request_id() -> str | None:
    current = _serving.get()
    return current.request_id if current is not None and not current.ended else None


class RequestContext(logging.Filter):
    """Gives each record the id of the request being served, if any: on a handler, as records
    of every logger pass through it."""

    def filter(self, record: logging.LogRecord) -> bool:
        if getattr(record, "request_id", None) is None:
            record.request_id = current_request_id()
        return True


class JsonFormatter(logging.Formatter):
    """One JSON object per record, on one line: a message or traceback spanning lines is escaped."""

    def format(self, record: logging.LogRecord) -> str:
        entry: dict[str, Any] = {
            "time": datetime.fromtimestamp(record.created, UTC).isoformat(timespec="milliseconds"),
            "level": record.levelname,
            "logger": record.name,
            "message": record.getMessage(),
        }
        entry.update((field, value) for field in FIELDS if (value := getattr(record, field, None)) is not None)
        if record.name == "uvicorn.access" and isinstance(record.args, tuple) and len(record.args) == 5:
            # uvicorn's arguments for '%s - "%s %s HTTP/%s" %d', as fields a collector can filter on.
            client, method, path, _, status = record.args
            entry.update(client=client, method=method, path=path, status=status)
        if record.exc_info:
            entry["exception"] = self.formatException(record.exc_info)
        elif record.exc_text:
            entry["exception"] = record.exc_text
        if record.stack_info:
            entry["stack"] = self.formatStack(record.stack_info)
        return json.dumps(entry, default=str)


def use_format(log_format: str) -> None:
    """From now on the root logger's handlers (the CLI's basicConfig set up one) write `log_format`;
    text leaves them as they are."""
    if log_format != "json":
        return
    for handler in logging.getLogger().handlers:
        handler.setFormatter(JsonFormatter())
        handler.addFilter(RequestContext())


def uvicorn_log_config() -> dict[str, Any]:
    """uvicorn's logging with LAUNCHDECK_LOG_FORMAT=json: its loggers, the access log's included,
    lose the handlers of their own and pass their records to the root logger's, as ours do."""
    return {
        "version": 1,
        "disable_existing_loggers": False,
        "loggers": {
            "uvicorn": {"level": "INFO", "handlers": [], "propagate": True},
            "uvicorn.access": {"handlers": [], "propagate": True},
        },
    }
