"""The first admin. The one-time setup link: `launchdeck serve` on an empty data dir prints it, and
it makes the first admin once; a wrong or spent secret is a plain 404, and a dashboard with accounts
prints none. The password file (a compose secret): read on the first start only."""

from __future__ import annotations

import asyncio
import re
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from sqlalchemy.ext.asyncio import AsyncEngine

from app.accounts import users
from app.config import Settings
from app.db.models import User
from app.states import Role
from tests.support.accounts import PASSWORD
from tests.support.cli import cli_env
from tests.support.faults import Process
from tests.support.servers import free_port
from tests.support.waiting import wait_until
from tests.support.web import csrf_from


def serve(data_dir: Path, tmp_path: Path, **more: str) -> Process:
    env = cli_env(
        {
            "LAUNCHDECK_DATA_DIR": str(data_dir),
            "LAUNCHDECK_PORT": str(free_port()),
            "LAUNCHDECK_COOKIE_SECURE": "false",
            "LAUNCHDECK_KNOWN_HOSTS": str(data_dir / "known_hosts"),
            "LAUNCHDECK_SSH_CONFIG": str(data_dir / "no-ssh-config"),
            **more,
        },
        clean=True,
    )
    return Process(["serve"], env, tmp_path / "serve.out")


def wait_answering(dashboard: Process) -> str:
    """Waits until the dashboard answers; returns what it printed by then."""
    port = dashboard.env["LAUNCHDECK_PORT"]

    def answering() -> str:
        assert dashboard.popen is not None and dashboard.popen.poll() is None, dashboard.tail()
        try:
            httpx.get(f"http://127.0.0.1:{port}/api/health", timeout=2).raise_for_status()
        except httpx.HTTPError:
            return ""
        return dashboard.output.read_text()

    return str(wait_until(answering, 60, "the dashboard did not answer"))


@pytest.fixture
def started(tmp_path: Path) -> Iterator[tuple[Process, str]]:
    """`launchdeck serve` on an empty data dir, answering; and what it printed by then."""
    dashboard = serve(tmp_path / "data", tmp_path)
    dashboard.spawn()
    try:
        yield dashboard, wait_answering(dashboard)
    finally:
        dashboard.stop()


def test_the_printed_link_creates_the_first_admin_once(started: tuple[Process, str]) -> None:
    dashboard, printed = started
    port = dashboard.env["LAUNCHDECK_PORT"]
    found = re.search(rf"create the first admin, once, at (http://127\.0\.0\.1:{port}/setup/(\S+))", printed)
    assert found, printed
    link, secret = found[1], found[2]
    with httpx.Client(timeout=10) as browser:
        form = browser.get(link)
        assert form.status_code == 200 and "Create the first admin" in form.text
        fields = {"name": "ada", "password": PASSWORD, "again": PASSWORD, "csrf_token": csrf_from(form.text)}
        differ = browser.post(link, data=fields | {"again": "something else"})
        assert differ.status_code == 422 and "the password and its repetition differ." in differ.text
        created = browser.post(link, data=fields)
        assert (created.status_code, created.headers["location"]) == (303, "/users")
        page = browser.get(f"http://127.0.0.1:{port}/users")
        assert page.status_code == 200 and 'data-user="ada"' in page.text  # logged in, as an admin
        assert "admin" in re.search(r'data-user="ada".*?</tr>', page.text, re.S)[0]  # type: ignore[index]
        audit = browser.get(f"http://127.0.0.1:{port}/audit").text
        assert "user-add" in audit and "setup link" in audit
        assert browser.get(link).status_code == 404
        assert browser.post(link, data=fields | {"name": "eve"}).status_code == 404
    with httpx.Client(timeout=10) as stranger:
        assert stranger.get(link).status_code == 404
    with httpx.Client(timeout=10) as login:
        form = login.get(f"http://127.0.0.1:{port}/login")
        fields = {"name": "ada", "password": PASSWORD, "csrf_token": csrf_from(form.text)}
        assert login.post(f"http://127.0.0.1:{port}/login", data=fields).status_code == 303
    assert secret not in (Path(dashboard.env["LAUNCHDECK_DATA_DIR"]) / "launchdeck.db").read_bytes().decode("latin-1")


def test_a_wrong_secret_is_a_404_and_the_access_token_still_logs_in(started: tuple[Process, str]) -> None:
    dashboard, _ = started
    base = f"http://127.0.0.1:{dashboard.env['LAUNCHDECK_PORT']}"
    with httpx.Client(timeout=10) as browser:
        assert browser.get(f"{base}/setup/not-the-secret").status_code == 404
        form = browser.get(f"{base}/login")
        fields = {"name": "ada", "password": PASSWORD, "again": PASSWORD, "csrf_token": csrf_from(form.text)}
        assert browser.post(f"{base}/setup/not-the-secret", data=fields).status_code == 404
        token = (Path(dashboard.env["LAUNCHDECK_DATA_DIR"]) / "access-token").read_text().strip()
        fields = {"token": token, "csrf_token": csrf_from(form.text)}
        assert browser.post(f"{base}/login", data=fields).status_code == 303
        assert browser.get(f"{base}/users").status_code == 200


