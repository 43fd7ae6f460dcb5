"""The team's rules applied to stored diagnoses: on each write of a live attempt's diagnosis, and
to past attempts in the background after the rules change.

What is kept: the diagnosis as the rules decide it, with `built_in` (the class, hint and fingerprint
launchdeck gave by itself) and `rule` (which rule decided, by whom, on what line) beside it, so the
page can show both. Deciding again always starts from `built_in`, so editing or deleting a rule
undoes what it did.

Scope `root` rules and merges decide from the stored root error and fingerprint alone. Scope `any`
rules need the log. A live write, which never reads files inside its transaction, keeps the line
such a rule matched before (a log only grows, so that line is still there); once an attempt's
following has ended, it is decided again from its whole log; and a pass after a rule change reads
each attempt's local copy. Each read takes at most `MAX_LOG_BYTES` of a log and `PASS_LOG_BYTES`
of all logs in one pass; past that, rules keep the lines they matched before.

The background pass never holds a session while it reads logs: it reads a batch of attempts,
decides them outside any transaction, then writes only those whose diagnosis changed, in one
short transaction per batch, skipping any that a live follower rewrote meanwhile.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from sqlalchemy import select

from app.casebook.signatures import assign_signature
from app.casebook.team_rules import active_rules, set_aside
from app.db import Sessions
from app.db.models import Attempt
from app.diagnose.rules import Rule, RuleScanner, RuleScope
from app.diagnose.stored import AppliedRule, StoredDiagnosis
from app.logs.store import LogStore

log = logging.getLogger(__name__)

BATCH = 100  # attempts read, decided and written together
BATCH_PAUSE = 0.05  # seconds between batches, so a pass never crowds out live work
MAX_LOG_BYTES = 16 << 20  # of each log, read for scope `any` rules
PASS_LOG_BYTES = 4 << 30  # of all logs in one pass; past it, `any` rules keep the lines they matched


@dataclass(frozen=True)
class Decided:
    """A diagnosis as the rules decided it, and the rules (by id) that ran out of time on it."""

    diagnosis: StoredDiagnosis
    stalled: dict[int, str]


def decide(found: StoredDiagnosis, rules: list[tuple[int, Rule]], *, log_path: Path | None = None) -> Decided:
    """The stored diagnosis `found` as the rules decide it. With `log_path`, scope `any` rules read
    the log; without it they keep the line they matched before. Slow: a worker thread's work."""
    if not found.stage:
        return Decided(found, {})
    scanner = RuleScanner(tuple(rule for _, rule in rules))
    previous = found.rule
    if log_path is not None and any(rule.scope == RuleScope.ANY for _, rule in rules):
        with contextlib.suppress(OSError), open(log_path, "rb") as f:
            left = MAX_LOG_BYTES
            while left > 0 and (block := f.read(min(1 << 20, left))):
                scanner.feed_bytes(block)
                left -= len(block)
    elif previous is not None and previous.scope == RuleScope.ANY and previous.matched:
        scanner.feed(previous.matched + "\n")
    decided, decision = found.decided_by(scanner)
    stalled = {rules[index][0]: why for index, why in scanner.stalled.items()}
    if decision is None:
        return Decided(decided, stalled)
    rule_id = next(rule_id for rule_id, rule in rules if rule is decision.rule)
    line = decision.line
    if log_path is None and previous is not None and previous.scope == decision.rule.scope == RuleScope.ANY:
        line = previous.line
    return Decided(replace(decided, rule=AppliedRule.of(decision, rule_id, line)), stalled)


def decide_live(found: StoredDiagnosis, earlier: StoredDiagnosis, rules: list[tuple[int, Rule]]) -> Decided:
    """The rules over the diagnosis a live attempt's follower is about to write (`earlier` is the
    one it replaces, which knows the line a scope `any` rule matched). Slow: the follower runs it
    in a worker thread, before its transaction, so neither waits on a rule."""
    if not found.stage:
        return Decided(found, {})
    return decide(replace(found, rule=found.rule or earlier.rule), rules)


