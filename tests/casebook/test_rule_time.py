"""Team rules cannot stall the dashboard: a pattern that backtracks without bound is refused when it
is made, a team keeps a bounded number of rules, and rules stored before those checks (or slow on
a real log) run off the event loop, within one time for the diagnosis, and are set aside."""

from __future__ import annotations

import asyncio
import time

import pytest
from fastapi import FastAPI
from httpx import AsyncClient
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

from app import db
from app.casebook import team_rules
from app.db.models import DiagnosisRule
from app.diagnose.rules import DIAGNOSIS_SECONDS, MAX_RULES, Rule, RuleScanner, parse_rules
from app.errors import InvalidInput
from tests.support.launching import launch, wait_for
from tests.support.web import log_in

# Five groups and their mirror: no match on any line, after a search of every split of it.
CATASTROPHIC = r"(.*)(.*)(.*)(.*)(.*)\5\4\3\2\1"


def test_a_pattern_that_backtracks_without_bound_is_refused_with_a_sentence() -> None:
    text = f"[[rule]]\nmatch = '{CATASTROPHIC}'\nregex = true\nflag_aware = false\nclass = 'oom'\ntitle = 't'\n"
    with pytest.raises(InvalidInput, match=r"rule 1: match is a regular expression that ran past 0.05 s"):
        parse_rules(text)
    sound = text.replace(CATASTROPHIC, r"out of memory.*Tried to allocate (\d+\.\d+) GiB")
    assert parse_rules(sound)[0].regex


def test_a_rules_file_over_the_cap_is_refused_before_any_rule_is_compiled() -> None:
    text = "[[rule]]\nmatch = 'x'\nclass = 'oom'\ntitle = 't'\n" * (MAX_RULES + 1)
    with pytest.raises(InvalidInput, match=f"holds {MAX_RULES + 1} rules; a team keeps at most {MAX_RULES}"):
        parse_rules(text)


def test_slow_rules_share_one_time_per_diagnosis_and_those_slow_on_their_own_are_named() -> None:
    slow = [Rule("oom", f"slow {n}", match=CATASTROPHIC + f"(?#{n})", regex=True, scope="any") for n in range(60)]  # type: ignore[arg-type]
    scanner = RuleScanner(tuple(slow))
    started = time.perf_counter()
    scanner.feed("x" * 3000 + "\n")
    scanner.finish()
    spent = time.perf_counter() - started
    assert spent < 3 * DIAGNOSIS_SECONDS  # a loose guard: the rules stop at the diagnosis's time
    # The first rules ran out of their own time (0.1 s a line) until the diagnosis's ran out too.
    assert scanner.stalled and sorted(scanner.stalled) == list(range(len(scanner.stalled)))
    assert len(scanner.stalled) <= DIAGNOSIS_SECONDS / 0.1
    assert "ran past 0.1 s on a line of 3000 characters" in scanner.stalled[0]
    assert any(f"the rules' {DIAGNOSIS_SECONDS:g} s for this diagnosis were spent" in w for w in scanner.warnings)


async def test_the_cap_on_rules_is_said_when_a_rule_would_pass_it(sessions: async_sessionmaker[AsyncSession]) -> None:
    async with sessions() as session:
        session.add_all(DiagnosisRule(match=f"m{n}", failure_class="oom", title="t") for n in range(MAX_RULES))
        await session.commit()
    async with sessions() as session:
        with pytest.raises(InvalidInput, match=f"a team keeps at most {MAX_RULES} rules .* there are {MAX_RULES}"):
            await team_rules.create_rule(session, {"match": "x", "class": "oom", "title": "t"}, actor="ana")


async def test_stored_slow_rules_leave_the_dashboard_answering_and_are_set_aside(
    api: AsyncClient, running_app: FastAPI
) -> None:
    """300 catastrophic rules stored directly (as a database from before the check would hold them),
    then a launch that fails: /api/health keeps answering while the diagnosis runs, the attempt
    gets its built-in diagnosis, and the rules that ran out of time are set aside and said so."""
    sessions: db.Sessions = running_app.state.runtime.sessions
    async with sessions.write() as session:
        session.add_all(
            DiagnosisRule(match=CATASTROPHIC + f"(?#{n})", regex=True, flag_aware=False, failure_class="nccl",
                          title=f"slow {n}", scope="root")
            for n in range(300)
        )  # fmt: skip
        await session.commit()
    attempt_id = await launch(api, "qwen36-27b-mtp-oom", "rtxpro-01", [0])
    # The client runs in the dashboard's event loop: a stall shows as a long gap between answers.
    slowest, answered = 0.0, time.perf_counter()
    while True:
        assert (await api.get("/api/health")).status_code == 200
        slowest, answered = max(slowest, time.perf_counter() - answered), time.perf_counter()
        attempt = (await api.get(f"/api/attempts/{attempt_id}")).json()
        if attempt["status"] == "failed":
            break
        await asyncio.sleep(0.05)
    attempt = await wait_for(api, attempt_id, {"failed"})
    assert slowest < 1.0, f"/api/health stalled {slowest:.2f} s while the rules ran"  # goal 0.1 s: bench
    assert attempt["diagnosis"]["class"] == "oom"  # the built-in answer: no slow rule decided
    rules = (await api.get("/api/rules")).json()
    stalled = [rule for rule in rules if rule["stalled"]]
    assert stalled and all("ran past 0.1 s" in rule["stalled"] for rule in stalled)
    assert stalled[0]["id"] == rules[0]["id"]  # first rules first, until the diagnosis's time ran out
    await log_in(api)
    page = (await api.get("/rules")).text
    assert "Set aside: its regular expression ran past 0.1 s" in page
