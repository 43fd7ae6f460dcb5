"""The team's rules in the database: made, edited and deleted with their author and audited,
deciding over the built-in diagnosis of live and past attempts, and exported and imported as the
rules file `launchdeck diagnose --rules` reads."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import AsyncIterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import select

from app import audit, db
from app.casebook import team_rules
from app.casebook.rediagnose import Rediagnosis, decide, decide_live
from app.casebook.signatures import assign_signature
from app.db.models import Attempt, Host, Preset, PresetRevision, Signature
from app.diagnose.rules import parse_rules
from app.diagnose.stored import BuiltIn, StoredDiagnosis
from app.errors import InvalidInput, NotFound
from app.launch import record as record_module
from app.launch.record import AttemptRecord, Changes, Pace, Tracking
from app.logs.mirror import Mirrors
from app.logs.store import LogStore
from tests.support.waiting import until

ROOT = "RuntimeError: Not enough memory. Please try to increase --mem-fraction-static."
STORED: dict[str, Any] = {
    "stage": "load",
    "class": "other",
    "root_error": ROOT,
    "root_line": 7,
    "fingerprint": "0123456789abcdef",
    "hint": "built-in hint",
    "adjustments": [],
    "frames": [],
    "error_type": "RuntimeError",
    "error_message": "Not enough memory",
}


@pytest.fixture
async def sessions(database_url: str) -> AsyncIterator[db.Sessions]:
    db.upgrade(database_url)
    engine = db.create_engine(database_url)
    yield db.Sessions.of(engine)
    await engine.dispose()


async def add_attempt(sessions: db.Sessions, diagnosis: dict[str, Any]) -> int:
    async with sessions.write.begin() as session:
        host = await session.scalar(select(Host).where(Host.name == "h1")) or Host(name="h1")
        revision = PresetRevision(preset=Preset(name=f"p{id(diagnosis)}"), number=1, model_path="m")
        attempt = Attempt(host=host, revision=revision, diagnosis=diagnosis)
        session.add(attempt)
        await session.flush()
        await assign_signature(session, attempt)
        return attempt.id


async def test_rules_are_made_edited_and_deleted_with_their_author_and_audited(sessions: db.Sessions) -> None:
    async with sessions.write() as session:
        row = await team_rules.create_rule(
            session, {"match": "Not enough memory", "class": "oom", "title": "KV pool too small"}, actor="ana"
        )
    async with sessions.write() as session:
        row = await team_rules.get_rule(session, row.id)
        assert (row.author, row.failure_class, row.scope, row.flag_aware) == ("ana", "oom", "root", True)
        await team_rules.update_rule(
            session, row.id, {"match": "Not enough", "class": "oom", "title": "KV pool", "hint": "see https://x"},
            actor="ben",
        )  # fmt: skip
    async with sessions.read() as session:
        (row,) = await team_rules.list_rules(session)
        assert (row.author, row.match, row.hint) == ("ben", "Not enough", "see https://x")
        assert row.updated_at >= row.created_at
    async with sessions.write() as session:
        await team_rules.delete_rule(session, await team_rules.get_rule(session, row.id), actor="cy")
    async with sessions.read() as session:
        assert await team_rules.list_rules(session) == []
        with pytest.raises(NotFound):
            await team_rules.get_rule(session, row.id)
        events = [(e.actor, e.action, e.target) for e in reversed(await audit.recent_events(session))]
    assert events == [("ana", "rule-create", f"rule {row.id}"), ("ben", "rule-update", f"rule {row.id}"),
                      ("cy", "rule-delete", f"rule {row.id}")]  # fmt: skip


async def test_a_bad_rule_is_refused_with_a_sentence_and_nothing_is_written(sessions: db.Sessions) -> None:
    async with sessions.write() as session:
        with pytest.raises(InvalidInput, match="class 'memory' is not one of"):
            await team_rules.create_rule(session, {"match": "x", "class": "memory", "title": "t"}, actor="ana")
        with pytest.raises(InvalidInput, match="not a valid regular expression"):
            await team_rules.create_rule(
                session, {"match": "(", "regex": True, "flag_aware": False, "class": "oom", "title": "t"}, actor="ana"
            )
    async with sessions.read() as session:
        assert await team_rules.list_rules(session) == []
        assert await audit.recent_events(session) == []


def test_a_rule_decides_over_the_built_in_answer_which_stays_beside_it_and_returns_without_it() -> None:
    rule = parse_rules('[[rule]]\nmatch = "not enough memory"\nclass = "oom"\ntitle = "KV pool"\nauthor = "ana"\n')[0]
    found = StoredDiagnosis.from_json(STORED)
    assert decide(found, [(3, rule)]).diagnosis == found  # case matters: no match, nothing added
    rule = parse_rules('[[rule]]\nmatch = "Not enough memory"\nclass = "oom"\ntitle = "KV pool"\nauthor = "ana"\n')[0]
    decided = decide(found, [(3, rule)]).diagnosis
    assert (decided.failure_class, decided.recognised) == ("oom", True) and decided.hint != "built-in hint"
    assert decided.built_in == BuiltIn("other", "built-in hint", "0123456789abcdef", recognised=False)
    assert decided.rule is not None and (decided.rule.id, decided.rule.author, decided.rule.title) == (
        3,
        "ana",
        "KV pool",
    )
    assert decide(decided, []).diagnosis == found  # the rule deleted: the built-in answer returns


def test_a_rule_of_the_same_kind_keeps_the_one_click_fix_and_one_of_another_kind_drops_it() -> None:
    change = {"flag": "--mem-fraction-static", "value": "0.9"}
    oom = StoredDiagnosis.from_json({**STORED, "class": "oom", "change": change})
    teach = '[[rule]]\nmatch = "Not enough memory"\nclass = "{kind}"\ntitle = "KV pool too small"\n'
    named = decide(oom, [(3, parse_rules(teach.format(kind="oom"))[0])]).diagnosis
    assert named.rule is not None and named.change == oom.change
    other = decide(oom, [(4, parse_rules(teach.format(kind="driver"))[0])]).diagnosis
    assert other.failure_class == "driver" and other.change is None


def test_a_failure_a_rule_placed_is_no_longer_unrecognised_and_is_again_once_the_rule_goes() -> None:
    unplaced = StoredDiagnosis.from_json({**STORED, "recognised": False})
    rule = parse_rules('[[rule]]\nmatch = "Not enough memory"\nclass = "oom"\ntitle = "KV pool"\n')[0]
    decided = decide(unplaced, [(3, rule)]).diagnosis
    assert decided.recognised is True and decided.built_in is not None and decided.built_in.recognised is False
    assert decide(decided, [(3, rule)]).diagnosis == decided
    assert decide(decided, []).diagnosis == unplaced


def test_a_scope_any_rule_reads_the_log_and_a_live_write_keeps_the_line_it_matched(tmp_path: Path) -> None:
    log = tmp_path / "1.log"
    log.write_text("starting\nWARNING: the_flag is ignored on this GPU\n" + ROOT + "\n")
    rule = parse_rules('[[rule]]\nmatch = "--the-flag"\nscope = "any"\nclass = "arg-override"\ntitle = "T"\n')[0]
    found = StoredDiagnosis.from_json(STORED)
    decided = decide(found, [(1, rule)], log_path=log).diagnosis
    assert decided.failure_class == "arg-override" and decided.rule is not None
    assert (decided.rule.matched, decided.rule.line) == ("WARNING: the_flag is ignored on this GPU", 2)
    again = decide(replace(found, rule=decided.rule), [(1, rule)]).diagnosis  # no log read: the line is still there
    assert again == decided


def test_a_row_stored_by_an_older_version_reads_with_defaults_and_keeps_its_keys() -> None:
    """Rows lack keys added since they were written; `recognised` absent means a class other than
    `other`. A row read and written back keeps every key it had, with the same value."""
    found = StoredDiagnosis.from_json(STORED)
    assert (found.recognised, found.stage_percent, found.memory, found.rule) == (False, None, {}, None)
    assert StoredDiagnosis.from_json({**STORED, "class": "oom"}).recognised is True
    assert StoredDiagnosis.from_json({}) == StoredDiagnosis()
    assert found.to_json().items() >= STORED.items()
    assert "rule" not in found.to_json() and "server_info" not in found.to_json()


async def test_the_background_pass_rediagnoses_past_attempts_and_undoes_a_deleted_rule(
    sessions: db.Sessions, tmp_path: Path
) -> None:
    past = await add_attempt(sessions, STORED)
    other = await add_attempt(sessions, {**STORED, "root_error": "ValueError: something else"})
    rediagnosis = Rediagnosis(sessions, LogStore(tmp_path / "logs"), asyncio.Lock())
    rediagnosis.start()
    try:
        async with sessions.write() as session:
            row = await team_rules.create_rule(
                session, {"match": "Not enough memory", "class": "oom", "title": "KV pool", "merge": []}, actor="ana"
            )
        rediagnosis.request()
        await wait_for_pass(rediagnosis, 1)
        async with sessions.read() as session:
            attempt = await session.get(Attempt, past)
            assert attempt is not None
            assert attempt.diagnosis["class"] == "oom"
            assert attempt.diagnosis["rule"]["author"] == "ana"
            assert attempt.diagnosis["built_in"]["class"] == "other"
            signature = await session.get(Signature, attempt.signature_id)
            assert signature is not None and signature.fingerprint == "0123456789abcdef"
            untouched = await session.get(Attempt, other)
            assert untouched is not None and "rule" not in untouched.diagnosis
        async with sessions.write() as session:
            await team_rules.delete_rule(session, await team_rules.get_rule(session, row.id), actor="ana")
        rediagnosis.request()
        await wait_for_pass(rediagnosis, 2)
        async with sessions.read() as session:
            attempt = await session.get(Attempt, past)
            assert attempt is not None and attempt.diagnosis == StoredDiagnosis.from_json(STORED).to_json()
    finally:
        await rediagnosis.close()


async def wait_for_pass(rediagnosis: Rediagnosis, passes: int) -> None:
    await until(lambda: rediagnosis.passes >= passes, f"rediagnosis pass {passes}")


async def test_rules_export_and_import_round_trip_and_a_bad_file_writes_nothing(sessions: db.Sessions) -> None:
    text = (
        '[[rule]]\nmatch = "a \\"quoted\\" \\\\ line"\nclass = "oom"\ntitle = "T1"\n'
        'hint = "see https://x.example/a?b=1\\n\\tthen \\u0007 retry"\n\n'
        '[[rule]]\nmatch = "Err[0-9]+"\nregex = true\nflag_aware = false\nscope = "any"\nclass = "nccl"\ntitle = "T2"\n'
        'author = "dee"\n\n[[rule]]\nclass = "oom"\ntitle = "T3"\nmerge = ["0123456789abcdef"]\n'
    )
    async with sessions.write() as session:
        await team_rules.import_toml(session, text, actor="ana")
    async with sessions.read() as session:
        rules = [rule for _, rule in await team_rules.active_rules(session)]
    assert [rule.author for rule in rules] == ["ana"] * 3  # whoever imports is the author, whom the file names
    exported = team_rules.export_toml(rules)
    assert parse_rules(exported) == tuple(rules)
    bad = exported + '\n[[rule]]\nmatch = "x"\nclass = "oom"\n'  # no title
    async with sessions.write() as session:
        with pytest.raises(InvalidInput, match="rule 4: title is required"):
            await team_rules.import_toml(session, bad, actor="ana")
    async with sessions.read() as session:
        assert len(await team_rules.list_rules(session)) == 3


async def test_the_background_pass_reads_a_past_attempts_log_for_a_rule_on_any_line(
    sessions: db.Sessions, tmp_path: Path
) -> None:
    past = await add_attempt(sessions, STORED)
    logs = LogStore(tmp_path / "logs")
    logs.directory.mkdir(parents=True)
    logs.paths([past])[past].write_text("loading\n[2026-12-03 10:00:00] the-flag was ignored\n" + ROOT + "\n")
    async with sessions.write() as session:
        await team_rules.create_rule(
            session, {"match": "--the-flag", "scope": "any", "class": "arg-override", "title": "T"}, actor="ana"
        )
    rediagnosis = Rediagnosis(sessions, logs, asyncio.Lock())
    assert await rediagnosis.run_pass() == 1
    async with sessions.read() as session:
        attempt = await session.get(Attempt, past)
        assert attempt is not None and attempt.diagnosis["class"] == "arg-override"
        assert attempt.diagnosis["rule"]["line"] == 2
    assert await rediagnosis.run_pass() == 0  # decided already: nothing to write


async def test_a_rule_that_merges_two_signatures_files_both_causes_under_the_first(
    sessions: db.Sessions, tmp_path: Path
) -> None:
    first = await add_attempt(sessions, STORED)
    second = await add_attempt(
        sessions, {**STORED, "root_error": "RuntimeError: out of pool", "fingerprint": "fedcba9876543210"}
    )
    rediagnosis = Rediagnosis(sessions, LogStore(tmp_path / "logs"), asyncio.Lock())
    async with sessions.write() as session:
        await team_rules.create_rule(
            session, {"class": "oom", "title": "One pool", "merge": ["0123456789abcdef", "fedcba9876543210"]},
            actor="ana",
        )  # fmt: skip
    assert await rediagnosis.run_pass() == 2  # the first is now decided by the rule too
    async with sessions.read() as session:
        attempts = [await session.get(Attempt, attempt_id) for attempt_id in (first, second)]
        assert [a.diagnosis["fingerprint"] for a in attempts if a] == ["0123456789abcdef"] * 2
        assert [a.diagnosis["built_in"]["fingerprint"] for a in attempts if a] == [
            "0123456789abcdef", "fedcba9876543210"
        ]  # fmt: skip
        counts = dict((await session.execute(select(Signature.fingerprint, Signature.count))).all())
    assert counts == {"0123456789abcdef": 2, "fedcba9876543210": 0}


async def test_a_rule_taught_while_the_follower_decides_is_not_written_over_by_its_older_decision(
    sessions: db.Sessions, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The follower reads the rules, then decides in a thread; a rule taught meanwhile, and written
    by the rules' pass, stays: the follower decides again rather than write what it read before."""
    attempt_id = await add_attempt(sessions, STORED)
    logs = LogStore(tmp_path / "logs")
    signatures = asyncio.Lock()
    record = AttemptRecord(
        sessions, attempt_id, mirrors=Mirrors(logs), tracking=Tracking(), changes=Changes(), pace=Pace(),
        signatures=signatures,
    )  # fmt: skip
    deciding, taught = threading.Event(), threading.Event()

    def decide_after_the_rule(*args: Any) -> Any:
        if not deciding.is_set():  # the first decision, with the rules read before the rule existed
            deciding.set()
            taught.wait(10)
        return decide_live(*args)

    monkeypatch.setattr(record_module, "decide_live", decide_after_the_rule)
    progress = asyncio.create_task(
        record.progress(lambda attempt: None, lambda earlier: StoredDiagnosis.from_json(STORED))
    )
    await until(deciding.is_set, "the follower deciding")
    async with sessions.write() as session:
        await team_rules.create_rule(
            session, {"match": "Not enough memory", "class": "oom", "title": "KV pool", "merge": []}, actor="ana"
        )
    assert await Rediagnosis(sessions, logs, signatures).run_on([attempt_id], every_rule=True) == 1
    taught.set()
    await progress
    async with sessions.read() as session:
        attempt = await session.get(Attempt, attempt_id)
        assert attempt is not None
        decided = (attempt.diagnosis["class"], (attempt.diagnosis.get("rule") or {}).get("title"))
        assert decided == ("oom", "KV pool"), "the follower wrote over the rule with what it decided before"
