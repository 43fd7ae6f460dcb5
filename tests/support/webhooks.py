"""A webhook on loopback, for the tests of notifications: a real HTTP server that records what each
post says and carries."""

from __future__ import annotations

import itertools
import json
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

SECRET = "T0000/B0000/not-a-real-token"  # the part of a webhook URL that must stay out of logs


@dataclass
class Hook:
    """Takes webhook posts: /ok answers 200, /down 503, /hang 200 once released (or after 10 s)."""

    port: int
    received: list[tuple[str, dict[str, Any]]]
    release: threading.Event
    arrived: list[tuple[str, float]]  # when each post came, by time.monotonic()
    keys: list[tuple[str, str]]  # each post's Idempotency-Key

    def keys_of(self, path: str) -> list[str]:
        return [key for where, key in self.keys if where == f"{path}/{SECRET}"]

    def url(self, path: str) -> str:
        return f"http://127.0.0.1:{self.port}{path}/{SECRET}"

    def posts(self, path: str) -> list[dict[str, Any]]:
        return [body for where, body in self.received if where == f"{path}/{SECRET}"]

    def gaps(self, path: str) -> list[float]:
        """Seconds between one post to `path` and the next."""
        times = [when for where, when in self.arrived if where == f"{path}/{SECRET}"]
        return [later - earlier for earlier, later in itertools.pairwise(times)]


@contextmanager
def webhook() -> Iterator[Hook]:
    found: list[tuple[str, dict[str, Any]]] = []
    arrived: list[tuple[str, float]] = []
    keys: list[tuple[str, str]] = []
    release = threading.Event()

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            assert self.headers["Content-Type"] == "application/json"
            arrived.append((self.path, time.monotonic()))
            keys.append((self.path, self.headers.get("Idempotency-Key", "")))
            found.append((self.path, json.loads(self.rfile.read(int(self.headers["Content-Length"])))))
            if self.path.startswith("/hang"):
                release.wait(10)
            self.send_response(503 if self.path.startswith("/down") else 200)
            self.send_header("Content-Length", "0")
            self.end_headers()

        def log_message(self, format: str, *args: Any) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    server.daemon_threads = True
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield Hook(server.server_address[1], found, release, arrived, keys)
    finally:
        release.set()
        server.shutdown()
        server.server_close()
