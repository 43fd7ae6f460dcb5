"""The retry waits: within the minimum and the cap, growing while failures go on, short again after
progress, and different for loops that failed at the same moment."""

from __future__ import annotations

import random

from hypothesis import given
from hypothesis import strategies as st

from app.backoff import Backoff


class Highest(random.Random):
    """Always the top of the range: the longest waits a Backoff can give."""

    def uniform(self, a: float, b: float) -> float:
        return b


@given(
    minimum=st.floats(0.001, 10),
    cap=st.floats(0.001, 100),
    seed=st.integers(0, 2**32),
    steps=st.lists(st.sampled_from(["next", "reset", "to_cap"]), max_size=40),
)
def test_every_wait_lies_between_the_minimum_and_the_cap(
    minimum: float, cap: float, seed: int, steps: list[str]
) -> None:
    backoff = Backoff(minimum, cap, rng=random.Random(seed))
    for step in steps:
        if step == "next":
            assert min(minimum, cap) <= backoff.next() <= cap
        else:
            getattr(backoff, step)()


def test_waits_grow_up_to_the_cap_and_stay_there() -> None:
    backoff = Backoff(1.0, 30.0, rng=Highest())
    assert [backoff.next() for _ in range(6)] == [3.0, 9.0, 27.0, 30.0, 30.0, 30.0]


def test_waits_grow_on_average_while_failures_go_on() -> None:
    rng = random.Random(7)
    runs = [Backoff(1.0, rng=rng) for _ in range(2000)]
    means = [sum(run.next() for run in runs) / len(runs) for _ in range(4)]
    assert means == sorted(means) and means[-1] > 3 * means[0]


def test_a_reset_makes_the_next_wait_short_again() -> None:
    backoff = Backoff(0.5, 60.0, rng=Highest())
    for _ in range(10):
        backoff.next()
    backoff.reset()
    assert backoff.next() == 1.5


def test_to_cap_allows_the_longest_wait_next() -> None:
    backoff = Backoff(1.0, 30.0, rng=Highest())
    backoff.to_cap()
    assert backoff.next() == 30.0


def test_a_cap_below_the_minimum_is_the_only_wait() -> None:
    """The tests shorten caps below a loop's usual minimum; the cap wins."""
    backoff = Backoff(0.1, 0.05)
    assert {backoff.next() for _ in range(5)} == {0.05}


def test_loops_that_fail_together_wait_for_different_times() -> None:
    first_waits = sorted(Backoff(1.0, 2.0).next() for _ in range(200))
    assert len(set(first_waits)) == 200
    assert first_waits[-1] - first_waits[0] > 0.8  # of the 1 s between the minimum and the cap
    in_tenths = [sum(1 for wait in first_waits if 1 + tenth / 10 <= wait < 1 + (tenth + 1) / 10) for tenth in range(10)]
    assert max(in_tenths) < 50, in_tenths  # 20 expected in each tenth; lockstep puts all 200 in one


def test_the_same_seed_gives_the_same_waits() -> None:
    def waits(seed: int) -> list[float]:
        backoff = Backoff(1.0, 30.0, rng=random.Random(seed))
        return [backoff.next() for _ in range(8)]

    assert waits(3) == waits(3) != waits(4)
