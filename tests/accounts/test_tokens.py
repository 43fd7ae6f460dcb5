"""People's API tokens: made on their page or with `launchdeck tokens`, shown once, used as
bearer tokens with their role, ended by expiry, revoking or the owner's account; never kept or
logged in clear."""

from __future__ import annotations

import functools
import io
import json
import logging
import re
from datetime import timedelta
from pathlib import Path

import pytest
from fastapi import FastAPI
from httpx import AsyncClient
from sqlalchemy import update

from app.accounts import tokens, users
from app.cli import main
from app.clock import utcnow
from app.db.models import ApiToken
from app.states import Role
from tests.support.accounts import PASSWORD, add_user, browser, log_in
from tests.support.cli import cli
from tests.support.launching import FINAL, launch, wait_for
from tests.support.served import served
from tests.support.web import read_events

SECRET = re.compile(r"ldk_[A-Za-z0-9_-]{43}")


def bearer(secret: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {secret}"}


async def make_token(client: AsyncClient, csrf: str, **fields: str) -> str:
    """Makes a token on the page; returns the secret it shows."""
    answer = await client.post("/account/tokens", data={"expires_days": "", **fields, "csrf_token": csrf})
    assert answer.status_code == 201, answer.text
    assert answer.headers["cache-control"] == "no-store"
    assert "it is not shown again" in answer.text
    found = SECRET.findall(answer.text)
    assert found, answer.text
    return found[0]


async def token_for(app: FastAPI, user: str, name: str, role: Role | None = None) -> str:
    async with app.state.runtime.sessions.write() as session:
        owner = await users.get_user(session, user)
        _, secret = await tokens.create_token(session, user=owner, name=name, role=role, actor="test")
    return secret


async def test_a_token_made_on_the_page_is_shown_once_and_acts_with_its_role(running_app: FastAPI) -> None:
    await add_user(running_app, "ann", Role.OPERATOR)
    async with browser(running_app) as client, browser(running_app) as script:
        csrf = await log_in(client, name="ann", password=PASSWORD)
        secret = await make_token(client, csrf, name="dashboards", role="viewer", expires_days="30")

        page = await client.get("/account/tokens")
        assert page.status_code == 200 and secret not in page.text
        assert "dashboards" in page.text and secret[:12] + "…" in page.text and "viewer" in page.text

        assert (await script.get("/api/attempts", headers=bearer(secret))).status_code == 200
        launch = await script.post(
            "/api/attempts", json={"preset": "p", "host": "h", "gpus": [0]}, headers=bearer(secret)
        )
        assert launch.status_code == 403 and launch.json()["detail"] == (
            "this needs the operator role; ann has the viewer role"
        )
        # Neither the API nor any page gives the secret out again.
        for path in ("/api/audit", "/audit", "/account/tokens"):
            answer = await client.get(path)
            assert answer.status_code == 200 and secret not in answer.text


async def test_a_token_above_its_owners_role_is_refused(running_app: FastAPI) -> None:
    await add_user(running_app, "val", Role.VIEWER)
    async with browser(running_app) as client:
        csrf = await log_in(client, name="val", password=PASSWORD)
        page = await client.get("/account/tokens")
        assert "<option selected>viewer</option>" in page.text and ">operator<" not in page.text
        answer = await client.post("/account/tokens", data={"name": "x", "role": "admin", "csrf_token": csrf})
        assert answer.status_code == 422
        assert "a token&#39;s role is at most its owner&#39;s: val has the viewer role, not admin" in answer.text
        assert not SECRET.search(answer.text)
        no_csrf = await client.post("/account/tokens", data={"name": "x", "role": "viewer"})
        assert no_csrf.status_code == 403
    async with running_app.state.runtime.sessions.read() as session:
        assert await tokens.list_tokens(session) == []


async def test_expired_revoked_and_disabled_owners_tokens_are_refused(running_app: FastAPI) -> None:
    await add_user(running_app, "ann", Role.OPERATOR)
    await add_user(running_app, "bob", Role.OPERATOR)
    expiring, revoked, disabled = (
        await token_for(running_app, "ann", "expiring"),
        await token_for(running_app, "ann", "revoked"),
        await token_for(running_app, "bob", "bobs"),
    )
    async with browser(running_app) as client, browser(running_app) as script:
        for secret in (expiring, revoked, disabled):
            assert (await script.get("/api/hosts", headers=bearer(secret))).status_code == 200
        async with running_app.state.runtime.sessions.write() as session:
            await session.execute(
                update(ApiToken).where(ApiToken.name == "expiring").values(expires_at=utcnow() - timedelta(seconds=1))
            )
            await session.commit()
            await users.set_disabled(session, "bob", True)

        csrf = await log_in(client, name="ann", password=PASSWORD)
        page = await client.get("/account/tokens")
        assert "expired" in page.text and "bobs" not in page.text  # ann sees only her own
        revoked_id = re.search(r'data-token="(\d+)">\s*<td>revoked</td>', page.text)
        assert revoked_id, page.text
        async with running_app.state.runtime.sessions.read() as session:
            bobs_id = next(t.id for t in await tokens.list_tokens(session, user_name="bob"))
        assert (await client.post(f"/account/tokens/{bobs_id}/revoke", data={"csrf_token": csrf})).status_code == 404
        done = await client.post(f"/account/tokens/{revoked_id[1]}/revoke", data={"csrf_token": csrf})
        assert done.status_code == 303 and "revoked 20" in (await client.get("/account/tokens")).text

        for secret in (expiring, revoked, disabled, "ldk_" + "x" * 43, disabled + "x"):
            answer = await script.get("/api/hosts", headers=bearer(secret))
            assert answer.status_code == 401 and answer.json()["detail"] == "invalid API token", secret


async def test_the_effective_role_is_the_lower_of_the_tokens_and_the_owners_now(running_app: FastAPI) -> None:
    await add_user(running_app, "ann", Role.ADMIN)
    secret = await token_for(running_app, "ann", "ops", Role.OPERATOR)
    async with browser(running_app) as script:
        assert (await script.get("/api/audit", params={"actor": "bob"}, headers=bearer(secret))).status_code == 200
        preset = {"name": "p1", "model_path": "m"}
        assert (await script.post("/api/presets", json=preset, headers=bearer(secret))).status_code == 201
        async with running_app.state.runtime.sessions.write() as session:
            await users.set_role(session, "ann", Role.VIEWER)
        refused = await script.post("/api/presets", json=preset | {"name": "p2"}, headers=bearer(secret))
        assert refused.status_code == 403 and refused.json()["detail"].endswith("ann has the viewer role")


async def test_the_audit_names_the_token_an_api_call_came_with(running_app: FastAPI) -> None:
    await add_user(running_app, "ann", Role.OPERATOR)
    secret = await token_for(running_app, "ann", "ci")
    async with browser(running_app) as script, browser(running_app) as client:
        answer = await script.post("/api/presets", json={"name": "p1", "model_path": "m"}, headers=bearer(secret))
        assert answer.status_code == 201
        csrf = await log_in(client, name="ann", password=PASSWORD)
        page_made = await client.post(
            "/api/presets", json={"name": "p2", "model_path": "m"}, headers={"X-CSRF-Token": csrf}
        )
        assert page_made.status_code == 201
        events = (await script.get("/api/audit", headers=bearer(secret))).json()
        made = {e["target"]: e for e in events if e["action"] == "preset-create"}
        assert made["p1"]["actor"] == "ann" and made["p1"]["detail"]["via"] == "token ci"
        assert made["p1"]["remote_addr"] == made["p2"]["remote_addr"] == "127.0.0.1"  # where each came from
        assert made["p2"]["actor"] == "ann" and "via" not in made["p2"]["detail"]
        assert "via=token ci" in (await client.get("/audit")).text


def test_tokens_cli_creates_lists_and_revokes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("LAUNCHDECK_DATA_DIR", str(tmp_path))
    monkeypatch.setattr("sys.stdin", io.StringIO(PASSWORD + "\n"))
    assert main(["users", "add", "ann", "--role", "operator", "--password-stdin"]) == 0
    capsys.readouterr()
    assert main(["tokens", "create", "ci", "--user", "ann", "--role", "viewer", "--expires-days", "7"]) == 0
    made = capsys.readouterr()
    secret = made.out.strip()
    assert SECRET.fullmatch(secret) and "token 1 'ci' for ann (viewer, expires 20" in made.err
    assert main(["tokens", "create", "--name", "laptop", "--user", "ann"]) == 0
    assert main(["tokens", "create", "--user", "ann", "--role", "admin"]) == 1
    assert "a token's role is at most its owner's: ann has the operator role, not admin" in capsys.readouterr().err
    assert main(["tokens", "create", "x", "--user", "nobody"]) == 1
    assert main(["tokens", "revoke", "1"]) == 0
    assert main(["tokens", "revoke", "99"]) == 1
    capsys.readouterr()
    assert main(["tokens", "list", "--user", "ann"]) == 0
    listed = capsys.readouterr().out
    assert secret not in listed
    rows = [line.split() for line in listed.splitlines()]
    assert [(r[0], r[2], r[4], r[5]) for r in rows] == [
        ("2", "laptop", "operator", "active"),
        ("1", "ci", "viewer", "revoked"),
    ]
    assert rows[1][3] == secret[:12] + "…"
    assert main(["tokens", "list", "--user", "ann", "--json"]) == 0
    as_json = capsys.readouterr().out
    assert secret not in as_json
    assert [(t["id"], t["user"], t["name"], t["prefix"], t["role"], t["state"]) for t in json.loads(as_json)] == [
        (2, "ann", "laptop", rows[0][3].removesuffix("…"), "operator", "active"),
        (1, "ann", "ci", secret[:12], "viewer", "revoked"),
    ]
    assert main(["users", "list", "--json"]) == 0
    (ann,) = json.loads(capsys.readouterr().out)
    assert (ann["name"], ann["role"], ann["disabled"], ann["host_labels"]) == ("ann", "operator", False, None)


async def test_the_cli_sends_the_token_from_the_environment_or_its_client_file(
    running_app: FastAPI, tmp_path: Path
) -> None:
    await add_user(running_app, "ann", Role.OPERATOR)
    secret = await token_for(running_app, "ann", "laptop", Role.VIEWER)
    revoked = await token_for(running_app, "ann", "old")
    async with running_app.state.runtime.sessions.write() as session:
        old = next(t for t in await tokens.list_tokens(session) if t.name == "old")
        await tokens.revoke_token(session, old.id, actor="test")
    config = tmp_path / "config"
    (config / "launchdeck").mkdir(parents=True)
    client_file = config / "launchdeck" / "client.toml"
    env = {"XDG_CONFIG_HOME": str(config), "LAUNCHDECK_DATA_DIR": str(tmp_path / "elsewhere")}
    launchdeck = functools.partial(cli, env=env, unset=["LAUNCHDECK_TOKEN", "LAUNCHDECK_URL"], merge=True)
    async with served(running_app) as url:
        client_file.write_text(f'url = "{url}"\ntoken = "{secret}"\n')
        client_file.chmod(0o600)
        code, output, _ = await launchdeck("attempts")  # url and token from the client file
        assert code == 0, output
        # the environment's comes first
        code, output, _ = await launchdeck("attempts", env=env | {"LAUNCHDECK_TOKEN": revoked})
        assert code == 1 and output.strip() == "launchdeck: 401: invalid API token"
        code, output, _ = await launchdeck("launch", "p", "h")
        assert code == 1 and output.strip() == "launchdeck: 403: this needs the operator role; ann has the viewer role"
        client_file.chmod(0o644)
        code, output, _ = await launchdeck("attempts")
        assert code == 2 and output.strip() == (
            f"launchdeck: {client_file} may be read by other users (mode 644): `chmod 600 {client_file}`; "
            "it was not used"
        )


async def test_no_token_or_password_is_kept_or_logged_in_clear(
    running_app: FastAPI, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    await add_user(running_app, "ann", Role.OPERATOR)
    async with browser(running_app) as client, browser(running_app) as script:
        csrf = await log_in(client, name="ann", password=PASSWORD)
        secret = await make_token(client, csrf, name="kept-as-hash")
        assert (await script.get("/api/attempts", headers=bearer(secret))).status_code == 200
        assert (
            await script.post("/api/presets", json={"name": "p", "model_path": "m"}, headers=bearer(secret))
        ).status_code == 201
        assert (await script.get("/api/hosts", headers=bearer(secret + "x"))).status_code == 401
    async with running_app.state.runtime.sessions.read() as session:
        assert [t.last_used_at is not None for t in await tokens.list_tokens(session)] == [True]
    data_dir = running_app.state.runtime.settings.data_dir
    kept = b"".join(path.read_bytes() for path in data_dir.rglob("*") if path.is_file())
    assert b"kept-as-hash" in kept  # what is read is where the token's row went (the WAL included)
    for clear in (secret, PASSWORD):
        assert clear.encode() not in kept
        assert clear not in caplog.text


async def test_a_token_launches_and_follows_the_log_and_the_launch_names_it(
    api: AsyncClient, running_app: FastAPI
) -> None:
    await add_user(running_app, "ann", Role.OPERATOR)
    secret = await token_for(running_app, "ann", "ci")
    silent = {"name": "silent", "model_path": "meta-llama/Llama-3.1-8B-Instruct", "python": "true"}
    assert (await api.post("/api/presets", json=silent)).status_code == 201
    async with browser(running_app) as script:
        script.headers.update(bearer(secret))
        attempt = await wait_for(script, await launch(script, "silent", "rtxpro-01", [0]), FINAL)
        assert attempt["launched_by"] == "ann"
        events = await read_events(
            running_app,
            f"/api/attempts/{attempt['id']}/events?offset=0",
            count=1,
            headers={"authorization": f"Bearer {secret}"},
        )
        assert events == [("end", "0", '{"offset": 0}')]
        audit = (await script.get("/api/audit")).json()
        assert [(e["action"], e["detail"]["via"]) for e in audit if e["action"] == "launch"] == [("launch", "token ci")]
