"""Which SGLang release this simulated install plays: one per simulated Python environment.

The simulated hosts offer the newest release as `python3` and older ones through wrapper
interpreters (`python3-sglang-0.5.10`) that set LAUNCHDECK_SIM_SGLANG_VERSION, which every child
process (schedulers, preflight probes) inherits.
"""

import os

VERSION_ENV = "LAUNCHDECK_SIM_SGLANG_VERSION"
RELEASES = ("0.5.10", "0.5.23")
NEWEST = RELEASES[-1]


def release() -> str:
    name = os.environ.get(VERSION_ENV) or NEWEST
    if name not in RELEASES:
        raise ImportError(f"{VERSION_ENV}={name!r}: the simulated SGLang offers {', '.join(RELEASES)}")
    return name
