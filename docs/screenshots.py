"""Retakes the README's screenshots from a realistic demo state (`make screenshots`).

Starts `launchdeck demo` in a temporary data directory, builds through the API what a team's
dashboard holds after an afternoon (a server in use, a colleague's job on one GPU, the seed story's
two failures and its fix, a failure nothing built in places, a sweep with the built-in workload),
then logs in through the login form in chromium and walks the pages. Every shot is checked before it
is saved: no test payload, no path of this checkout or of the temporary directory, the menu as
templates/base.html draws it, legend dots of dot size. The demo is stopped with SIGTERM at the end,
also on an error or Ctrl-C, and nothing it started may be left running.

    .venv/bin/python docs/screenshots.py [FOLDER]   # default docs/screenshots
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import re
import secrets
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import tomllib
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import asyncssh
import httpx
from playwright.async_api import Browser, Page, async_playwright, expect

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))  # the one toolbox, tests/support, serves this script too

from tests.support.browser import CHROMIUM, CHROMIUM_ARGS, log_in  # noqa: E402
from tests.support.hosts import processes_under  # noqa: E402
from tests.support.servers import free_port  # noqa: E402

DESKTOP = {"width": 1280, "height": 800}
PHONE = {"width": 390, "height": 844}
STARTUP_S = 60
SHUTDOWN_S = 20
SWEEP_S = 420  # four points of chat-short: about 40 s of benchmark each, plus their launches

# A colleague's fine-tuning run on b200-01, started over SSH outside launchdeck: the simulated
# driver books its memory as it would a real process's.
FOREIGN_GPU = 4
FOREIGN_SCRIPT = f"""\
import os, time
import simgpu

