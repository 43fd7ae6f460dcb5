"""/metrics, for Prometheus (app.metrics says what it holds). A scraper is let in by its own token
(LAUNCHDECK_METRICS_TOKEN, as a bearer token) or by its address (LAUNCHDECK_METRICS_ALLOWED);
people's logins and API tokens do not open it, and with neither setting it is closed."""

from __future__ import annotations

import hmac

from fastapi import APIRouter, HTTPException, Request
from fastapi.responses import Response
from prometheus_client import CONTENT_TYPE_LATEST

from app.config import address_in
from app.web.deps import RuntimeDep
from app.web.login_guard import client_address

router = APIRouter()


@router.get("/metrics", response_class=Response, responses={401: {}, 403: {}})
async def metrics(request: Request, runtime: RuntimeDep) -> Response:
    settings = runtime.settings
    token, networks = settings.metrics_token, settings.resolved_metrics_networks()
    if not token and not networks:
        raise HTTPException(403, "/metrics is closed: set LAUNCHDECK_METRICS_TOKEN or LAUNCHDECK_METRICS_ALLOWED")
    given = request.headers.get("authorization", "")
    by_token = token is not None and hmac.compare_digest(given.encode(), f"Bearer {token.get_secret_value()}".encode())
    if not by_token and not address_in(client_address(request), networks):
        raise HTTPException(401, "/metrics needs the bearer token LAUNCHDECK_METRICS_TOKEN, or an allowed address")
    return Response(await runtime.metrics.exposition(), media_type=CONTENT_TYPE_LATEST)
