"""The dashboard in a real browser: `launchdeck demo` as a user starts it, driven through Debian's chromium.

One demo process (simulated cluster + dashboard) serves the whole module; each test gets a fresh
browser context, so cookies never leak from one test into the next.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import re
import shlex
import shutil
import signal
import subprocess
import sys
import time
import tomllib
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import asyncssh
import httpx
import pytest
from playwright.async_api import (
    Browser,
    Locator,
    Page,
    Request,
    Response,
    Route,
    async_playwright,
    expect,
)

from app.demo.hostlib import simgpu
from app.demo.presets import DEMO_PRESETS
from tests.support.browser import CHROMIUM, CHROMIUM_ARGS, FORM_SETTLED, Tab, line_numbers, log_in, open_tab
from tests.support.hosts import processes_under
from tests.support.paths import NODE_MODULES, PACKAGE_JSON
from tests.support.servers import free_port
from tests.support.strict import require

pytestmark = pytest.mark.browser

TOKEN = "browser-test-token-3f9c1a7e-0123456789"
HTMX_VERSION = json.loads(PACKAGE_JSON.read_text())["dependencies"]["htmx.org"]
B200 = "NVIDIA B200"
RTX_PRO = "NVIDIA RTX PRO 6000 Blackwell Server Edition"
STARTUP_DEADLINE_S = 30
SHUTDOWN_DEADLINE_S = 15
# The GPU probe reads every second and the host list's event stream is renewed every 8 s (which is
# when an ended session is noticed); allow that, plus a margin.
REFRESH_TIMEOUT_MS = 15_000


@dataclass
class Demo:
    """A running `launchdeck demo` and where it keeps its files."""

    process: subprocess.Popen[bytes]
    root: Path
    data_dir: Path
    base_url: str
    log_path: Path

    def gpu_state_path(self, host: str) -> Path:
        return self.data_dir / "demo" / "hosts" / host / "gpu-state.json"

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")


async def wait_until(condition: Callable[[], Awaitable[bool]], timeout: float, what: str, demo: Demo) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if demo.process.poll() is not None:
            pytest.fail(
                f"launchdeck demo exited with {demo.process.returncode} while waiting for {what}:\n{demo.log()}"
            )
        if await condition():
            return
        await asyncio.sleep(0.1)
    pytest.fail(f"timed out after {timeout} s waiting for {what}; demo log:\n{demo.log()}")


async def log_in_to(demo: Demo, name: str) -> asyncssh.SSHClientConnection:
    """An SSH session on one of the demo's hosts, as a person opens one with the cluster's key."""
    cluster = demo.data_dir / "demo"
    host = next(h for h in tomllib.loads((cluster / "hosts.toml").read_text())["host"] if h["name"] == name)
    return await asyncssh.connect(
        "127.0.0.1",
        host["port"],
        username=os.environ.get("USER", "root"),
        client_keys=[str(cluster / "client_ed25519_key")],
        known_hosts=str(cluster / "known_hosts"),
        config=None,
    )


async def start_lingering_session(demo: Demo) -> asyncssh.SSHClientConnection:
    """A command on b200-01 that ignores hangups and would run for minutes, as a launched server
    would; the demo must still leave nothing behind when it stops."""
    conn = await log_in_to(demo, "b200-01")
    await conn.create_process("trap '' HUP; exec sleep 300")
    return conn


@pytest.fixture(scope="module")
async def demo(tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[Demo]:
    root = tmp_path_factory.mktemp("browser")
    data_dir = root / "data"
    port = free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith("LAUNCHDECK_") or k == "LAUNCHDECK_TEST_STRICT"}
    # LAUNCHDECK_COOKIE_SECURE stays at its default (true): the login must work over plain
    # http://127.0.0.1, which browsers treat as a secure context.
    env.update(LAUNCHDECK_DATA_DIR=str(data_dir), LAUNCHDECK_PORT=str(port), LAUNCHDECK_TOKEN=TOKEN)
    env.update(LAUNCHDECK_DEMO_TIME_SCALE="0.05")  # simulated servers ready in about a second
    launchdeck = Path(sys.executable).parent / "launchdeck"
    if not launchdeck.exists():
        launchdeck = Path(shutil.which("launchdeck") or "launchdeck")
    log_path = root / "demo.log"
    with open(log_path, "wb") as log:
        process = subprocess.Popen(
            [str(launchdeck), "demo"], cwd=root, env=env, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT
        )
    running = Demo(process, root, data_dir, f"http://127.0.0.1:{port}", log_path)
    conn: asyncssh.SSHClientConnection | None = None
    try:
        async with httpx.AsyncClient(base_url=running.base_url, timeout=2) as client:

            async def healthy() -> bool:
                try:
                    return (await client.get("/api/health")).status_code == 200
                except httpx.TransportError:
                    return False

            async def hosts_ready() -> bool:
                answer = await client.get("/api/hosts", headers={"Authorization": f"Bearer {TOKEN}"})
                hosts = answer.json() if answer.status_code == 200 else []
                return len(hosts) == 3 and all(h["state"] == "online" and h["gpus"] for h in hosts)

            await wait_until(healthy, STARTUP_DEADLINE_S, "GET /api/health to answer", running)
            await wait_until(hosts_ready, STARTUP_DEADLINE_S, "the three simulated hosts to be online", running)

        conn = await start_lingering_session(running)

        async def lingering_started() -> bool:
            return any("sleep 300" in p for p in processes_under(data_dir))

        await wait_until(lingering_started, 10, "the lingering command on b200-01 to start", running)
        yield running
    finally:
        try:
            if process.poll() is None:
                process.send_signal(signal.SIGTERM)
            try:
                returncode = await asyncio.to_thread(process.wait, SHUTDOWN_DEADLINE_S)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()
                pytest.fail(f"launchdeck demo did not exit within {SHUTDOWN_DEADLINE_S} s of SIGTERM:\n{running.log()}")
            assert returncode == 0, f"launchdeck demo exited with {returncode} after SIGTERM:\n{running.log()}"
            # SIGKILLed process groups vanish at once, but allow the kernel a moment.
            deadline = time.monotonic() + 2
            while (left := processes_under(data_dir)) and time.monotonic() < deadline:
                await asyncio.sleep(0.05)
            assert not left, "launchdeck demo left processes running after it exited:\n" + "\n".join(left)
        finally:
            if conn is not None:
                conn.close()
                with contextlib.suppress(OSError, asyncssh.Error):
                    await conn.wait_closed()


@pytest.fixture(scope="module")
async def browser() -> AsyncIterator[Browser]:
    require(CHROMIUM.exists(), f"{CHROMIUM} is missing (apt-get install chromium)")
    async with async_playwright() as playwright:
        chromium = await playwright.chromium.launch(executable_path=str(CHROMIUM), args=CHROMIUM_ARGS)
        try:
            yield chromium
        finally:
            await chromium.close()


@pytest.fixture
async def tab(browser: Browser, demo: Demo) -> AsyncIterator[Tab]:
    async with open_tab(browser, demo.base_url) as opened:
        yield opened


def gpu_row(page: Page, host: str, index: int) -> tuple[Locator, Locator]:
    """A GPU's table row and its used-memory cell."""
    row = page.locator(f"article.host[data-host='{host}'] tr.gpu[data-gpu='{index}']")
    return row, row.locator("td.used")


def shown_used(mib: int) -> re.Pattern[str]:
    """The used-memory cell for `mib` used: GiB with one decimal, as everywhere on the page."""
    return re.compile(rf"^\s*{mib / 1024:.1f} / \d+\.\d GiB\s*$")


async def used_mib(page: Page, host: str, index: int) -> int:
    """Used memory exactly, from the meter (the text is rounded to 0.1 GiB)."""
    row, used = gpu_row(page, host, index)
    await expect(used).to_have_text(re.compile(r"^\s*\d+\.\d / \d+\.\d GiB\s*$"))
    return int(await row.get_by_role("meter").get_attribute("aria-valuenow") or "-1")


async def walk_in(page: Page) -> None:
    """Where a person's walk begins: the home page, which sends a stranger to log in and back."""
    await page.goto("/")
    await log_in(page, TOKEN)


async def open_attempt(page: Page, attempt_id: int, preset: str) -> None:
    """An attempt as a person finds it: the menu's Attempts, the list narrowed to its preset, its number."""
    await page.get_by_role("link", name="Attempts", exact=True).click()
    await page.locator("form.filters select[name=preset]").select_option(preset)
    await page.get_by_role("button", name="Filter").click()
    await expect(page).to_have_url(re.compile(r"/attempts\?.*preset="))
    await page.locator(f"tr[data-attempt='{attempt_id}']").get_by_role("link", name=str(attempt_id), exact=True).click()
    await expect(page).to_have_url(re.compile(rf"/attempts/{attempt_id}$"))


async def test_hosts_page_requires_login_and_shows_every_gpu_after_it(tab: Tab, demo: Demo) -> None:
    page = tab.page
    response = await page.goto("/hosts")
    assert response is not None and response.ok
    assert response.request.redirected_from is not None, "/hosts answered without a login"
    assert response.request.redirected_from.url == f"{demo.base_url}/hosts"
    assert page.url == f"{demo.base_url}/login?next=/hosts"
    await expect(page.get_by_role("heading", name="Log in")).to_be_visible()
    await expect(page.locator("#host-list")).to_have_count(0)

    await log_in(page, "not-the-token")
    await expect(page.get_by_role("alert")).to_have_text("That token is not valid.")
    assert page.url.startswith(f"{demo.base_url}/login"), page.url
    await expect(page.locator("#host-list")).to_have_count(0)
    response = await page.goto("/hosts")
    assert response is not None
    assert page.url.startswith(f"{demo.base_url}/login"), "a wrong token logged the browser in"

    await log_in(page, TOKEN)
    assert page.url == f"{demo.base_url}/hosts", page.url
    hosts = page.locator("#host-list article.host")
    await expect(hosts).to_have_count(3)
    assert await hosts.evaluate_all("els => els.map(e => e.dataset.host)") == ["b200-01", "rtxpro-01", "rtxpro-02"]
    # A host whose nvidia-smi was slow shows an error until the next poll; it must clear by itself.
    errors = page.locator("#host-list .host-error")
    deadline = time.monotonic() + REFRESH_TIMEOUT_MS / 1000
    while (shown := await errors.all_text_contents()) and time.monotonic() < deadline:
        await asyncio.sleep(0.2)
    assert shown == [], f"the hosts page shows errors: {shown}"
    for name in ("b200-01", "rtxpro-01", "rtxpro-02"):
        host = page.locator(f"article.host[data-host='{name}']")
        await expect(host.get_by_role("heading", name=name)).to_be_visible()
        await expect(host.locator(".state")).to_have_text("online")

    rows = page.locator("#host-list tr.gpu")
    await expect(rows).to_have_count(16)
    # Every cell inside its card: the sparklines ran past the card's edge, loads were cut short.
    overflow = await page.locator("#host-list article.host").first.evaluate(
        "card => { const edge = card.getBoundingClientRect().right;"
        " return [...card.querySelectorAll('.spark, td')].filter(e => e.getBoundingClientRect().right > edge"
        " || e.scrollWidth > e.clientWidth + 1).map(e => e.className + ':' + e.textContent.trim()); }"
    )
    assert overflow == [], overflow
    expected = [("b200-01", i, B200) for i in range(8)]
    expected += [(name, i, RTX_PRO) for name in ("rtxpro-01", "rtxpro-02") for i in range(4)]
    for host_name, index, gpu_name in expected:
        row = page.locator(f"article.host[data-host='{host_name}'] tr.gpu[data-gpu='{index}']")
        cells = row.locator("td")
        await expect(cells.nth(0)).to_have_text(str(index))
        await expect(cells.nth(1)).to_have_text(gpu_name)
        meter = row.get_by_role("meter")
        await expect(meter).to_have_count(1)
        await expect(meter).to_be_visible()
        total = int(await meter.get_attribute("aria-valuemax") or "0")
        assert total > 0, f"{host_name} GPU {index}: meter has no maximum"
        used_text = await cells.nth(3).text_content()
        assert re.fullmatch(rf"\s*\d+\.\d / {total / 1024:.1f} GiB\s*", used_text or ""), used_text
        free_text = (await row.locator("td.free").text_content() or "").strip()
        match = re.fullmatch(r"(\d+\.\d) GiB", free_text)
        assert match, f"{host_name} GPU {index}: free memory reads {free_text!r}"
        assert 0 < float(match.group(1)) <= total / 1024

    screenshot = demo.root / "hosts.png"
    await page.screenshot(path=str(screenshot), full_page=True)
    assert screenshot.stat().st_size > 10_000
    print(f"screenshot of the hosts page: {screenshot}")


async def test_session_cookie_is_httponly_secure_and_strict(tab: Tab, demo: Demo) -> None:
    await log_in(tab.page, TOKEN)
    assert tab.page.url == f"{demo.base_url}/hosts", "login over http://127.0.0.1 with a Secure cookie failed"
    cookies = {c["name"]: c for c in await tab.context.cookies()}
    assert "launchdeck_session" in cookies, cookies
    session = cookies["launchdeck_session"]
    assert session.get("httpOnly") is True
    assert session.get("secure") is True
    assert session.get("sameSite") == "Strict"
    assert await tab.page.evaluate("document.cookie") == "", "the session cookie is readable from scripts"


async def test_host_list_updates_in_place_over_server_sent_events(tab: Tab, demo: Demo) -> None:
    page = tab.page
    streams: list[Request] = []
    page.on("request", lambda r: streams.append(r) if r.url == f"{demo.base_url}/hosts/events" else None)
    await log_in(page, TOKEN)
    host_list = page.locator("#host-list")
    assert await host_list.get_attribute("sse-swap") == "hosts"
    before = await used_mib(page, "b200-01", 0)
    await page.evaluate("window.__marker = 1")

    sleeper = subprocess.Popen(["sleep", "60"])
    try:
        simgpu.book([0], 40000, pid=sleeper.pid, name="python3", path=str(demo.gpu_state_path("b200-01")))
        row, used = gpu_row(page, "b200-01", 0)
        await expect(used).to_have_text(shown_used(before + 40000), timeout=REFRESH_TIMEOUT_MS)
        meter = row.get_by_role("meter")
        await expect(meter).to_have_attribute("aria-valuenow", str(before + 40000))
        assert await used_mib(page, "b200-01", 1) == before, "memory booked on GPU 0 shows on GPU 1"
        assert await page.evaluate("window.__marker") == 1, "the page was reloaded instead of updated in place"
        assert streams, "the host list changed without its event stream"
    finally:
        sleeper.kill()
        sleeper.wait()

    await expect(used).to_have_text(shown_used(before), timeout=REFRESH_TIMEOUT_MS)
    assert await page.evaluate("window.__marker") == 1, "the page was reloaded instead of updated in place"
    assert tab.console_errors == []


