"""Which line of a log is the root error: the decision a person reads first.

Separate because it is a precedence, not a pattern. In order:

1. The first fatal event in time wins, across ranks and processes: an exception block, or a fatal
   line printed outside any traceback (analyze.py keeps them in the order the log shows them).
2. Within a block, the first exception printed is the cause (Python prints chains innermost
   first); an outer one that only repeats it, or has an empty message, yields to it.
3. A wrapper is never the root when what it wraps is visible: a report that another task,
   process, rank or server failed (Ray's task errors, a scheduler that "hit an exception", an
   orchestrator's "never became ready", a child's exit status) yields to the failure it reports,
   in its block or anywhere in the window, before it or after.
4. A rank's error caused by another's failure (its peer's socket closed) is the root only when
   nothing else failed.
5. A traceback header is never a root: a bare key yields to the outer exception that says what it
   means, a header that only announces its cause yields to the cause listed below it, and a
   window cut inside a traceback is named by the frame it was cut in.
"""

from __future__ import annotations

import re

from app.diagnose.events import MESSAGE_HEAD, Evidence, Traceback, exception_message, traceback_context
from app.diagnose.lines import Line

# A cause given below an exception whose message only announces it: a listed detail, a repr, a
# bare class name with its message (what torch's compiler wrapper quotes after "raised:"), or the
# first error of a compiler or linker in the build output a wrapper quotes ("nvcc fatal : ...",
# "<path>/ld: cannot find -lcudart", "kernel.cu:12:10: fatal error: ...").
DETAIL = re.compile(
    r"^- [A-Z]\w*(?:Error|Exception): .+|^[A-Z]\w*(?:Error|Exception)\(.+\)$|^[A-Z][a-z][A-Za-z]*: \S|"
    r"^(?:\S*/)?(?:ld|nvcc|ptxas|gcc|g\+\+|c\+\+|cc1plus|clang\+*|[\w.-]+-(?:gcc|g\+\+|c\+\+|ld))(?:\.\w+)?\s*"
    r"(?:fatal\s*:|:\s*(?:fatal error|error|cannot find|undefined reference))|"
    r"^\S+\.(?:cu|cuh|cpp|cc|c|h|hpp|inc):\d+(?::\d+)?: (?:fatal )?error: "
)
QUOTED_KEY = re.compile(r"^'[^' ]+'$")
# Errors a rank raises because another failed first (its peer's socket closed; torch's c10d store
# reads nothing from a peer that is gone).
SECONDARY = re.compile(
    r"gloo.*Connection (?:reset|closed) by peer|Connection (?:reset|closed) by peer.*gloo|failed to recv, got 0 bytes",
    re.I,
)
# Reports that something else failed: what they wrap, where visible, is the root.
WRAPPER = re.compile(
    r"RayTaskError|RayActorError|ActorDiedError|ChildFailedError|BrokenProcessPool|hit an exception|"
    r"Engine core initiali[sz]ation failed|Initiali[sz]ation failed\. (?:Please see|warmup error)|"
    r"scheduler (?:is dead|died)|"  # sglang/srt/entrypoints/engine.py, http_server.py
    r"(?:process|worker|server|engine|subprocess)\b.{0,60}\b(?:exited|died|terminated|crashed|failed to start|"
    r"never became ready|did not become (?:ready|healthy))|"
    # a child process that is itself a server or a Python program (not a compiler a kernel build ran)
    r"Command '\[?'?(?:[^' ,]*/)?(?:python[\d.]*|torchrun|sglang[\w.-]*)'?[ ,\]].*(?:returned non-zero exit|died with)",
    re.I,
)


def is_wrapper(line: Line) -> bool:
    return WRAPPER.search(line.text[:MESSAGE_HEAD]) is not None


def root_of(tb: Traceback) -> tuple[Line, Evidence] | None:
    """A traceback's root exception and what else the traceback says about it."""
    if not tb.exceptions:
        return None
    primary = [e for e in tb.exceptions if not SECONDARY.search(e.text)] or tb.exceptions
    primary = [e for e in primary if not is_wrapper(e)] or primary
    root = next((e for e in primary if exception_message(e)), primary[0])
    if QUOTED_KEY.match(exception_message(root)):
        key = exception_message(root)[1:-1]
        root = next((e for e in primary[primary.index(root) + 1 :] if key in exception_message(e)), root)
    if not exception_message(root):
        # A report that gives its cause after an empty header (sgl_kernel's loader lists its
        # attempts; Triton quotes the kernel source first): the first cause below it.
        after = tb.lines[tb.lines.index(root) + 1 :] if root in tb.lines else tb.lines
        root = next((line for line in after if DETAIL.match(line.text.strip()) and line not in tb.exceptions), root)
    return root, traceback_context(tb, root)
