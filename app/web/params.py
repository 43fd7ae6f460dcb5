"""Integers a request may carry: whatever a route does with one (a database key, an offset into a
file, a count), it must fit in 64 bits, or SQLite and PostgreSQL raise OverflowError and the
request would end in a 500. Declared once here, so every route and body model refuses a larger
number the same way: 422 naming the parameter."""

from __future__ import annotations

from typing import Annotated

from pydantic import Field

INT64_MIN, INT64_MAX = -(2**63), 2**63 - 1

Int64 = Annotated[int, Field(ge=INT64_MIN, le=INT64_MAX)]
