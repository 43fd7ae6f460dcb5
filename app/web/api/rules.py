"""JSON API for the team's rules: the fields of a `[[rule]]` table in, the same with id, author
and times out; `export` and `import` speak the rules file itself (TOML). Each change asks for the
stored attempts to be decided again in the background."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from fastapi import APIRouter, Body, Request, Response, status
from pydantic import BaseModel, ConfigDict, Field

from app.casebook import team_rules
from app.db.models import DiagnosisRule
from app.errors import InvalidInput
from app.web.deps import ApiOperator, ApiViewer, ReadDb, RuntimeDep, WriteDb
from app.web.login_guard import client_address
from app.web.params import Int64

router = APIRouter(prefix="/api/rules", tags=["rules"])
TOML = "application/toml"
MAX_RULES_FILE = 1 << 20


class RulePublic(BaseModel):
    model_config = ConfigDict(populate_by_name=True, serialize_by_alias=True)

    id: int
    match: str
    regex: bool
    failure_class: str = Field(alias="class")
    title: str
    hint: str
    scope: str
    flag_aware: bool
    merge: list[str]
    author: str
    stalled: str  # why diagnoses stopped running it ("" while they run it); editing it clears this
    created_at: datetime
    updated_at: datetime

    @classmethod
    def of(cls, row: DiagnosisRule) -> RulePublic:
        return cls.model_validate(row, from_attributes=True)


# A missing body is an empty rule, so what is wrong with it is said by the one check of rules.
RuleBody = Body(default={}, examples=[{"match": "Not enough memory", "class": "oom", "title": "KV pool too small"}])


@router.get("")
async def list_rules(db: ReadDb, _user: ApiViewer) -> list[RulePublic]:
    return [RulePublic.of(row) for row in await team_rules.list_rules(db)]


@router.get("/export", response_class=Response, responses={200: {"content": {TOML: {}}}})
async def export_rules(db: ReadDb, _user: ApiViewer) -> Response:
    rules = [rule for _, rule in await team_rules.active_rules(db)]
    return Response(team_rules.export_toml(rules), media_type=TOML)


@router.post("/import", status_code=status.HTTP_201_CREATED)
async def import_rules(request: Request, db: WriteDb, runtime: RuntimeDep, user: ApiOperator) -> list[RulePublic]:
    """The body is a rules file; every rule is checked before any is added."""
    body = await request.body()
    if len(body) > MAX_RULES_FILE:
        raise InvalidInput(f"a rules file may have at most {MAX_RULES_FILE} bytes")
    try:
        text = body.decode()
    except UnicodeDecodeError:
        raise InvalidInput("the rules file is not UTF-8 text") from None
    rows = await team_rules.import_toml(db, text, actor=user.name, remote_addr=client_address(request))
    runtime.rediagnosis.request()
    return [RulePublic.of(row) for row in rows]


@router.post("", status_code=status.HTTP_201_CREATED)
async def create_rule(
    request: Request, db: WriteDb, runtime: RuntimeDep, user: ApiOperator, table: dict[str, Any] = RuleBody
) -> RulePublic:
    row = await team_rules.create_rule(db, table, actor=user.name, remote_addr=client_address(request))
    runtime.rediagnosis.request()
    return RulePublic.of(row)


@router.get("/{rule_id}")
async def get_rule(rule_id: Int64, db: ReadDb, _user: ApiViewer) -> RulePublic:
    return RulePublic.of(await team_rules.get_rule(db, rule_id))


@router.put("/{rule_id}")
async def update_rule(
    request: Request,
    rule_id: Int64,
    db: WriteDb,
    runtime: RuntimeDep,
    user: ApiOperator,
    table: dict[str, Any] = RuleBody,
) -> RulePublic:
    row = await team_rules.update_rule(db, rule_id, table, actor=user.name, remote_addr=client_address(request))
    runtime.rediagnosis.request()
    return RulePublic.of(row)


@router.delete("/{rule_id}", status_code=status.HTTP_204_NO_CONTENT)
async def delete_rule(request: Request, rule_id: Int64, db: WriteDb, runtime: RuntimeDep, user: ApiOperator) -> None:
    row = await team_rules.get_rule(db, rule_id)
    await team_rules.delete_rule(db, row, actor=user.name, remote_addr=client_address(request))
    runtime.rediagnosis.request()
