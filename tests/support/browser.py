"""Debian's chromium through Playwright: the command line it runs with, a tab that notes the page's
errors, a login with a token, and the live log's line numbers."""

from __future__ import annotations

import contextlib
import re
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path

from playwright.async_api import Browser, BrowserContext, Page

CHROMIUM = Path("/usr/bin/chromium")
CHROMIUM_ARGS = [
    "--headless=new",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]

# The launch form is wired and no redraw of it is under way: a choice made before would be lost.
FORM_SETTLED = """() => { const form = document.querySelector('#launch-form');
    return form && !form.matches('.htmx-settling, .htmx-swapping') && !form.querySelector('.htmx-request')
        && [...form.querySelectorAll('select[name=host], select[name=hosts]')].every(s => s['htmx-internal-data']); }"""


@dataclass
class Tab:
    """A page in its own browser context, with what the page logged as errors."""

    context: BrowserContext
    page: Page
    console_errors: list[str]


@contextlib.asynccontextmanager
async def open_tab(browser: Browser, base_url: str) -> AsyncIterator[Tab]:
    """A laptop-sized page on `base_url` that notes every console error and uncaught exception."""
    context = await browser.new_context(base_url=base_url, viewport={"width": 1280, "height": 900})
    context.set_default_timeout(10_000)
    page = await context.new_page()
    errors: list[str] = []
    page.on("console", lambda message: errors.append(message.text) if message.type == "error" else None)
    page.on("pageerror", lambda exc: errors.append(f"uncaught: {exc}"))
    try:
        yield Tab(context, page, errors)
    finally:
        await context.close()


async def log_in(page: Page, token: str) -> None:
    if not re.search(r"/login(\?|$)", page.url):
        await page.goto("/login")
    await page.get_by_label("Access token").fill(token)
    await page.get_by_role("button", name="Log in").click()
    await page.wait_for_load_state()


async def line_numbers(page: Page) -> list[int]:
    numbers: list[int] = await page.eval_on_selector_all(
        "#live-lines .ln[id^=L] > .n", "links => links.map(a => +a.textContent)"
    )
    return numbers
