"""Request ids: every answer names its request in X-Request-ID, keeping a client's or proxy's own
id when it is a plain token, and every record logged while the request is served carries it."""

from __future__ import annotations

import logging
import re

import pytest
from httpx import ASGITransport, AsyncClient
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import PlainTextResponse
from starlette.routing import Route

from app.logging_setup import RequestContext
from app.web.request_ids import RequestIds

GENERATED = re.compile(r"[0-9a-f]{32}")


async def test_an_answer_sends_back_the_id_it_was_given(app_client: AsyncClient) -> None:
    response = await app_client.get("/api/health", headers={"X-Request-ID": "lb-7f3a.42:1"})
    assert response.headers["x-request-id"] == "lb-7f3a.42:1"


@pytest.mark.parametrize("given", [None, "", "two words", '{"forged": true}', "x" * 129])
async def test_an_id_that_is_no_plain_token_is_replaced(app_client: AsyncClient, given: str | None) -> None:
    headers = {} if given is None else {"X-Request-ID": given}
    first, second = [(await app_client.get("/api/health", headers=headers)).headers["x-request-id"] for _ in range(2)]
    assert GENERATED.fullmatch(first) and GENERATED.fullmatch(second)
    assert first != second


async def test_records_logged_while_serving_carry_its_id(caplog: pytest.LogCaptureFixture) -> None:
    async def route(request: Request) -> PlainTextResponse:
        logging.getLogger("tests.served").warning("serving %s", request.url.path)
        return PlainTextResponse("ok")

    caplog.handler.addFilter(RequestContext())
    app = RequestIds(Starlette(routes=[Route("/", route)]))
    async with AsyncClient(transport=ASGITransport(app=app), base_url="http://testserver") as client:
        given = await client.get("/", headers={"X-Request-ID": "given-1"})
        made = await client.get("/")
    logged = [getattr(record, "request_id", None) for record in caplog.records if record.name == "tests.served"]
    assert logged == ["given-1", made.headers["x-request-id"]]
    assert given.headers["x-request-id"] == "given-1"