simgpu.book([{FOREIGN_GPU}], 63_488, pid=os.getpid(), name="python3")
time.sleep(24 * 3600)
"""
FOREIGN_COMMAND = "finetune.py --config configs/lora-llama31-8b.yaml --output ckpt/lora-0412"

# A failure no built-in rule places: the host's model mirror is a generation behind (the demo's
# simulated SGLang raises it when the preset asks for it).
STALE_MIRROR = {
    "name": "llama31-8b-b200-mirror",
    "model_path": "meta-llama/Llama-3.1-8B-Instruct",
    "env": {"LAUNCHDECK_SIM_FAULT": "stale-model"},
    "description": "Llama 3.1 8B served from b200-01's local model mirror.",
}
RULE_TITLE = "Model mirror behind on this host"
RULE_HINT = "Run `modelsync pull` on the host, then launch again."

# The sweep the README shows: MTP's draft shape on the newest SGLang, the built-in chat workload.
DRAFT_SHAPE = ("--speculative-num-steps", "--speculative-eagle-topk", "--speculative-num-draft-tokens")
SWEEP_POINTS = [dict(zip(DRAFT_SHAPE, map(str, p), strict=True)) for p in [(1, 1, 2), (2, 1, 3), (3, 1, 4), (3, 4, 4)]]

# What must never reach a picture: the browser tests' hostile lines and their rendering.
PAYLOADS = ("__pwned", "onerror", "\\xff", "\\xfe", "<script")


class ShotFailed(Exception):
    """A page did not show what its shot is for, or showed what no shot may."""


@dataclass
class Demo:
    process: subprocess.Popen[bytes]
    root: Path
    data_dir: Path
    base_url: str
    token: str
    log_path: Path

    def log_tail(self, lines: int = 40) -> str:
        return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])

    def password(self) -> str:
        return (self.data_dir / "demo-password").read_text().strip()


@dataclass
class Story:
    """The attempts and accounts the shots show."""

    serving: int  # llama31-8b on b200-01, in use
    oom: int
    unset: int  # the strategy nobody asked for
    fixed: int  # ready on rtxpro-01, benchmarked
    mirror: int  # the failure nothing built in places
    sweep: int
    ana_password: str


STARTED = time.monotonic()


def log(message: str) -> None:
    print(f"[{time.monotonic() - STARTED:6.1f} s] {message}", flush=True)


def start_demo(root: Path) -> Demo:
    data_dir = root / "data"
    port = free_port()
    token = secrets.token_urlsafe(32)
    env = {k: v for k, v in os.environ.items() if not k.startswith("LAUNCHDECK_")}
    env.update(LAUNCHDECK_DATA_DIR=str(data_dir), LAUNCHDECK_PORT=str(port), LAUNCHDECK_TOKEN=token)
    env.update(LAUNCHDECK_DEMO_TIME_SCALE="0.05")  # a server is ready in seconds; a benchmark runs in real time
    log_path = root / "demo.log"
    with open(log_path, "wb") as out:
        # Its own session: Ctrl-C reaches this script, which stops the demo as SIGTERM should.
        process = subprocess.Popen(
            [str(Path(sys.executable).parent / "launchdeck"), "demo"],
            cwd=root,
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    return Demo(process, root, data_dir, f"http://127.0.0.1:{port}", token, log_path)


@contextlib.asynccontextmanager
async def running_demo(root: Path) -> AsyncIterator[Demo]:
    demo = start_demo(root)
    try:
        async with httpx.AsyncClient(base_url=demo.base_url, timeout=5) as client:

            async def online() -> bool:
                with contextlib.suppress(httpx.TransportError):
                    if (await client.get("/api/health")).status_code == 200:
                        answer = await client.get("/api/hosts", headers={"Authorization": f"Bearer {demo.token}"})
                        hosts = answer.json() if answer.status_code == 200 else []
                        return len(hosts) == 3 and all(h["state"] == "online" and h["gpus"] for h in hosts)
                return False

            await until(online, STARTUP_S, "the demo's three hosts to be online", demo)
        yield demo
    finally:
        stop_demo(demo)


def stop_demo(demo: Demo) -> None:
    """SIGTERM, as the contract says the demo stops; whatever outlives it is killed and reported."""
    if demo.process.poll() is None:
        demo.process.send_signal(signal.SIGTERM)
    try:
        demo.process.wait(SHUTDOWN_S)
    except subprocess.TimeoutExpired:
        print(f"launchdeck demo did not stop within {SHUTDOWN_S} s of SIGTERM; killing it", file=sys.stderr)
        with contextlib.suppress(ProcessLookupError):
            os.killpg(demo.process.pid, signal.SIGKILL)
        demo.process.wait()
    deadline = time.monotonic() + 3
    while (left := processes_under(demo.data_dir)) and time.monotonic() < deadline:
        time.sleep(0.1)
    for line in left:
        print(f"left running after the demo stopped, killed: {line}", file=sys.stderr)
        with contextlib.suppress(ProcessLookupError):
            os.kill(int(line.split()[1]), signal.SIGKILL)


async def until(condition: Callable[[], Awaitable[bool]], timeout: float, what: str, demo: Demo) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if demo.process.poll() is not None:
            raise ShotFailed(
                f"launchdeck demo exited ({demo.process.returncode}) waiting for {what}:\n{demo.log_tail()}"
            )
        if await condition():
            return
        await asyncio.sleep(0.2)
    raise ShotFailed(f"timed out after {timeout} s waiting for {what}; the demo's log ends:\n{demo.log_tail()}")


def cli(demo: Demo, *args: str, stdin: str = "") -> str:
    """`launchdeck ...` on the demo's data directory, as an admin on the server would run it."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("LAUNCHDECK_")}
    env["LAUNCHDECK_DATA_DIR"] = str(demo.data_dir)
    command = [str(Path(sys.executable).parent / "launchdeck"), *args]
    return subprocess.run(command, input=stdin, text=True, check=True, capture_output=True, env=env).stdout.strip()


