"""The disk-full case of issue 13, measured: `python -m bench.disk_full_case` (as root: it mounts
a 30 MB tmpfs for the dashboard's data dir).

A launched server is ready and mirrored; then the data dir's filesystem is filled and the host's
log grows by about 1 MB. The script records what a preset create, a launch, a login and the reads
answer; what the attempt says; how often the mirror retried; then the server is killed while the
disk is still full, the space is given back, and it records the attempt's final status, the
mirror's size against the host's log, its segments and its verification. It prints one JSON
object. Run it from a checkout: the simulated hosts and the dashboard are that checkout's code.
"""

from __future__ import annotations

import asyncio
import errno
import json
import os
import re
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import httpx

from app.demo.presets import DEMO_PRESETS
from tests.support.faults import AUTH, TOKEN, Dashboard, HostProcess
from tests.support.servers import free_port


def fill(directory: Path) -> Path:
    filler = directory / "filler"
    with filler.open("wb", buffering=0) as f:
        for size in (1 << 20, 4096, 1):
            try:
                while True:
                    f.write(b"\0" * size)
            except OSError as exc:
                assert exc.errno == errno.ENOSPC, exc
    return filler


async def wait_for(check: Any, timeout: float) -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if result := await check():
            return result
        await asyncio.sleep(0.1)
    return None


async def answer(request: Any) -> dict[str, Any]:
    try:
        response = await request
    except httpx.HTTPError as exc:
        return {"status": 0, "detail": f"{type(exc).__name__} (no answer)"}
    try:
        body = response.json()
    except ValueError:
        body = {"detail": response.text[:100]}
    detail = body.get("detail", "") if isinstance(body, dict) else ""
    return {"status": response.status_code, "detail": detail}


async def login(url: str) -> int:
    async with httpx.AsyncClient(base_url=url, timeout=30) as browser:
        form = await browser.get("/login")
        found = re.search(r'name="csrf_token" value="([^"]+)"', form.text)
        if not found:
            return form.status_code
        try:
            response = await browser.post("/login", data={"token": TOKEN, "next": "/hosts", "csrf_token": found[1]})
        except httpx.HTTPError:
            return 0
        return response.status_code


async def measure(root: Path, small: Path) -> dict[str, Any]:
    host = HostProcess.create(root / "cluster", "fa-b200", 0.3)
    host.start()
    data_dir = small / "data"
    dashboard = Dashboard.create(data_dir, host.cluster / "hosts.toml", output=root / "dashboard.out")
    dashboard.start()
    result: dict[str, Any] = {}
    try:
        async with httpx.AsyncClient(base_url=dashboard.url, headers=AUTH, timeout=30) as client:
            for preset in DEMO_PRESETS:
                assert (await client.post("/api/presets", json=vars(preset))).status_code == 201
            body = {"preset": "llama31-8b", "host": host.name, "gpus": [2], "port": free_port()}
            attempt_id = (await client.post("/api/attempts", json=body)).json()["id"]

            async def ready() -> dict[str, Any] | None:
                attempt = (await client.get(f"/api/attempts/{attempt_id}")).json()
                return attempt if attempt["status"] == "ready" else None

            attempt = await wait_for(ready, 90)
            assert attempt, "the attempt did not become ready"
            host_log = host.home / attempt["remote_dir"] / "server.log"
            filler = fill(small)
            with host_log.open("ab") as log:
                for n in range(20000):
                    log.write(b"[2026-01-05 10:00:01] line %d written while the data dir was full\n" % n)
            result["preset_create"] = await answer(
                client.post("/api/presets", json={"name": "full", "model_path": "m"})
            )
            body = {"preset": "llama31-8b", "host": host.name, "gpus": [3], "port": free_port()}
            result["launch"] = await answer(client.post("/api/attempts", json=body))
            result["login"] = await login(dashboard.url)
            reads = ("/api/attempts", "/api/hosts", f"/api/attempts/{attempt_id}", "/api/presets")
            result["reads"] = {route: (await answer(client.get(route)))["status"] for route in reads}
            async with httpx.AsyncClient(base_url=dashboard.url, timeout=30) as browser:
                page = await browser.get("/login")
                result["login_page_banner"] = "the data dir is full" in page.text
            retries_before = dashboard.output.read_text(errors="replace").count("log mirror")
            await asyncio.sleep(10)
            retries = dashboard.output.read_text(errors="replace").count("log mirror") - retries_before
            result["mirror_retries_per_s"] = round(retries / 10, 1)
            seen = (await client.get(f"/api/attempts/{attempt_id}")).json()
            result["attempt_says"] = {key: seen.get(key) for key in ("status", "tracking", "log_mirror")}
            os.killpg(attempt["pgid"], signal.SIGKILL)  # the server exits while the disk is full
            await asyncio.sleep(8)
            result["status_8s_after_exit_while_full"] = (await client.get(f"/api/attempts/{attempt_id}")).json()[
                "status"
            ]
            filler.unlink()

            async def finished() -> dict[str, Any] | None:
                attempt = (await client.get(f"/api/attempts/{attempt_id}")).json()
                complete = (data_dir / "logs" / f"{attempt_id}.json").exists() and json.loads(
                    (data_dir / "logs" / f"{attempt_id}.json").read_text()
                ).get("complete")
                return attempt if attempt["status"] in ("failed", "stopped", "lost") and complete else None

            final = await wait_for(finished, 60)
            last = (await client.get(f"/api/attempts/{attempt_id}")).json()["status"]
            result["status_after_space_returned"] = final["status"] if final else f"{last} after 60 s"
            meta = json.loads((data_dir / "logs" / f"{attempt_id}.json").read_text())
            result["host_log_bytes"] = host_log.stat().st_size
            result["mirror_bytes"] = (data_dir / "logs" / f"{attempt_id}.log").stat().st_size
            result["mirror_equals_host_log"] = (data_dir / "logs" / f"{attempt_id}.log").read_bytes() == (
                host_log.read_bytes()
            )
            result["segments"] = [segment["reason"] for segment in meta["segments"]]
            verification = meta.get("verification") or {}
            result["verification_match"] = verification.get("match")
    finally:
        dashboard.stop()
        host.stop()
    return result


def main() -> int:
    with tempfile.TemporaryDirectory() as scratch:
        root = Path(scratch)
        small = root / "small"
        small.mkdir()
        subprocess.run(["mount", "-t", "tmpfs", "-o", "size=30m", "tmpfs", str(small)], check=True)
        try:
            result = asyncio.run(measure(root, small))
        finally:
            subprocess.run(["umount", "-l", str(small)], check=False)
    print(json.dumps(result, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
