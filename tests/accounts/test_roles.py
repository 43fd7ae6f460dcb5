"""Every route of the app against every kind of caller: who gets through, and what the others see.

The table names each route's least role; a route the app has and the table lacks (or the other
way round) fails the test, so a new route cannot go out without deciding who may use it."""

from __future__ import annotations

import re

from fastapi import FastAPI
from httpx import ASGITransport, AsyncClient

from app.accounts import tokens, users
from app.states import Role
from tests.support.accounts import PASSWORD, forget_failed_logins
from tests.support.dashboard import TOKEN
from tests.support.web import api_routes, csrf_from

PUBLIC, STREAM = "public", "stream"  # STREAM: a logged-out browser gets an event that sends it to login
CREDENTIALS = "credentials"  # the login form: no credentials given, so 401 for anyone
# SECRET: the one-time setup link needs its secret, not a login; here, with a wrong one, everyone
# gets the same 404 (tests/accounts/test_setup_link.py tests the right one).
SECRET = "secret"
# SCRAPER: /metrics opens to a scraper's own token or address, not to logins or API tokens; here,
# with neither set, it is closed to everyone (tests/web/test_metrics.py opens it).
SCRAPER = "scraper"
VIEWER, OPERATOR, ADMIN = Role.VIEWER.value, Role.OPERATOR.value, Role.ADMIN.value