async def start_foreign_job(demo: Demo) -> None:
    """Starts the colleague's job on b200-01 over SSH, detached, as they would; the demo kills it on stop."""
    cluster = demo.data_dir / "demo"
    host = next(h for h in tomllib.loads((cluster / "hosts.toml").read_text())["host"] if h["name"] == "b200-01")
    async with asyncssh.connect(
        "127.0.0.1",
        host["port"],
        username=host.get("user") or os.environ.get("USER", "root"),
        client_keys=[str(cluster / "client_ed25519_key")],
        known_hosts=str(cluster / "known_hosts"),
        config=None,
    ) as conn:
        async with conn.start_sftp_client() as sftp, sftp.open("finetune.py", "w") as script:
            await script.write(FOREIGN_SCRIPT)
        await conn.run(
            f"mkdir -p ckpt && setsid python3 {FOREIGN_COMMAND} >ckpt/train.log 2>&1 </dev/null &", check=True
        )


async def build_story(demo: Demo) -> Story:
    cli(demo, "users", "add", "ana", "--role", "operator", "--password-stdin", stdin="ana's first password\n")
    ana_token = cli(demo, "tokens", "create", "laptop", "--user", "ana")
    headers = {"Authorization": f"Bearer {ana_token}"}
    async with httpx.AsyncClient(base_url=demo.base_url, headers=headers, timeout=30) as api:

        async def launch(preset: str, host: str, gpus: list[int], **extra: Any) -> int:
            body = {"preset": preset, "host": host, "gpus": gpus, "port": free_port()} | extra
            answer = await api.post("/api/attempts", json=body)
            if answer.status_code != 202:
                raise ShotFailed(f"launching {preset} on {host} {gpus}: {answer.status_code} {answer.text}")
            return int(answer.json()["id"])

        async def reaches(attempt_id: int, wanted: str, timeout: float = 60) -> None:
            async def there() -> bool:
                status = (await api.get(f"/api/attempts/{attempt_id}")).json()["status"]
                if status in ("failed", "stopped", "lost", "ready") and status != wanted:
                    raise ShotFailed(f"attempt {attempt_id} is {status}, not {wanted}")
                return bool(status == wanted)

            await until(there, timeout, f"attempt {attempt_id} to be {wanted}", demo)

        await start_foreign_job(demo)
        serving = await launch("llama31-8b", "b200-01", [0])
        # The sweep runs on rtxpro-02 while the story plays on rtxpro-01 and the pages are shot.
        sweep_body = {"preset": "qwen36-27b-mtp-newest", "host": "rtxpro-02", "gpus": [0], "workload": "chat-short",
                      "points": SWEEP_POINTS, "port": free_port(), "name": "MTP draft shape"}  # fmt: skip
        answer = await api.post("/api/sweeps", json=sweep_body)
        if answer.status_code != 202:
            raise ShotFailed(f"starting the sweep: {answer.status_code} {answer.text}")
        sweep = int(answer.json()["id"])

        # The seed story, one GPU of rtxpro-01 after another launch: SGLang 0.5.10's own memory fraction
        # leaves no room for the draft states; 0.95 without a strategy meets auto -> no_buffer; both fixed.
        port = free_port()
        oom = await launch("qwen36-27b-mtp-oom", "rtxpro-01", [0], port=port)
        await reaches(oom, "failed")
        reason = "preflight says 0.5.10 refuses it; launching to read the server's own error"
        unset = await launch("qwen36-27b-mtp-strategy-unset", "rtxpro-01", [0], port=port, override_reason=reason)
        await reaches(unset, "failed")
        fixed = await launch("qwen36-27b-mtp-fixed", "rtxpro-01", [0], port=port)
        await reaches(serving, "ready")
        await reaches(fixed, "ready")

        created = await api.post("/api/presets", json=STALE_MIRROR)
        if created.status_code != 201:
            raise ShotFailed(f"adding {STALE_MIRROR['name']}: {created.status_code} {created.text}")
        mirror = await launch(STALE_MIRROR["name"], "b200-01", [6])
        await reaches(mirror, "failed")
    return Story(serving, oom, unset, fixed, mirror, sweep, "ana's first password")


