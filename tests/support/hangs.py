"""The hang report: the stacks of the session's event loop's tasks, printed for a test that is
about to time out (conftest.py's pytest_runtest_protocol); pytest-timeout's thread stacks show
only the loop's selector for a test hung in asyncio."""

from __future__ import annotations

import asyncio
import sys

LOOPS: list[asyncio.AbstractEventLoop] = []  # the session's event loop, noted by a fixture


def print_tasks(nodeid: str) -> None:
    def dump() -> None:
        print(f"\n===== {nodeid} is about to time out; its event loop's tasks:", file=sys.__stderr__)
        for task in asyncio.all_tasks(loop):
            task.print_stack(limit=12, file=sys.__stderr__)

    for loop in LOOPS:
        loop.call_soon_threadsafe(dump)
