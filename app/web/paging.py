"""Keyset pages for the API's lists: each answer is one bounded page, and a `Link` header with
rel="next" (RFC 8288) gives the next page's address, the same query with `before` set to the
cursor of the last row sent. The body stays a plain JSON list, so clients that read one page keep
working; an absent header means there is nothing older."""

from __future__ import annotations

from fastapi import Request, Response


def link_next(request: Request, response: Response, cursor: int | str | None) -> None:
    if cursor is None:
        return
    url = request.url.include_query_params(before=cursor)
    response.headers["Link"] = f'<{url.path}?{url.query}>; rel="next"'