# The menu as base.html draws it: (href, label, who sees it).
MENU_ENTRY = re.compile(r'\("(/[a-z/]*)", "([^"]+)", (true|can_operate|can_administer)\)')


def menu_for(role: str) -> list[str]:
    shown = {"true": True, "can_operate": role in ("operator", "admin"), "can_administer": role == "admin"}
    base = (ROOT / "templates" / "base.html").read_text()
    entries = [(label, who) for _, label, who in MENU_ENTRY.findall(base)]
    if len(entries) < 5:
        raise ShotFailed("templates/base.html no longer lists its menu as (href, label, who) tuples")
    return [label for label, who in entries if shown[who]]


class Shooter:
    """Checks a page and saves its picture under the staging folder."""

    def __init__(self, staging: Path, forbidden: list[str]) -> None:
        self.staging = staging
        self.forbidden = forbidden
        self.taken: list[str] = []

    async def check(self, page: Page, name: str, role: str) -> None:
        text = await page.evaluate("document.body.innerText")
        html = await page.content()
        found = [p for p in PAYLOADS if p in text or (p == "__pwned" and p in html)]
        found += [p for p in self.forbidden if p in text]
        if found:
            raise ShotFailed(f"{name}: the page shows {found}")
        narrow = await page.evaluate("innerWidth") < 700
        nav = page.locator(".narrow-menu nav a" if narrow else ".wide-menu nav a")
        if await nav.count():  # (a page whose menu is generated is checked all the same)
            labels = [label.strip() for label in await nav.all_inner_texts()]
            if labels != menu_for(role):
                raise ShotFailed(f"{name}: the menu reads {labels}, base.html draws {menu_for(role)} for {role}")
        for box in [await dot.bounding_box() for dot in await page.locator(".plot .legend svg").all()]:
            if box is None or box["height"] > 12 or box["width"] > 12:
                raise ShotFailed(f"{name}: a legend dot measures {box}")
        for entry in await page.locator(".plot .legend span").all_inner_texts():
            if not entry.strip():
                raise ShotFailed(f"{name}: a legend entry has a dot and no name")
        if errors := await page.locator(".host-error:visible").all_inner_texts():
            raise ShotFailed(f"{name}: the hosts show errors {errors}")
        wide, window = await page.evaluate("[document.scrollingElement.scrollWidth, innerWidth]")
        if wide > window:  # a layout fault to fix in the app, not a reason to keep an old picture
            log(f"warning: {name}: the page scrolls sideways, {wide} px in a {window} px window")

    async def shoot(self, page: Page, name: str, *, role: str = "admin", element: str | None = None,
                    region: str | None = None, top: str | None = None, full_page: bool = False) -> None:  # fmt: skip
        await self.check(page, name, role)
        await page.mouse.move(0, 0)  # no row lit by the pointer's last click
        if top is not None:
            await page.locator(top).evaluate("element => element.scrollIntoView({block: 'start'})")
        path = self.staging / name
        if element is not None:
            await page.locator(element).screenshot(path=str(path))
        elif region is not None:  # the elements' union, with a margin
            boxes = await page.locator(region).evaluate_all(
                "els => els.map(e => { const r = e.getBoundingClientRect();"
                " return [r.left + scrollX, r.top + scrollY, r.right + scrollX, r.bottom + scrollY]; })"
            )
            left, top_edge = min(b[0] for b in boxes) - 8, min(b[1] for b in boxes) - 8
            width, height = max(b[2] for b in boxes) + 8 - left, max(b[3] for b in boxes) + 8 - top_edge
            clip = {"x": left, "y": top_edge, "width": width, "height": height}
            await page.screenshot(path=str(path), clip=clip, full_page=True)
        elif full_page:  # as tall as the page, as wide as the window: what a person scrolls down through
            width, height = await page.evaluate("[innerWidth, document.scrollingElement.scrollHeight]")
            await page.screenshot(
                path=str(path), full_page=True, clip={"x": 0, "y": 0, "width": width, "height": height}
            )
        else:
            await page.screenshot(path=str(path))
        self.taken.append(name)
        log(f"took {name}")


