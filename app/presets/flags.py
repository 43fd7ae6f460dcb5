"""A preset's flags against the SGLang releases it runs on, and the one-click rewrite to a new
revision that follows SGLang's own advice (see app.diagnose.flag_history).

The editor checks a preset against the versions its Python reported on each host at the latest
launch there (recorded on the attempt), one report per version, since hosts may run different
releases. When no host has reported yet it checks against the newest release in the flag
history: that is what a fresh install gets, and what an old preset is most likely to meet.
"""

from __future__ import annotations

import shlex
from dataclasses import dataclass

from sqlalchemy import literal_column, select
from sqlalchemy.ext.asyncio import AsyncSession

from app.db.models import UNKNOWN_VERSION, Attempt, Host, Preset, PresetRevision
from app.diagnose import flag_history
from app.errors import InvalidInput
from app.presets.revisions import PresetInput, latest, revision_fields, save_preset


@dataclass
class FlagReport:
    version: str
    hosts: list[str]  # where the preset's Python last reported this version; empty: the newest assumed
    findings: list[flag_history.Finding]
    rewritten: list[str] | None  # the arguments after the rewrite, or None when nothing can be rewritten

    @property
    def rewritten_text(self) -> str:
        return shlex.join(self.rewritten or [])


async def versions_seen(session: AsyncSession, python: str) -> dict[str, str]:
    """Host name -> the SGLang version `python` reported there at its latest launch that said.
    One short walk per host, newest first, over the attempts that recorded a version."""
    latest = (
        select(Attempt.sglang_version)
        .join(PresetRevision, Attempt.preset_revision_id == PresetRevision.id)
        .where(
            Attempt.host_id == Host.id,
            Attempt.sglang_version != literal_column(UNKNOWN_VERSION),
            PresetRevision.python == python,
        )
        .order_by(Attempt.id.desc())
        .limit(1)
        .scalar_subquery()
    )
    rows = await session.execute(select(Host.name, latest).order_by(Host.name))
    return {name: version for name, version in rows.all() if version}


async def flag_reports(session: AsyncSession, revision: PresetRevision) -> list[FlagReport]:
    hosts_by_version: dict[str, list[str]] = {}
    for host, version in (await versions_seen(session, revision.python)).items():
        hosts_by_version.setdefault(version, []).append(host)
    if not hosts_by_version:
        hosts_by_version[flag_history.newest_version()] = []
    reports = []
    for version, hosts in sorted(hosts_by_version.items(), key=lambda item: flag_history.release(item[0]) or (0,)):
        args = list(revision.args)
        rewritten, applied = flag_history.rewrite(args, version)
        reports.append(FlagReport(version, hosts, flag_history.lint(args, version), rewritten if applied else None))
    return reports


async def rewrite_preset(session: AsyncSession, preset: Preset, *, version: str, actor: str) -> PresetRevision:
    """Saves the latest revision with every mechanical rewrite for `version` applied, as a new
    revision audited under the person who asked; one unit of work, committed here."""
    if flag_history.release(version) is None:
        raise InvalidInput(f"version: {version[:64]!r} is not an SGLang release number such as 0.5.23")
    current = latest(preset)
    args, applied = flag_history.rewrite(list(current.args), version)
    if not applied:
        raise InvalidInput(f"version: revision {current.number} has no flag to rewrite for SGLang {version}")
    data = PresetInput(name=preset.name, description=preset.description, **{**revision_fields(current), "args": args})
    detail = {"version": version, "flags": sorted({finding.flag for finding in applied})}
    revision = await save_preset(session, preset, data, actor=actor, action="preset-rewrite", detail=detail)
    assert revision is not None  # a rewrite always changes the arguments
    return revision