async def test_logout_needs_the_form_and_ends_the_session(tab: Tab, demo: Demo) -> None:
    page = tab.page
    await log_in(page, TOKEN)
    assert page.url == f"{demo.base_url}/hosts"

    # A forged cross-site post carries the cookie but not the page's CSRF token.
    forged = await page.request.post("/logout", max_redirects=0)
    assert forged.status == 403, f"POST /logout without the CSRF token answered {forged.status}"
    await forged.dispose()
    await page.reload()
    assert page.url == f"{demo.base_url}/hosts", "the forged logout ended the session"

    await page.get_by_role("button", name="Log out").click()
    await expect(page.get_by_role("heading", name="Log in")).to_be_visible()
    await expect(page).to_have_url(re.compile(r"/login$"))
    await expect(page.get_by_role("button", name="Log out")).to_have_count(0)

    response = await page.goto("/hosts")
    assert response is not None
    assert page.url.startswith(f"{demo.base_url}/login"), "/hosts still shows after logging out"
    await expect(page.locator("#host-list")).to_have_count(0)


async def test_htmx_is_served_from_the_pinned_vendor_path(tab: Tab, demo: Demo) -> None:
    page = tab.page
    responses: list[Response] = []
    page.on("response", lambda response: responses.append(response))
    await log_in(page, TOKEN)
    assert page.url == f"{demo.base_url}/hosts"
    await page.wait_for_load_state("networkidle")

    htmx_url = f"{demo.base_url}/static/vendor/htmx.org@{HTMX_VERSION}/htmx.min.js"
    htmx_loads = [r for r in responses if r.url == htmx_url]
    assert htmx_loads, f"the page did not load {htmx_url}; it loaded {[r.url for r in responses]}"
    # 304: a later page revalidated the copy the login page had loaded.
    assert all(r.status in (200, 304) for r in htmx_loads), [r.status for r in htmx_loads]
    await page.wait_for_function("() => window.htmx !== undefined")
    assert await page.evaluate("window.htmx.version") == HTMX_VERSION
    failed = [f"{r.status} {r.url}" for r in responses if r.status >= 400]
    assert failed == [], failed
    assert tab.console_errors == [], tab.console_errors


async def test_ended_session_sends_the_polling_page_to_the_login_form(tab: Tab, demo: Demo) -> None:
    """When the session ends elsewhere, the renewed event stream sends the page to login."""
    page = tab.page
    await log_in(page, TOKEN)
    assert page.url == f"{demo.base_url}/hosts"
    await tab.context.clear_cookies()
    await expect(page).to_have_url(re.compile(r"/login\?next=/hosts$"), timeout=REFRESH_TIMEOUT_MS)
    await expect(page.get_by_role("heading", name="Log in")).to_be_visible()
    await expect(page.locator("#host-list")).to_have_count(0)


async def test_launch_a_demo_preset_from_the_browser_and_stop_it(tab: Tab, demo: Demo) -> None:
    page = tab.page
    await log_in(page, TOKEN)
    await page.get_by_role("link", name="Presets").click()
    for name in ("llama31-8b", "qwen36-27b-mtp-oom", "qwen36-27b-mtp-strategy-unset", "qwen36-27b-mtp-fixed"):
        await expect(page.locator(f"tr[data-preset='{name}']")).to_be_visible()
    await page.get_by_role("link", name="llama31-8b").click()
    await expect(page.locator("#command")).to_contain_text("--model-path meta-llama/Llama-3.1-8B-Instruct")
    await page.locator("section").get_by_role("link", name="Launch").click()

    await expect(page.get_by_role("heading", name="Launch")).to_be_visible()
    await page.wait_for_function(FORM_SETTLED)
    await page.get_by_label(re.compile(r"^Host\b")).select_option("rtxpro-01")
    await page.wait_for_function(FORM_SETTLED)
    await expect(page.locator("fieldset.gpu-picker")).to_contain_text("GPUs on rtxpro-01 (online)")
    await page.locator("input[name=gpus][value='0']").uncheck()
    await page.locator("input[name=gpus][value='2']").check()
    await page.get_by_label("Port").fill(str(free_port()))
    await page.get_by_role("button", name="Run preflight").click()
    await expect(page.locator("tr[data-check='memory']")).to_contain_text("✓ enough free memory")
    await expect(page.locator("tr[data-check='gpus']")).to_contain_text("GPU 2")

    await page.get_by_role("button", name="Launch", exact=True).click()
    await expect(page).to_have_url(re.compile(r"/attempts/\d+$"))
    await expect(page.locator("#status")).to_have_text("ready", timeout=30_000)
    await expect(page.locator("tr[data-stage='cuda graph capture']")).to_be_visible()
    assert json.loads(demo.gpu_state_path("rtxpro-01").read_text())["processes"]

    page.once("dialog", lambda dialog: asyncio.ensure_future(dialog.accept()))  # "Stop attempt N? …"
    await page.get_by_role("button", name="Stop").click()
    await expect(page.locator("#status")).to_have_text("stopped", timeout=30_000)
    await expect(page.locator("p.summary")).to_contain_text("exit code 143")
    assert simgpu.read(str(demo.gpu_state_path("rtxpro-01")))["processes"] == []
    assert tab.console_errors == [], tab.console_errors


async def test_a_server_started_by_hand_is_adopted_from_its_host_page_followed_searched_and_stopped(
    tab: Tab, demo: Demo
) -> None:
    """Someone started SGLang on rtxpro-02 over SSH, its output to a file: its GPU processes show as
    not launchdeck's, and Adopt makes it an attempt whose log, command and health are followed."""
    page, port = tab.page, free_port()
    command = shlex.join(["env", "CUDA_VISIBLE_DEVICES=2", "python3", "-m", "sglang.launch_server",
                          "--model-path", "meta-llama/Llama-3.1-8B-Instruct", "--port", str(port)])  # fmt: skip
    conn = await log_in_to(demo, "rtxpro-02")
    pid = ""
    try:
        started = await conn.run(
            f"mkdir -p by-hand && cd by-hand && setsid {command} > {port}.log 2>&1 < /dev/null & echo $!"
        )
        pid = str(started.stdout).strip()

        async def serving() -> bool:
            log = await conn.run(f"cat by-hand/{port}.log", check=False)
            return "The server is fired up and ready to roll!" in str(log.stdout)

        await wait_until(serving, 30, "the server started by hand to be ready", demo)

        async def on_gpu() -> bool:
            return bool(simgpu.read(str(demo.gpu_state_path("rtxpro-02")))["processes"])

        await wait_until(on_gpu, 10, "its memory booked on GPU 2", demo)
        await walk_in(page)
        await page.locator("article.host[data-host='rtxpro-02'] h2").get_by_role("link", name="rtxpro-02").click()
        await expect(page).to_have_url(re.compile(r"/hosts/rtxpro-02$"))
        foreign = page.locator("tr.process-other").filter(has_text="sglang::scheduler")
        await expect(foreign).to_contain_text("not launchdeck's")
        await foreign.locator("input[name=port]").fill(str(port))
        await foreign.get_by_role("button", name="Adopt").click()

        await expect(page).to_have_url(re.compile(r"/attempts/\d+$"))
        await expect(page.locator("#status")).to_have_text("ready", timeout=30_000)
        await expect(page.locator("#adopted")).to_contain_text("Adopted by admin at ")
        await expect(page.locator("p.summary")).to_contain_text("adopted by admin · GPUs 2")
        await expect(page.locator("#adopted")).to_contain_text("Not known: its launch script (there is none")
        await expect(page.locator("#adopted")).to_contain_text(f"/by-hand/{port}.log, mirrored from its first byte")
        await expect(page.locator("#command-heading + pre.command")).to_have_text(
            f"CUDA_VISIBLE_DEVICES=2 python3 -m sglang.launch_server --model-path meta-llama/Llama-3.1-8B-Instruct "
            f"--port {port}"
        )
        await expect(page.locator("#live-lines")).to_contain_text("The server is fired up and ready to roll!")
        await page.get_by_label("pattern").fill("fired up")
        await page.get_by_role("button", name="Grep").click()
        await expect(page.locator("#grep-results .ln.mark").first).to_contain_text("ready to roll")
        await page.screenshot(path=str(demo.root / "adopted.png"), full_page=True)

        page.once("dialog", lambda dialog: asyncio.ensure_future(dialog.accept()))  # "Stop attempt N? …"
        await page.get_by_role("button", name="Stop").click()
        await expect(page.locator("#status")).to_have_text("stopped", timeout=30_000)
        gone = await conn.run(f"kill -0 {pid}", check=False)
        assert gone.exit_status != 0, "the adopted server still runs after its stop"
        assert tab.console_errors == [], tab.console_errors
    finally:
        if pid:
            await conn.run(f"kill -KILL {pid}", check=False)
        conn.close()


# The header's count of lines and the number of the last line shown, read in one go: while the
# server writes, two reads could straddle a new batch.
COUNTED_AND_LAST = """() => {
    const numbered = document.querySelectorAll("#live-lines .ln[id^=L]");
    const counted = document.getElementById("log-lines").textContent.replace(/,/g, "");
    return [counted, numbered[numbered.length - 1].id.slice(1)];
}"""


async def test_a_person_clicks_from_the_home_page_to_a_live_log_that_follows_counts_and_answers_keys(
    tab: Tab, demo: Demo
) -> None:
    """Only clicks and keys after the home page: every page arrives by boosted navigation, and the
    log views work as after a reload. The live log follows its end, its header counts bytes and
    lines as they come and ends on the sha256 check, the keys answer, and "full log" lands on the
    last line, highlighted and in view."""
    page = tab.page
    await page.goto("/")
    await log_in(page, TOKEN)
    await page.get_by_role("link", name="Presets").click()
    await page.get_by_role("link", name="llama31-8b").click()
    await page.locator("section").get_by_role("link", name="Launch").click()
    await page.wait_for_function(FORM_SETTLED)
    await page.get_by_label(re.compile(r"^Host\b")).select_option("rtxpro-01")
    await page.wait_for_function(FORM_SETTLED)
    await expect(page.locator("fieldset.gpu-picker")).to_contain_text("GPUs on rtxpro-01 (online)")
    for gpu in await page.locator("input[name=gpus]").all():
        await gpu.uncheck()
    await page.locator("input[name=gpus][value='1']").check()
    await page.get_by_label("Port").fill(str(free_port()))
    await page.get_by_role("button", name="Launch", exact=True).click()
    await expect(page).to_have_url(re.compile(r"/attempts/\d+$"))
    await expect(page.locator("#status")).to_have_text("ready", timeout=30_000)

    following = "box => box.scrollHeight > box.clientHeight && box.scrollHeight - box.scrollTop - box.clientHeight < 40"
    await page.wait_for_function(f"() => ({following})(document.getElementById('live-log'))")
    await expect(page.locator("#log-lines")).to_have_text(re.compile(r"^[1-9]"))
    counted, numbered = await page.evaluate(COUNTED_AND_LAST)  # in one look: the server logs on
    assert counted == numbered
    await expect(page.locator("#log-bytes")).not_to_have_text("0")
    notify = page.locator("#notify-toggle")
    if await notify.count():  # a button beside the title, not a bar across the page
        assert (await notify.bounding_box() or {"width": 0})["width"] < 400
    await page.keyboard.press("?")
    await expect(page.get_by_role("dialog", name="Keyboard shortcuts")).to_be_visible()
    await page.get_by_role("button", name="Close").click()
    # The launch's stages are sections headed by how long each took, as they arrived; a progress bar
    # shows its last state, the earlier ones folded.
    stages = page.locator("#live-lines details.stage")
    names = ["args parsed", "weights loading", "weights loaded", "kv cache allocated", "cuda graph capture"]
    for name in names:
        heading = stages.and_(page.locator(f"[data-stage='{name}']")).locator("> summary")
        await expect(heading.locator(".took")).to_have_text(re.compile(r"^\d+ s$"))  # the next stage began
    bars = page.locator("#live-lines details.progress")
    await expect(bars.first).not_to_have_attribute("open", "")
    await expect(bars.first.locator("summary")).to_have_text(re.compile(r"^\d+ earlier states?$"))
    weights = page.locator("#live-lines details.stage[data-stage='weights loading']")
    inside = weights.locator(".ln[id^=L]").first
    await expect(inside).to_be_visible()
    await weights.locator("> summary").click()  # folded: its lines hidden, the log still followed
    await expect(inside).to_be_hidden()
    await page.keyboard.press("g")
    await page.wait_for_function("() => document.getElementById('live-log').scrollTop === 0")
    await page.keyboard.press("G")  # back to following the end, past the folded section
    await page.wait_for_function(f"() => ({following})(document.getElementById('live-log'))")
    await weights.locator("> summary").click()
    await expect(inside).to_be_visible()

    page.once("dialog", lambda dialog: asyncio.ensure_future(dialog.accept()))
    await page.get_by_role("button", name="Stop").click()
    await expect(page.locator("#status")).to_have_text("stopped", timeout=30_000)
    await expect(page.locator("#log-state")).to_contain_text("complete, sha256 matches", timeout=15_000)
    counted, numbered = await page.evaluate(COUNTED_AND_LAST)
    assert counted == numbered

    await page.get_by_role("link", name="full log").click()
    await expect(page).to_have_url(re.compile(r"/log\?at=bottom$"))
    last = page.locator("#log .ln").last
    await expect(last).to_have_class(re.compile(r"\bmark\b"))
    await expect(last).to_be_in_viewport()
    await page.keyboard.press("g")
    await expect(page.locator("#log .ln").first).to_have_class(re.compile(r"\bmark\b"))
    took = page.locator("#log details.stage > summary .took")  # the full log's sections, timed alike
    await expect(took.first).to_have_text(re.compile(r"^\d+ s$"))
    await expect(took).to_have_count(await page.locator("#log details.stage").count())
    assert tab.console_errors == [], tab.console_errors


