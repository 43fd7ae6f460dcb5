"""Relaunching an attempt with the same choices (preset revision, host, GPUs, port), or with a new
revision of its preset made from the revision it ran, with a change applied: the hint's suggestion
or what the person edited. Both launch through `AttemptService.launch`, the one way to launch; this
module only decides what to launch and saves the new revision first.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import asdict, dataclass
from typing import Any

from app.db.history import load_attempt, parts_of
from app.db.models import Attempt, PresetRevision
from app.diagnose.hints import SuggestedChange
from app.diagnose.stored import StoredDiagnosis
from app.errors import InvalidInput
from app.launch.attempts import AttemptService
from app.launch.guards import LaunchPermission
from app.launch.nodes import option_value
from app.launch.shapes import Where
from app.presets.revisions import (
    FIELD_BY_OPTION,
    PresetInput,
    diff_revisions,
    get_preset,
    latest,
    revision_fields,
    same_revision,
    save_preset,
)
from app.states import AttemptStatus


@dataclass(frozen=True)
class Target:
    """Where and what an attempt ran: a relaunch keeps all of it."""

    preset: str
    revision: int
    host: str
    gpus: list[int]
    port: int | None

    @classmethod
    def of(cls, attempt: Attempt) -> Target:
        revision = attempt.revision
        return cls(revision.preset.name, revision.number, attempt.host.name, list(attempt.gpus), attempt.port)


@dataclass(frozen=True)
class Relaunched:
    attempt: Attempt
    revision: int  # the preset revision it runs
    saved: bool  # whether that revision was made for it


def suggested_change(attempt: Attempt) -> SuggestedChange | None:
    """The change the diagnosis of a failed attempt names, if it names one."""
    if attempt.status != AttemptStatus.FAILED:
        return None
    return StoredDiagnosis.from_json(attempt.diagnosis).change


def apply_change(args: list[str], change: SuggestedChange) -> list[str]:
    """`args` with the change's flag set (kept where it stands, in the spelling the args use) or
    dropped; a flag not there yet is appended. A word after a flag is that flag's value."""
    if not change.flag.startswith("--") or change.flag.startswith("---") or "=" in change.flag:
        raise InvalidInput(f"changes: {change.flag!r} is not an argument (give it as --name)")
    wanted = _canonical(change.flag)
    result: list[str] = []
    found = False
    i = 0
    while i < len(args):
        option, has_value, _ = args[i].partition("=")
        end = i + 1
        if option.startswith("--") and not has_value and not _is_switch(option):
            while end < len(args) and not args[end].startswith("--"):
                end += 1
        if option.startswith("--") and _canonical(option) == wanted:
            if not found and not change.remove:
                result += _setting(option, change.value)
            found = True
        else:
            result += args[i:end]
        i = end
    if not found and not change.remove:
        result += _setting(change.flag, change.value)
    return result


def changed_input(attempt: Attempt, changes: Iterable[SuggestedChange] = ()) -> PresetInput:
    """The attempt's revision as the preset editor's input, with the changes applied."""
    preset = attempt.revision.preset
    data = PresetInput(
        name=preset.name,
        description=preset.description,
        webhook_url=preset.webhook_url,
        **revision_fields(attempt.revision),
    )
    for change in changes:
        data.args = apply_change(data.args, change)
    return data


def changes_from(revision: PresetRevision, data: PresetInput) -> list[tuple[str, str, str]]:
    """(what, before, after) for what `data` changes in the revision, flags compared one by one."""
    draft = PresetRevision(**{key: getattr(data, key) for key in revision_fields(revision)})
    return diff_revisions(revision, draft)