class Rediagnosis:
    """Decides stored attempts again: `request()` after the rules change asks for a pass over every
    attempt; `attempt_ended(id)` asks for one attempt, read whole now that its log is. One pass runs
    at a time, and a change during a pass starts it over once it ends its batch."""

    def __init__(self, sessions: Sessions, logs: LogStore, signatures: asyncio.Lock):
        self.sessions = sessions
        self.logs = logs
        self.signatures = signatures  # the lock under which attempts are filed under signatures
        self._wake = asyncio.Event()
        self._everything = False  # a pass over every attempt is wanted
        self._ended: set[int] = set()  # attempts to decide from their whole log
        self._task: asyncio.Task[None] | None = None
        self.passes = 0  # passes completed, for the tests
        self.changed = 0  # attempts whose diagnosis the last pass changed
        self._log_budget = PASS_LOG_BYTES  # log bytes the pass under way may still read
        self._closing = False  # read by a batch in its thread, which no cancellation reaches

    def start(self) -> None:
        self._task = asyncio.create_task(self._run(), name="rediagnosis")

    def request(self) -> None:
        """A pass over every attempt (the one a rule was taught on is decided by its request, with
        `run_on`, so the page the person goes back to shows the rule at once)."""
        self._everything = True
        self._wake.set()

    def attempt_ended(self, attempt_id: int) -> None:
        self._ended.add(attempt_id)
        self._wake.set()

    async def close(self) -> None:
        self._closing = True
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task

    async def _run(self) -> None:
        while True:
            await self._wake.wait()
            self._wake.clear()
            everything, self._everything = self._everything, False
            ended, self._ended = sorted(self._ended), set()
            try:
                if everything:
                    self.changed = await self.run_pass()
                elif ended:
                    self.changed = await self.run_on(ended)
            except Exception:
                log.exception("re-diagnosis with the team's rules failed; it runs again at the next change")
            self.passes += 1

    async def run_pass(self) -> int:
        """One pass over every attempt with a diagnosis, oldest first; the number it changed."""
        after, changed = 0, 0
        self._log_budget = PASS_LOG_BYTES
        while not self._everything:
            async with self.sessions.read() as session:
                rules = await active_rules(session)
                query = select(Attempt.id, Attempt.diagnosis).where(Attempt.id > after).order_by(Attempt.id)
                rows = list((await session.execute(query.limit(BATCH))).all())
            if not rows:
                break
            after = rows[-1][0]
            changed += await self._decide_and_write(rows, rules)
            await asyncio.sleep(BATCH_PAUSE)
        return changed

    async def run_on(self, attempt_ids: list[int], *, every_rule: bool = False) -> int:
        """Those attempts: after a rule change, or, when their following ended, only if a rule
        reads any line (the follower applied the others as it wrote)."""
        changed = 0
        self._log_budget = PASS_LOG_BYTES
        for start in range(0, len(attempt_ids), BATCH):
            async with self.sessions.read() as session:
                rules = await active_rules(session)
                if not every_rule and not any(rule.scope == RuleScope.ANY for _, rule in rules):
                    return changed
                query = select(Attempt.id, Attempt.diagnosis).where(Attempt.id.in_(attempt_ids[start : start + BATCH]))
                rows = list((await session.execute(query)).all())
            changed += await self._decide_and_write(rows, rules)
        return changed

    async def _decide_and_write(self, rows: list[Any], rules: list[tuple[int, Rule]]) -> int:
        """Decides outside any transaction, then writes those that changed in one short one."""
        decided, stalled = await asyncio.to_thread(self._decide_batch, rows, rules)
        changed = 0
        if decided or stalled:
            async with self.signatures, self.sessions.write.begin() as session:
                await set_aside(session, stalled)
                for attempt_id, (before, now) in decided.items():
                    attempt = await session.get(Attempt, attempt_id)
                    if attempt is None or attempt.diagnosis != before:
                        continue  # gone, or rewritten by its follower, which applies the rules itself
                    attempt.diagnosis = now
                    await assign_signature(session, attempt)
                    changed += 1
        return changed

    def _decide_batch(
        self, rows: list[Any], rules: list[tuple[int, Rule]]
    ) -> tuple[dict[int, tuple[dict[str, Any], dict[str, Any]]], dict[int, str]]:
        """The attempts whose diagnosis the rules change (before, after), and the rules set aside:
        once one ran out of time, the rest of the batch runs without it."""
        changes, stalled = {}, {}
        paths = self.logs.paths([attempt_id for attempt_id, _ in rows])
        reads_logs = any(rule.scope == RuleScope.ANY for _, rule in rules)
        for attempt_id, row in rows:
            if self._closing:  # a batch reading logs may take seconds; the process must not wait for it
                return {}, {}
            found = StoredDiagnosis.from_json(row)
            if not found.stage:
                continue
            path = paths[attempt_id]
            if reads_logs and self._log_budget > 0 and path.exists():
                self._log_budget -= min(path.stat().st_size, MAX_LOG_BYTES)
                now = decide(found, rules, log_path=path)
            else:
                now = decide(found, rules)
            if now.stalled:
                stalled.update(now.stalled)
                rules = [(rule_id, rule) for rule_id, rule in rules if rule_id not in now.stalled]
            if now.diagnosis != found:
                changes[attempt_id] = (row, now.diagnosis.to_json())
        return changes, stalled
