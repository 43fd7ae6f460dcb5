"""The account page, the users page, the audit filters, and pages that offer each role only what
it may do: what a person sees in the browser's HTML, with real logins."""

from __future__ import annotations

import re
from datetime import timedelta

from fastapi import FastAPI
from httpx import AsyncClient
from sqlalchemy import select, update

from app.clock import utcnow
from app.db.models import AuditEvent
from app.demo.presets import seed_demo_presets
from app.states import Role
from tests.support.accounts import PASSWORD, add_user, browser, log_in

NEW_PASSWORD = "a much longer passphrase"


def nav_links(html: str) -> list[str]:
    wide = html[html.index('<div class="wide-menu">') : html.index('<details class="narrow-menu"')]
    return re.findall(r'<a href="[^"]+"[^>]*>([^<]+)</a>', wide)


async def test_a_person_changes_their_password_their_other_logins_end_and_this_one_goes_on(
    running_app: FastAPI,
) -> None:
    await add_user(running_app, "ann", Role.VIEWER)
    async with browser(running_app) as here, browser(running_app) as elsewhere:
        csrf = await log_in(here, name="ann", password=PASSWORD)
        await log_in(elsewhere, name="ann", password=PASSWORD)
        page = await here.get("/account")
        assert "<strong>ann</strong>, role <strong>viewer</strong>" in page.text
        assert page.text.count("<tr") == 3 and page.text.count("<td>this one</td>") == 1  # header and two logins

        fields = {"csrf_token": csrf, "current": "not my password", "new": NEW_PASSWORD, "again": NEW_PASSWORD}
        wrong = await here.post("/account/password", data=fields)
        assert wrong.status_code == 422 and "Password not changed: the current password is wrong." in wrong.text
        differ = await here.post("/account/password", data=fields | {"current": PASSWORD, "again": "something else"})
        assert differ.status_code == 422 and "the new password and its repetition differ" in differ.text
        short = await here.post(
            "/account/password", data=fields | {"current": PASSWORD, "new": "short", "again": "short"}
        )
        assert short.status_code == 422 and "at least 8 characters" in short.text
        assert (await elsewhere.get("/hosts")).status_code == 200  # nothing changed yet

        changed = await here.post("/account/password", data=fields | {"current": PASSWORD}, follow_redirects=True)
        assert "Your other logins have ended; this one goes on." in changed.text
        assert (await here.get("/hosts")).status_code == 200
        assert (await elsewhere.get("/hosts")).status_code == 303
        await log_in(elsewhere, name="ann", password=NEW_PASSWORD)


async def test_sign_out_other_sessions_ends_every_login_but_this_one(running_app: FastAPI) -> None:
    await add_user(running_app, "ann", Role.OPERATOR)
    async with browser(running_app) as here, browser(running_app) as phone, browser(running_app) as laptop:
        csrf = await log_in(here, name="ann", password=PASSWORD)
        for other in (phone, laptop):
            await log_in(other, name="ann", password=PASSWORD)
        answer = await here.post("/account/logins/end-others", data={"csrf_token": csrf}, follow_redirects=True)
        assert "Signed out of 2 other logins." in answer.text and answer.text.count("<td>this one</td>") == 1
        assert (await here.get("/hosts")).status_code == 200
        assert [(await c.get("/hosts")).status_code for c in (phone, laptop)] == [303, 303]
        assert (await here.post("/account/logins/end-others")).status_code == 403  # no CSRF token


async def test_an_admin_manages_users_and_each_change_is_audited_under_their_name(running_app: FastAPI) -> None:
    await add_user(running_app, "boss", Role.ADMIN)
    async with browser(running_app) as admin, browser(running_app) as carl:
        csrf = await log_in(admin, name="boss", password=PASSWORD)
        assert "Users" in nav_links((await admin.get("/hosts")).text)
        bad = await admin.post(
            "/users", data={"csrf_token": csrf, "name": "Carl!", "role": "viewer", "password": PASSWORD}
        )
        assert bad.status_code == 422 and "a user name is 1-64 lower-case letters" in bad.text
        assert 'value="Carl!"' in bad.text  # the form keeps what was typed
        added = await admin.post(
            "/users", data={"csrf_token": csrf, "name": "carl", "role": "viewer", "password": PASSWORD},
            follow_redirects=True,
        )  # fmt: skip
        assert re.search(r'<tr data-user="carl">.*?<option selected>viewer</option>', added.text, re.S)
        assert 'data-user="carl"' in added.text and "never" in added.text
        await log_in(carl, name="carl", password=PASSWORD)

        await admin.post("/users/carl/role", data={"csrf_token": csrf, "role": "operator"})
        assert "Launch" in nav_links((await carl.get("/hosts")).text)  # the next click has the new role
        await admin.post("/users/carl/disabled", data={"csrf_token": csrf, "disabled": "true"})
        assert (await carl.get("/hosts")).status_code == 303
        page = await admin.get("/users")
        assert re.search(r'data-user="carl">.*?disabled <input[^>]*><button type="submit">Enable', page.text, re.S)
        await admin.post("/users/carl/disabled", data={"csrf_token": csrf, "disabled": "false"})
        await log_in(carl, name="carl", password=PASSWORD)
        await admin.post("/users/carl/password", data={"csrf_token": csrf, "password": NEW_PASSWORD})
        assert (await carl.get("/hosts")).status_code == 303
        await log_in(carl, name="carl", password=NEW_PASSWORD)

        myself = await admin.post("/users/boss/disabled", data={"csrf_token": csrf, "disabled": "true"})
        assert myself.status_code == 422 and "you cannot disable your own account" in myself.text
        missing = await admin.post("/users/nobody/role", data={"csrf_token": csrf, "role": "viewer"})
        assert missing.status_code == 404
    async with running_app.state.runtime.sessions.read() as db:
        events = (await db.scalars(select(AuditEvent).where(AuditEvent.actor == "boss").order_by(AuditEvent.id))).all()
    assert [(e.action, e.target) for e in events if e.action != "login"] == [
        ("user-add", "carl"),
        ("user-role", "carl"),
        ("user-disable", "carl"),
        ("user-enable", "carl"),
        ("user-password", "carl"),
    ]
    assert all(e.remote_addr for e in events) and events[1].detail == {"role": "viewer"}


