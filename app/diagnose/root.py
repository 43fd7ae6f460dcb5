"""Which exception in a traceback is the root error: the decision a person reads first.

Separate because it is a precedence, not a pattern: the first exception printed is the cause; an
outer one that only repeats it, or has an empty message, yields to the inner one; a rank's error
caused by another's failure yields to that failure; a bare key yields to the outer exception
that says what it means; a header that only announces its cause yields to the cause listed below
it. Which traceback and which fatal line come first in the log is the analyzer's (analyze.py).
"""

from __future__ import annotations

import re

from app.diagnose.events import Traceback, exception_message, sglang_frames, traceback_context
from app.diagnose.lines import Line

# A cause given below an exception whose message only announces it: a listed detail, a repr, or
# a bare class name with its message (what torch's compiler wrapper quotes after "raised:").
DETAIL = re.compile(r"^- [A-Z]\w*(?:Error|Exception): .+|^[A-Z]\w*(?:Error|Exception)\(.+\)$|^[A-Z][A-Za-z]+: \S")
QUOTED_KEY = re.compile(r"^'[^' ]+'$")
# Errors a rank raises because another failed first (its peer's socket closed): the root only
# when nothing else in the log failed.
SECONDARY = re.compile(r"gloo.*Connection (?:reset|closed) by peer|Connection (?:reset|closed) by peer.*gloo", re.I)


def root_of(tb: Traceback) -> tuple[tuple[Line, str], list[str]] | None:
    """A traceback's root exception with what else it says, and the SGLang frames leading to it."""
    if not tb.exceptions:
        return None
    # The first exception printed is the cause; an outer one that only repeats it adds nothing,
    # and an outer one with an empty message means the inner is the root.
    # A rank's error caused by another's failure yields to that failure.
    primary = [e for e in tb.exceptions if not SECONDARY.search(e.text)] or tb.exceptions
    root = next((e for e in primary if exception_message(e)), primary[0])
    if QUOTED_KEY.match(exception_message(root)):
        # A bare key (a KeyError's): an outer exception raised about that key says what it means.
        key = exception_message(root)[1:-1]
        root = next((e for e in primary[primary.index(root) + 1 :] if key in exception_message(e)), root)
    if not exception_message(root):
        # A report that gives its cause after an empty header (sgl_kernel's loader lists its
        # attempts; Triton quotes the kernel source first): the first cause below it.
        after = tb.lines[tb.lines.index(root) + 1 :] if root in tb.lines else tb.lines
        root = next((line for line in after if DETAIL.match(line.text.strip()) and line not in tb.exceptions), root)
    context, frames = traceback_context(tb, root)
    return (root, context), sglang_frames(frames)