async def new_page(browser: Browser, demo: Demo, **options: Any) -> Page:
    context = await browser.new_context(base_url=demo.base_url, viewport=DESKTOP, **options)
    context.set_default_timeout(15_000)
    return await context.new_page()


async def log_in_as(page: Page, name: str, password: str) -> None:
    await page.goto("/login")
    await page.get_by_label("User name").fill(name)
    await page.get_by_label("Password", exact=True).fill(password)
    await page.get_by_role("button", name="Log in").click()
    await expect(page.locator("#host-list")).to_be_visible()


async def shoot_hosts_and_the_story(page: Page, demo: Demo, story: Story, shots: Shooter) -> None:
    await page.goto("/")
    await log_in(page, demo.token)
    # Every GPU that holds something shows it: ours (attempt links), the colleague's job (others).
    b200 = page.locator("article.host[data-host='b200-01']")
    await expect(b200.locator(f"a.holder[href='/attempts/{story.serving}']")).to_be_visible(timeout=30_000)
    rtxpro = page.locator("article.host[data-host='rtxpro-01']")
    await expect(rtxpro.locator(f"a.holder[href='/attempts/{story.fixed}']")).to_be_visible(timeout=30_000)
    await expect(page.locator("article.host[data-host='rtxpro-02'] a.holder")).to_be_visible(timeout=60_000)
    foreign = b200.locator(f"tr.gpu[data-gpu='{FOREIGN_GPU}'] td.used")
    await expect(foreign).to_have_text(re.compile(r"^\s*6\d\.\d / "), timeout=30_000)
    await shots.shoot(page, "hosts.png", full_page=True)

    await page.locator(".wide-menu nav").get_by_role("link", name="Attempts").click()
    for attempt_id in (story.oom, story.unset, story.fixed):
        await page.locator(f"#pick-{attempt_id}").check()
    await page.get_by_role("button", name="Compare selected").click()
    await expect(page.locator("#outcome .failure-class")).to_have_text(["healthy", "arg-conflict", "oom"])
    await shots.shoot(page, "compare-three.png")
    await page.goto(f"/compare?a={story.oom}&b={story.fixed}")
    await expect(page.locator("#argv-diff tr[data-row='--mem-fraction-static']")).to_contain_text("0.95")
    await shots.shoot(page, "compare-oom-fixed.png", full_page=True)

    # Traffic on the fixed server, from its page: the live log shows batches as they are decoded.
    await page.locator(".wide-menu nav").get_by_role("link", name="Hosts").click()
    await page.locator(f"a.holder[href='/attempts/{story.fixed}']").click()
    benchmark = page.locator("#benchmark-form")
    await benchmark.get_by_label("Workload").select_option("chat-short")
    await benchmark.get_by_role("button", name="Run benchmark").click()
    live = page.locator("#live-log")
    await expect(live.locator(".ln", has_text="Decode batch").nth(1)).to_be_visible(timeout=60_000)
    await shots.shoot(page, "live-log.png", element="#live-log")

    await page.goto(f"/attempts/{story.unset}")
    await expect(page.locator("#failure-class")).to_have_text("arg-conflict")
    changed = page.locator("#drift tr[data-arg='mamba_scheduler_strategy']")
    await expect(changed).to_have_class(re.compile(r"\bchanged\b"))
    await expect(changed.locator("b")).to_have_text("no_buffer")
    await shots.shoot(page, "diagnosis-override.png")
    await shots.shoot(page, "drift.png", region="#diagnosis > h3:has(+ #drift), #drift")

    # The story's grep: the flag as SGLang's Python spells it, not as the command line does.
    await page.get_by_label("pattern").fill("mamba_scheduler")
    await page.get_by_label("- and _ alike").uncheck()
    await page.get_by_role("button", name="Grep").click()
    await expect(page.locator(".zero-hits")).to_contain_text("No line matches mamba_scheduler")
    await shots.shoot(page, "zero-hits.png", element="#grep-results")

    await page.goto(f"/attempts/{story.oom}/log?at=error")
    await expect(page.locator("#log .ln.mark")).to_contain_text("Traceback (most recent call last):")
    await shots.shoot(page, "log-viewer-light.png")
    await page.emulate_media(color_scheme="dark")
    await page.reload()
    await expect(page.locator("#log .ln.mark")).to_be_visible()
    await shots.shoot(page, "log-viewer-dark.png")
    await page.emulate_media(color_scheme="light")

    await page.goto(f"/attempts/{story.mirror}")
    card = page.locator("#root-error")
    await expect(card.locator("#unrecognised")).to_have_text("unrecognised failure")
    await card.get_by_role("link", name="teach launchdeck").click()
    form = page.locator("#teach form")
    await form.get_by_label("Class").select_option("model-load")
    await form.get_by_label("Title").fill(RULE_TITLE)
    await form.get_by_label(re.compile(r"^Hint")).fill(RULE_HINT)
    await form.get_by_label(re.compile(r"^Match")).fill("modelsync: the copy of")
    await shots.shoot(page, "teach-form.png", top="#root-error")

    await page.set_viewport_size(PHONE)
    await page.goto("/hosts")
    await page.locator("summary", has_text="Menu").click()
    await expect(page.locator(".narrow-menu").get_by_role("button", name="Log out")).to_be_in_viewport()
    await shots.shoot(page, "phone-menu.png")
    await page.set_viewport_size(DESKTOP)

    await page.locator(".wide-menu nav").get_by_role("link", name="Users").click()
    form = page.locator("#add-user")
    await form.get_by_label("Name").fill("ben")
    await form.get_by_label("Role").select_option("viewer")
    await form.get_by_label("Initial password").fill(secrets.token_urlsafe(12))
    await form.get_by_role("button", name="Add user").click()
    await expect(page.locator("tr[data-user='ben']")).to_contain_text("active")
    await shots.shoot(page, "users.png")


