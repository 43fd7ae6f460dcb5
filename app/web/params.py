"""Integers a request may carry: whatever a route does with one (a database key, an offset into a
file, a count), it must fit in 64 bits, or SQLite and PostgreSQL raise OverflowError and the
request would end in a 500. Declared once here, so every route and body model refuses a larger
number the same way: 422 naming the parameter."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Annotated

from pydantic import Field

from app.errors import InvalidInput

INT64_MIN, INT64_MAX = -(2**63), 2**63 - 1

Int64 = Annotated[int, Field(ge=INT64_MIN, le=INT64_MAX)]


def compared_ids(a: int | None, b: int | None, ids: list[str] | None) -> list[int]:
    """The attempts a comparison names: `ids` (comma-separated, or repeated as a form's checkboxes
    send them) or the older `a` and `b`; how many may be compared is the comparison's to say."""
    if not ids:
        if a is None or b is None:
            raise InvalidInput("name the attempts to compare: ids=1,2,3 (2 to 4 of them), or a and b")
        return [a, b]
    found = []
    for piece in (item.strip() for value in ids for item in value.split(",")):
        if not piece:
            continue
        if not piece.isdigit() or int(piece) > INT64_MAX:
            raise InvalidInput(f"ids: {piece[:40]!r} is not an attempt number")
        found.append(int(piece))
    return found


def moment(value: str | None, name: str) -> datetime | None:
    """A point in time a filter gives, as ISO 8601 (`2026-05-01`, `2026-05-01T14:30`, or with an
    offset); without an offset it is UTC, as the pages show times. Empty: no bound."""
    if not value or not value.strip():
        return None
    try:
        found = datetime.fromisoformat(value.strip())
    except ValueError:
        raise InvalidInput(f"{name}: {value[:40]!r} is not a date or time such as 2026-05-01T14:30") from None
    return found.replace(tzinfo=UTC) if found.tzinfo is None else found