async def test_the_launch_form_keeps_what_is_on_screen_and_stopping_a_server_asks_first(tab: Tab, demo: Demo) -> None:
    """A server of someone else's holds GPU 3 and a port. From the home page: the host page's Stop
    asks first; on the launch form "use port N" changes only the port (the GPUs ticked stay) and
    runs preflight again; a choice changed after a preflight takes it off the screen; preflight's
    own Stop asks first and leaves the form as it is."""
    page = tab.page
    port = free_port()
    async with httpx.AsyncClient(base_url=demo.base_url, headers={"Authorization": f"Bearer {TOKEN}"}) as api:
        body = {"preset": "llama31-8b", "host": "rtxpro-01", "gpus": [3], "port": port}
        held = (await api.post("/api/attempts", json={**body, **AGAIN})).json()["id"]
        try:

            async def status() -> str:
                return str((await api.get(f"/api/attempts/{held}")).json()["status"])

            await wait_until(lambda: _is(status, "ready"), 30, f"attempt {held} to be ready", demo)
            questions: list[str] = []

            async def answer(dialog: Any, accept: bool) -> None:
                questions.append(dialog.message)
                await (dialog.accept() if accept else dialog.dismiss())

            await page.goto("/")
            await log_in(page, TOKEN)
            await page.get_by_role("link", name="Hosts", exact=True).click()
            await page.get_by_role("link", name="rtxpro-01", exact=True).click()
            page.once("dialog", lambda dialog: answer(dialog, False))
            await page.get_by_role("button", name=f"Stop attempt {held}").click()
            await wait_until(lambda: _true(bool(questions)), 5, "the host page to ask", demo)
            assert questions[-1] == f"Stop attempt {held}? Its server on rtxpro-01 stops answering."
            assert await status() == "ready"

            await page.get_by_role("link", name="Launch", exact=True).click()
            await page.wait_for_function(FORM_SETTLED)
            await page.get_by_label("Preset").select_option("llama31-8b")
            await page.wait_for_function(FORM_SETTLED)
            await page.get_by_label(re.compile(r"^Host\b")).select_option("rtxpro-01")
            await page.wait_for_function(FORM_SETTLED)
            await expect(page.locator("fieldset.gpu-picker")).to_contain_text("GPUs on rtxpro-01 (online)")
            await expect(page.locator("input[name=gpus][value='3']")).not_to_be_checked()  # it is full
            for gpu in await page.locator("input[name=gpus]").all():
                await gpu.uncheck()
            await page.locator("input[name=gpus][value='3']").check()
            await page.get_by_label("Port").fill(str(port))
            await page.get_by_role("button", name="Run preflight").click()
            await expect(page.locator("tr[data-check='port']")).to_contain_text("is not free")
            use = page.locator("#use-free-port")
            free = int(await use.get_attribute("data-use-port") or 0)
            await use.click()
            await expect(page.get_by_label("Port")).to_have_value(str(free))
            await expect(page.locator("tr[data-check='port']")).to_contain_text("✓")
            await expect(page.locator("input[name=gpus]:checked")).to_have_count(1)
            await expect(page.locator("input[name=gpus][value='3']")).to_be_checked()

            await page.locator("input[name=gpus][value='2']").check()
            await expect(page.locator("#preflight")).to_have_text(
                "The choices changed since this preflight: run it again."
            )
            await page.get_by_role("button", name="Run preflight").click()
            stop = page.get_by_role("button", name=f"Stop attempt {held}")
            page.once("dialog", lambda dialog: answer(dialog, True))
            await stop.click()
            await wait_until(lambda: _is(status, "stopped"), 30, f"attempt {held} to stop", demo)
            assert questions[-1].startswith(f"Stop attempt {held}? Its server on rtxpro-01 stops answering")
            await expect(page.get_by_label("Port")).to_have_value(str(free))  # the form stayed
            await expect(page.locator("input[name=gpus]:checked")).to_have_count(2)
        finally:  # a failure above must not leave the server holding GPU 3 for the next test
            await api.post(f"/api/attempts/{held}/stop")
            await wait_until(lambda: _is(status, "stopped"), 30, f"attempt {held} to stop", demo)
    assert tab.console_errors == [], tab.console_errors


async def _is(read: Callable[[], Awaitable[str]], wanted: str) -> bool:
    return await read() == wanted


async def _true(value: bool) -> bool:
    return value


async def test_a_new_preset_made_in_the_form_launches_after_preflight_holds_its_gpu_and_stop_frees_it(
    tab: Tab, demo: Demo
) -> None:
    """The whole loop through the pages alone: a preset created in the form, launched after preflight,
    its GPU shown held on the hosts page while it serves, and shown free again after Stop."""
    page = tab.page
    async with httpx.AsyncClient(base_url=demo.base_url, headers={"Authorization": f"Bearer {TOKEN}"}) as api:
        hosts = {host["name"]: host for host in (await api.get("/api/hosts")).json()}
    gpu = next(g["index"] for g in hosts["b200-01"]["gpus"] if not g["memory_used_mib"])  # none of another test's
    port = free_port()
    await log_in(page, TOKEN)
    await page.get_by_role("link", name="Presets").click()
    await page.get_by_role("link", name="New preset").click()
    await expect(page.get_by_role("heading", name="New preset")).to_be_visible()
    await page.get_by_label("Name", exact=True).fill("llama31-8b-made-in-form")
    await page.get_by_label("Description", exact=True).fill("Llama 3.1 8B with a shorter context, made in the form")
    await page.get_by_label("Model path", exact=True).fill("meta-llama/Llama-3.1-8B-Instruct")
    await page.get_by_label("--context-length", exact=True).fill("8192")
    await page.get_by_label("--mem-fraction-static", exact=True).fill("0.85")
    await page.get_by_label("Extra arguments", exact=True).fill("--served-model-name llama-form")
    await page.get_by_role("button", name="Create preset").click()

    await expect(page).to_have_url(f"{demo.base_url}/presets/llama31-8b-made-in-form")
    command = page.locator("#command")
    for part in ("--model-path meta-llama/Llama-3.1-8B-Instruct", "--mem-fraction-static 0.85",
                 "--context-length 8192", "--served-model-name llama-form"):  # fmt: skip
        await expect(command).to_contain_text(part)
    await page.locator("section").get_by_role("link", name="Launch").click()

    await expect(page.get_by_role("heading", name="Launch")).to_be_visible()
    await page.wait_for_function(FORM_SETTLED)
    await page.get_by_label(re.compile(r"^Host\b")).select_option("b200-01")
    await page.wait_for_function(FORM_SETTLED)
    await expect(page.locator("fieldset.gpu-picker")).to_contain_text("GPUs on b200-01 (online)")
    for checked in await page.locator("input[name=gpus]:checked").all():
        await checked.uncheck()
    await page.locator(f"input[name=gpus][value='{gpu}']").check()
    await page.get_by_label("Port").fill(str(port))
    await page.get_by_role("button", name="Run preflight").click()
    await expect(page.locator("tr[data-check='memory']")).to_contain_text("✓ enough free memory")
    await expect(page.locator("tr[data-check='gpus']")).to_contain_text(f"GPU {gpu}")

    await page.get_by_role("button", name="Launch", exact=True).click()
    await expect(page).to_have_url(re.compile(r"/attempts/\d+$"))
    attempt_id = int(page.url.rsplit("/", 1)[1])
    await expect(page.locator("h1")).to_contain_text("llama31-8b-made-in-form")
    await expect(page.locator("#status")).to_have_text("ready", timeout=30_000)
    stages = page.locator("tr[data-stage]")
    for stage in ("weights loaded", "cuda graph capture", "ready"):
        await expect(page.locator(f"tr[data-stage='{stage}']")).to_be_visible()
    assert await stages.count() >= 3
    await expect(page.locator(".summary")).to_contain_text(f"GPUs {gpu} · port {port}")

    await page.get_by_role("link", name="Hosts", exact=True).click()
    row, used = gpu_row(page, "b200-01", gpu)
    await expect(row.get_by_role("link", name=f"attempt {attempt_id}")).to_be_visible(timeout=REFRESH_TIMEOUT_MS)
    await expect(used).not_to_have_text(shown_used(0))
    assert await used_mib(page, "b200-01", gpu) > 0

    await row.get_by_role("link", name=f"attempt {attempt_id}").click()
    await expect(page).to_have_url(f"{demo.base_url}/attempts/{attempt_id}")
    page.once("dialog", lambda dialog: asyncio.ensure_future(dialog.accept()))  # "Stop attempt N? …"
    await page.get_by_role("button", name="Stop").click()
    await expect(page.locator("#status")).to_have_text("stopped", timeout=30_000)

    await page.get_by_role("link", name="Hosts", exact=True).click()
    row, used = gpu_row(page, "b200-01", gpu)
    await expect(used).to_have_text(shown_used(0), timeout=REFRESH_TIMEOUT_MS)
    await expect(row.get_by_role("link", name=re.compile(r"^attempt "))).to_have_count(0)
    assert await used_mib(page, "b200-01", gpu) == 0
    assert tab.console_errors == [], tab.console_errors


# The module's tests share one demo, which keeps the failures earlier tests made (one appends a
# traceback to a llama31-8b log): a launch meant to go ahead confirms that its configuration may
# have failed before, and one meant to fail also overrides its preflight.
AGAIN = {"confirm_failed_before": True}
SEE_IT_FAIL = {**AGAIN, "override_reason": "watching it fail"}


async def launch_ready(demo: Demo, gpu: int) -> dict[str, Any]:
    """A llama31-8b attempt on rtxpro-01, launched through the API and ready."""
    async with httpx.AsyncClient(base_url=demo.base_url, headers={"Authorization": f"Bearer {TOKEN}"}) as api:
        body = {"preset": "llama31-8b", "host": "rtxpro-01", "gpus": [gpu], "port": free_port()}
        launched = await api.post("/api/attempts", json={**body, **AGAIN})
        assert launched.status_code == 202, launched.text
        attempt_id = launched.json()["id"]

        async def ready() -> bool:
            return bool((await api.get(f"/api/attempts/{attempt_id}")).json()["status"] == "ready")

        await wait_until(ready, 30, f"attempt {attempt_id} to be ready", demo)
        attempt: dict[str, Any] = (await api.get(f"/api/attempts/{attempt_id}")).json()
        return attempt


async def stop_every_attempt_on(api: httpx.AsyncClient, host: str, demo: Demo) -> None:
    active = {"pending", "uploading", "starting", "loading", "ready", "unhealthy"}
    listed = (await api.get("/api/attempts", params={"host": host, "limit": 500})).json()
    running = [attempt["id"] for attempt in listed if attempt["status"] in active]
    for attempt_id in running:
        assert (await api.post(f"/api/attempts/{attempt_id}/stop")).status_code in (202, 409)

    async def all_ended() -> bool:
        statuses = [(await api.get(f"/api/attempts/{i}")).json()["status"] for i in running]
        return not active.intersection(statuses)

    await wait_until(all_ended, 30, f"the attempts on {host} to stop", demo)


def append_to_host_log(demo: Demo, attempt: dict[str, Any], lines: list[bytes]) -> None:
    """As the server would: the simulated host's files are on this machine."""
    path = demo.data_dir / "demo" / "hosts" / attempt["host"] / "home" / attempt["remote_dir"] / "server.log"
    with open(path, "ab") as log:
        log.write(b"".join(line + b"\n" for line in lines))


async def test_live_log_resumes_exactly_after_drops_and_keeps_markup_inert(tab: Tab, demo: Demo) -> None:
    page = tab.page
    attempt = await launch_ready(demo, 1)
    streams: list[str] = []
    page.on("request", lambda r: streams.append(r.url) if "/log/stream" in r.url else None)
    await walk_in(page)
    await open_attempt(page, attempt["id"], "llama31-8b")
    await expect(page.locator("#live-lines .ln").last).to_be_visible()
    hostile = [
        b"[2026-01-05 10:00:01 TP0] <script>window.__pwned = 1</script>",
        b'[2026-01-05 10:00:01 TP1] <img src=x onerror="window.__pwned = 2">',
        b"\x1b[31mERROR\x1b[0m coloured \x1b]8;;javascript:window.__pwned=3\x1b\\link text\x1b]8;;\x1b\\"
        b" \xff\xfe bad bytes",
    ]
    append_to_host_log(demo, attempt, hostile)
    await expect(page.locator("#live-lines")).to_contain_text("<script>window.__pwned = 1</script>")
    await expect(page.locator("#live-lines")).to_contain_text("link text \\xff\\xfe bad bytes")
    assert await page.locator("#live-lines img, #live-lines script, #live-lines a[href^=javascript]").count() == 0
    assert await page.locator("#live-lines .ansi-fg-1").first.text_content() == "ERROR"
    assert await page.evaluate("window.__pwned") is None

    for drop in range(5):  # each time the browser gives up on the stream and htmx opens a fresh one
        append_to_host_log(demo, attempt, [b"before drop %d line %d" % (drop, n) for n in range(300)])
        await expect(page.locator("#live-lines")).to_contain_text(f"before drop {drop} line 299")
        await page.evaluate(
            """() => { const source = document.querySelector('#live-log')['htmx-internal-data'].sseEventSource;
                       source.close(); source.onerror(new Event('error')); }"""
        )
        append_to_host_log(demo, attempt, [b"during drop %d line %d" % (drop, n) for n in range(300)])
        await expect(page.locator("#live-lines")).to_contain_text(f"during drop {drop} line 299")
    numbers = await line_numbers(page)
    assert numbers == list(range(numbers[0], numbers[0] + len(numbers))), "a line was lost or shown twice"
    offsets = [int(re.search(r"offset=(\d+)", url).group(1)) for url in streams]  # type: ignore[union-attr]
    assert len(offsets) >= 6 and offsets == sorted(offsets) and len(set(offsets)) == len(offsets)
    assert [e for e in tab.console_errors if e != "[object Event]"] == []  # htmx logs each forced error


