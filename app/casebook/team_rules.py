"""The team's rules kept in the database: made, edited and deleted by people, each change audited
with its author, and exported or imported as a rules file (the TOML `launchdeck diagnose --rules`
reads). Every rule is checked by `rules.rule_from`, the one place that says what a rule may be.

The functions that change rules take a write session and commit it once, audit row included.
A rule is checked in a worker thread (its regular expression is tried on hostile lines), before
the session runs a statement. A team keeps at most `MAX_RULES`; a rule whose regular expression ran
out of time on a log is set aside (`stalled`) until someone edits it.
"""

from __future__ import annotations

import asyncio
from dataclasses import replace
from typing import Any

import tomli_w
from sqlalchemy import func, select, update
from sqlalchemy.ext.asyncio import AsyncSession

from app import audit
from app.db.models import DiagnosisRule
from app.diagnose.rules import MAX_RULES, Rule, RuleScope, parse_rules, rule_from
from app.errors import InvalidInput, NotFound


def rule_of(row: DiagnosisRule) -> Rule:
    return Rule(
        failure_class=row.failure_class,
        title=row.title,
        match=row.match,
        regex=row.regex,
        hint=row.hint,
        scope=RuleScope(row.scope),
        flag_aware=row.flag_aware,
        merge=tuple(row.merge),
        author=row.author,
    )


def table_of(rule: Rule) -> dict[str, Any]:
    """The rule as a `[[rule]]` table, keys in the order a person reads them, defaults left out."""
    table: dict[str, Any] = {"match": rule.match, "class": rule.failure_class, "title": rule.title}
    if rule.regex:
        table["regex"] = True
    if rule.hint:
        table["hint"] = rule.hint
    if rule.scope != "root":
        table["scope"] = str(rule.scope)
    if rule.regex or not rule.flag_aware:
        table["flag_aware"] = False
    if rule.merge:
        table["merge"] = list(rule.merge)
    if rule.author:
        table["author"] = rule.author
    if not rule.match:
        del table["match"]
    return table


async def list_rules(session: AsyncSession) -> list[DiagnosisRule]:
    """Every rule, in the order they decide (the order they were made)."""
    return list((await session.scalars(select(DiagnosisRule).order_by(DiagnosisRule.id))).all())


async def active_rules(session: AsyncSession) -> list[tuple[int, Rule]]:
    """The rules diagnoses run, in order: all but those set aside."""
    query = select(DiagnosisRule).where(DiagnosisRule.stalled == "").order_by(DiagnosisRule.id)
    return [(row.id, rule_of(row)) for row in (await session.scalars(query)).all()]


async def set_aside(session: AsyncSession, stalled: dict[int, str]) -> None:
    """Rules (by id) whose regular expression ran out of time, with why: diagnoses stop running
    them. In the caller's transaction; a rule edited meanwhile is set aside all the same."""
    for rule_id, why in stalled.items():
        await session.execute(
            update(DiagnosisRule).where(DiagnosisRule.id == rule_id, DiagnosisRule.stalled == "").values(stalled=why)
        )


async def _check_room(session: AsyncSession, adding: int) -> None:
    count = await session.scalar(select(func.count()).select_from(DiagnosisRule)) or 0
    if count + adding > MAX_RULES:
        raise InvalidInput(
            f"a team keeps at most {MAX_RULES} rules (every diagnosis runs them all); there are {count}, "
            f"and this adds {adding}: delete some, or merge rules that say the same"
        )


async def get_rule(session: AsyncSession, rule_id: int) -> DiagnosisRule:
    row = await session.get(DiagnosisRule, rule_id)
    if row is None:
        raise NotFound(f"no rule {rule_id}")
    return row


async def _checked(table: dict[str, Any], *, author: str, where: str = "rule") -> Rule:
    """The rule a person asked for, with them as its author (a rules file may name another)."""
    return await asyncio.to_thread(rule_from, {**table, "author": table.get("author") or author}, where=where)


def _write(row: DiagnosisRule, rule: Rule) -> None:
    row.match, row.regex, row.failure_class, row.title = rule.match, rule.regex, rule.failure_class, rule.title
    row.hint, row.scope, row.flag_aware, row.merge = rule.hint, str(rule.scope), rule.flag_aware, list(rule.merge)
    row.author, row.stalled = rule.author, ""


async def create_rule(
    session: AsyncSession, table: dict[str, Any], *, actor: str, remote_addr: str = ""
) -> DiagnosisRule:
    rule = await _checked({**table, "author": ""}, author=actor)  # made by whoever makes it
    await _check_room(session, 1)
    row = DiagnosisRule()
    _write(row, rule)
    session.add(row)
    await session.flush()
    audit.record(session, actor=actor, action="rule-create", target=f"rule {row.id}", remote_addr=remote_addr,
                 detail=table_of(rule))  # fmt: skip
    await session.commit()
    return row


async def update_rule(
    session: AsyncSession, rule_id: int, table: dict[str, Any], *, actor: str, remote_addr: str = ""
) -> DiagnosisRule:
    """The rule as edited; the person who edits it becomes its author. Checked before the row is
    read: a write session holds SQLite's write lock from its first statement."""
    rule = await _checked({**table, "author": ""}, author=actor)
    row = await get_rule(session, rule_id)
    before = table_of(rule_of(row))
    _write(row, rule)
    audit.record(session, actor=actor, action="rule-update", target=f"rule {row.id}", remote_addr=remote_addr,
                 detail={"before": before, "after": table_of(rule)})  # fmt: skip
    await session.commit()
    return row


async def delete_rule(session: AsyncSession, row: DiagnosisRule, *, actor: str, remote_addr: str = "") -> None:
    audit.record(session, actor=actor, action="rule-delete", target=f"rule {row.id}", remote_addr=remote_addr,
                 detail=table_of(rule_of(row)))  # fmt: skip
    await session.delete(row)
    await session.commit()


def export_toml(rules: list[Rule]) -> str:
    """The rules as a rules file; `parse_rules` reads it back to the same rules."""
    return tomli_w.dumps({"rule": [table_of(rule) for rule in rules]})


async def import_toml(session: AsyncSession, text: str, *, actor: str, remote_addr: str = "") -> list[DiagnosisRule]:
    """Adds every rule of a rules file after those there are, or none: the whole file is checked
    before anything is written. The person importing is each rule's author (whom a file names
    is only its word)."""
    rules = await asyncio.to_thread(parse_rules, text)
    if not rules:
        raise InvalidInput("the rules file holds no [[rule]] table")
    await _check_room(session, len(rules))
    rows = []
    for rule in rules:
        row = DiagnosisRule()
        _write(row, replace(rule, author=actor))
        session.add(row)
        rows.append(row)
    await session.flush()
    audit.record(session, actor=actor, action="rule-import", target=f"{len(rows)} rules", remote_addr=remote_addr,
                 detail={"ids": [row.id for row in rows]})  # fmt: skip
    await session.commit()
    return rows
