"""Waiting for something, never forever: after its timeout a wait fails, saying what it waited for."""

from __future__ import annotations

import asyncio
import inspect
import time
from collections.abc import Awaitable, Callable
from typing import Any


async def until(check: Callable[[], Any | Awaitable[Any]], what: str, timeout: float = 30) -> Any:
    """Polls `check` (plain or async) until it returns something true, and returns that; a test that
    waits for something never waits forever: after `timeout` it fails, saying `what` it waited for."""
    deadline = time.monotonic() + timeout
    while True:
        result = check()
        if inspect.isawaitable(result):
            result = await result
        if result:
            return result
        if time.monotonic() > deadline:
            raise AssertionError(f"{what} (waited {timeout:g} s)")
        await asyncio.sleep(0.05)


def wait_until(check: Any, timeout: float, what: str, interval: float = 0.05) -> Any:
    """Polls `check` until it returns something true; fails naming `what` after `timeout` s."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if result := check():
            return result
        time.sleep(interval)
    raise AssertionError(f"{what} within {timeout} s")
