"""`launchdeck launch` and `launchdeck attempts`: the dashboard's HTTP API from a terminal."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import httpx

from app.config import Settings
from app.errors import InvalidInput, LaunchdeckError

FINAL = ("ready", "failed", "stopped", "lost", "unhealthy")


class ApiClient:
    def __init__(self, settings: Settings, url: str | None = None):
        host = settings.bind if settings.bind not in ("0.0.0.0", "::") else "127.0.0.1"
        self.url = (url or f"http://{host}:{settings.port}").rstrip("/")
        token = settings.token.get_secret_value() if settings.token else _token_file(settings)
        self.http = httpx.Client(base_url=self.url, headers={"Authorization": f"Bearer {token}"}, timeout=60)

    def call(self, method: str, path: str, **kwargs: Any) -> Any:
        try:
            response = self.http.request(method, path, **kwargs)
        except httpx.TransportError as exc:
            raise LaunchdeckError(f"cannot reach the dashboard at {self.url}: {exc}") from None
        if response.status_code >= 400:
            try:
                detail = response.json().get("detail", response.text)
            except ValueError:
                detail = response.text
            raise LaunchdeckError(f"{response.status_code}: {detail}")
        return response.json()


def _token_file(settings: Settings) -> str:
    path = settings.data_dir / "access-token"
    try:
        return path.read_text().strip()
    except OSError:
        raise InvalidInput(f"no access token: set LAUNCHDECK_TOKEN or run from the data dir ({path})") from None


def parse_gpus(text: str) -> list[int]:
    try:
        return [int(part) for part in text.split(",") if part.strip()]
    except ValueError:
        raise InvalidInput(f"--gpus: {text!r} is not a comma-separated list of GPU indices, e.g. 0,1") from None


def launch(
    client: ApiClient,
    *,
    preset: str,
    host: str,
    gpus: list[int],
    port: int | None,
    override: str,
    wait: bool,
    out: Callable[[str], None] = print,
) -> int:
    """Launches and, with `wait`, follows the attempt; exit status 0 when it reaches ready."""
    body = {"preset": preset, "host": host, "gpus": gpus, "port": port, "override_reason": override}
    attempt = client.call("POST", "/api/attempts", json=body)
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
    if attempt["status"] == "ready":
        out(f"ready after {attempt['time_to_ready_s']:.1f} s on port {attempt['port']}")
        return 0
    out(f"{attempt['status']}: {attempt['error'] or 'no error recorded'}")
    return 1


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
