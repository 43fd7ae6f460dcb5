"""Strict runs (CI, LAUNCHDECK_TEST_STRICT=1): a component a test group needs and misses is a
failure there, and a skip elsewhere."""

from __future__ import annotations

import os

import pytest

STRICT = os.environ.get("LAUNCHDECK_TEST_STRICT") == "1"


def require(condition: bool, reason: str) -> None:
    """Skips when a component is missing, except in strict runs (CI), where that is a failure."""
    if not condition:
        if STRICT:
            pytest.fail(f"{reason} (LAUNCHDECK_TEST_STRICT=1: missing components fail the run)")
        pytest.skip(reason)
