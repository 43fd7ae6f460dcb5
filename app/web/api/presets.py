"""JSON API for presets and their revisions."""

from __future__ import annotations

from datetime import datetime

from fastapi import APIRouter, status
from pydantic import BaseModel, Field

from app.config import redacted_url
from app.db.models import Preset, PresetRevision
from app.presets import flags, revisions
from app.states import Role
from app.web.deps import ApiOperator, ApiViewer, ReadDb, RuntimeDep, WriteDb
from app.web.params import Int64

router = APIRouter(prefix="/api/presets", tags=["presets"])


class PresetIn(BaseModel):
    name: str
    model_path: str
    args: list[str] = Field(default_factory=list)
    env: dict[str, str] = Field(default_factory=dict)
    description: str = ""
    launcher: str = revisions.LAUNCHERS[0]
    python: str = "python3"
    port: Int64 = 30000
    webhook_url: str = Field(
        "", description="incoming webhook told of this preset's attempts; both it and the dashboard's are told"
    )

    def domain(self) -> revisions.PresetInput:
        return revisions.PresetInput(**self.model_dump())


class PresetUpdate(BaseModel):
    model_path: str
    args: list[str] = Field(default_factory=list)
    env: dict[str, str] = Field(default_factory=dict)
    description: str = ""
    launcher: str = revisions.LAUNCHERS[0]
    python: str = "python3"
    port: Int64 = 30000
    webhook_url: str = ""


class RevisionPublic(BaseModel):
    number: int
    model_path: str
    launcher: str
    python: str
    port: int
    args: list[str]
    env: dict[str, str]
    command: list[str]
    created_at: datetime
    created_by: str

    @classmethod
    def of(cls, revision: PresetRevision) -> RevisionPublic:
        return cls(
            **revisions.revision_fields(revision),
            number=revision.number,
            command=revisions.command_argv(revision),
            created_at=revision.created_at,
            created_by=revision.created_by,
        )


class PresetPublic(BaseModel):
    name: str
    description: str
    webhook_url: str
    archived: bool
    revision: RevisionPublic
    revisions: int

    @classmethod
    def of(cls, preset: Preset, *, reveal: bool = True) -> PresetPublic:
        """`reveal` False (a viewer asking) shows only the webhook's scheme and host: its path is
        the secret that lets anyone post to it."""
        return cls(
            name=preset.name,
            description=preset.description,
            webhook_url=preset.webhook_url if reveal or not preset.webhook_url else redacted_url(preset.webhook_url),
            archived=preset.archived_at is not None,
            revision=RevisionPublic.of(revisions.latest(preset)),
            revisions=len(preset.revisions),
        )


class CloneIn(BaseModel):
    name: str


class RewriteIn(BaseModel):
    version: str = Field(description="the SGLang release to rewrite the flags for, e.g. 0.5.23")


class FlagFinding(BaseModel):
    flag: str
    change: str  # renamed, deprecated, removed, choice-removed, or new (unknown to an older release)
    version: str  # the release that made the change
    blocking: bool  # that release's argparse refuses it (exit 2)
    message: str
    replacement: list[str] | None


class FlagReportPublic(BaseModel):
    version: str
    hosts: list[str]
    findings: list[FlagFinding]
    rewritten_args: list[str] | None

    @classmethod
    def of(cls, report: flags.FlagReport) -> FlagReportPublic:
        findings = [
            FlagFinding(
                flag=finding.flag,
                change=finding.change,
                version=finding.version,
                blocking=finding.blocking,
                message=finding.message,
                replacement=list(finding.replacement) if finding.replacement is not None else None,
            )
            for finding in report.findings
        ]
        return cls(version=report.version, hosts=report.hosts, findings=findings, rewritten_args=report.rewritten)


class Change(BaseModel):
    field: str
    before: str
    after: str


@router.post("", status_code=status.HTTP_201_CREATED)
async def create_preset(body: PresetIn, db: WriteDb, user: ApiOperator, runtime: RuntimeDep) -> PresetPublic:
    allowed = runtime.settings.webhook_destinations()
    return PresetPublic.of(await revisions.create_preset(db, body.domain(), actor=user.name, destinations=allowed))


@router.get("")
async def list_presets(db: ReadDb, user: ApiViewer, archived: bool = False) -> list[PresetPublic]:
    reveal = user.role.allows(Role.OPERATOR)  # who may edit presets sees their webhooks whole
    return [PresetPublic.of(preset, reveal=reveal) for preset in await revisions.list_presets(db, archived=archived)]


@router.get("/{name}")
async def get_preset(name: str, db: ReadDb, user: ApiViewer) -> PresetPublic:
    return PresetPublic.of(await revisions.get_preset(db, name), reveal=user.role.allows(Role.OPERATOR))


@router.get("/{name}/revisions")
async def list_revisions(name: str, db: ReadDb, _user: ApiViewer) -> list[RevisionPublic]:
    return [RevisionPublic.of(revision) for revision in (await revisions.get_preset(db, name)).revisions]


@router.put("/{name}")
async def update_preset(
    name: str, body: PresetUpdate, db: WriteDb, read: ReadDb, user: ApiOperator, runtime: RuntimeDep
) -> PresetPublic:
    """Saves a new revision when anything changed; the answer shows the latest revision either way."""
    preset = await revisions.get_preset(db, name)
    data = revisions.PresetInput(name=name, **body.model_dump())
    allowed = runtime.settings.webhook_destinations()
    await revisions.save_preset(db, preset, data, actor=user.name, destinations=allowed)
    return PresetPublic.of(await revisions.get_preset(read, name))


@router.post("/{name}/clone", status_code=status.HTTP_201_CREATED)
async def clone_preset(name: str, body: CloneIn, db: WriteDb, user: ApiOperator) -> PresetPublic:
    clone = await revisions.clone_preset(db, await revisions.get_preset(db, name), body.name, actor=user.name)
    return PresetPublic.of(clone)


@router.post("/{name}/archive")
async def archive_preset(
    name: str, db: WriteDb, read: ReadDb, user: ApiOperator, restore: bool = False
) -> PresetPublic:
    preset = await revisions.get_preset(db, name)
    await revisions.archive_preset(db, preset, actor=user.name, archived=not restore)
    return PresetPublic.of(await revisions.get_preset(read, name))


@router.get("/{name}/diff")
async def diff(name: str, a: Int64, b: Int64, db: ReadDb, _user: ApiViewer) -> list[Change]:
    preset = await revisions.get_preset(db, name)
    changes = revisions.diff_revisions(revisions.revision_of(preset, a), revisions.revision_of(preset, b))
    return [Change(field=field, before=before, after=after) for field, before, after in changes]


@router.get("/{name}/flags")
async def flag_reports(name: str, db: ReadDb, _user: ApiViewer) -> list[FlagReportPublic]:
    """The latest revision's flags against each SGLang version its Python last reported on a host
    (or the newest release known, when none has): renamed, deprecated and removed ones."""
    revision = revisions.latest(await revisions.get_preset(db, name))
    return [FlagReportPublic.of(report) for report in await flags.flag_reports(db, revision)]


@router.post("/{name}/rewrite")
async def rewrite_preset(name: str, body: RewriteIn, db: WriteDb, read: ReadDb, user: ApiOperator) -> PresetPublic:
    """Saves a new revision with the flags that SGLang `version` renamed, deprecated or removed
    rewritten as SGLang advises; 422 when there is nothing to rewrite."""
    preset = await revisions.get_preset(db, name)
    await flags.rewrite_preset(db, preset, version=body.version, actor=user.name)
    return PresetPublic.of(await revisions.get_preset(read, name))