async def relaunch(
    service: AttemptService,
    *,
    attempt_id: int,
    actor: str,
    data: PresetInput | None = None,
    override_reason: str = "",
    confirm_failed_before: bool = False,
    permission: LaunchPermission | None = None,
) -> Relaunched:
    """Launches the attempt's choices again on the same host, GPUs and port. With `data` (the
    attempt's preset as edited), that launch is vetted first, then saved as a new revision, audited
    as made from the attempt (unless it is the attempt's own revision or the preset's latest
    unchanged), and launched: a refused edit saves nothing."""
    async with service.sessions.read() as session:
        attempt = await load_attempt(session, attempt_id)
        hosts = [part.host.name for part in await parts_of(session, attempt_id)] or None  # on several nodes
    target = Target.of(attempt)
    dist_port = (option_value(attempt.argv, ("--dist-init-addr",)) or "").rpartition(":")[2]
    where = Where(
        host=None if hosts else target.host, hosts=hosts, label=None, gpus=target.gpus, port=target.port,
        dist_port=int(dist_port) if dist_port.isdigit() else None,
    )  # fmt: skip
    consent = Consent(actor, permission, override_reason, confirm_failed_before)
    if data is not None and not same_revision(attempt.revision, data):
        return await _launch_edited(
            service, target.preset, data, where, consent, action="preset-relaunch", detail={"from_attempt": attempt_id}
        )
    return Relaunched(await consent.launch(service, target.preset, target.revision, where), target.revision, False)


async def launch_with_change(
    service: AttemptService,
    *,
    preset: str,
    change: SuggestedChange,
    where: Where,
    actor: str,
    override_reason: str = "",
    confirm_failed_before: bool = False,
    permission: LaunchPermission | None = None,
) -> Relaunched:
    """The preset's latest revision with `change` applied, launched: the launch form's "apply the
    fix and launch" for a refusal its preflight predicted. As for a relaunch with changes, the new
    revision is saved (audited as `preset-fix`) only once every guard lets its launch through."""
    async with service.sessions.read() as session:
        row = await get_preset(session, preset)
    data = PresetInput(
        name=preset, description=row.description, webhook_url=row.webhook_url, **revision_fields(latest(row))
    )
    data.args = apply_change(data.args, change)
    consent = Consent(actor, permission, override_reason, confirm_failed_before)
    return await _launch_edited(
        service, preset, data, where, consent, action="preset-fix", detail={"change": str(change)}
    )


@dataclass(frozen=True)
class Consent:
    """Who launches, where they may, and what they agreed to (a reason to override preflight, a
    configuration that failed before)."""

    actor: str
    permission: LaunchPermission | None
    override_reason: str
    confirm_failed_before: bool

    async def launch(self, service: AttemptService, preset: str, revision: int, where: Where) -> Attempt:
        return await service.launch(
            preset=preset, revision=revision, **asdict(where), override_reason=self.override_reason,
            confirm_failed_before=self.confirm_failed_before, actor=self.actor, permission=self.permission,
        )  # fmt: skip


async def _launch_edited(
    service: AttemptService,
    preset: str,
    data: PresetInput,
    where: Where,
    consent: Consent,
    *,
    action: str,
    detail: dict[str, Any],
) -> Relaunched:
    """Runs every launch guard on `data` as a revision not yet saved, then saves it and launches
    it: a refused edit leaves no revision and no audit row. An edit that equals the preset's
    latest revision runs that one."""
    data.validate()
    draft = PresetRevision(
        model_path=data.model_path, launcher=data.launcher, python=data.python, port=data.port,
        args=list(data.args), env=dict(data.env),
    )  # fmt: skip
    await service.vet(preset, draft, where, consent.permission, consent.override_reason, consent.confirm_failed_before)
    async with service.sessions.write() as session:
        row = await get_preset(session, preset)
        new = await save_preset(session, row, data, actor=consent.actor, action=action, detail=detail)
        revision = new.number if new else latest(row).number
    return Relaunched(await consent.launch(service, preset, revision, where), revision, new is not None)


def _canonical(option: str) -> str:
    """The editor's name for a flag any release spells otherwise; other flags as they are."""
    known = FIELD_BY_OPTION.get(option)
    return known.flag if known else option


def _is_switch(option: str) -> bool:
    known = FIELD_BY_OPTION.get(option)
    return known is not None and known.kind is bool


def _setting(option: str, value: str | None) -> list[str]:
    return [option] if value is None else [option, value]
