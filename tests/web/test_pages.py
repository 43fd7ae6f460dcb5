"""The browser-facing pages as plain HTTP: login, CSRF, fragments."""

from __future__ import annotations

import re

from fastapi import FastAPI
from httpx import AsyncClient
from sqlalchemy import select

from app.db.models import AuditEvent
from tests.support.dashboard import TOKEN
from tests.support.web import csrf_from, log_in


async def test_pages_redirect_to_login_and_back_after_it(app_client: AsyncClient) -> None:
    response = await app_client.get("/hosts?view=all")
    assert response.status_code == 303
    assert response.headers["location"] == "/login?next=/hosts%3Fview%3Dall"
    form = await app_client.get(response.headers["location"])
    assert 'name="next" value="/hosts?view=all"' in form.text
    login = await app_client.post(
        "/login", data={"token": TOKEN, "next": "/hosts?view=all", "csrf_token": csrf_from(form.text)}
    )
    assert login.status_code == 303
    assert login.headers["location"] == "/hosts?view=all"


async def test_hosts_page_lists_gpus_with_memory_bars(app_client: AsyncClient) -> None:
    await log_in(app_client)
    html = (await app_client.get("/hosts")).text
    assert html.count('class="gpu"') == 16
    assert html.count('role="meter"') == 16
    assert "NVIDIA RTX PRO 6000 Blackwell Server Edition" in html
    assert "/static/vendor/htmx.org@" in html
    # what the probe reads beside memory: utilisation, temperature and power draw of each GPU
    assert (
        len(
            re.findall(
                r'<td class="num load"><span title="utilisation">\d+ %</span> · '
                r'<span title="temperature">\d+ °C</span> · <span title="power draw">\d+ W</span>',
                html,
            )
        )
        == 16
    )


async def test_wrong_token_is_refused_and_audited(app_client: AsyncClient, running_app: FastAPI) -> None:
    form = await app_client.get("/login")
    response = await app_client.post("/login", data={"token": "guess", "csrf_token": csrf_from(form.text)})
    assert response.status_code == 401
    assert "That token is not valid." in response.text
    assert (await app_client.get("/hosts")).status_code == 303
    async with running_app.state.runtime.sessions.read() as session:
        actions = list(await session.scalars(select(AuditEvent.action)))
    assert actions == ["login-failed"]


async def test_login_without_csrf_token_is_refused(app_client: AsyncClient) -> None:
    await app_client.get("/login")
    response = await app_client.post("/login", data={"token": TOKEN})
    assert response.status_code == 403
    assert (await app_client.get("/hosts")).status_code == 303


async def test_login_never_redirects_off_site(app_client: AsyncClient) -> None:
    form = await app_client.get("/login")
    response = await app_client.post(
        "/login", data={"token": TOKEN, "next": "//evil.example/", "csrf_token": csrf_from(form.text)}
    )
    assert response.headers["location"] == "/hosts"


async def test_logout_needs_the_csrf_token(app_client: AsyncClient) -> None:
    csrf = await log_in(app_client)
    assert (await app_client.post("/logout")).status_code == 403
    assert (await app_client.get("/hosts")).status_code == 200
    assert (await app_client.post("/logout", data={"csrf_token": csrf})).status_code == 303
    assert (await app_client.get("/hosts")).status_code == 303


async def test_htmx_poll_gets_only_the_host_list(app_client: AsyncClient) -> None:
    await log_in(app_client)
    response = await app_client.get("/hosts", headers={"HX-Request": "true"})
    assert response.status_code == 200
    assert response.text.lstrip().startswith('<div id="host-list"')
    assert "<html" not in response.text
    assert "HX-Request" in response.headers["vary"]
    boosted = await app_client.get("/hosts", headers={"HX-Request": "true", "HX-Boosted": "true"})
    assert "<html" in boosted.text


async def test_logged_in_browser_can_read_the_api(app_client: AsyncClient) -> None:
    await log_in(app_client)
    assert (await app_client.get("/api/hosts")).status_code == 200


async def test_error_pages_are_html_for_browsers(app_client: AsyncClient) -> None:
    await log_in(app_client)
    response = await app_client.get("/no-such-page", headers={"Accept": "text/html"})
    assert response.status_code == 404
    assert "<html" in response.text and "Not Found" in response.text


async def test_a_missing_page_followed_inside_the_page_is_a_page_with_the_menu_and_json_stays_for_the_api(
    app_client: AsyncClient,
) -> None:
    await log_in(app_client)
    boosted = {"HX-Request": "true", "HX-Boosted": "true", "Accept": "*/*"}  # what htmx sends for a link
    response = await app_client.get("/attempts/999999999", headers=boosted)
    assert response.status_code == 404 and response.headers["content-type"].startswith("text/html")
    assert 'id="error-page"' in response.text and "attempt 999999999" in response.text
    assert 'aria-label="Main"' in response.text  # the menu, so the way on is one click
    fragment = await app_client.get("/attempts/999999999", headers={"HX-Request": "true"})
    assert fragment.text.lstrip().startswith('<section class="error-page"')
    api = await app_client.get("/api/attempts/999999999", headers={"Accept": "text/html"})
    assert api.status_code == 404 and "detail" in api.json()
    assert "detail" in (await app_client.get("/attempts/999999999")).json()  # a client that asks for no HTML


async def test_the_menu_marks_the_current_page(app_client: AsyncClient) -> None:
    await log_in(app_client)
    html = (await app_client.get("/hosts/rtxpro-01")).text
    # once in the wide screen's menu and once in the phone's folded one
    assert re.findall(r'<a href="([^"]+)" aria-current="page">', html) == ["/hosts", "/hosts"]


async def test_htmx_poll_after_logout_navigates_to_login_instead_of_swapping(app_client: AsyncClient) -> None:
    csrf = await log_in(app_client)
    await app_client.post("/logout", data={"csrf_token": csrf})
    response = await app_client.get("/hosts", headers={"HX-Request": "true"})
    assert response.status_code == 204
    assert response.headers["HX-Redirect"] == "/login?next=/hosts"


async def test_empty_token_never_logs_in(app_client: AsyncClient) -> None:
    form = await app_client.get("/login")
    response = await app_client.post("/login", data={"token": "", "csrf_token": csrf_from(form.text)})
    assert response.status_code == 401
    assert (await app_client.get("/api/hosts", headers={"Authorization": "Bearer "})).status_code == 401


async def test_pages_forbid_framing_and_foreign_scripts(app_client: AsyncClient) -> None:
    await log_in(app_client)
    response = await app_client.get("/hosts")
    assert "script-src 'self'" in response.headers["content-security-policy"]
    assert "frame-ancestors 'none'" in response.headers["content-security-policy"]
    assert response.headers["x-frame-options"] == "DENY"
    assert response.headers["x-content-type-options"] == "nosniff"
