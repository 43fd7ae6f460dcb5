"""People with accounts: one added with the tests' password, a browser-like client of the app, a
login through the form with a user's fields (name and password, or the token), and a hand clock for
the login limiter."""

from __future__ import annotations

from fastapi import FastAPI
from httpx import ASGITransport, AsyncClient
from sqlalchemy import delete

from app.accounts import tokens, users
from app.db.models import LoginLimit
from app.states import Role
from tests.support.web import csrf_from

PASSWORD = "correct horse battery"


class Clock:
    """A clock the test moves by hand, for the login limiter: a lock's remaining seconds stay what
    the test set however slow the machine."""

    def __init__(self, now: float = 1000.0) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


async def add_user(app: FastAPI, name: str, role: Role) -> None:
    async with app.state.runtime.sessions.write() as session:
        await users.add_user(session, name=name, password=PASSWORD, role=role)


async def forget_failed_logins(app: FastAPI) -> None:
    """Clears every failed-login limit, as a quiet hour would (they live in the database)."""
    async with app.state.runtime.sessions.write() as session:
        await session.execute(delete(LoginLimit))
        await session.commit()


async def log_in(client: AsyncClient, **fields: str) -> str:
    """Logs in through the form with `fields`; returns the page's CSRF token."""
    form = await client.get("/login")
    answer = await client.post("/login", data={**fields, "next": "/hosts", "csrf_token": csrf_from(form.text)})
    assert answer.status_code == 303, answer.text
    return csrf_from((await client.get("/hosts")).text)


def browser(app: FastAPI) -> AsyncClient:
    return AsyncClient(transport=ASGITransport(app=app), base_url="http://testserver")


async def person(app: FastAPI, name: str, role: Role, labels: list[str] | None) -> AsyncClient:
    """A client with an API token of a new account `name`, limited to hosts with `labels`."""
    async with app.state.runtime.sessions.write() as session:
        user = await users.add_user(session, name=name, password=PASSWORD, role=role)
        await users.set_host_labels(session, name, labels)
        _, secret = await tokens.create_token(session, user=user, name="cli", role=role, actor=name)
    return AsyncClient(
        transport=ASGITransport(app=app), base_url="http://testserver", headers={"Authorization": f"Bearer {secret}"}
    )
