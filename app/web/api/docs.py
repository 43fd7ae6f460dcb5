"""The API's documentation and OpenAPI schema: behind a login, unless LAUNCHDECK_PUBLIC_DOCS opens
them (the schema maps every route an attacker could try)."""

from __future__ import annotations

from fastapi import APIRouter, Depends, Request
from fastapi.openapi.docs import get_swagger_ui_html
from fastapi.responses import HTMLResponse, JSONResponse

from app.web.deps import LoginRequired, RuntimeDep, find_api_caller, session_login

router = APIRouter(include_in_schema=False)

SCHEMA_URL = "/api/openapi.json"


async def docs_reader(request: Request, runtime: RuntimeDep) -> None:
    """A browser without a login is sent to the login form, which brings it back here."""
    if runtime.settings.public_docs or await session_login(request, runtime):
        return
    if "authorization" in request.headers:
        await find_api_caller(request, runtime)
        return
    raise LoginRequired()


async def schema_reader(request: Request, runtime: RuntimeDep) -> None:
    if not runtime.settings.public_docs:
        await find_api_caller(request, runtime)


@router.get("/api/docs", dependencies=[Depends(docs_reader)])
async def docs(request: Request) -> HTMLResponse:
    return get_swagger_ui_html(openapi_url=SCHEMA_URL, title=f"{request.app.title} API")


@router.get(SCHEMA_URL, dependencies=[Depends(schema_reader)])
async def schema(request: Request) -> JSONResponse:
    return JSONResponse(request.app.openapi())