# Records each desktop notification the page creates, then lets the browser's own show it.
RECORD_NOTIFICATIONS = """(() => {
  const Real = window.Notification;
  window.shownNotifications = [];
  function Recorded(title, options) {
    window.shownNotifications.push({title: title, body: (options || {}).body || ""});
    return new Real(title, options);
  }
  Object.defineProperty(Recorded, "permission", {get: () => Real.permission});
  Recorded.requestPermission = Real.requestPermission.bind(Real);
  window.Notification = Recorded;
})()"""


async def test_watched_attempts_show_their_status_in_the_tab_and_notify_when_ready_or_failed(
    tab: Tab, demo: Demo
) -> None:
    """Two launches are held while loading (SIGSTOP to their process groups) until a page watches
    each; then one is let go to ready and the other ended (SIGTERM) as a failure."""
    page = tab.page
    await tab.context.grant_permissions(["notifications"], origin=demo.base_url)
    await tab.context.add_init_script(RECORD_NOTIFICATIONS)
    await walk_in(page)
    held: dict[str, tuple[int, int]] = {}  # outcome: (attempt id, process group)
    async with httpx.AsyncClient(base_url=demo.base_url, headers={"Authorization": f"Bearer {TOKEN}"}) as api:
        launched = {}
        for outcome, gpu in (("failed", 4), ("ready", 5)):
            body = {"preset": "llama31-8b", "host": "b200-01", "gpus": [gpu], "port": free_port(), **AGAIN}
            launched[outcome] = (await api.post("/api/attempts", json=body)).json()["id"]
        for outcome, attempt_id in launched.items():

            async def started(attempt_id: int = attempt_id, outcome: str = outcome) -> bool:
                attempt = (await api.get(f"/api/attempts/{attempt_id}")).json()
                if attempt["pgid"] is not None:
                    os.killpg(attempt["pgid"], signal.SIGSTOP)
                    held[outcome] = (attempt_id, attempt["pgid"])
                return attempt["pgid"] is not None

            await wait_until(started, 30, f"attempt {attempt_id} to start", demo)
        try:
            pages = {"failed": page, "ready": await tab.context.new_page()}
            for outcome, (attempt_id, _) in held.items():
                watching = pages[outcome]
                if watching is not page:  # a second tab opens at the home page
                    await watching.goto("/")
                await open_attempt(watching, attempt_id, "llama31-8b")
                await expect(watching).to_have_title(f"… loading · #{attempt_id} llama31-8b — launchdeck")
                await expect(watching.locator("link[rel=icon]")).to_have_attribute("data-status", "loading")
                if outcome == "failed":  # asked once: the other page finds it on
                    await watching.get_by_role("button", name="notify me").click()
                on = watching.get_by_role("button", name="notifications on", pressed=True)
                await expect(on).to_be_visible()
            assert await page.evaluate("localStorage.getItem('launchdeck.notify')") == "on"

            os.killpg(held["failed"][1], signal.SIGTERM)  # the server dies with no stop asked for: a failure
            for _, pgid in held.values():
                os.killpg(pgid, signal.SIGCONT)
            glyphs = {"failed": "✗", "ready": "✓"}
            for outcome, (attempt_id, _) in held.items():
                watching = pages[outcome]
                title = f"{glyphs[outcome]} {outcome} · #{attempt_id} llama31-8b — launchdeck"
                await expect(watching).to_have_title(title, timeout=30_000)
                icon = watching.locator("link[rel=icon]")
                await expect(icon).to_have_attribute("data-status", outcome)
                assert (await icon.get_attribute("href") or "").startswith("data:image/svg+xml,")
                await watching.wait_for_function("window.shownNotifications.length > 0")
                shown = await watching.evaluate("window.shownNotifications")
                body = "llama31-8b on b200-01" + ("\nthe server exited with 143" if outcome == "failed" else "")
                assert shown == [{"title": f"launchdeck: #{attempt_id} {outcome}", "body": body}]
        finally:
            for _, pgid in held.values():
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(pgid, signal.SIGCONT)
            await api.post(f"/api/attempts/{held['ready'][0]}/stop")
    assert tab.console_errors == []


async def test_grep_with_zero_hits_pivots_to_the_full_log(tab: Tab, demo: Demo) -> None:
    page = tab.page
    async with httpx.AsyncClient(base_url=demo.base_url, headers={"Authorization": f"Bearer {TOKEN}"}) as api:
        body = {"preset": "qwen36-27b-mtp-strategy-unset", "host": "rtxpro-01", "gpus": [3], "port": free_port()}
        attempt_id = (await api.post("/api/attempts", json={**body, **SEE_IT_FAIL})).json()["id"]

        async def failed() -> bool:
            return bool((await api.get(f"/api/attempts/{attempt_id}")).json()["status"] == "failed")

        await wait_until(failed, 30, f"attempt {attempt_id} to fail", demo)
    await walk_in(page)
    await open_attempt(page, attempt_id, "qwen36-27b-mtp-strategy-unset")
    await page.get_by_label("pattern").fill("mamba_scheduler")
    await page.get_by_label("- and _ alike").uncheck()  # the plain grep of the story
    await page.get_by_role("button", name="Grep").click()
    zero = page.locator(".zero-hits")
    await expect(zero).to_contain_text("No line matches mamba_scheduler: searched")
    await expect(zero.locator(".tail .ln").first).to_be_visible()
    await zero.get_by_role("link", name=re.compile("First traceback")).click()
    await expect(page).to_have_url(re.compile(r"/log\?line=\d+#L\d+$"))
    target = page.locator(".ln:target")
    await expect(target).to_contain_text("Traceback (most recent call last):")
    await expect(target).to_be_in_viewport()

    await page.get_by_label("pattern").fill("mamba_scheduler")
    await page.get_by_role("button", name="Grep").click()  # flag-aware, as by default
    hit = page.locator("#grep-results .ln.mark").first
    await expect(hit).to_contain_text("--mamba-scheduler-strategy no_buffer")
    number = await hit.locator(".n").text_content()
    await hit.locator(".n").click()
    await expect(page.locator(f"#L{number}")).to_be_in_viewport()
    await page.goto(f"/attempts/{attempt_id}/log?start=1#L{number}")  # a shared deep link
    await expect(page.locator(f"#L{number}")).to_be_visible()
    await page.get_by_label("pattern").fill("(unclosed")
    await page.get_by_label("regex").check()
    await page.get_by_role("button", name="Grep").click()
    await expect(page.locator(".grep-error")).to_contain_text("Invalid regular expression: Unmatched ( or \\(")
    # The browser notes the 400 that carried the reason; nothing else went wrong.
    assert tab.console_errors == ["Failed to load resource: the server responded with a status of 400 (Bad Request)"]


async def test_a_failed_launch_shows_why_and_what_changed_against_one_that_worked(tab: Tab, demo: Demo) -> None:
    page = tab.page
    launched = {}
    async with httpx.AsyncClient(base_url=demo.base_url, headers={"Authorization": f"Bearer {TOKEN}"}) as api:
        # GPU 1 still serves the live-log test's attempt.
        for gpu, preset in zip(
            (0, 2, 3), ("qwen36-27b-mtp-oom", "qwen36-27b-mtp-strategy-unset", "qwen36-27b-mtp-fixed"), strict=True
        ):
            body = {"preset": preset, "host": "rtxpro-01", "gpus": [gpu], "port": free_port()}
            guards = SEE_IT_FAIL if not preset.endswith("fixed") else {}
            answer = await api.post("/api/attempts", json={**body, **guards})
            assert answer.status_code == 202, f"{preset} on GPU {gpu}: {answer.text}"  # what refused it, if anything
            launched[preset] = answer.json()["id"]
        for preset, attempt_id in launched.items():
            wanted = "ready" if preset.endswith("fixed") else "failed"

            async def ended(attempt_id: int = attempt_id, wanted: str = wanted) -> bool:
                return bool((await api.get(f"/api/attempts/{attempt_id}")).json()["status"] == wanted)

            await wait_until(ended, 60, f"attempt {attempt_id} ({preset}) to be {wanted}", demo)
        oom, override, fixed = launched.values()
        try:
            await walk_in(page)
            await open_attempt(page, override, "qwen36-27b-mtp-strategy-unset")
            # SGLang 0.5.10 refused a strategy nobody asked for: auto became no_buffer.
            await expect(page.locator("#failure-class")).to_have_text("arg-conflict")
            await expect(page.locator("#hint")).to_contain_text("the strategy was never requested")
            changed = page.locator("#drift tr[data-arg='mamba_scheduler_strategy']")
            await expect(changed).to_have_class(re.compile(r"\bchanged\b"))
            await expect(changed.locator("b")).to_have_text("no_buffer")
            # The zero-hits test's attempt of this preset failed the same way before, when it ran first.
            same = re.compile(r"same signature: \d+ earlier attempts?:|first attempt to fail this way")
            await expect(page.locator("#same-signature")).to_have_text(same)
            await page.locator("#root-error-link").click()
            await expect(page).to_have_url(re.compile(r"/log\?line=\d+#L\d+$"))
            target = page.locator(".ln:target")
            await expect(target).to_contain_text("ValueError: Speculative decoding for")
            await expect(target).to_be_in_viewport()
            await page.go_back()  # the browser's own Back brings the attempt page, working
            await expect(page.locator("#failure-class")).to_have_text("arg-conflict")

            await open_attempt(page, oom, "qwen36-27b-mtp-oom")
            await expect(page.locator("#failure-class")).to_have_text("oom")
            await expect(page.locator("#stage-progress .step.current.failed")).to_contain_text("✗ weights loaded")
            why = page.locator("#evidence summary")  # what the class was weighed from, folded
            await expect(why).to_contain_text("Why oom: the error says: memory exhausted")
            await why.click()
            await expect(page.locator("#evidence li.weighed").first).to_contain_text("oom +12")
            leftovers = page.locator("#stop-leftovers")  # offered only while its processes are seen
            if await leftovers.count():
                await expect(leftovers).to_contain_text("still on GPU 0, holding")  # what its Stop would end
            await page.get_by_role("link", name="Errors", exact=True).click()
            await expect(page.locator("#error-groups tbody tr")).to_have_count(2)
            await expect(page.locator("#error-groups")).to_contain_text("qwen36-27b-mtp-strategy-unset")

            # Two picked on the attempts list: one column grid for every table, each side's values in
            # one column down the page.
            await page.get_by_role("link", name="Attempts", exact=True).click()
            for attempt_id in (oom, fixed):
                await page.locator(f"#pick-{attempt_id}").check()
            await page.get_by_role("button", name="Compare selected").click()
            await expect(page).to_have_url(f"{demo.base_url}/compare?ids={fixed}&ids={oom}")
            edges = [
                await page.locator(f"#{table} thead th").nth(2).bounding_box() for table in ("argv-diff", "outcome")
            ]
            assert edges[0] and edges[1] and abs(edges[0]["x"] - edges[1]["x"]) <= 1, edges
            fraction = page.locator("#argv-diff tr[data-row='--mem-fraction-static']")
            await expect(fraction).to_have_class(re.compile(r"\bdiffers\b"))
            await expect(fraction.locator("td")).to_have_text(["--mem-fraction-static", "0.95", "—"])
            await expect(page.locator("#outcome .failure-class")).to_have_text(["healthy", "oom"])
            await expect(page.locator("#root-logs .ln.mark")).to_contain_text("Not enough memory")

            # All three: one column each, the changed argument first.
            await page.get_by_role("link", name="Attempts", exact=True).click()
            for attempt_id in (oom, override, fixed):
                await page.locator(f"#pick-{attempt_id}").check()
            await page.get_by_role("button", name="Compare selected").click()
            await expect(page).to_have_url(f"{demo.base_url}/compare?ids={fixed}&ids={override}&ids={oom}")
            await expect(page.locator("#argv-diff thead th")).to_have_text(["", f"#{fixed}", f"#{override}", f"#{oom}"])
            await expect(fraction.locator("td")).to_have_text(["--mem-fraction-static", "0.95", "0.95", "—"])
            await expect(page.locator("#outcome .failure-class")).to_have_text(["healthy", "arg-conflict", "oom"])
            await expect(page.locator("#stages table")).to_have_count(3)
            assert tab.console_errors == []
        finally:
            await api.post(f"/api/attempts/{fixed}/stop")


async def copy_of_unset(api: httpx.AsyncClient, name: str) -> str:
    """A preset of its own like the demo's strategy-unset one, served under its own name: a configuration
    no other test launched, and a walk that fixes it changes no other test's preset."""
    unset = next(p for p in DEMO_PRESETS if p.name == "qwen36-27b-mtp-strategy-unset")
    args = [*unset.args, "--served-model-name", name]
    body = {"name": name, "model_path": unset.model_path, "args": args, "python": unset.python}
    assert (await api.post("/api/presets", json=body)).status_code == 201
    return name


async def choose_and_launch(page: Page, preset: str, gpu: int, port: int) -> None:
    """From any page: Presets, the preset, Launch, rtxpro-01 with one GPU and a port, Launch."""
    await page.get_by_role("link", name="Presets", exact=True).click()
    await page.get_by_role("link", name=preset, exact=True).click()
    await page.locator("section").get_by_role("link", name="Launch").click()
    await page.wait_for_function(FORM_SETTLED)
    await page.get_by_label(re.compile(r"^Host\b")).select_option("rtxpro-01")
    await page.wait_for_function(FORM_SETTLED)
    await expect(page.locator("fieldset.gpu-picker")).to_contain_text("GPUs on rtxpro-01 (online)")
    for box in await page.locator("input[name=gpus]").all():
        await box.uncheck()
    await page.locator(f"input[name=gpus][value='{gpu}']").check()
    await page.get_by_label("Port", exact=True).fill(str(port))
    await page.get_by_role("button", name="Launch", exact=True).click()


# What a person does in the tab, as the page sees it (trusted events only), kept across page loads:
# clicks, and keys (each key pressed, each character typed).
COUNT_STEPS = """(() => {
  const add = (name, n) => sessionStorage.setItem(name, String(+(sessionStorage.getItem(name) || 0) + n));
  document.addEventListener("click", e => { if (e.isTrusted) add("walk.clicks", 1); }, true);
  document.addEventListener("keydown", e => { if (e.isTrusted) add("walk.keys", 1); }, true);
  document.addEventListener("input", e => { if (e.isTrusted && e.data) add("walk.keys", e.data.length); }, true);
})()"""


