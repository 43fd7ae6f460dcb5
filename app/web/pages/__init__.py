"""The HTML pages and their htmx fragments: one router gathering each resource's pages."""

from fastapi import APIRouter

from app.web.pages import (
    account,
    attempts,
    diagnosis,
    home,
    hosts,
    logs,
    perf,
    presets,
    relaunch,
    rules,
    setup,
    sweeps,
    tokens,
    users,
)

router = APIRouter()
for module in (
    home,
    hosts,
    presets,
    attempts,
    perf,
    sweeps,
    logs,
    diagnosis,
    rules,
    relaunch,
    tokens,
    account,
    users,
    setup,
):
    router.include_router(module.router)