async def shoot_ana(page: Page, story: Story, shots: Shooter) -> None:
    """Ana's own pages: her tokens (one made with the CLI, one here) and her password."""
    await log_in_as(page, "ana", story.ana_password)
    await page.locator(".wide-menu nav").get_by_role("link", name="Account").click()
    await page.get_by_role("link", name=re.compile("tokens", re.IGNORECASE)).first.click()
    form = page.locator("#new-token-form")
    await form.get_by_label("Name").fill("nightly benchmarks")
    await form.get_by_label("Role").select_option("viewer")
    await form.get_by_role("button", name="Make token").click()
    await expect(page.locator("#token-secret")).to_have_text(re.compile(r"^ldk_"))
    await shots.shoot(page, "tokens.png", role="operator", full_page=True)

    await page.locator(".wide-menu nav").get_by_role("link", name="Account").click()
    await page.get_by_label("Current password").fill(story.ana_password)
    await page.get_by_label("New password (at least 8 characters)").fill("a longer passphrase of ana's")
    await page.get_by_label("New password again").fill("a longer passphrase of ana's")
    await page.get_by_role("button", name="Change password").click()
    await expect(page.locator("#account-notice")).to_contain_text("Your other logins have ended")
    await shots.shoot(page, "account.png", role="operator")


async def shoot_compact_hosts(page: Page, shots: Shooter) -> None:
    """The compact view of 64 generated 8-GPU hosts, rendered by the page's own template and context
    (the demo has three hosts), with the demo's styles."""
    html = generated_hosts_page(64)
    await page.route(
        "**/hosts?view=compact&generated=64", lambda route: route.fulfill(body=html, content_type="text/html")
    )
    await page.route("**/hosts/events*", lambda route: route.abort())
    await page.goto("/hosts?view=compact&generated=64")
    await expect(page.locator("#compact-hosts .cgpu")).to_have_count(512)
    await shots.shoot(page, "hosts-compact.png")