async def steps_taken(page: Page, *, reset: bool = False) -> tuple[int, int]:
    """The clicks and keys counted since the last reset."""
    counted = await page.evaluate(
        """reset => { const names = ["walk.clicks", "walk.keys"];
                      const got = names.map(name => +(sessionStorage.getItem(name) || 0));
                      if (reset) names.forEach(name => sessionStorage.removeItem(name));
                      return got; }""",
        reset,
    )
    return counted[0], counted[1]


async def test_the_seed_story_goes_from_refused_or_failed_to_serving_by_clicks(tab: Tab, demo: Demo) -> None:
    """The 27B MTP preset whose mamba strategy SGLang 0.5.10 turns into no_buffer, walked from the home
    page twice. Refused: preflight quotes SGLang's refusal and its fix, one click applies it and
    launches. Failed (launched over the refusal): the root-error card's Edit and relaunch, Save,
    Confirm. Both end serving; the closing note quotes the steps counted here."""
    page = tab.page
    await page.add_init_script(COUNT_STEPS)
    async with httpx.AsyncClient(base_url=demo.base_url, headers={"Authorization": f"Bearer {TOKEN}"}) as api:
        refused, failed = [await copy_of_unset(api, f"qwen36-27b-walk-{way}") for way in ("refused", "failed")]
        hosts = {host["name"]: host for host in (await api.get("/api/hosts")).json()}
        gpu = next(g["index"] for g in hosts["rtxpro-01"]["gpus"] if not g["memory_used_mib"])
        try:
            await walk_in(page)
            # Refused: nothing is launched until the fix is applied.
            await choose_and_launch(page, refused, gpu, port := free_port())
            await expect(page.locator("tr[data-check='arguments']")).to_contain_text("✗")
            offer = page.get_by_role("button", name="Apply --mamba-scheduler-strategy extra_buffer and launch")
            await expect(offer).to_be_visible()
            clicks, keys = await steps_taken(page, reset=True)  # counted from the refusal on screen
            assert clicks > 5 and keys >= len(str(port)), (clicks, keys)  # the way there: the port was typed
            await offer.click()
            await expect(page).to_have_url(re.compile(r"/attempts/\d+$"))
            await expect(page.locator("h1")).to_contain_text(f"{refused} r2 on rtxpro-01")
            await expect(page.locator("#status")).to_have_text("ready", timeout=60_000)
            command = page.locator("#command-heading + pre")
            await expect(command).to_contain_text("--mamba-scheduler-strategy extra_buffer")
            assert await steps_taken(page) == (1, 0)  # clicks, keys
            page.once("dialog", lambda dialog: asyncio.ensure_future(dialog.accept()))
            await page.get_by_role("button", name="Stop").click()
            await expect(page.locator("#status")).to_have_text("stopped", timeout=30_000)

            # Failed: launched over the refusal with a reason, watched as it fails, then fixed.
            await choose_and_launch(page, failed, gpu, port := free_port())
            await expect(page.locator("tr[data-check='arguments']")).to_contain_text("✗")
            await page.get_by_label("Launch even if a blocking preflight check fails").check()
            reason = "see SGLang refuse it"
            await page.get_by_label("override reason").fill(reason)
            await page.get_by_role("button", name="Launch", exact=True).click()
            await expect(page).to_have_url(re.compile(r"/attempts/\d+$"))
            first = int(page.url.rsplit("/", 1)[1])
            await expect(page.locator("#status")).to_have_text("failed", timeout=60_000)
            await expect(page.locator("main")).to_contain_text(f"preflight overridden: “{reason}”")
            card = page.locator("#root-error")
            await expect(card).to_contain_text("with --mamba-scheduler-strategy extra_buffer, on rtxpro-01")
            await steps_taken(page, reset=True)  # from the failure on screen
            await card.get_by_role("link", name="Edit and relaunch").click()
            # The editor: the attempt's revision with the suggestion applied, what changed, where it launches.
            strategy = page.locator("#relaunch-changes tr[data-change='--mamba-scheduler-strategy']")
            await expect(strategy.locator(".before")).to_have_text("(unset)")
            await expect(strategy.locator(".after")).to_have_text("extra_buffer")
            await expect(page.locator("select[name='mamba_scheduler_strategy']")).to_have_value("extra_buffer")
            await expect(page.locator("#launch-target")).to_contain_text(f"on rtxpro-01, GPUs {gpu}, port {port}")
            await page.get_by_role("button", name="Save and relaunch").click()
            await page.get_by_role("button", name="Confirm: save and launch").click()
            await page.wait_for_url(re.compile(rf"/attempts/(?!{first}$)\d+$"))
            await expect(page.locator("h1")).to_contain_text(f"{failed} r2 on rtxpro-01")
            await expect(page.locator("#status")).to_have_text("ready", timeout=60_000)
            await expect(page.locator(".summary")).to_contain_text(f"GPUs {gpu} · port {port}")
            assert await steps_taken(page) == (3, 0)
            # The one refusal provoked: the first launch, before its fix.
            assert (
                tab.console_errors
                == ["Failed to load resource: the server responded with a status of 422 (Unprocessable Entity)"] * 2
            )
        finally:
            for preset in (refused, failed):
                for attempt in (await api.get("/api/attempts", params={"preset": preset, "limit": 5})).json():
                    if attempt["status"] in ("ready", "loading", "starting", "uploading", "pending"):
                        await api.post(f"/api/attempts/{attempt['id']}/stop")


# Notes (in ms of the page's clock) when the root-error card and the failing line first appear.
LIVE_OBSERVER = """
window.__seen = {};
new MutationObserver(() => {
  const now = performance.now(), lines = document.getElementById("live-lines");
  if (!("card" in window.__seen) && document.getElementById("root-error")) window.__seen.card = now;
  if (!("line" in window.__seen) && lines && lines.textContent.includes("33 layers")) window.__seen.line = now;
}).observe(document, {childList: true, subtree: true});
"""
FAILURE = [
    b"Traceback (most recent call last):",
    b'  File "/opt/sglang/python/sglang/srt/model_executor/model_runner.py", line 412, in load_model',
    b"    self.model = get_model(model_config=self.model_config)",
    b"ValueError: the checkpoint has 33 layers, the config says 32",
]


def group_members(pgid: int) -> list[int]:
    """The processes of a process group on this machine (where the simulated hosts run theirs)."""
    members = []
    for entry in Path("/proc").iterdir():
        with contextlib.suppress(OSError, ValueError, IndexError):
            stat = (entry / "stat").read_bytes()
            if entry.name.isdigit() and int(stat[stat.rindex(b")") + 2 :].split()[2]) == pgid:
                members.append(int(entry.name))
    return members


async def launch_frozen(api: httpx.AsyncClient, demo: Demo, gpu: int) -> dict[str, Any]:
    """A llama31-8b attempt on b200-01, its processes stopped (SIGSTOP) while it loads, so that a
    page can be open before anything more happens."""
    body = {"preset": "llama31-8b", "host": "b200-01", "gpus": [gpu], "port": free_port()}
    attempt_id = (await api.post("/api/attempts", json={**body, **AGAIN})).json()["id"]
    attempt: dict[str, Any] = {}

    async def loading() -> bool:
        nonlocal attempt
        attempt = (await api.get(f"/api/attempts/{attempt_id}")).json()
        return attempt["status"] == "loading" and attempt["pgid"] is not None

    await wait_until(loading, 30, f"attempt {attempt_id} to load", demo)
    os.killpg(attempt["pgid"], signal.SIGSTOP)
    return attempt


async def test_status_and_root_error_are_pushed_to_the_attempt_page_as_they_happen(tab: Tab, demo: Demo) -> None:
    """The page's live stream says when the attempt changed: the root-error card follows its line
    within a second (the status block waited for a 2 s poll before), and `ready` and `failed` come
    without a reload."""
    page = tab.page
    await page.add_init_script(LIVE_OBSERVER)
    await walk_in(page)
    async with httpx.AsyncClient(base_url=demo.base_url, headers={"Authorization": f"Bearer {TOKEN}"}) as api:
        ready = await launch_frozen(api, demo, 4)
        try:
            await open_attempt(page, ready["id"], "llama31-8b")
            await expect(page.locator("#status")).to_have_text("loading")
            await page.evaluate("window.__marker = 1")
            os.killpg(ready["pgid"], signal.SIGCONT)
            await expect(page.locator("#status")).to_have_text("ready", timeout=30_000)
            await expect(page.locator("tr[data-stage='ready']")).to_be_visible()
            assert await page.evaluate("window.__marker") == 1, "the page was reloaded instead of updated in place"
        finally:
            os.killpg(ready["pgid"], signal.SIGCONT)
            await api.post(f"/api/attempts/{ready['id']}/stop")

        failing = await launch_frozen(api, demo, 5)
        try:
            await open_attempt(page, failing["id"], "llama31-8b")
            await expect(page.locator("#status")).to_have_text("loading")
            await page.evaluate("window.__marker = 1")
            append_to_host_log(demo, failing, FAILURE)
            await expect(page.locator("#root-error .root-line")).to_have_text(FAILURE[-1].decode())
            seen = await page.evaluate("window.__seen")
            assert seen["card"] - seen["line"] < 1000, (
                f"the card came {seen['card'] - seen['line']:.0f} ms after its line"
            )
            for pid in group_members(failing["pgid"]):  # the server dies; its launch script records 137
                if pid != failing["pgid"]:
                    os.kill(pid, signal.SIGKILL)
        finally:
            os.killpg(failing["pgid"], signal.SIGCONT)
        await expect(page.locator("#status")).to_have_text("failed", timeout=15_000)
        await expect(page.locator("p.summary")).to_contain_text("exit code 137")
        assert await page.evaluate("window.__marker") == 1, "the page was reloaded instead of updated in place"
    assert tab.console_errors == []


STALE_COPY = {
    "name": "llama31-8b-stale-copy",
    "model_path": "meta-llama/Llama-3.1-8B-Instruct",
    "env": {"LAUNCHDECK_SIM_FAULT": "stale-model"},  # the simulator's failure that nothing built in places
    "description": "Llama 3.1 8B from a host whose model mirror is behind: the team's modelsync check refuses it.",
}
RULE_TITLE = "Model mirror behind on this host"
RULE_HINT = "Run `modelsync pull` on the host, then launch again; how the mirror works: https://wiki.example/modelsync."
RULE_LINK = "https://wiki.example/modelsync"
# What the attempt page does on its stream's `status` event: the status block fetched and swapped in;
# resolved once it has settled.
REDRAW_STATUS = """() => new Promise((settled) => {
  document.body.addEventListener("htmx:afterSettle", () => settled(), {once: true});
  htmx.trigger(document.querySelector("[hx-target='#attempt-status']"), "sse:status");
})"""


async def test_teach_launchdeck_on_an_unrecognised_failure_and_see_the_past_and_a_later_attempt_take_it(
    tab: Tab, demo: Demo
) -> None:
    page = tab.page
    await page.set_viewport_size({"width": 1280, "height": 800})
    async with httpx.AsyncClient(base_url=demo.base_url, headers={"Authorization": f"Bearer {TOKEN}"}) as api:
        assert (await api.post("/api/presets", json=STALE_COPY)).status_code == 201
        body = {"preset": STALE_COPY["name"], "host": "b200-01", "gpus": [6], "port": free_port()}
        past = (await api.post("/api/attempts", json=body)).json()["id"]

        async def failed() -> bool:
            return bool((await api.get(f"/api/attempts/{past}")).json()["status"] == "failed")

        await wait_until(failed, 30, f"attempt {past} to fail", demo)

    await walk_in(page)
    await open_attempt(page, past, STALE_COPY["name"])
    card = page.locator("#root-error")
    await expect(page.locator("#failure-class")).to_have_text("other")
    await expect(card.locator("#unrecognised")).to_have_text("unrecognised failure")
    await expect(card.locator(".root-line")).to_contain_text("RuntimeError: modelsync: the copy of")
    await expect(page.locator("#hint")).to_contain_text("Unrecognised failure: launchdeck has no rule for this error")
    fingerprint = (await card.locator("a[href^='/errors/'] code").text_content() or "").strip()
    await card.get_by_role("link", name="teach launchdeck").click()  # one click from the unrecognised badge
    form = page.locator("#teach form")
    await expect(form).to_be_in_viewport()
    await form.get_by_label("Class").select_option("model-load")
    await form.get_by_label("Title").fill(RULE_TITLE)
    await form.get_by_label(re.compile(r"^Hint")).fill(RULE_HINT)
    match = form.get_by_label(re.compile(r"^Match"))
    await expect(match).to_have_value(re.compile(r"^RuntimeError: modelsync: the copy of "))  # the root error
    await match.fill("modelsync: the copy of")  # what every copy of this error says, whatever the model
    # The attempt's row written while the person types (its follower's last write comes seconds
    # after the failure under load): the status block is redrawn around the form, which keeps what
    # they typed.
    await page.evaluate(REDRAW_STATUS)
    await expect(form.get_by_label("Title")).to_have_value(RULE_TITLE)
    await expect(form.get_by_label("Class")).to_have_value("model-load")
    await form.get_by_role("button", name="Save as a team rule").click()
    # Back on the attempt once the rule is saved and this attempt re-diagnosed with it (seconds under
    # the whole suite's load on two cores).
    await expect(page).to_have_url(f"{demo.base_url}/attempts/{past}", timeout=15_000)

    team_rule = page.locator("#team-rule")  # decided before the page came back: no reload needed
    await expect(team_rule).to_contain_text(f"team rule by admin: {RULE_TITLE}")
    await expect(team_rule).to_contain_text("launchdeck alone said other (it had no rule for this failure)")
    await expect(page.locator("#failure-class")).to_have_text("model-load")
    await expect(card.locator("#unrecognised")).to_have_count(0)
    hint = page.locator("#hint")
    await expect(hint).to_have_text(RULE_HINT)
    await expect(hint.get_by_role("link", name=RULE_LINK)).to_have_attribute("href", RULE_LINK)

    # A later launch of the same preset, from the browser: the rule decides it as it fails.
    await page.get_by_role("link", name="Launch", exact=True).click()
    await page.wait_for_function(FORM_SETTLED)
    await page.get_by_label("Preset").select_option(STALE_COPY["name"])
    await page.wait_for_function(FORM_SETTLED)  # each choice redraws the form, as a person would wait for
    await page.get_by_label(re.compile(r"^Host\b")).select_option("b200-01")
    await page.wait_for_function(FORM_SETTLED)
    await expect(page.locator("fieldset.gpu-picker")).to_contain_text("GPUs on b200-01 (online)")
    await page.locator("input[name=gpus][value='0']").uncheck()
    await page.locator("input[name=gpus][value='7']").check()
    await page.get_by_label("Port").fill(str(free_port()))
    # The form says the configuration failed before, with its cause, and asks to confirm.
    warning = page.locator("#failed-before")
    await expect(warning).to_contain_text("This configuration failed once")
    await expect(warning.get_by_role("link", name=f"attempt {past}")).to_be_visible()
    await page.get_by_role("button", name="Launch", exact=True).click()
    await expect(page.locator(".form-error")).to_contain_text("this configuration failed once")
    await expect(page.get_by_label("Port")).not_to_have_value("")  # what was chosen is still there
    await page.get_by_label("I know; launch it again").check()
    await page.get_by_role("button", name="Launch", exact=True).click()
    await expect(page).to_have_url(re.compile(r"/attempts/\d+$"))
    later = int(page.url.rsplit("/", 1)[1])
    assert later != past
    await expect(page.locator("#status")).to_have_text("failed", timeout=30_000)
    await expect(page.locator("#failure-class")).to_have_text("model-load")
    await expect(page.locator("#team-rule")).to_contain_text(f"team rule by admin: {RULE_TITLE}")
    await expect(page.locator("#hint")).to_have_text(RULE_HINT)
    await expect(page.locator("#same-signature")).to_contain_text(f"#{past}")

    await page.get_by_role("link", name="Errors", exact=True).click()
    group = page.locator(f"#error-groups tr[data-fingerprint='{fingerprint}']")
    await expect(group.locator(".failure-class")).to_have_text("model-load")
    await expect(group.locator(".unrecognised")).to_have_count(0)
    await expect(group.locator("td.num")).to_have_text("2")
    await expect(group).to_contain_text(STALE_COPY["name"])
    await group.get_by_role("link").first.click()
    await expect(page).to_have_url(f"{demo.base_url}/errors/{fingerprint}")
    await expect(page.locator("h1 .failure-class")).to_have_text("model-load")
    await expect(page.locator("#team-rule")).to_contain_text(f"team rule by admin: {RULE_TITLE}")
    await expect(page.locator("#group-attempts tbody tr")).to_have_count(2)
    # The one refusal provoked: the launch before its confirmation.
    assert tab.console_errors == ["Failed to load resource: the server responded with a status of 409 (Conflict)"]


