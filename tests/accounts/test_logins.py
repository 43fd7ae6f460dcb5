"""Accounts and server-side logins: what a person sees when they log in, out, or time out."""

from __future__ import annotations

import base64
import io
import json
from datetime import timedelta
from pathlib import Path

import pytest
from fastapi import FastAPI
from sqlalchemy import create_engine, select, text, update

from app.accounts import users
from app.accounts.logins import HeldLogins
from app.cli import cli_actor, main
from app.clock import utcnow
from app.db.models import AuditEvent, LoginSession
from app.states import Role
from tests.support.accounts import PASSWORD, add_user, browser, log_in
from tests.support.dashboard import TOKEN
from tests.support.web import csrf_from


async def test_logout_ends_the_login_for_a_copied_cookie_too(running_app: FastAPI) -> None:
    async with browser(running_app) as client, browser(running_app) as thief:
        csrf = await log_in(client, token=TOKEN)
        thief.cookies.update(client.cookies)
        assert (await thief.get("/attempts")).status_code == 200
        assert (await client.post("/logout", data={"csrf_token": csrf})).status_code == 303

        page = await thief.get("/attempts")
        assert page.status_code == 303 and page.headers["location"].startswith("/login")
        assert (await thief.get("/api/attempts")).status_code == 401
        stop = await thief.post("/api/attempts/1/stop", headers={"X-CSRF-Token": csrf})
        assert stop.status_code == 401


async def test_the_cookie_carries_a_random_id_and_no_token_material(running_app: FastAPI) -> None:
    async with browser(running_app) as client:
        await log_in(client, token=TOKEN)
        payload = client.cookies["launchdeck_session"].split(".")[0]
        session = json.loads(base64.b64decode(payload + "=" * (-len(payload) % 4)))
        assert set(session) == {"login", "csrf"}
        async with running_app.state.runtime.sessions.read() as db:
            rows = (await db.scalars(select(LoginSession))).all()
        assert len(rows) == 1 and session["login"] not in (rows[0].id_hash, rows[0].token_check)


async def test_a_user_logs_in_with_a_password_and_the_audit_names_them(running_app: FastAPI) -> None:
    await add_user(running_app, "ann", Role.OPERATOR)
    async with browser(running_app) as client:
        form = await client.get("/login")
        wrong = await client.post(
            "/login", data={"name": "ann", "password": "not it at all", "csrf_token": csrf_from(form.text)}
        )
        assert wrong.status_code == 401 and "Wrong user name or password." in wrong.text
        csrf = await log_in(client, name="ann", password=PASSWORD)
        await client.post("/logout", data={"csrf_token": csrf})
    async with running_app.state.runtime.sessions.read() as db:
        events = (await db.scalars(select(AuditEvent).order_by(AuditEvent.id))).all()
    assert [(e.actor, e.action) for e in events] == [("ann", "login-failed"), ("ann", "login"), ("ann", "logout")]


async def test_a_viewer_reads_but_may_not_change_anything(running_app: FastAPI) -> None:
    await add_user(running_app, "vic", Role.VIEWER)
    async with browser(running_app) as client:
        csrf = await log_in(client, name="vic", password=PASSWORD)
        assert (await client.get("/api/presets")).status_code == 200
        refused = await client.post(
            "/api/presets", json={"name": "p", "model_path": "m"}, headers={"X-CSRF-Token": csrf}
        )
        assert refused.status_code == 403
        assert refused.json() == {"detail": "this needs the operator role; vic has the viewer role"}


async def test_idle_and_old_logins_end(running_app: FastAPI) -> None:
    sessions = running_app.state.runtime.sessions
    for column, age in (("last_seen_at", timedelta(hours=13)), ("created_at", timedelta(days=15))):
        async with browser(running_app) as client:
            await log_in(client, token=TOKEN)
            async with sessions.write() as db:
                await db.execute(update(LoginSession).values({column: utcnow() - age}))
                await db.commit()
            assert (await client.get("/hosts")).status_code == 303, column


async def test_a_new_password_or_a_disabled_account_ends_that_persons_logins(running_app: FastAPI) -> None:
    await add_user(running_app, "bob", Role.VIEWER)
    sessions = running_app.state.runtime.sessions
    async with browser(running_app) as client:
        await log_in(client, name="bob", password=PASSWORD)
        async with sessions.write() as db:
            await users.set_password(db, "bob", "another long password")
        assert (await client.get("/hosts")).status_code == 303
        await log_in(client, name="bob", password="another long password")
        async with sessions.write() as db:
            await users.set_disabled(db, "bob", True)
        assert (await client.get("/hosts")).status_code == 303
        form = await client.get("/login")
        again = await client.post(
            "/login", data={"name": "bob", "password": "another long password", "csrf_token": csrf_from(form.text)}
        )
        assert again.status_code == 401


def test_users_cli_adds_lists_and_changes_accounts(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("LAUNCHDECK_DATA_DIR", str(tmp_path))
    monkeypatch.setattr("sys.stdin", io.StringIO(PASSWORD + "\n"))
    assert main(["users", "add", "ann", "--role", "operator", "--password-stdin"]) == 0
    monkeypatch.setattr("sys.stdin", io.StringIO("short\n"))
    assert main(["users", "add", "bob", "--password-stdin"]) == 1
    assert main(["users", "role", "ann", "admin"]) == 0
    assert main(["users", "disable", "ann"]) == 0
    assert main(["users", "role", "nobody", "viewer"]) == 1
    capsys.readouterr()
    assert main(["users", "list"]) == 0
    assert capsys.readouterr().out.split()[:3] == ["ann", "admin", "disabled"]
    engine = create_engine(f"sqlite:///{tmp_path / 'launchdeck.db'}")
    with engine.connect() as connection:  # each change is audited under the person at the terminal
        rows = connection.execute(text("SELECT actor, action, target FROM audit_event ORDER BY id")).all()
    engine.dispose()
    assert [(action, target) for _, action, target in rows] == [
        ("user-add", "ann"),
        ("user-role", "ann"),
        ("user-disable", "ann"),
    ]
    assert {actor for actor, _, _ in rows} == {cli_actor()} and cli_actor().endswith(" on the command line")


def test_logins_held_on_a_full_disk_are_bounded_the_oldest_dropped_first() -> None:
    held = HeldLogins(limit=2)
    for id_hash in ("first", "second", "third"):
        held.hold(LoginSession(id_hash=id_hash, user_id=None, token_check="", remote_addr="", created_at=utcnow()))
    assert [held.find(id_hash) is not None for id_hash in ("first", "second", "third")] == [False, True, True]