LEAST_ROLE: dict[tuple[str, str], str] = {
    ("GET", "/api/health"): PUBLIC,
    ("GET", "/readyz"): PUBLIC,
    ("GET", "/metrics"): SCRAPER,
    ("GET", "/api/docs"): VIEWER,
    ("GET", "/api/openapi.json"): VIEWER,
    ("GET", "/api/hosts"): VIEWER,
    ("GET", "/api/hosts/{name}"): VIEWER,
    ("POST", "/api/hosts/{name}/adopt"): OPERATOR,
    ("POST", "/api/presets"): OPERATOR,
    ("GET", "/api/presets"): VIEWER,
    ("GET", "/api/presets/{name}"): VIEWER,
    ("GET", "/api/presets/{name}/revisions"): VIEWER,
    ("PUT", "/api/presets/{name}"): OPERATOR,
    ("POST", "/api/presets/{name}/clone"): OPERATOR,
    ("POST", "/api/presets/{name}/archive"): OPERATOR,
    ("GET", "/api/presets/{name}/diff"): VIEWER,
    ("GET", "/api/presets/{name}/flags"): VIEWER,
    ("POST", "/api/presets/{name}/rewrite"): OPERATOR,
    ("POST", "/api/preflight"): OPERATOR,
    ("POST", "/api/attempts"): OPERATOR,
    ("POST", "/api/attempts/{attempt_id}/relaunch"): OPERATOR,
    ("GET", "/api/attempts"): VIEWER,
    ("GET", "/api/attempts/{attempt_id}"): VIEWER,
    ("POST", "/api/attempts/{attempt_id}/stop"): OPERATOR,
    ("GET", "/api/audit"): VIEWER,  # a viewer or operator reads only their own events
    ("GET", "/api/attempts/{attempt_id}/log"): VIEWER,
    ("GET", "/api/attempts/{attempt_id}/log/download"): VIEWER,
    ("GET", "/api/attempts/{attempt_id}/events"): VIEWER,
    ("GET", "/api/attempts/{attempt_id}/grep"): VIEWER,
    ("GET", "/api/grep"): VIEWER,
    ("GET", "/api/compare"): VIEWER,
    ("GET", "/api/workloads"): VIEWER,
    ("POST", "/api/workloads"): OPERATOR,
    ("POST", "/api/attempts/{attempt_id}/benchmarks"): OPERATOR,
    ("GET", "/api/attempts/{attempt_id}/benchmarks"): VIEWER,
    ("GET", "/api/attempts/{attempt_id}/serving"): VIEWER,
    ("GET", "/api/leases"): VIEWER,
    ("GET", "/api/benchmarks/{benchmark_id}"): VIEWER,
    ("GET", "/api/benchmarks/{benchmark_id}/output"): VIEWER,
    ("POST", "/api/benchmarks/{benchmark_id}/stop"): OPERATOR,
    ("POST", "/api/sweeps"): OPERATOR,
    ("GET", "/api/sweeps"): VIEWER,
    ("GET", "/api/sweeps/{sweep_id}"): VIEWER,
    ("POST", "/api/sweeps/{sweep_id}/stop"): OPERATOR,
    ("POST", "/api/sweeps/{sweep_id}/points/{attempt_id}/adopt"): OPERATOR,
    ("GET", "/attempts/{attempt_id}/performance"): VIEWER,
    ("GET", "/attempts/{attempt_id}/serving"): VIEWER,
    ("POST", "/attempts/{attempt_id}/benchmarks"): OPERATOR,
    ("GET", "/sweeps"): VIEWER,
    ("GET", "/sweeps/new"): OPERATOR,
    ("POST", "/sweeps"): OPERATOR,
    ("GET", "/sweeps/{sweep_id}"): VIEWER,
    ("POST", "/sweeps/{sweep_id}/stop"): OPERATOR,
    ("POST", "/sweeps/{sweep_id}/adopt"): OPERATOR,
    ("GET", "/api/signatures"): VIEWER,
    ("GET", "/api/signatures/{fingerprint}/attempts"): VIEWER,
    ("GET", "/api/rules"): VIEWER,
    ("GET", "/api/rules/export"): VIEWER,
    ("POST", "/api/rules/import"): OPERATOR,
    ("POST", "/api/rules"): OPERATOR,
    ("GET", "/api/rules/{rule_id}"): VIEWER,
    ("PUT", "/api/rules/{rule_id}"): OPERATOR,
    ("DELETE", "/api/rules/{rule_id}"): OPERATOR,
    ("GET", "/"): PUBLIC,
    ("GET", "/login"): PUBLIC,
    ("GET", "/setup/{secret}"): SECRET,
    ("POST", "/setup/{secret}"): SECRET,
    ("POST", "/login"): CREDENTIALS,
    ("POST", "/logout"): VIEWER,
    ("GET", "/hosts"): VIEWER,
    ("GET", "/hosts/events"): STREAM,
    ("GET", "/hosts/{name}"): VIEWER,
    ("POST", "/hosts/{name}/processes/{pid}/stop"): OPERATOR,
    ("POST", "/hosts/{name}/adopt"): OPERATOR,
    ("GET", "/presets"): VIEWER,
    ("GET", "/presets/new"): OPERATOR,
    ("POST", "/presets"): OPERATOR,
    ("GET", "/presets/{name}"): VIEWER,
    ("POST", "/presets/{name}"): OPERATOR,
    ("POST", "/presets/{name}/clone"): OPERATOR,
    ("POST", "/presets/{name}/archive"): OPERATOR,
    ("POST", "/presets/{name}/rewrite"): OPERATOR,
    ("GET", "/launch"): OPERATOR,
    ("POST", "/launch/preflight"): OPERATOR,
    ("POST", "/launch"): OPERATOR,
    ("GET", "/attempts"): VIEWER,
    ("GET", "/attempts/{attempt_id}"): VIEWER,
    ("POST", "/attempts/{attempt_id}/stop"): OPERATOR,
    ("GET", "/audit"): VIEWER,  # a viewer or operator sees only their own events
    ("GET", "/attempts/{attempt_id}/log/stream"): STREAM,
    ("GET", "/attempts/{attempt_id}/log"): VIEWER,
    ("GET", "/attempts/{attempt_id}/log/grep"): VIEWER,
    ("GET", "/search"): VIEWER,
    ("GET", "/errors"): VIEWER,
    ("GET", "/errors/{fingerprint}"): VIEWER,
    ("GET", "/compare"): VIEWER,
    ("GET", "/attempts/{attempt_id}/compare/{other}"): VIEWER,
    ("GET", "/rules"): VIEWER,
    ("POST", "/rules"): OPERATOR,
    ("GET", "/rules/{rule_id}"): VIEWER,
    ("POST", "/rules/{rule_id}"): OPERATOR,
    ("POST", "/rules/{rule_id}/delete"): OPERATOR,
    ("GET", "/attempts/{attempt_id}/relaunch"): OPERATOR,
    ("POST", "/attempts/{attempt_id}/relaunch"): OPERATOR,
    ("GET", "/attempts/{attempt_id}/edit"): OPERATOR,
    ("POST", "/attempts/{attempt_id}/edit"): OPERATOR,
    ("GET", "/account/tokens"): VIEWER,
    ("POST", "/account/tokens"): VIEWER,  # the built-in admin has no account: refused with a sentence
    ("POST", "/account/tokens/{token_id}/revoke"): VIEWER,  # a viewer revokes only their own
    ("GET", "/account"): VIEWER,
    ("POST", "/account/password"): VIEWER,
    ("POST", "/account/logins/end-others"): VIEWER,
    ("GET", "/users"): ADMIN,
    ("POST", "/users"): ADMIN,
    ("POST", "/users/{name}/role"): ADMIN,
    ("POST", "/users/{name}/disabled"): ADMIN,
    ("POST", "/users/{name}/password"): ADMIN,
}