def generated_hosts_page(count: int) -> str:
    from starlette.requests import Request

    from app.web.pages.hosts import HostsQuery, hosts_context
    from app.web.templating import templates
    from tests.support.hosts import generated_hosts

    versions = json.loads((ROOT / "package.json").read_text())["dependencies"]
    scope = {"type": "http", "method": "GET", "path": "/hosts", "query_string": b"view=compact", "headers": [],
             "scheme": "http", "server": ("127.0.0.1", 80), "root_path": ""}  # fmt: skip
    context = hosts_context(generated_hosts(count), HostsQuery(view="compact"))
    context |= {"request": Request(scope), "csrf_token": "x", "htmx_version": versions["htmx.org"],
                "htmx_sse_version": versions["htmx-ext-sse"], "disk_warning": None, "user": "admin",
                "can_operate": True, "can_administer": True}  # fmt: skip
    return templates.get_template("hosts.html").render(context)


async def shoot_sweep(page: Page, shots: Shooter) -> None:
    await page.goto("/sweeps")
    await page.get_by_role("link", name="MTP draft shape").click()
    await expect(page.locator("#sweep-status")).to_have_text("done", timeout=SWEEP_S * 1000)
    await expect(page.locator("#sweep-points .best-mark")).to_have_count(1)
    await page.get_by_label("colour by").select_option("--speculative-eagle-topk")
    await page.get_by_role("button", name="Draw").click()
    await expect(page.locator("#sweep-chart figcaption.legend span")).to_have_count(2)
    await shots.shoot(page, "sweep.png", full_page=True)


async def take(out: Path, root: Path) -> list[str]:
    staging = root / "shots"
    staging.mkdir()
    async with running_demo(root) as demo:
        log(f"demo up at {demo.base_url}")
        story = await build_story(demo)
        log(f"story built: {story}")
        shots = Shooter(staging, forbidden=[str(ROOT), "/work/", str(root)])
        async with async_playwright() as playwright:
            browser = await playwright.chromium.launch(executable_path=str(CHROMIUM), args=CHROMIUM_ARGS)
            try:
                admin = await new_page(browser, demo)
                await shoot_hosts_and_the_story(admin, demo, story, shots)
                await shoot_ana(await new_page(browser, demo), story, shots)
                await shoot_compact_hosts(admin, shots)
                await admin.unroute_all()
                await shoot_sweep(admin, shots)
            finally:
                await browser.close()
    out.mkdir(parents=True, exist_ok=True)
    for name in shots.taken:
        shutil.copyfile(staging / name, out / name)
    return shots.taken


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("folder", nargs="?", type=Path, default=ROOT / "docs" / "screenshots")
    parser.add_argument("--keep", action="store_true", help="keep the temporary directory (the demo's log, data)")
    options = parser.parse_args()
    if not CHROMIUM.exists():
        print(f"{CHROMIUM} is missing (apt-get install chromium)", file=sys.stderr)
        return 2
    signal.signal(signal.SIGTERM, signal.default_int_handler)  # stopped like Ctrl-C: the demo stops too
    root = Path(tempfile.mkdtemp(prefix="launchdeck-shots-"))
    try:
        taken = asyncio.run(take(options.folder.resolve(), root))
    except ShotFailed as failure:
        print(f"screenshots: {failure}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print("screenshots: interrupted; the demo is stopped and nothing was saved", file=sys.stderr)
        return 130
    finally:
        if options.keep:
            print(f"kept {root}")
        else:
            shutil.rmtree(root, ignore_errors=True)
    stale = sorted(p.name for p in options.folder.glob("*.png") if p.name not in taken)
    log(f"saved {len(taken)} shots in {options.folder}" + (f"; not retaken: {', '.join(stale)}" if stale else ""))
    return 0


if __name__ == "__main__":
    sys.exit(main())