FEEDBACK_PRESET = {
    "name": "llama31-8b-feedback",
    "model_path": "meta-llama/Llama-3.1-8B-Instruct",
    "description": "Llama 3.1 8B, a preset of its own, so its first attempt has nothing to compare with.",
}
NARROW_PAGES = [
    "/hosts", "/hosts?view=compact&gpus=2&free_gib=80",
    "/hosts/b200-01", "/presets", f"/presets/{FEEDBACK_PRESET['name']}", "/launch", "/attempts",
    "/attempts/{first}", "/attempts/{first}/log", "/compare?a={first}&b={second}",
    "/compare?ids={second},{first}", "/errors", "/rules", "/search",
    "/audit", "/account/tokens", "/attempts/999999999",
]  # fmt: skip


async def launch_feedback_preset(api: httpx.AsyncClient, demo: Demo, gpu: int) -> int:
    body = {"preset": FEEDBACK_PRESET["name"], "host": "b200-01", "gpus": [gpu], "port": free_port()}
    attempt_id: int = (await api.post("/api/attempts", json={**body, **AGAIN})).json()["id"]

    async def ready() -> bool:
        return bool((await api.get(f"/api/attempts/{attempt_id}")).json()["status"] == "ready")

    await wait_until(ready, 30, f"attempt {attempt_id} to be ready", demo)
    return attempt_id


async def test_every_action_answers_at_once_and_every_page_fits_a_phone_in_light_and_dark(tab: Tab, demo: Demo) -> None:
    page = tab.page
    async with httpx.AsyncClient(base_url=demo.base_url, headers={"Authorization": f"Bearer {TOKEN}"}) as api:
        assert (await api.post("/api/presets", json=FEEDBACK_PRESET)).status_code == 201
        first = await launch_feedback_preset(api, demo, 0)
        await walk_in(page)
        await open_attempt(page, first, FEEDBACK_PRESET["name"])
        await expect(page.locator(".wide-menu nav a[aria-current=page]")).to_have_text("Attempts")
        # Nothing to compare with yet: no links that would answer 404.
        await expect(page.locator(".compare-links a")).to_have_count(0)
        port = (await api.get(f"/api/attempts/{first}")).json()["port"]
        await expect(page.locator("#endpoint code")).to_have_text(f"http://127.0.0.1:{port}")
        await expect(page.locator("#curl-example")).to_contain_text(f"curl http://127.0.0.1:{port}/v1/chat/completions")

        second = await launch_feedback_preset(api, demo, 1)
    await open_attempt(page, second, FEEDBACK_PRESET["name"])
    for link in ("#compare-previous", "#compare-success"):  # the first became ready: both compare with it
        await expect(page.locator(link)).to_have_attribute("href", f"/compare?a={first}&b={second}")

    # Stop asks first; dismissed, nothing happens; confirmed, the page says "stopping…" before the host answers.
    questions: list[str] = []
    page.once("dialog", lambda dialog: (questions.append(dialog.message), asyncio.ensure_future(dialog.dismiss())))
    await page.get_by_role("button", name="Stop").click()
    await expect(page.locator("#status")).to_have_text("ready")
    assert len(questions) == 1 and questions[0].startswith(f"Stop attempt {second}? Its server on b200-01 port ")
    await page.evaluate(
        """() => { window.__seen = [];
                   new MutationObserver(() => window.__seen.push(document.getElementById('status')?.textContent))
                     .observe(document.body, {subtree: true, childList: true, characterData: true}); }"""
    )
    page.once("dialog", lambda dialog: asyncio.ensure_future(dialog.accept()))
    await page.get_by_role("button", name="Stop").click()
    await expect(page.locator("form.stop")).to_have_count(0)  # the page the server sent back has no Stop
    await expect(page.locator("#status")).to_have_text(re.compile(r"^(stopping…|stopped)$"))
    # The live log and the host's events change the page too: the status's first change is what counts.
    seen = [status for status in await page.evaluate("window.__seen") if status != "ready"]
    assert seen[0] == "stopping…", f"the status went {seen} after Stop was confirmed"
    await expect(page.locator("#status")).to_have_text("stopped", timeout=30_000)  # the page has settled

    # A dead link followed inside the page (a boosted request, which accepts anything) shows the error in the layout.
    await page.evaluate(
        """() => { const main = document.querySelector('main');
                   main.insertAdjacentHTML('beforeend', '<a id="dead-link" href="/attempts/999999999">gone</a>');
                   htmx.process(main); }"""
    )

    async def slowly(route: Route) -> None:
        await asyncio.sleep(0.8)
        await route.continue_()

    await page.route("**/attempts/999999999", slowly)
    busy = page.locator("#busy")
    await expect(busy).to_be_hidden()
    await page.locator("#dead-link").click()
    await expect(busy).to_be_visible()  # the spinner in the top bar, while any request takes time
    await expect(page.locator("#error-page")).to_contain_text("Error 404")
    await expect(busy).to_be_hidden()
    await page.unroute("**/attempts/999999999")
    await expect(page.locator("#error-page")).to_contain_text("attempt 999999999")
    await expect(page.get_by_role("button", name="Log out")).to_be_visible()

    # 390 px: no page scrolls sideways, and the menu and "Log out" stay in reach.
    await page.set_viewport_size({"width": 390, "height": 844})
    for path in NARROW_PAGES:
        await page.goto(path.format(first=first, second=second))
        widths = await page.evaluate("[document.scrollingElement.scrollWidth, innerWidth]")
        assert widths[0] <= widths[1], f"{path} scrolls sideways at 390 px: {widths}"
    # The menu is folded under its button; opened, every entry and "Log out" are on the screen.
    menu = page.get_by_role("group").filter(has=page.locator("summary", has_text="Menu"))
    await expect(page.get_by_role("link", name="Audit")).to_be_hidden()
    await page.locator("summary", has_text="Menu").click()
    await expect(menu.get_by_role("link", name="Audit")).to_be_in_viewport()
    await expect(menu.get_by_role("button", name="Log out")).to_be_in_viewport()
    await page.locator("summary", has_text="Menu").click()
    await expect(page.get_by_role("link", name="Audit")).to_be_hidden()

    # The system's dark preference is followed, and light comes back with it.
    background = "getComputedStyle(document.documentElement).backgroundColor"
    await page.emulate_media(color_scheme="dark")
    assert await page.evaluate(background) == "rgb(17, 21, 28)"
    await page.emulate_media(color_scheme="light")
    assert await page.evaluate(background) == "rgb(246, 247, 249)"
    assert set(tab.console_errors) <= {"Failed to load resource: the server responded with a status of 404 (Not Found)"}


def generated_hosts_page(count: int) -> str:
    """The compact hosts view of `count` generated 8-GPU hosts, rendered by the page's own template
    and context (the demo has three hosts; 64 real ones would cost a minute of CPU to start)."""
    from starlette.requests import Request as StarletteRequest

    from app.web.pages.hosts import HostsQuery, hosts_context
    from app.web.templating import templates
    from tests.support.hosts import generated_hosts

    scope = {"type": "http", "method": "GET", "path": "/hosts", "query_string": b"view=compact", "headers": [],
             "scheme": "http", "server": ("127.0.0.1", 80), "root_path": ""}  # fmt: skip
    context = hosts_context(generated_hosts(count), HostsQuery(view="compact"))
    context |= {"request": StarletteRequest(scope), "csrf_token": "x", "htmx_version": HTMX_VERSION,
                "htmx_sse_version": json.loads(PACKAGE_JSON.read_text())["dependencies"]["htmx-ext-sse"],
                "disk_warning": None, "user": "admin"}  # fmt: skip
    return templates.get_template("hosts.html").render(context)


async def test_compact_hosts_view_fits_64_hosts_of_8_gpus_on_one_screen_and_the_filter_narrows_it(
    tab: Tab, demo: Demo
) -> None:
    page = tab.page
    await page.set_viewport_size({"width": 1280, "height": 800})
    await walk_in(page)
    await page.get_by_role("link", name="Compact").click()
    rows = page.locator("#compact-hosts li.chost")
    await expect(rows).to_have_count(3)
    await expect(rows.first.get_by_role("meter").first).to_have_attribute("aria-label", re.compile(r"^GPU 0: .* free"))
    await page.get_by_label("Label").select_option("rtx-pro-6000")
    await page.get_by_label("GPUs").fill("2")
    await page.get_by_label("with free GiB").fill("80")
    await page.get_by_role("button", name="Filter").click()
    await expect(page).to_have_url(f"{demo.base_url}/hosts?view=compact&label=rtx-pro-6000&gpus=2&free_gib=80")
    await expect(rows).to_have_count(2)
    await expect(rows.first).to_have_attribute("data-host", "rtxpro-01")
    await expect(page.locator("#match-count")).to_have_text(
        "2 of 3 hosts labelled rtx-pro-6000 with 2 GPUs of ≥ 80 GiB free."
    )
    await page.get_by_role("link", name="Cards").click()  # the other view keeps the filter
    await expect(page.locator("article.host")).to_have_count(2)
    await expect(page.locator("#match-count")).to_contain_text("2 of 3 hosts")

    assert tab.console_errors == []

    # 64 hosts of 8 GPUs: the same template and context from generated readings, with the demo's styles.
    html = generated_hosts_page(64)
    await page.route(
        "**/hosts?view=compact&generated=64", lambda route: route.fulfill(body=html, content_type="text/html")
    )
    await page.route("**/hosts/events*", lambda route: route.abort())  # the demo's own three hosts stay out
    await page.goto("/hosts?view=compact&generated=64")
    await expect(rows).to_have_count(64)
    await expect(page.locator("#compact-hosts .cgpu")).to_have_count(512)
    sizes = await page.evaluate(
        "[document.scrollingElement.scrollHeight, innerHeight, document.scrollingElement.scrollWidth, innerWidth]"
    )
    assert sizes[0] <= sizes[1] and sizes[2] <= sizes[3], f"64 hosts overflow 1280x800: {sizes}"


