"""The waits between retries of every loop that retries (SSH reconnects, log mirrors, GPU probes,
attempt followers, row writes, webhooks), drawn at random: hosts that one network blip cut off
together, and their ProxyJump tunnels through one bastion, must not all come back at the same moments.

"Decorrelated jitter" (AWS Architecture Blog, "Exponential Backoff And Jitter"): each wait is uniform
between the minimum and three times the previous one, so waits spread as widely as with full jitter
but never fall below the minimum, and a host that is down is never tried faster than that. The cap
bounds the draw instead of clipping it, so waits at the cap do not pile up on exactly the cap.
"""

from __future__ import annotations

import math
import random


class Backoff:
    """One loop's waits: `next()` before each retry, `reset()` once the loop gets somewhere."""

    def __init__(self, minimum: float, cap: float = math.inf, *, rng: random.Random | None = None):
        self.minimum = min(minimum, cap)
        self.cap = cap
        self._rng = rng or random.Random()
        self._last = self.minimum

    def next(self) -> float:
        """The wait before the next try: between the minimum and the cap, about 1.5 times the
        previous one on average."""
        self._last = self._rng.uniform(self.minimum, min(self.cap, 3 * self._last))
        return self._last

    def reset(self) -> None:
        """After progress: the next wait is short again."""
        self._last = self.minimum

    def to_cap(self) -> None:
        """After a failure that retrying soon cannot cure: the next wait may be as long as the cap."""
        self._last = self.cap