# Values for path parameters that name nothing: a caller who gets through meets 404 or 422, so no
# request here launches, stops or changes anything.
PATH_VALUES = {
    "attempt_id": "999999",
    "benchmark_id": "999999",
    "sweep_id": "999999",
    "rule_id": "999999",
    "pid": "1",
    "other": "999998",
    "token_id": "999999",
    "name": "no-such",
    "secret": "no-such-secret",
}
OPERATOR_TOKEN = "operator's viewer token"  # an operator's token made with the viewer role
CALLERS = ("anonymous", "service token", OPERATOR_TOKEN, VIEWER, OPERATOR, ADMIN)
PAGES_UNDER_API = {"/api/docs"}  # a browser page: a logged-out visitor is sent to the login form
RANK = {VIEWER: 1, OPERATOR: 2, ADMIN: 3}


def app_routes(app: FastAPI) -> set[tuple[str, str]]:
    return {(method, route.path) for route in api_routes(app.routes) for method in route.methods - {"HEAD"}}


def expected(least: str, caller: str, api: bool, bearer: bool | None = None) -> str:
    """What `caller` sees: "through", "login" (redirect to the form, or the stream's event), 401 or 403.
    `bearer`: whether the route takes the service token (every API route does)."""
    if least in (PUBLIC, SECRET):
        return "through"
    if least == CREDENTIALS:
        return "401"
    if least == SCRAPER:
        return "403"
    takes_bearer = api if bearer is None else bearer
    role = {"service token": ADMIN, OPERATOR_TOKEN: VIEWER}.get(caller, caller) if takes_bearer else caller
    if role not in RANK:
        return "401" if api else "login"
    return "through" if least == STREAM or RANK[role] >= RANK[least] else "403"


async def seen(client: AsyncClient, method: str, path: str, csrf: str) -> str:
    url = re.sub(r"\{(\w+)\}", lambda m: PATH_VALUES.get(m[1], "0" * 16), path)
    headers = {"X-CSRF-Token": csrf, "Accept": "text/html"}
    # An empty JSON object: a caller who gets through is turned away by validation or a lookup.
    kwargs = {"content": b"{}", "headers": headers | {"content-type": "application/json"}} if method != "GET" else {}
    async with client.stream(method, url, **({"headers": headers} | kwargs)) as answer:
        if answer.status_code in (401, 403):
            return str(answer.status_code)
        if answer.status_code == 303 and answer.headers["location"].startswith("/login?next="):
            return "login"
        if answer.headers.get("content-type", "").startswith("text/event-stream"):
            first = ""
            async for text in answer.aiter_text():
                first += text
                if "data:" in first:
                    break
            return "login" if 'hx-trigger="load"' in first else "through"
    return "through"


async def client_for(app: FastAPI, caller: str) -> tuple[AsyncClient, str]:
    """A client logged in as `caller`, and its CSRF token."""
    client = AsyncClient(transport=ASGITransport(app=app), base_url="http://testserver")
    if caller == "service token":
        client.headers["Authorization"] = f"Bearer {TOKEN}"
    if caller == OPERATOR_TOKEN:
        async with app.state.runtime.sessions.write() as session:
            owner = await users.add_user(session, name="token-owner", password=PASSWORD, role=Role.OPERATOR)
            _, secret = await tokens.create_token(session, user=owner, name="ro", role=Role.VIEWER, actor="test")
        client.headers["Authorization"] = f"Bearer {secret}"
    if caller not in RANK:
        return client, csrf_from((await client.get("/login")).text)
    async with app.state.runtime.sessions.write() as session:
        await users.add_user(session, name=f"{caller}-1", password=PASSWORD, role=Role(caller))
    form = await client.get("/login")
    fields = {"name": f"{caller}-1", "password": PASSWORD, "csrf_token": csrf_from(form.text)}
    assert (await client.post("/login", data=fields)).status_code == 303
    return client, csrf_from((await client.get("/hosts")).text)


async def test_every_route_lets_through_exactly_the_roles_its_table_entry_names(running_app: FastAPI) -> None:
    assert app_routes(running_app) == set(LEAST_ROLE), "each route needs an entry in LEAST_ROLE (and only they)"
    wrong = []
    for caller in CALLERS:
        # Each caller's empty POST /login is a failed login; test_login_limits tests where they add up.
        await forget_failed_logins(running_app)
        client, csrf = await client_for(running_app, caller)
        try:
            for (method, path), least in LEAST_ROLE.items():
                if (method, path) == ("POST", "/logout"):
                    continue  # checked last: it would end the login
                api = path.startswith("/api") and path not in PAGES_UNDER_API
                want = expected(least, caller, api, bearer=path.startswith("/api"))
                got = await seen(client, method, path, csrf)
                if got != want:
                    wrong.append(f"{caller:13} {method:6} {path}: {got}, expected {want}")
            want = expected(VIEWER, caller, api=False)
            got = await seen(client, "POST", "/logout", csrf)
            if got != want:
                wrong.append(f"{caller:13} POST   /logout: {got}, expected {want}")
        finally:
            await client.aclose()
    assert not wrong, f"{len(wrong)} of {len(LEAST_ROLE) * len(CALLERS)} wrong:\n" + "\n".join(wrong)