async def test_each_role_is_offered_only_what_it_may_do(running_app: FastAPI) -> None:
    async with running_app.state.runtime.sessions.write() as session:
        await seed_demo_presets(session)
    seen: dict[str, dict[str, object]] = {}
    for role in Role:
        await add_user(running_app, f"{role}-1", role)
        async with browser(running_app) as client:
            await log_in(client, name=f"{role}-1", password=PASSWORD)
            preset = (await client.get("/presets/qwen36-27b-mtp-fixed")).text
            presets = (await client.get("/presets")).text
            rules = (await client.get("/rules")).text
            seen[role] = {
                "nav": nav_links(preset),
                "launch": 'href="/launch?preset=' in preset or 'href="/launch?preset=' in presets,
                "new preset": "New preset" in presets,
                "edit": "Save as a new revision" in preset or 'action="/presets/qwen36-27b-mtp-fixed/clone"' in preset,
                "new rule": 'id="new-rule"' in rules,
            }
    base = ["Hosts", "Presets", "Attempts", "Sweeps", "Errors", "Rules", "Search logs", "Audit"]
    assert seen["viewer"] == {
        "nav": [*base, "Account"],
        "launch": False,
        "new preset": False,
        "edit": False,
        "new rule": False,
    }
    operator = {"launch": True, "new preset": True, "edit": True, "new rule": True}
    assert seen["operator"] == {"nav": [*base[:2], "Launch", *base[2:], "Account"], **operator}
    assert seen["admin"] == {"nav": [*base[:2], "Launch", *base[2:], "Users", "Account"], **operator}


async def audit_page(client: AsyncClient, **query: str) -> list[tuple[str, str]]:
    """The (who, what) pairs the audit page lists."""
    page = await client.get("/audit", params=query)
    assert page.status_code == 200, page.text
    return re.findall(r'<td><a href="/audit\?actor=[^"]*">([^<]+)</a></td><td>([^<]+)</td>', page.text)


async def test_the_audit_trail_filters_by_person_action_and_time_and_others_see_only_their_own(
    running_app: FastAPI,
) -> None:
    await add_user(running_app, "boss", Role.ADMIN)
    await add_user(running_app, "vic", Role.VIEWER)
    async with browser(running_app) as admin, browser(running_app) as vic:
        csrf = await log_in(admin, name="boss", password=PASSWORD)
        await log_in(vic, name="vic", password=PASSWORD)
        await admin.post("/users", data={"csrf_token": csrf, "name": "dan", "role": "viewer", "password": PASSWORD})
        async with running_app.state.runtime.sessions.write() as db:  # boss's login, a day ago
            first = await db.scalar(select(AuditEvent.id).where(AuditEvent.actor == "boss").order_by(AuditEvent.id))
            await db.execute(update(AuditEvent).where(AuditEvent.id == first).values(at=utcnow() - timedelta(days=1)))
            await db.commit()

        assert await audit_page(admin) == [("boss", "user-add"), ("vic", "login"), ("boss", "login")]
        assert await audit_page(admin, action="login") == [("vic", "login"), ("boss", "login")]
        assert await audit_page(admin, actor="boss", action="login") == [("boss", "login")]
        hour_ago = (utcnow() - timedelta(hours=1)).strftime("%Y-%m-%dT%H:%M")
        assert await audit_page(admin, since=hour_ago) == [("boss", "user-add"), ("vic", "login")]
        assert await audit_page(admin, until=hour_ago) == [("boss", "login")]
        assert await audit_page(admin, action="logout") == []
        assert (await admin.get("/audit", params={"since": "yesterday"})).status_code == 422

        assert await audit_page(vic) == [("vic", "login")]
        assert await audit_page(vic, actor="boss") == [("vic", "login")]  # only their own, whatever they ask
        assert 'name="actor"' not in (await vic.get("/audit")).text
        api = await vic.get("/api/audit", params={"action": "login", "since": hour_ago})
        assert [(e["actor"], e["action"]) for e in api.json()] == [("vic", "login")]
