"""The team's rules as pages: the list at /rules with edit and delete, and the "teach launchdeck"
form on an attempt's root-error card and on each error group, which posts here. After each change
the stored attempts are decided again in the background."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Request
from fastapi.responses import HTMLResponse, RedirectResponse, Response
from starlette.datastructures import FormData

from app.casebook import team_rules
from app.errors import InvalidInput
from app.states import FailureClass
from app.web.deps import Caller, Operator, ReadDb, RuntimeDep, Viewer, WriteDb
from app.web.login_guard import client_address
from app.web.params import Int64
from app.web.templating import render

router = APIRouter(include_in_schema=False)


def rule_table(form: FormData) -> dict[str, Any]:
    """A rule's fields from the form. The `-`/`_` box is ticked by default and applies to fixed
    strings only, so a regular expression turns it off rather than being refused for it."""
    regex = form.get("regex") == "on"
    table: dict[str, Any] = {
        "class": str(form.get("class", "")),
        "title": str(form.get("title", "")),
        "hint": str(form.get("hint", "")),
        "match": str(form.get("match", "")).strip(),
        "regex": regex,
        "scope": str(form.get("scope", "")) or "root",
        "flag_aware": form.get("flag_aware") == "on" and not regex,
        "merge": str(form.get("merge", "")).replace(",", " ").split(),
    }
    if not table["match"] and table["merge"]:
        del table["match"]  # the rule applies to the signatures it names
    return table


def back_to(form: FormData) -> str:
    """Where the form came from (a page of this site), or the rules list."""
    target = str(form.get("next", ""))
    return target if target.startswith("/") and not target.startswith(("//", "/\\")) else "/rules"


def values_of(table: dict[str, Any]) -> dict[str, Any]:
    """Fields as the form shows them again after an error."""
    return {**table, "merge": " ".join(table.get("merge", ())), "match": table.get("match", "")}


async def rules_page_context(db: ReadDb, user: Caller, **more: Any) -> dict[str, Any]:
    return {"user": user, "rules": await team_rules.list_rules(db), "classes": list(FailureClass), **more}


@router.get("/rules", response_class=HTMLResponse)
async def rules_page(request: Request, db: ReadDb, user: Viewer) -> Response:
    return render(request, "rules.html", await rules_page_context(db, user))


@router.post("/rules", response_class=HTMLResponse)
async def create_rule(request: Request, db: WriteDb, runtime: RuntimeDep, user: Operator) -> Response:
    form = await request.form()
    table = rule_table(form)
    try:
        await team_rules.create_rule(db, table, actor=user.name, remote_addr=client_address(request))
    except InvalidInput as exc:
        context = await rules_page_context(db, user, error=str(exc), values=values_of(table), next=back_to(form))
        return render(request, "rules.html", context, status_code=422)
    taught_on = str(form.get("attempt", ""))
    if taught_on.isdigit() and len(taught_on) < 19:
        # The page the person goes back to shows the rule at once; the rest follow in the background.
        await runtime.rediagnosis.run_on([int(taught_on)], every_rule=True)
    runtime.rediagnosis.request()
    return RedirectResponse(back_to(form), status_code=303)


@router.get("/rules/{rule_id}", response_class=HTMLResponse)
async def rule_page(request: Request, rule_id: Int64, db: ReadDb, user: Viewer) -> Response:
    row = await team_rules.get_rule(db, rule_id)
    values = values_of(team_rules.table_of(team_rules.rule_of(row)) | {"flag_aware": row.flag_aware})
    return render(request, "rule.html", {"user": user, "rule": row, "values": values, "classes": list(FailureClass)})


@router.post("/rules/{rule_id}", response_class=HTMLResponse)
async def update_rule(request: Request, rule_id: Int64, db: WriteDb, runtime: RuntimeDep, user: Operator) -> Response:
    table = rule_table(await request.form())
    try:
        await team_rules.update_rule(db, rule_id, table, actor=user.name, remote_addr=client_address(request))
    except InvalidInput as exc:
        context = {
            "user": user,
            "rule": await team_rules.get_rule(db, rule_id),
            "values": values_of(table),
            "classes": list(FailureClass),
            "error": str(exc),
        }
        return render(request, "rule.html", context, status_code=422)
    runtime.rediagnosis.request()
    return RedirectResponse("/rules", status_code=303)


@router.post("/rules/{rule_id}/delete")
async def delete_rule(request: Request, rule_id: Int64, db: WriteDb, runtime: RuntimeDep, user: Operator) -> Response:
    row = await team_rules.get_rule(db, rule_id)
    await team_rules.delete_rule(db, row, actor=user.name, remote_addr=client_address(request))
    runtime.rediagnosis.request()
    return RedirectResponse("/rules", status_code=303)
