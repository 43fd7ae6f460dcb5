"""A newcomer's first walk through a running launchdeck, over HTTP only: readiness, a login through
the form, the hosts, one launch to ready, its page, and its stop. The installed-wheel and compose
checks (.ci/wheel-check, .ci/compose-check) walk it; every step fails with a sentence."""

from __future__ import annotations

import re
import time
from pathlib import Path

import httpx

LLAMA = "meta-llama/Llama-3.1-8B-Instruct"


class WalkFailed(Exception):
    pass


def until(what: str, probe, timeout: float, every: float = 0.5):  # type: ignore[no-untyped-def]
    """probe()'s first true answer, polled until `timeout` seconds have passed."""
    deadline = time.monotonic() + timeout
    last = None
    while time.monotonic() < deadline:
        try:
            if answer := probe():
                return answer
        except httpx.HTTPError as exc:
            last = exc
        time.sleep(every)
    raise WalkFailed(f"{what} did not happen within {timeout:.0f} s" + (f" (last error: {last})" if last else ""))


def ready(base: str, timeout: float = 120) -> dict:
    """/readyz's answer once it is 200; /api/health must answer too."""

    def probe() -> dict | None:
        answer = httpx.get(f"{base}/readyz", timeout=5)
        return answer.json() if answer.status_code == 200 else None

    readiness = until("/readyz answering 200", probe, timeout)
    health = httpx.get(f"{base}/api/health", timeout=5)
    if health.status_code != 200 or health.json().get("status") != "ok":
        raise WalkFailed(f"/api/health answered {health.status_code}: {health.text[:200]}")
    return readiness


def log_in(base: str, name: str, password: str) -> httpx.Client:
    """A client logged in through the form. The session cookie is Secure (as behind TLS), which
    Python's cookie jar keeps from plain http: it is carried by hand, as a browser on localhost does."""
    client = httpx.Client(base_url=base, timeout=15)
    form = client.get("/login")
    token = re.search(r'name="csrf_token" value="([^"]+)"', form.text)
    if form.status_code != 200 or token is None:
        raise WalkFailed(f"GET /login answered {form.status_code} without a form")
    cookies = "; ".join(f"{c.name}={c.value}" for c in client.cookies.jar)
    answer = client.post(
        "/login",
        data={"name": name, "password": password, "next": "/hosts", "csrf_token": token.group(1)},
        headers={"Cookie": cookies},
    )
    if answer.status_code != 303:
        raise WalkFailed(f"logging in as {name} answered {answer.status_code}: {answer.text[:300]}")
    jar = {**{c.name: c.value for c in client.cookies.jar}, **dict(answer.cookies)}
    client.headers["Cookie"] = "; ".join(f"{k}={v}" for k, v in jar.items())
    hosts = client.get("/hosts")
    if hosts.status_code != 200 or "<h1" not in hosts.text:
        raise WalkFailed(f"the hosts page after logging in answered {hosts.status_code}")
    return client


def every_link(page: httpx.Client) -> int:
    """Follows every link of the hosts page and loads every script and style sheet it names (the
    static files and htmx come from the installed package); returns how many answered 200."""
    html = page.get("/hosts").text
    targets = set(re.findall(r'(?:href|src)="(/[^"?#]*)"', html)) - {"/logout"}
    broken = [f"{target} {page.get(target).status_code}" for target in sorted(targets)]
    broken = [line for line in broken if not line.endswith(" 200")]
    if broken or not any(target.startswith("/static/vendor/htmx") for target in targets):
        raise WalkFailed(f"from the hosts page: {', '.join(broken) or 'no htmx script'}")
    return len(targets)


def api(base: str, token: str) -> httpx.Client:
    return httpx.Client(base_url=base, timeout=30, headers={"Authorization": f"Bearer {token}"})


def hosts_online(client: httpx.Client, names: set[str], timeout: float = 60) -> None:
    def probe() -> bool:
        states = {h["name"]: h["state"] for h in client.get("/api/hosts").raise_for_status().json()}
        return names <= {name for name, state in states.items() if state == "online"}

    until(f"hosts {', '.join(sorted(names))} online", probe, timeout)


