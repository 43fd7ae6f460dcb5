"""The events a log is made of, as Python and the shell print them: exception blocks (a traceback,
its frames and the exception lines that end it) and fatal lines printed outside any traceback.

Separate because every later decision reads these shapes and none of them changes them: the root
is chosen among these events (root.py), classified by their words (lexicon.py) and fingerprinted
by their message (fingerprint.py). This module decides what a line *is* (an exception line, a
frame, a fatal line, a precursor of one), and what a traceback says around one of its lines.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from app.diagnose.lines import Line

# An exception line: a name that says it is one, or any class name qualified by its module
# ("triton.runtime.errors.OutOfResources: ...") with a message.
EXCEPTION = re.compile(
    r"^(?:[A-Za-z_][\w]*\.)*"
    r"([A-Za-z]\w*(?:Error|Exception|Exit|Interrupt)|Exception|(?<=\.)[A-Z]\w*(?=: ))(?:\([\w.]+\))?(?:: ?(.*))?$"
)
ARGPARSE_ERROR = re.compile(r"^[\w./ -]+: error: (.+)$")
FRAME = re.compile(r'^\s*File "([^"]+)", line \d+, in (\S+)')
PACKAGE_NAMES = ("sglang/", "sgl_kernel/")
# The package in a frame's path: the last such folder, for a source checkout at /x/sglang/python/sglang/srt.
PACKAGE = re.compile(rf"\b(?:{'|'.join(PACKAGE_NAMES)})(?!.*\b(?:{'|'.join(PACKAGE_NAMES)}))")
# The shell could not run the server's command at all (an interpreter path that does not exist,
# a file that is not executable): dash's and ash's "<script>: 12: <command>: not found", bash's
# "<script>: line 12: <command>: No such file or directory" or "command not found", and the like.
CANNOT_RUN = re.compile(
    r"^[^:]+: (?:line )?\d+: (?:exec: )?\S[^:]*(?:: \S[^:]*: bad interpreter)?: (?:(?:command )?not found|"
    r"No such file or directory|Permission denied|Exec format error|cannot execute(?: binary file)?(?:: .*)?)$"
)
FATAL_LINES = (  # fatal messages that are not Python exceptions
    CANNOT_RUN,
    re.compile(r"CUDA error \(.*\): .+|^CUDA Error: .+"),
    re.compile(r"\[torch_memory_saver\.cpp\] (?:cudaError|CUresult) error\b.+"),
    re.compile(r"ERROR: +\[Errno \d+\] error while attempting to bind on address .+"),
    re.compile(r"Watchdog caught collective operation timeout: .+|watchdog thread terminated with exception: .+"),
    re.compile(r"\bwatchdog timeout \(.+\)", re.I),
    # logged, not raised
    re.compile(r"\b(?:CUDA|HIP|NPU|XPU) out of memory\. Tried to allocate"),
    re.compile(r"^Failed to \w+ [^:]*: (?:NCCL error|CUDA error|CUDA out of memory)"),
    re.compile(r"\bfailed\b.* with exception [\w.]*(?:Error|Exception)\b"),  # a request's failure
    re.compile(r"^what\(\): +\S"),  # a C++ exception that ended the process ("terminate called after ...")
    re.compile(r"^(?:Cannot access gated repo|Repository Not Found) for url"),  # the hub's refusal, printed
    re.compile(r"^Fatal Python error: \w|\bCaught signal \d+ \(|^Segmentation fault"),  # a crash below Python
    re.compile(r"^Memory access fault by GPU|^Failed: Cuda error \S"),  # the ROCm runtime's, a CUDA check's
    re.compile(r"aborting with error : HSA_STATUS_ERROR_\w+"),  # the ROCm runtime's queue, before it aborts
    re.compile(r"^LLVM ERROR: \S"),  # Triton's compiler, aborting the process
    re.compile(r"\.(?:cuh?|cpp|cc|c|h|hpp):\d+: .*Assertion `.*[`'] failed"),  # a C++ or CUDA assert, aborting
    re.compile(r"^E[A-Z]\d{4}: \S"),  # Ascend's error codes ("EE1001: ..."), before the exception that reports them
    re.compile(r"^Pyspy dump for PID \d+"),  # SGLang's watchdog: a scheduler stopped making progress
    # NCCL's transport losing a peer (a socket refused or reset, an IB completion with an error);
    # not its other warnings, which healthy starts print (no IB device, no libibverbs)
    re.compile(
        r"NCCL WARN .*(?:Connection (?:refused|reset|closed)|error retry count|Got completion from peer .*status=[1-9])"
    ),
    # a library that does not load, in a wrapper's one-line error
    re.compile(r"\b[Ee]rror\b.*\.so(?:\.[\d.]+)?: undefined symbol: \S"),
)
# Lines that say themselves they are no failure (a warning, a note that an error can be ignored),
# wherever they are printed: never a fatal line, nor part of an exception's message.
HARMLESS = re.compile(r"Warning: |can be ignored|may not be an issue|Performance might be sub-optimal|^Skipping ", re.I)
# A line printed beside a failure that says something of its cause without being one: a
# collective library's or torch's c10d line about a peer or a store, a CUDA or ROCm runtime's
# error, a compiler's error. Weighed with the root error (weighing.py); a root only where a
# traceback is cut before its exception. Lines that only report a retry are no evidence: a healthy
# start-up prints them while its peers come up.
BESIDE = re.compile(
    r"\[c10d\]|\bTCPStore\b|\bProcessGroup\w*|\bNCCL WARN\b|\b[nr]ccl\w*Error\b|\bgloo\b|\bnvshmem|\bibv_\w+|"
    r"\bDeepEP\b|\bCUDA error\b|\bcudaError|CUDA_ERROR_|HSA_STATUS_ERROR|\bHIP error\b|"
    r"\b(?:ptxas|nvcc|collect2|ld)\b[^\n]{0,40}\b(?:fatal|error)\b|"
    r"\.(?:cuh?|cpp|cc|h|hpp):\d+(?::\d+)?: (?:fatal )?error\b",
    re.I,
)
BESIDE_WORDS = ("rror", "RROR", "ail", "AIL", "atal", "imed out", "eset by", "losed by", "bort")  # before BESIDE runs
RETRYING = re.compile(r"failed to connect|\bretry|\bretrying|will retry|No device found", re.I)
# A fatal line that announces the error after it: the root only when no exception follows.
PRECURSOR = re.compile(r"is larger than the profiled value -\d+")  # the weights left no room for the KV cache
MAX_TRACEBACK_LINES = 400
# How much of a message line its kind is read from: what a failure is, is said in its first words;
# a tensor or a request printed whole into the message adds nothing but time.
MESSAGE_HEAD = 4096
SEPARATORS = ("During handling of the above exception", "The above exception was the direct cause")
CARETS = re.compile(r"^[~^]+$")  # Python 3.11's markers under a frame's source


@dataclass
class Traceback:
    """One exception block as read so far: its lines (at most MAX_TRACEBACK_LINES), its exception
    lines, and whether the log has moved on past it."""

    lines: list[Line] = field(default_factory=list)
    exceptions: list[Line] = field(default_factory=list)
    ended: bool = False


def stopped(exceptions: list[Line]) -> bool:
    """Exceptions that start with Ctrl-C: someone stopped the process, which is no failure of its own."""
    found = EXCEPTION.match(exceptions[0].text.strip()) if exceptions else None
    return found is not None and found.group(1) == "KeyboardInterrupt"


@dataclass(frozen=True)
class Evidence:
    """What a traceback says around its root error, in the layers the lexicon weighs: what the
    failure *says* (the chain: the other exceptions, the wrappers and causes, and the lines that
    continue their messages) and *where* it was raised (the frames and their source lines)."""

    chain: tuple[str, ...] = ()
    chain_types: tuple[str, ...] = ()  # the exception types of the chain
    where: str = ""
    frames: tuple[str, ...] = ()  # "<path>:<function>" that led to the root, outermost first

    def text(self) -> str:
        return "\n".join([*self.chain, self.where])


def traceback_context(tb: Traceback, root: Line | None) -> Evidence:
    """What else a traceback says that can name the kind of failure: its other exceptions and the
    lines that continue messages (a loader's report, CUDA's trailer), and the frames that led to
    `root` with their source lines."""
    chain: list[str] = []
    types: list[str] = []
    where: list[str] = []
    after_frame = False
    for line in tb.lines:
        text = line.text.strip()
        if line is root or not text or text.startswith(SEPARATORS) or "Traceback (most recent" in text:
            after_frame = False
        elif FRAME.match(line.text):
            after_frame = True
        elif after_frame or CARETS.match(text):
            where.append(text)  # the frame's source line
            after_frame = False
        elif not HARMLESS.search(text):  # (a warning printed into the traceback says nothing of it)
            chain.append(text)
            if line in tb.exceptions and (found := EXCEPTION.match(text)):
                types.append(found.group(1))
    frames = frames_before(tb.lines, root)
    return Evidence(tuple(chain), tuple(types), "\n".join([*frames, *where]), tuple(frames))


def sglang_frames(frames: list[str], keep: int = 3) -> list[str]:
    return [frame for frame in frames if frame.startswith(PACKAGE_NAMES)][-keep:]


def frames_before(lines: list[Line], root: Line | None) -> list[str]:
    """The frames that led to `root`, outermost first, as "<path>:<function>"; SGLang's paths cut
    at the package ("sglang/srt/..."), so they read the same on every host and install."""
    frames: list[str] = []
    for line in lines:
        if line is root:
            break
        text = line.text.strip()
        if "Traceback (most recent call last)" in text or text.startswith(SEPARATORS):
            frames = []  # a new exception's frames start here
        elif match := FRAME.match(line.text):
            path = match.group(1)
            package = PACKAGE.search(path)
            frames.append(f"{path[package.start() :] if package else path}:{match.group(2)}")
    return frames


def exception_message(line: Line) -> str:
    """The exception's message; empty too for a wrapper that announces a cause it does not give
    ("Capture cuda graph failed: ")."""
    match = EXCEPTION.match(line.text.strip())
    message = (match.group(2) or "").strip() if match else ""
    return "" if message.endswith(":") else message