async def test_full_log_goes_to_its_target_pages_every_grep_hit_and_answers_keys(tab: Tab, demo: Demo) -> None:
    page = tab.page
    async with httpx.AsyncClient(base_url=demo.base_url, headers={"Authorization": f"Bearer {TOKEN}"}) as api:
        body = {"preset": "llama31-8b", "host": "b200-01", "gpus": [5], "port": free_port()}
        launched = await api.post("/api/attempts", json={**body, **AGAIN})
        assert launched.status_code == 202, launched.text
        attempt_id = launched.json()["id"]

        async def ready() -> bool:
            return bool((await api.get(f"/api/attempts/{attempt_id}")).json()["status"] == "ready")

        await wait_until(ready, 30, f"attempt {attempt_id} to be ready", demo)
        attempt = (await api.get(f"/api/attempts/{attempt_id}")).json()
        lines = [b"[2026-02-11 09:%02d:%02d TP0] decode step %d" % (n // 60 % 60, n % 60, n) for n in range(3000)]
        for n in range(0, 3000, 7):
            lines[n] += b" probe <b>p</b>-%d" % n  # 429 hits, the text inert
        lines[1702:1706] = [
            b"Traceback (most recent call last):",
            b'  File "/opt/sglang/srt/managers/scheduler.py", line 88, in step',
            b"    self.run()",
            b"ValueError: tensor shapes disagree",
        ]
        append_to_host_log(demo, attempt, lines)
        size = len(b"".join(line + b"\n" for line in lines))

        async def mirrored() -> bool:
            return int((await api.get(f"/api/attempts/{attempt_id}/log?limit=0")).headers["X-Log-Size"]) >= size

        await wait_until(mirrored, 10, "the appended lines to be mirrored", demo)
    await log_in(page, TOKEN)

    async def expect_target(text: str) -> Locator:
        target = page.locator("#log .ln.mark")
        await expect(target).to_have_count(1)
        await expect(target).to_contain_text(text)
        await expect(target).to_be_in_viewport()
        return target

    async def expect_last_line() -> None:
        """The log's last line (the server's health checks may have added lines after ours), marked, in view."""
        last = page.locator("#log .ln").last
        await expect(last).to_have_class(re.compile(r"\bmark\b"))
        await expect(last).to_be_in_viewport()

    await page.goto(f"/attempts/{attempt_id}/log?at=error")
    traceback = page.locator("#log details.traceback[open]")
    await expect(traceback.locator(".ln")).to_have_count(4)
    await expect(await expect_target("Traceback (most recent call last):")).to_be_visible()
    await page.keyboard.press("e")  # the next error line: the exception's own
    await expect(page.locator("#log .ln.mark")).to_contain_text("ValueError: tensor shapes disagree")
    await page.keyboard.press("E")
    await expect_target("Traceback (most recent call last):")
    await traceback.locator("summary").click()  # folds the block to its first line
    await expect(traceback.get_by_text("tensor shapes disagree")).to_be_hidden()

    # A range of lines, as a shared link, then made by shift-clicking a second line's number.
    await page.goto(f"/attempts/{attempt_id}/log?line=1650#L1650-L1652")
    await expect(page.locator("#log .ln.mark")).to_have_count(3)
    await page.locator("#L1660 a.n").click()
    await expect(page).to_have_url(re.compile(r"#L1660$"))
    await page.locator("#L1663 a.n").click(modifiers=["Shift"])
    await expect(page).to_have_url(re.compile(r"#L1660-L1663$"))
    await expect(page.locator("#log .ln.mark")).to_have_count(4)

    await page.get_by_label("line", exact=True).fill("1200")
    await page.get_by_role("button", name="Go").first.click()
    await expect(page).to_have_url(re.compile(r"line=1200"))
    numbered = await expect_target("decode step")
    await expect(numbered.locator(".n")).to_have_text("1200")
    await page.get_by_role("link", name="bottom", exact=True).click()
    await expect(page).to_have_url(re.compile(r"at=bottom"))
    await expect_last_line()
    await page.keyboard.press("g")
    await expect(page).to_have_url(re.compile(r"start=1$"))
    await expect(page.locator("#L1")).to_be_in_viewport()
    await page.keyboard.press("G")
    await expect(page).to_have_url(re.compile(r"at=bottom"))
    await expect_last_line()

    await page.keyboard.press("t")
    await expect(page.locator("#log .ts").first).to_be_hidden()
    await expect(page.get_by_label("timestamps")).not_to_be_checked()
    await page.keyboard.press("t")
    await expect(page.locator("#log .ts").first).to_be_visible()

    await page.keyboard.press("/")
    await expect(page.get_by_label("pattern")).to_be_focused()
    await page.keyboard.type("probe <b>")
    await page.keyboard.press("Enter")
    summary = page.locator(".grep-summary")
    await expect(summary).to_contain_text("429 matching lines for probe <b>, showing 1\N{EN DASH}200")
    marks = page.locator("#grep-results mark")
    await expect(marks).to_have_count(200)
    await expect(marks.first).to_have_text("probe <b>")
    assert await page.locator("#grep-results .t b").count() == 0
    await page.keyboard.press("Escape")  # leaves the pattern field for the keys
    await page.keyboard.press("n")
    current = page.locator("#grep-results .ln.current")
    await expect(current).to_contain_text("decode step 0 probe")
    await page.keyboard.press("N")
    await expect(current).to_contain_text(f"decode step {199 * 7} probe")
    await expect(current).to_be_in_viewport()
    await page.get_by_role("link", name=re.compile("next 200 hits")).click()
    await expect(summary).to_contain_text("showing 201\N{EN DASH}400")
    await page.get_by_role("link", name=re.compile("next 200 hits")).click()
    await expect(summary).to_contain_text("showing 401\N{EN DASH}429")
    await expect(page.get_by_role("link", name=re.compile("next"))).to_have_count(0)
    await expect(page.locator("#grep-results .ln.mark").last).to_contain_text(f"decode step {428 * 7} probe")

    await page.keyboard.press("?")
    await expect(page.get_by_role("dialog", name="Keyboard shortcuts")).to_be_visible()
    await page.keyboard.press("Escape")
    await expect(page.get_by_role("dialog")).to_be_hidden()

    await open_attempt(page, attempt_id, "llama31-8b")
    box = page.locator("#live-log")
    # (the server's health checks add access lines of their own at any time: counts are at least ours)
    await expect(box.locator(".ln", has_text="decode step 2999")).to_have_count(1)
    await box.evaluate("box => { box.scrollTop = 0; box.dispatchEvent(new Event('scroll')); }")
    jump = page.get_by_role("button", name=re.compile("jump to the end"))
    await expect(jump).to_contain_text(re.compile(r"\d+ new lines"))

    async def new_lines() -> int:
        return int(re.search(r"(\d+) new lines", await jump.text_content() or "")[1])  # type: ignore[index]

    before = await new_lines()
    append_to_host_log(demo, attempt, [b"[2026-02-11 10:00:00 TP0] after the pause %d" % n for n in range(5)])
    await page.wait_for_function(
        f"() => /(\\d+) new lines/.exec(document.body.innerText)?.[1] >= {before + 5}", timeout=10_000
    )
    await jump.click()
    await expect(box.locator(".ln").last).to_be_in_viewport()
    await expect(jump).to_be_hidden()
    await page.keyboard.press("f")  # pauses
    await expect(jump).to_be_visible()
    await page.keyboard.press("f")
    await expect(jump).to_be_hidden()
    assert tab.console_errors == []


AXE = NODE_MODULES / "axe-core" / "axe.min.js"
# Every page a person reads, by what it needs from the demo (an attempt, its signature).
A11Y_PAGES = (
    "/hosts",
    "/hosts/rtxpro-01",
    "/presets",
    "/presets/new",
    "/presets/llama31-8b",
    "/launch",
    "/attempts",
    "/attempts/{attempt}",
    "/attempts/{attempt}/log",
    "/attempts/{attempt}/log/grep?pattern=Load",
    "/errors",
    "/rules",
    "/search",
    "/audit",
    "/compare",
    "/account/tokens",
    "/users",
    "/account",
)


@pytest.mark.parametrize("scheme", ["light", "dark"])
async def test_every_page_passes_an_automated_accessibility_check(browser: Browser, demo: Demo, scheme: str) -> None:
    """axe-core (from npm, injected into each page) finds no serious or critical violation on any page,
    in the light theme and the dark one; the page's own CSP forbids inline scripts, so this context
    bypasses it to inject the checker."""
    async with httpx.AsyncClient(base_url=demo.base_url, headers={"Authorization": f"Bearer {TOKEN}"}) as api:
        failed = (await api.get("/api/attempts", params={"status": "failed", "limit": 1})).json()
    # a failed attempt shows the most: its root-error card, teach form, drift and log (one is launched alone)
    attempt = failed[0]["id"] if failed else await launch_failing(demo)
    context = await browser.new_context(viewport={"width": 1280, "height": 800}, color_scheme=scheme, bypass_csp=True)
    page = await context.new_page()
    try:
        await page.goto(f"{demo.base_url}/login")
        checker = AXE.read_text()
        found: dict[str, list[str]] = {}
        found["/login"] = await serious_violations(page, checker)
        await log_in(page, TOKEN)
        for path in A11Y_PAGES:
            await page.goto(demo.base_url + path.format(attempt=attempt))
            found[path] = await serious_violations(page, checker)
        assert not {path: issues for path, issues in found.items() if issues}, found
    finally:
        await context.close()


async def serious_violations(page: Page, checker: str) -> list[str]:
    await page.evaluate(checker)
    violations = await page.evaluate(
        "async () => (await axe.run(document, {resultTypes: ['violations']})).violations"
        ".filter(v => v.impact === 'serious' || v.impact === 'critical')"
        ".map(v => `${v.id}: ${v.help} (${v.nodes.slice(0, 3).map(n => n.target.join(' ')).join(', ')})`)"
    )
    return list(violations)


async def launch_failing(demo: Demo) -> int:
    """A demo preset that fails at once (the KV pool does not fit), launched through the API, ended."""
    async with httpx.AsyncClient(base_url=demo.base_url, headers={"Authorization": f"Bearer {TOKEN}"}) as api:
        body = {"preset": "qwen36-27b-mtp-oom", "host": "rtxpro-01", "gpus": [3], "port": free_port()}
        attempt_id = int((await api.post("/api/attempts", json={**body, **SEE_IT_FAIL})).json()["id"])

        async def ended() -> bool:
            return bool((await api.get(f"/api/attempts/{attempt_id}")).json()["status"] == "failed")

        await wait_until(ended, 30, f"attempt {attempt_id} to fail", demo)
        return attempt_id


async def test_a_person_makes_a_token_copies_it_once_and_revokes_it(tab: Tab, demo: Demo) -> None:
    page = tab.page
    await tab.context.grant_permissions(["clipboard-read", "clipboard-write"])
    await page.goto("/login")
    await page.get_by_label("User name").fill("demo")
    await page.get_by_label("Password").fill((demo.data_dir / "demo-password").read_text().strip())
    await page.get_by_role("button", name="Log in").click()
    await expect(page.locator("#host-list")).to_be_visible()
    await page.get_by_role("link", name="Account", exact=True).click()
    await page.get_by_role("link", name=re.compile("API tokens")).click()
    form = page.locator("#new-token-form")
    await form.get_by_label("Name").fill("from the browser")
    await form.get_by_label("Role").select_option("viewer")
    await form.get_by_role("button", name="Make token").click()
    secret = (await page.locator("#token-secret").inner_text()).strip()
    assert secret.startswith("ldk_")
    await page.get_by_role("button", name="copy").click()
    await expect(page.get_by_role("button", name="copied")).to_be_visible()
    assert await page.evaluate("navigator.clipboard.readText()") == secret
    async with httpx.AsyncClient(base_url=demo.base_url, headers={"Authorization": f"Bearer {secret}"}) as api:
        assert (await api.get("/api/hosts")).status_code == 200
        await page.reload()  # what the list says now
        row = page.locator("tr", has_text="from the browser")
        await expect(row).to_contain_text("active")
        assert secret not in await page.content()
        await row.get_by_role("button", name="Revoke").click()
        await expect(page.locator("tr", has_text="from the browser")).to_contain_text("revoked")
        assert (await api.get("/api/hosts")).status_code == 401
    assert tab.console_errors == []


def add_user_with_the_cli(demo: Demo, name: str, role: str, password: str) -> None:
    """`launchdeck users add` on the demo's data dir, as an admin on the server would."""
    launchdeck = Path(sys.executable).parent / "launchdeck"
    env = {k: v for k, v in os.environ.items() if not k.startswith("LAUNCHDECK_")}
    env["LAUNCHDECK_DATA_DIR"] = str(demo.data_dir)
    command = [str(launchdeck if launchdeck.exists() else "launchdeck"), "users", "add", name, "--role", role]
    subprocess.run(
        [*command, "--password-stdin"], input=password + "\n", text=True, check=True, capture_output=True, env=env
    )


async def log_in_as(page: Page, name: str, password: str) -> None:
    if not re.search(r"/login(\?|$)", page.url):
        await page.goto("/login")
    await page.get_by_label("User name").fill(name)
    await page.get_by_label("Password", exact=True).fill(password)
    await page.get_by_role("button", name="Log in").click()
    await page.wait_for_load_state()


async def test_a_viewer_sees_hosts_and_attempts_without_controls_the_api_refuses_and_logout_ends_the_cookie(
    tab: Tab, demo: Demo
) -> None:
    await asyncio.to_thread(add_user_with_the_cli, demo, "vera", "viewer", "viewer password 1")
    async with httpx.AsyncClient(base_url=demo.base_url, headers={"Authorization": f"Bearer {TOKEN}"}) as api:
        body = {"preset": "llama31-8b", "host": "b200-01", "gpus": [7], "port": free_port(), **AGAIN}
        attempt_id = (await api.post("/api/attempts", json=body)).json()["id"]
        try:

            async def ready() -> bool:
                return bool((await api.get(f"/api/attempts/{attempt_id}")).json()["status"] == "ready")

            await wait_until(ready, 30, f"attempt {attempt_id} to be ready", demo)
            page = tab.page
            await log_in_as(page, "vera", "viewer password 1")
            await expect(page.locator("article.host[data-host='b200-01']")).to_be_visible()
            menu = page.locator(".wide-menu nav")
            await expect(menu.get_by_role("link", name="Account")).to_be_visible()
            for hidden in ("Launch", "Users"):
                await expect(menu.get_by_role("link", name=hidden)).to_have_count(0)

            await page.get_by_role("link", name="Presets", exact=True).click()
            await page.get_by_role("link", name="llama31-8b", exact=True).click()
            await expect(page.locator("#command")).to_contain_text("--model-path")
            await expect(page.get_by_role("link", name="Launch", exact=True)).to_have_count(0)
            await expect(page.get_by_role("button", name="Save as a new revision")).to_have_count(0)
            await open_attempt(page, attempt_id, "llama31-8b")
            await expect(page.locator("#status")).to_have_text("ready")
            await expect(page.locator("form.stop")).to_have_count(0)
            await expect(page.locator("#relaunch-link")).to_have_count(0)

            # The page's own session, with its CSRF token: the API still says no.
            status = await page.evaluate(
                """async body => (await fetch('/api/attempts', {method: 'POST', body: JSON.stringify(body),
                     headers: {'Content-Type': 'application/json',
                               'X-CSRF-Token': document.querySelector('input[name=csrf_token]').value}})).status""",
                {"preset": "llama31-8b", "host": "b200-01", "gpus": [6]},
            )
            assert status == 403
            assert (await api.get(f"/api/attempts/{attempt_id}")).json()["status"] == "ready"

            cookies = await tab.context.cookies()
            await page.get_by_role("button", name="Log out").click()
            await expect(page.get_by_role("heading", name="Log in")).to_be_visible()
            await tab.context.add_cookies(cookies)  # the cookie as it was before logging out
            await page.goto("/hosts")
            await expect(page.get_by_role("heading", name="Log in")).to_be_visible()
            assert "/login" in page.url
            refused = "Failed to load resource: the server responded with a status of 403 (Forbidden)"
            assert set(tab.console_errors) <= {refused}, tab.console_errors
        finally:
            await api.post(f"/api/attempts/{attempt_id}/stop")


async def test_an_admin_adds_a_user_who_then_changes_their_password(tab: Tab, demo: Demo) -> None:
    page = tab.page
    await log_in(page, TOKEN)
    await page.locator(".wide-menu nav").get_by_role("link", name="Users").click()
    await expect(page.get_by_role("heading", name="Users")).to_be_visible()
    form = page.locator("#add-user")
    await form.get_by_label("Name").fill("dana")
    await form.get_by_label("Role").select_option("operator")
    await form.get_by_label("Initial password").fill("initial password 1")
    await form.get_by_role("button", name="Add user").click()
    row = page.locator("tr[data-user='dana']")
    await expect(row).to_contain_text("active")
    await expect(row.get_by_label("Role of dana")).to_have_value("operator")
    await expect(row).to_contain_text("never")
    await page.get_by_role("button", name="Log out").click()
    await expect(page.get_by_role("heading", name="Log in")).to_be_visible()

    await log_in_as(page, "dana", "initial password 1")
    await page.locator(".wide-menu nav").get_by_role("link", name="Account").click()
    await expect(page.locator("#whoami")).to_contain_text("dana, role operator")
    await expect(page.locator("#logins tbody tr")).to_have_count(1)
    await page.get_by_label("Current password").fill("initial password 1")
    await page.get_by_label("New password (at least 8 characters)").fill("changed password 2")
    await page.get_by_label("New password again").fill("changed password 2")
    await page.get_by_role("button", name="Change password").click()
    await expect(page.locator("#account-notice")).to_contain_text("Your other logins have ended; this one goes on.")
    await expect(page.locator("#logins tbody tr")).to_contain_text("this one")
    await page.get_by_role("button", name="Log out").click()
    await expect(page.get_by_role("heading", name="Log in")).to_be_visible()
    await log_in_as(page, "dana", "initial password 1")
    await expect(page.get_by_role("alert")).to_have_text("Wrong user name or password.")
    await log_in_as(page, "dana", "changed password 2")
    await expect(page).to_have_url(re.compile(r"/hosts$"))
    wrong_password = "Failed to load resource: the server responded with a status of 401 (Unauthorized)"
    assert set(tab.console_errors) <= {wrong_password}, tab.console_errors


TWO_NODES = {
    "name": "qwen3-235b-over-two-hosts",
    "model_path": "Qwen/Qwen3-235B-A22B-Instruct-2507",
    "args": ["--tp-size", "8", "--nnodes", "2"],
}


async def test_a_preset_on_two_nodes_launches_from_the_form_shows_each_node_and_stops_on_both(
    tab: Tab, demo: Demo
) -> None:
    page = tab.page
    async with httpx.AsyncClient(base_url=demo.base_url, headers={"Authorization": f"Bearer {TOKEN}"}) as api:
        assert (await api.post("/api/presets", json=TWO_NODES)).status_code == 201
        for host in ("rtxpro-01", "rtxpro-02"):  # every GPU of both hosts: other tests' servers stop first
            await stop_every_attempt_on(api, host, demo)
    await walk_in(page)
    await page.get_by_role("link", name="Presets", exact=True).click()
    await page.get_by_role("link", name=TWO_NODES["name"], exact=True).click()
    await page.locator("section").get_by_role("link", name="Launch").click()
    # Offered as it should run: two hosts of one kind, and the 4 GPUs each node needs for --tp-size 8.
    await page.wait_for_function(FORM_SETTLED)
    await expect(page.get_by_label("Node 0 host")).to_have_value("rtxpro-01")
    await expect(page.get_by_label("Node 1 host")).to_have_value("rtxpro-02")
    await expect(page.locator("input[name=gpus]:checked")).to_have_count(4)
    for rank, host in enumerate(("rtxpro-01", "rtxpro-02")):
        await page.wait_for_function(FORM_SETTLED)  # a new choice redraws the form, as a person would wait for
        select = page.get_by_label(f"Node {rank} host")
        if await select.input_value() != host:
            async with page.expect_response(lambda response: urlsplit(response.url).path == "/launch"):
                await select.select_option(host)
        await expect(select).to_have_value(host)
    await expect(page.locator("fieldset.gpu-picker")).to_contain_text("on each of the 2 nodes; shown: on rtxpro-01")
    for gpu in range(4):
        await page.locator(f"input[name=gpus][value='{gpu}']").check()
    await page.get_by_label("Port", exact=True).fill(str(free_port()))
    await page.get_by_label("Rendezvous port").fill(str(free_port()))
    await page.get_by_role("button", name="Run preflight").click()
    memory = page.locator("tr[data-check='memory']")
    await expect(memory.nth(1)).to_contain_text("✓ node 1 (rtxpro-02): enough free memory")
    await expect(memory.nth(1)).to_contain_text("split over 2 nodes x 4 GPUs")
    await expect(page.locator(".headroom-row[data-node='1']").first).to_contain_text("rtxpro-02 GPU 0: needs")

    await page.get_by_role("button", name="Launch", exact=True).click()
    await expect(page).to_have_url(re.compile(r"/attempts/\d+$"))
    await expect(page.locator("#status")).to_have_text("ready", timeout=30_000)
    nodes = page.locator("#nodes tbody tr")
    await expect(nodes).to_have_count(2)
    await expect(nodes.nth(0)).to_contain_text("rtxpro-01")
    await expect(nodes.nth(1)).to_contain_text("rtxpro-02")
    live = page.locator("#live-log")
    await expect(live).to_contain_text("[node0 rtxpro-01]")
    await expect(live).to_contain_text("[node1 rtxpro-02]")
    await page.locator("select[data-log-filter=node]").select_option("1")  # one node's lines alone
    await expect(live.locator(".ln:visible", has_text="[node0 rtxpro-01]")).to_have_count(0)
    await expect(live.locator(".ln:visible", has_text="[node1 rtxpro-02]").first).to_be_visible()
    await page.locator("select[data-log-filter=level]").select_option("error")
    await expect(live.locator(".ln:visible:not(.error)")).to_have_count(0)
    await page.locator("select[data-log-filter=level]").select_option("")
    await page.locator("select[data-log-filter=node]").select_option("")

    page.once("dialog", lambda dialog: asyncio.ensure_future(dialog.accept()))  # "Stop attempt N? …"
    await page.get_by_role("button", name="Stop").click()
    await expect(page.locator("#status")).to_have_text("stopped", timeout=30_000)
    for row in (nodes.nth(0), nodes.nth(1)):
        await expect(row.locator(".status")).to_have_text("stopped", timeout=30_000)
    for host in ("rtxpro-01", "rtxpro-02"):
        assert simgpu.read(str(demo.gpu_state_path(host)))["processes"] == []

    await nodes.nth(1).get_by_role("link", name="node 1's log").click()
    # The node's own log page (the attempt page's h1 said "Attempt" too, so the URL comes first).
    await expect(page).to_have_url(re.compile(r"/attempts/\d+/log\?at=bottom$"))
    await expect(page.locator("h1")).to_contain_text(re.compile(r"^Log of attempt \d+: .* on rtxpro-02$"))
    await expect(page.locator("body")).not_to_contain_text("[node1 rtxpro-02]")  # the node's own log, untagged
    await expect(page.locator("body")).to_contain_text("Dummy health check server started")
    assert tab.console_errors == [], tab.console_errors


async def test_a_sweep_fills_its_table_and_chart_live_and_its_best_point_becomes_a_revision(
    tab: Tab, demo: Demo
) -> None:
    page = tab.page
    workload = {"name": "browser-tiny", "num_prompts": 8, "input_len": 64, "output_len": 32, "max_concurrency": 4}
    names = ("--speculative-num-steps", "--speculative-eagle-topk", "--speculative-num-draft-tokens")
    points = [dict(zip(names, map(str, shape), strict=True)) for shape in [(1, 1, 2), (2, 1, 3), (3, 4, 4)]]
    async with httpx.AsyncClient(base_url=demo.base_url, headers={"Authorization": f"Bearer {TOKEN}"}) as api:
        await stop_every_attempt_on(api, "rtxpro-02", demo)
        assert (await api.post("/api/workloads", json=workload)).status_code == 201
        body = {"preset": "qwen36-27b-mtp-newest", "host": "rtxpro-02", "gpus": [2], "workload": workload["name"],
                "points": points, "port": free_port(), "name": "draft shape"}  # fmt: skip
        started = await api.post("/api/sweeps", json=body)
        assert started.status_code == 202, started.text
        sweep_id = started.json()["id"]
    await walk_in(page)
    await page.get_by_role("link", name="Sweeps", exact=True).click()
    await page.get_by_role("link", name="draft shape").click()
    await expect(page).to_have_url(re.compile(rf"/sweeps/{sweep_id}$"))
    # The page follows the sweep by itself, point after point, until it is done.
    await expect(page.locator("#sweep-status")).to_have_text("done", timeout=90_000)
    rows = page.locator("#sweep-points tbody tr")
    await expect(rows).to_have_count(3)
    await expect(page.locator("#sweep-points tr.point-served")).to_have_count(3)
    await expect(page.locator("#sweep-chart circle.mark")).to_have_count(3)
    await expect(page.locator("#sweep-points .best-mark")).to_have_count(1)
    await page.get_by_label("colour by").select_option("--speculative-eagle-topk")
    await page.get_by_role("button", name="Draw").click()
    await expect(page.locator("#sweep-chart figcaption.legend span")).to_have_count(2)  # topk 1 and 4
    dot = await page.locator("#sweep-chart figcaption.legend svg").first.bounding_box()
    assert dot is not None and dot["height"] <= 12, dot  # a dot beside its name, not the chart's width
    widths = await page.evaluate("[document.scrollingElement.scrollWidth, innerWidth]")
    assert widths[0] <= widths[1], f"the sweep page scrolls sideways at 1280 px: {widths}"
    await page.set_viewport_size({"width": 390, "height": 844})  # on a phone the headings stay one line
    heights = await page.locator("#sweep-points thead th").evaluate_all("cells => cells.map(c => c.clientHeight)")
    assert max(heights) < 2 * min(heights), heights
    await page.set_viewport_size({"width": 1280, "height": 900})

    best = page.locator("#sweep-points tr.best")
    draft_tokens = (await best.locator("td").nth(3).text_content() or "").strip()
    await page.locator("#adopt-best").get_by_role("button").click()
    await expect(page).to_have_url(re.compile(r"/presets/qwen36-27b-mtp-newest\?saved=\d+$"))
    await expect(page.locator("p.notice")).to_contain_text("Saved as revision")
    await expect(page.locator("main")).to_contain_text(f"--speculative-num-draft-tokens {draft_tokens}")

    await page.set_viewport_size({"width": 390, "height": 844})
    for path in ("/sweeps", f"/sweeps/{sweep_id}"):
        await page.goto(path)
        widths = await page.evaluate("[document.scrollingElement.scrollWidth, innerWidth]")
        assert widths[0] <= widths[1], f"{path} scrolls sideways at 390 px: {widths}"
    assert not tab.console_errors, tab.console_errors


async def serve_load(demo: Demo, host: str, port: int, requests: int, tokens: int) -> None:
    """Requests to a server as its users send them, on the host (through an SSH forward of its port)."""
    async with await log_in_to(demo, host) as conn:
        listener = await conn.forward_local_port("127.0.0.1", 0, "127.0.0.1", port)
        async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{listener.get_port()}", timeout=120) as client:
            body = {"text": "the of and " * 40, "sampling_params": {"max_new_tokens": tokens}}
            replies = await asyncio.gather(*(client.post("/generate", json=body) for _ in range(requests)))
        listener.close()
    assert all(reply.status_code == 200 for reply in replies)


async def test_a_ready_mtp_server_s_serving_panel_fills_from_its_own_metrics(tab: Tab, demo: Demo) -> None:
    """The demo's MTP preset on the newest SGLang runs with --enable-metrics: its page, reached by
    clicks, shows the server's own figures (read from its /metrics) as requests are served."""
    page = tab.page
    preset = "qwen36-27b-mtp-newest"
    async with httpx.AsyncClient(base_url=demo.base_url, headers={"Authorization": f"Bearer {TOKEN}"}) as api:
        hosts = {host["name"]: host for host in (await api.get("/api/hosts")).json()}
        gpu = next(g["index"] for g in hosts["rtxpro-01"]["gpus"] if not g["memory_used_mib"])
        body = {"preset": preset, "host": "rtxpro-01", "gpus": [gpu], "port": (port := free_port())}
        attempt_id = (await api.post("/api/attempts", json=body)).json()["id"]
        try:
            await walk_in(page)
            await open_attempt(page, attempt_id, preset)
            await expect(page.locator("#status")).to_have_text("ready", timeout=60_000)
            panel = page.locator("#serving")
            await expect(panel.locator("h2")).to_have_text("Serving")
            await serve_load(demo, "rtxpro-01", port, requests=16, tokens=400)
            accept = panel.locator("tr[data-figure='accept_length'] .figure")
            await expect(accept).to_have_text(re.compile(r"^[1-4]\.\d\d$"), timeout=40_000)
            throughput = panel.locator("tr[data-figure='gen_throughput'] .figure")
            await expect(throughput).to_have_text(re.compile(r"tok/s$"))
            await expect(panel.locator("tr[data-figure='ttft_p99'] polyline")).to_have_attribute(
                "points", re.compile(r"\d")
            )
            if shots := os.environ.get("LAUNCHDECK_SHOTS"):
                await panel.screenshot(path=str(Path(shots) / "serving-panel.png"))
        finally:
            await api.post(f"/api/attempts/{attempt_id}/stop")
