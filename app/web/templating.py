"""Jinja2 templates; an htmx request gets one named block of the page instead of the whole page."""

from __future__ import annotations

import re
from typing import Any

from fastapi import Request
from fastapi.responses import HTMLResponse
from fastapi.templating import Jinja2Templates
from markupsafe import Markup, escape

from app import resources
from app.states import UNSTARTED_STATUSES, AttemptStatus, Role, SweepMode, SweepStatus
from app.web.deps import csrf_token, get_runtime

# Pages load only their own scripts and styles and cannot be framed by another site.
CONTENT_SECURITY_POLICY = (
    "default-src 'self'; script-src 'self'; style-src 'self' 'unsafe-inline'; img-src 'self' data:; "
    "connect-src 'self'; frame-ancestors 'none'; base-uri 'self'; form-action 'self'"
)

LINK = re.compile(r"https?://[^\s<>\"']+[^\s<>\"'.,;:!?)\]]")


def linkify(text: str | None) -> Markup:
    """Plain text (a hint a person wrote) as HTML: everything escaped, its http(s) addresses links."""
    text = text or ""
    pieces, last = [], 0
    for found in LINK.finditer(text):
        url = escape(found.group())
        pieces += [
            escape(text[last : found.start()]),
            Markup('<a href="{0}" rel="noopener noreferrer">{0}</a>').format(url),
        ]
        last = found.end()
    pieces.append(escape(text[last:]))
    return Markup("").join(pieces)


def gib(mib: int | None, unit: bool = True) -> str:
    """Memory as the pages show it: GiB with one decimal."""
    if mib is None:
        return "n/a"
    return f"{mib / 1024:.1f} GiB" if unit else f"{mib / 1024:.1f}"


templates = Jinja2Templates(directory=resources.folder("templates"))
templates.env.auto_reload = False  # the templates ship with the code: no stat of each file per page
# Pages compare values with the enums, never with copies of their strings.
templates.env.globals.update(
    AttemptStatus=AttemptStatus, UNSTARTED_STATUSES=UNSTARTED_STATUSES, SweepStatus=SweepStatus, SweepMode=SweepMode
)
templates.env.filters["linkify"] = linkify
templates.env.filters["gib"] = gib


def wants_fragment(request: Request) -> bool:
    """An htmx swap (not a boosted page load) wants just its fragment."""
    return request.headers.get("hx-request") == "true" and request.headers.get("hx-boosted") != "true"


def _full_context(request: Request, context: dict[str, Any]) -> dict[str, Any]:
    """What every page gets. `can_operate` and `can_administer` follow from the caller's role, so
    pages offer only what the caller may do (the routes check it again)."""
    runtime = get_runtime(request)
    login = getattr(request.state, "login", None)  # set by the login lookup every page makes
    role = login.role if login is not None else None
    return {
        "request": request,
        "csrf_token": csrf_token(request),
        "htmx_version": runtime.htmx_version,
        "htmx_sse_version": runtime.htmx_sse_version,
        "disk_warning": runtime.data_dir.warning(),  # every page says so while the data dir is full
        "can_operate": role is not None and role.allows(Role.OPERATOR),
        "can_administer": role is not None and role.allows(Role.ADMIN),
        **context,
    }


def render_block(request: Request, name: str, block: str, context: dict[str, Any]) -> str:
    """One named block of a page, as HTML (for htmx swaps and server-sent events)."""
    template = templates.get_template(name)
    return "".join(template.blocks[block](template.new_context(_full_context(request, context))))


def render(
    request: Request, name: str, context: dict[str, Any], *, block: str | None = None, status_code: int = 200
) -> HTMLResponse:
    """Renders a page, or only `block` of it for an htmx swap."""
    if block is not None and wants_fragment(request):
        response = HTMLResponse(render_block(request, name, block, context), status_code=status_code)
    else:
        response = templates.TemplateResponse(request, name, _full_context(request, context), status_code=status_code)
    response.headers["Vary"] = "HX-Request, HX-Boosted"
    response.headers["Content-Security-Policy"] = CONTENT_SECURITY_POLICY
    return response
