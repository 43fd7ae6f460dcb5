"""A load generator for the dashboard, run as its own process on loopback and bounded in time.

`python -m bench.loadgen CONFIG_JSON` drives `clients` clients for `seconds` and prints, per route,
the latency percentiles, request and error counts as JSON. Each client holds one keep-alive
HTTP/1.1 connection (raw asyncio streams: an HTTP library would spend the CPU the server needs on
this 2-core machine) and visits the routes in turn, starting at a route of its own.

model "closed": the next request goes as soon as the last one returns.
model "paced": requests are due every `pace_ms` on a fixed schedule per client (with a random
phase); a late answer delays the next request, and latency counts from when it was due, so a
slow server cannot hide its queue (no coordinated omission). No request starts after the end,
so a client far behind its schedule sends fewer requests than were due ("due" in the output).

Beside the clients, the GPU grid's event stream and each live attempt's log stream have a
viewer that reads and drops what arrives.
"""

from __future__ import annotations

import asyncio
import json
import random
import sys
import time
from typing import Any

GRACE = 10.0  # seconds an answer may still take after the end; then it counts as an error


class Connection:
    def __init__(self, port: int, headers: str):
        self.port, self.headers = port, headers
        self.reader: asyncio.StreamReader | None = None
        self.writer: asyncio.StreamWriter | None = None

    async def get(self, path: str) -> tuple[int, bytes]:
        if self.writer is None:
            self.reader, self.writer = await asyncio.open_connection("127.0.0.1", self.port)
        assert self.reader is not None
        self.writer.write(f"GET {path} HTTP/1.1\r\nHost: bench\r\n{self.headers}\r\n".encode())
        head = await self.reader.readuntil(b"\r\n\r\n")
        status = int(head.split(b" ", 2)[1])
        fields = {
            name.strip().lower(): value.strip()
            for name, _, value in (line.partition(b":") for line in head.split(b"\r\n")[1:])
        }
        if b"content-length" in fields:
            body = await self.reader.readexactly(int(fields[b"content-length"]))
        else:
            body = b""
            while size := int((await self.reader.readline()).split(b";")[0], 16):
                body += (await self.reader.readexactly(size + 2))[:-2]
            await self.reader.readline()
        if fields.get(b"connection") == b"close":
            await self.close()
        return status, body

    async def close(self) -> None:
        if self.writer is not None:
            self.writer.close()
            self.writer = self.reader = None


async def client(n: int, config: dict[str, Any], stats: dict[str, dict[str, Any]], ends: float) -> None:
    headers = f"Authorization: Bearer {config['token']}\r\nCookie: {config['cookie']}\r\n"
    connection = Connection(config["port"], headers)
    routes = list(config["routes"].items())
    pace = config["pace_ms"] / 1000
    due = time.monotonic() + random.random() * pace
    turn = n
    while True:
        if time.monotonic() > ends or (config["model"] == "paced" and due > ends):
            break
        if config["model"] == "paced":
            await asyncio.sleep(max(0.0, due - time.monotonic()))
            began = due
            due += pace
        else:
            began = time.monotonic()
        name, paths = routes[turn % len(routes)]
        path = paths[(turn // len(routes)) % len(paths)]
        turn += 1
        row = stats[name]
        try:
            status, body = await asyncio.wait_for(connection.get(path), max(1.0, ends + GRACE - time.monotonic()))
        except (TimeoutError, OSError, asyncio.IncompleteReadError, ValueError) as exc:
            await connection.close()
            status, body = 0, repr(exc).encode()
        row["latencies"].append(time.monotonic() - began)
        row["bytes"] += len(body)
        if status != 200:
            row["errors"] += 1
            row["error_sample"] = row["error_sample"] or f"{status} {body[:200].decode(errors='replace')}"
    await connection.close()


async def viewer(port: int, headers: str, path: str, ends: float) -> None:
    """Reads an event stream until the end, reconnecting when the server ends it."""
    while time.monotonic() < ends:
        try:
            reader, writer = await asyncio.open_connection("127.0.0.1", port)
        except OSError:
            await asyncio.sleep(0.5)
            continue
        try:
            writer.write(f"GET {path} HTTP/1.1\r\nHost: bench\r\n{headers}Accept: text/event-stream\r\n\r\n".encode())
            while time.monotonic() < ends and await asyncio.wait_for(reader.read(1 << 16), ends - time.monotonic()):
                pass
        except (TimeoutError, OSError):
            pass
        finally:
            writer.close()


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return round(ordered[min(len(ordered) - 1, int(q * len(ordered)))] * 1000, 1) if ordered else 0.0


async def main(config: dict[str, Any]) -> dict[str, Any]:
    stats = {name: {"latencies": [], "errors": 0, "bytes": 0, "error_sample": ""} for name in config["routes"]}
    began = time.monotonic()
    ends = began + config["seconds"]
    headers = f"Authorization: Bearer {config['token']}\r\nCookie: {config['cookie']}\r\n"
    streams = ["/hosts/events"] + [f"/api/attempts/{attempt_id}/events" for attempt_id in config["live"]]
    viewers = [asyncio.create_task(viewer(config["port"], headers, path, ends)) for path in streams]
    await asyncio.gather(*(client(n, config, stats, ends) for n in range(config["clients"])))
    elapsed = time.monotonic() - began
    await asyncio.gather(*viewers)
    routes = {
        name: {
            "p50_ms": percentile(row["latencies"], 0.5),
            "p99_ms": percentile(row["latencies"], 0.99),
            "max_ms": percentile(row["latencies"], 1.0),
            "requests": len(row["latencies"]),
            "errors": row["errors"],
            "mean_kib": round(row["bytes"] / max(1, len(row["latencies"])) / 1024, 1),
            "error_sample": row["error_sample"],
        }
        for name, row in stats.items()
    }
    total = sum(row["requests"] for row in routes.values())
    due = int(config["clients"] * config["seconds"] * 1000 // config["pace_ms"]) if config["model"] == "paced" else None
    return {"model": config["model"], "routes": routes, "requests": total, "due": due,
            "throughput_rps": round(total / elapsed, 1)}  # fmt: skip


if __name__ == "__main__":
    print(json.dumps(asyncio.run(main(json.loads(sys.argv[1])))))
