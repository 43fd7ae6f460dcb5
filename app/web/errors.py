"""Turns domain errors and framework errors into answers: JSON for /api, pages for browsers."""

from __future__ import annotations

import logging
from urllib.parse import quote

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, RedirectResponse, Response
from sqlalchemy.exc import InterfaceError, OperationalError
from starlette.exceptions import HTTPException
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from app.disk import is_disk_full
from app.errors import (
    AccessRefused,
    Conflict,
    DatabaseUnavailable,
    DiskFull,
    FailedBefore,
    HostError,
    HostUnavailable,
    InvalidInput,
    InvalidPattern,
    LaunchdeckError,
    LaunchRefused,
    NotFound,
    PreflightBlocked,
    SearchBusy,
    SearchOutOfMemory,
    SearchTooSlow,
)
from app.web.deps import LoginRequired, get_runtime, session_login
from app.web.templating import render

log = logging.getLogger(__name__)

STATUS_BY_ERROR: list[tuple[type[LaunchdeckError], int]] = [
    (NotFound, 404),
    (AccessRefused, 403),
    (InvalidPattern, 400),
    (SearchTooSlow, 422),
    (SearchOutOfMemory, 422),
    (InvalidInput, 422),
    (PreflightBlocked, 422),
    (FailedBefore, 409),
    (Conflict, 409),
    (SearchBusy, 503),
    (HostUnavailable, 503),
    (DatabaseUnavailable, 503),
    (DiskFull, 507),
    (HostError, 502),
]


def install_error_handlers(app: FastAPI) -> None:
    app.add_exception_handler(LaunchdeckError, _domain_error)
    app.add_exception_handler(RequestValidationError, _validation_error)
    app.add_exception_handler(HTTPException, _http_error)
    app.add_exception_handler(LoginRequired, _login_required)
    app.add_exception_handler(UnicodeEncodeError, _not_unicode)
    app.add_exception_handler(OperationalError, _database_away)
    app.add_exception_handler(InterfaceError, _database_away)
    app.add_exception_handler(Exception, _unexpected_error)


async def _answer(request: Request, status: int, message: str, **extra: object) -> Response:
    """JSON for the API and for clients that ask for no HTML; a page in the layout (with its menu
    when logged in) for browsers, including htmx's requests, which accept anything."""
    from_browser = "text/html" in request.headers.get("accept", "") or request.headers.get("hx-request") == "true"
    if request.url.path.startswith("/api") or not from_browser:
        return JSONResponse({"detail": message, **extra}, status_code=status)
    # An unexpected error is answered outside the session middleware: no session, no menu.
    user = await session_login(request, get_runtime(request)) if "session" in request.scope else None
    context = {"status": status, "message": message, "user": user}
    return render(request, "error.html", context, block="error", status_code=status)


def status_of(exc: LaunchdeckError) -> int:
    return next((code for kind, code in STATUS_BY_ERROR if isinstance(exc, kind)), 400)


async def _domain_error(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, LaunchdeckError)
    details = exc.details if isinstance(exc, LaunchRefused) else {}
    return await _answer(request, status_of(exc), str(exc), **details)


async def _validation_error(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, RequestValidationError)
    problems = []
    for error in exc.errors():
        location = ".".join(str(part) for part in error["loc"] if part not in ("body", "query", "path"))
        problems.append(f"{location}: {error['msg']}" if location else error["msg"])
    problems = list(dict.fromkeys(problems))  # a path parameter that a dependency reads too is named once
    return await _answer(request, 422, "; ".join(problems) or "invalid request", errors=problems)


async def _http_error(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, HTTPException)
    response = await _answer(request, exc.status_code, str(exc.detail))
    response.headers.update(exc.headers or {})
    return response


async def _login_required(request: Request, exc: Exception) -> Response:
    target = request.url.path + (f"?{request.url.query}" if request.url.query else "")
    login = f"/login?next={quote(target, safe='/')}"
    if request.headers.get("hx-request"):
        # The browser would follow a redirect inside the XHR and swap the login form into the
        # page; htmx turns this header into a full navigation instead.
        return Response(status_code=204, headers={"HX-Redirect": login})
    return RedirectResponse(login, status_code=303)


async def _database_away(request: Request, exc: Exception) -> Response:
    """The database did not answer (restarting, failing over, every connection busy): the request
    changed nothing, and may be made again in a moment."""
    log.warning("%s %s: the database did not answer: %s", request.method, request.url.path, exc)
    return await _answer(request, 503, "the database does not answer now; try again in a moment")


async def _not_unicode(request: Request, exc: Exception) -> Response:
    """Text with a lone surrogate (JSON's "\\ud800"), which no UTF-8 file or database column can
    hold, fails where it is written; the unit of work rolled back, and the person hears why."""
    if "surrogate" in str(exc):
        return await _answer(request, 422, "the request holds text that is not Unicode (a lone surrogate code point)")
    return await _unexpected_error(request, exc)


class UnexpectedErrors:
    """Answers an error no handler knows with a 500 page or JSON, and ends there. Starlette's own
    handler for Exception answers too but then raises again, and uvicorn closes the connection
    of an answer that raised, so a browser's keep-alive connection (and the htmx requests queued
    on it) would go with each 500. Inside the session middleware: the page keeps its menu."""

    def __init__(self, app: ASGIApp):
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        started = False

        async def watched(message: Message) -> None:
            nonlocal started
            started = started or message["type"] == "http.response.start"
            await send(message)

        try:
            await self.app(scope, receive, watched)
        except Exception as exc:
            if started:  # part of the answer is out: only closing the connection can end it
                raise
            response = await _unexpected_error(Request(scope, receive), exc)
            await response(scope, receive, send)


async def _unexpected_error(request: Request, exc: Exception) -> Response:
    if is_disk_full(exc):  # a write no domain function turned into DiskFull (the database's are)
        full = get_runtime(request).data_dir.full()
        log.warning("%s %s: %s (%s)", request.method, request.url.path, full, exc)
        return await _answer(request, status_of(full), str(full))
    log.exception("unhandled error in %s %s", request.method, request.url.path)
    return await _answer(request, 500, "internal error; the server log has the details")