async def test_no_link_is_printed_when_an_account_exists(tmp_path: Path) -> None:
    from app import db

    data_dir = tmp_path / "data"
    url = Settings(data_dir=data_dir).resolved_database_url()
    db.upgrade(url)
    engine = db.create_engine(url)
    try:
        async with db.session_factory(engine)() as session:
            await users.add_user(session, name="ada", password=PASSWORD, role=Role.ADMIN)
    finally:
        await engine.dispose()
    dashboard = serve(data_dir, tmp_path)
    dashboard.spawn()
    try:
        printed = wait_answering(dashboard)
        assert "launchdeck dashboard:" in printed and "setup" not in printed
    finally:
        dashboard.stop()


def log_in(base: str, name: str, password: str) -> int:
    """The login form's answer. Its cookie is Secure, which httpx keeps from plain http: it is
    carried by hand, as a browser on localhost carries it."""
    with httpx.Client(timeout=10) as browser:
        form = browser.get(f"{base}/login")
        fields = {"name": name, "password": password, "csrf_token": csrf_from(form.text)}
        cookies = "; ".join(f"{cookie.name}={cookie.value}" for cookie in browser.cookies.jar)
        return browser.post(f"{base}/login", data=fields, headers={"Cookie": cookies}).status_code


def test_a_container_first_started_beyond_loopback_makes_its_admin_from_the_password_file(tmp_path: Path) -> None:
    """As docker compose starts it on an empty volume: bound to 0.0.0.0 with no account, which alone
    is refused; the file makes the admin, once, and a later start leaves the password as it is."""
    secret = tmp_path / "admin-password"
    secret.write_text(PASSWORD + "\n")  # as `echo` writes it
    exposed = {"LAUNCHDECK_BIND": "0.0.0.0", "LAUNCHDECK_COOKIE_SECURE": "true", "LAUNCHDECK_ADMIN_NAME": "ops"}
    for start, file_says in enumerate((PASSWORD, "another password entirely")):
        secret.write_text(file_says + "\n")
        (tmp_path / f"start-{start}").mkdir()
        dashboard = serve(
            tmp_path / "data", tmp_path / f"start-{start}", LAUNCHDECK_ADMIN_PASSWORD_FILE=str(secret), **exposed
        )
        dashboard.spawn()
        try:
            printed = wait_answering(dashboard)
            assert ("created the first admin, ops, from LAUNCHDECK_ADMIN_PASSWORD_FILE" in printed) == (start == 0)
            assert "setup/" not in printed
            base = f"http://127.0.0.1:{dashboard.env['LAUNCHDECK_PORT']}"
            assert log_in(base, "ops", PASSWORD) == 303
            assert log_in(base, "ops", "another password entirely") == 401
        finally:
            dashboard.stop()


@pytest.mark.parametrize("problem", ["missing", "short"])
def test_a_password_file_that_cannot_make_the_admin_is_a_sentence_and_exit_2(tmp_path: Path, problem: str) -> None:
    secret = tmp_path / "admin-password"
    if problem == "short":
        secret.write_text("short\n")
    dashboard = serve(tmp_path / "data", tmp_path, LAUNCHDECK_ADMIN_PASSWORD_FILE=str(secret))
    dashboard.spawn()
    assert dashboard.popen is not None and dashboard.popen.wait(60) == 2
    said = dashboard.output.read_text()
    if problem == "missing":
        assert f"launchdeck: LAUNCHDECK_ADMIN_PASSWORD_FILE: cannot read {secret}: [Errno 2]" in said
    else:
        assert "launchdeck: LAUNCHDECK_ADMIN_PASSWORD_FILE: a password has at least 8 characters" in said


async def test_replicas_started_together_with_the_password_file_make_one_admin(
    database_url: str, tmp_path: Path
) -> None:
    """Each replica reads the file while no account exists; one makes the admin, the others find it made."""
    from app import db
    from app.accounts import setup

    secret = tmp_path / "admin-password"
    secret.write_text(PASSWORD + "\n")
    db.upgrade(database_url)
    engines = [db.create_engine(database_url) for _ in range(3)]
    try:

        async def start(engine: AsyncEngine) -> User | None:
            async with db.session_factory(engine)() as session:
                return await setup.admin_from_file(session, name="ops", password_file=secret)

        made = await asyncio.gather(*(start(engine) for engine in engines))
        assert [user.name for user in made if user is not None] == ["ops"]
    finally:
        await asyncio.gather(*(engine.dispose() for engine in engines))