def launch_and_stop(client: httpx.Client, page: httpx.Client, host: str, preset: str = "walk-llama") -> int:
    """Launches `preset` (made if missing) on one GPU of `host`, waits for ready, reads the attempt's
    page as the logged-in person sees it, stops it; returns the attempt's id."""
    if client.get(f"/api/presets/{preset}").status_code == 404:
        made = {"name": preset, "model_path": LLAMA, "args": [], "env": {}}
        client.post("/api/presets", json=made).raise_for_status()
    launched = client.post("/api/attempts", json={"preset": preset, "host": host, "gpus": [0]})
    if launched.status_code != 202:
        raise WalkFailed(f"launching {preset} on {host} answered {launched.status_code}: {launched.text[:300]}")
    attempt = launched.json()["id"]

    def status() -> str:
        return client.get(f"/api/attempts/{attempt}").raise_for_status().json()["status"]

    def started() -> str | None:
        now = status()
        return now if now in ("ready", "failed", "lost") else None

    outcome = until(f"attempt {attempt} to end its start", started, 180)
    if outcome != "ready":
        raise WalkFailed(f"attempt {attempt} on {host} ended {outcome}, not ready")
    shown = page.get(f"/attempts/{attempt}")
    if shown.status_code != 200 or preset not in shown.text:
        raise WalkFailed(f"the page of attempt {attempt} answered {shown.status_code} without its preset")
    client.post(f"/api/attempts/{attempt}/stop").raise_for_status()
    try:
        until(f"attempt {attempt} to stop", lambda: status() == "stopped", 60)
    except WalkFailed as exc:
        shown = client.get(f"/api/attempts/{attempt}").json()
        raise WalkFailed(f"{exc}: status {shown.get('status')}, stage {shown.get('stage')}") from None
    return attempt


def demo_walk(log_path: str, timeout: float = 180) -> None:
    """Walks `launchdeck demo` whose output goes to `log_path`: its printed address, token and
    demo admin, then the simulated b200-01."""

    def printed() -> re.Match[str] | None:
        text = Path(log_path).read_text(encoding="utf-8", errors="replace")
        return re.search(r"launchdeck dashboard: (\S+?)/?\naccess token: +(\S+)\ndemo admin: +(\S+) / (\S+)", text)

    found = until("the demo's address and logins in its output", printed, timeout)
    base, token, admin, password = found.groups()
    print(f"ready: {ready(base)}")
    page = log_in(base, admin, password)
    print(f"every link and asset of the hosts page answered: {every_link(page)}")
    client = api(base, token)
    hosts_online(client, {"b200-01", "rtxpro-01"})
    attempt = launch_and_stop(client, page, "b200-01", preset="llama31-8b")
    print(f"attempt {attempt}: ready on b200-01, its page shown, stopped")


if __name__ == "__main__":
    import argparse
    import sys

    parser = argparse.ArgumentParser(description=__doc__)
    commands = parser.add_subparsers(dest="command", required=True)
    demo = commands.add_parser("demo", help="walk `launchdeck demo`, reading its output file")
    demo.add_argument("log")
    served = commands.add_parser("served", help="walk a dashboard started with `serve`")
    served.add_argument("--base", required=True)
    served.add_argument("--token", required=True)
    served.add_argument("--admin", required=True)
    served.add_argument("--password-file", required=True)
    served.add_argument("--hosts", required=True, help="comma-separated hosts that must be online")
    served.add_argument("--expect-attempts", type=int, default=0, help="attempts that must already be listed")
    args = parser.parse_args()
    try:
        if args.command == "demo":
            demo_walk(args.log)
        else:
            print(f"ready: {ready(args.base)}")
            page = log_in(args.base, args.admin, Path(args.password_file).read_text().removesuffix("\n"))
            every_link(page)
            client = api(args.base, args.token)
            listed = client.get("/api/attempts").raise_for_status().json()
            if len(listed) != args.expect_attempts:
                raise WalkFailed(f"{len(listed)} attempts listed, {args.expect_attempts} expected")
            names = set(args.hosts.split(","))
            hosts_online(client, names)
            attempt = launch_and_stop(client, page, sorted(names)[0])
            online = ", ".join(sorted(names))
            print(f"logged in as {args.admin}; hosts online: {online}; attempt {attempt} ready, stopped")
    except WalkFailed as exc:
        sys.exit(f"walk: {exc}")
