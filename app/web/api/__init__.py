"""The JSON API under /api: one router gathering each resource's routes."""

from fastapi import APIRouter

from app.web.api import attempts, diagnosis, docs, health, hosts, logs, metrics, perf, presets, rules

router = APIRouter()
for module in (health, metrics, hosts, presets, attempts, perf, logs, diagnosis, rules, docs):
    router.include_router(module.router)
