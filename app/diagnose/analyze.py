"""What a launch's log says: the stage it reached, the root error and its kind, a fingerprint that
groups one cause across attempts, and the arguments SGLang changed on its own.

`Analyzer` reads the log in chunks of any size and keeps only what the answer needs, so a log of
any length is read in bounded memory and gives the same answer however it was split.
"""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass, field, replace

from app.diagnose.figures import Figures
from app.diagnose.lines import Line, logical_lines

EXCEPTION = re.compile(r"^(?:[A-Za-z_][\w]*\.)*([A-Z]\w*(?:Error|Exception|Exit|Interrupt)|Exception)(?:: ?(.*))?$")
ARGPARSE_ERROR = re.compile(r"^[\w./ -]+: error: (.+)$")
DETAIL = re.compile(r"^- [A-Z]\w*(?:Error|Exception): .+")
FRAME = re.compile(r'^\s*File "([^"]+)", line \d+, in (\S+)')
PACKAGE = re.compile(r"\b(?:sglang|sgl_kernel)/")
FATAL_LINES = (  # fatal messages that are not Python exceptions
    re.compile(r"CUDA error \(.*\): .+"),
    re.compile(r"\[torch_memory_saver\.cpp\] cudaError error: .+"),
    re.compile(r"ERROR: +\[Errno \d+\] error while attempting to bind on address .+"),
    re.compile(r"Watchdog caught collective operation timeout: .+"),
    re.compile(r"\bwatchdog timeout \(.+\)"),
)
HARMLESS = re.compile(r"Warning: |can be ignored|may not be an issue|Performance might be sub-optimal", re.I)
ADJUSTMENT = re.compile(
    r"is (?:adjusted|reset|set) to |(?:is|are) disabled (?:because|when|since)|^Disabl(?:e|ing) |^Automatically |"
    r"is turned on|turn off --|Use the profiled value instead|is not supported.*disabl|will be automatically selected|"
    r"not set\. Use .* by default",
    re.I,
)
READY = "The server is fired up and ready to roll!"
STAGES = (  # in launch order; each recognised by the first line SGLang writes in it
    ("args parsed", re.compile(r"^server_args=")),
    ("weights loading", re.compile(r"Load weight begin|Loading safetensors checkpoint shards")),
    ("weights loaded", re.compile(r"Load weight end")),
    ("kv cache allocated", re.compile(r"KV Cache is allocated|Memory pool end")),
    (
        "cuda graph capture",
        re.compile(r"Capture (?:cuda|npu|draft[\w ]*|piecewise CUDA) graph begin|Capturing batches"),
    ),
    ("http server up", re.compile(r"Uvicorn running on")),
    ("ready", re.compile(re.escape(READY))),
    ("serving", re.compile(r"^(?:Decode|Prefill) batch[.,]")),
)
PERCENT = re.compile(r"(\d{1,3})%")
SERVING = len(STAGES) - 1
# A serving log is mostly one record per line of batch statistics; once serving, outside a
# traceback, such a line only adds a decode sample and is not taken apart further.
BATCH_LINE = re.compile(
    r"^(?:\(\w+ pid=\d+(?:, ip=[\d.]+)?\) |[\w.-]+\s*\| )?"
    r"\[(?:\d{4}-\d\d-\d\d )?\d\d:\d\d:\d\d(?:\.\d+)?(?: [A-Z_]+\d+)*\] (Decode|Prefill) batch[.,][^\r\x1b\[]*$"
)

CLASSES = (  # first match wins; checked against the root error, then a few against its traceback
    (
        "oom",
        re.compile(r"out of memory|OutOfMemoryError|Not enough memory|CUDA_ERROR_OUT_OF_MEMORY|profiled value -", re.I),
    ),
    (
        "port-in-use",
        re.compile(r"address already in use|Errno 98|is not available in \d+ seconds|already in use", re.I),
    ),
    ("import-error", re.compile(r"ImportError|ModuleNotFoundError|undefined symbol|Could not load any common_ops")),
    (
        "driver",
        re.compile(
            r"no kernel image is available|driver version is insufficient|no NVIDIA driver|"
            r"No CUDA GPUs are available|invalid device ordinal|CUDA driver",
            re.I,
        ),
    ),
    ("nccl", re.compile(r"NCCL|ProcessGroupNCCL|DistBackendError|gloo|Watchdog caught collective", re.I)),
    (
        "cuda-graph",
        re.compile(r"Capture cuda graph failed|stream is capturing|during CUDA graph capture|graph capture", re.I),
    ),
    (
        "model-load",
        re.compile(
            r"not a valid model identifier|Repo id must|huggingface\.co|Model architectures|"
            r"RepositoryNotFound|GatedRepo|LocalEntryNotFound|safetensors|load_weights|"
            r"config\.json|HFValidationError|params_dict\[",
            re.I,
        ),
    ),
    ("timeout", re.compile(r"watchdog timeout|timed out|Timeout", re.I)),
    (
        "arg-conflict",
        re.compile(
            r"not compatible with|unrecognized arguments|invalid choice|"
            r"the following arguments are required|server_args\.py|only supports|must be",
            re.I,
        ),
    ),
)
HINTS = {
    "oom": "GPU memory ran out. Lower --mem-fraction-static (leaves more for activations and CUDA graphs), lower "
    "--cuda-graph-max-bs or --max-running-requests, raise --tp-size, or free the GPU of other processes.",
    "arg-conflict": "SGLang refused this combination of arguments; the error names the ones involved.",
    "arg-override": "SGLang changed a requested argument on its own (see adjustments).",
    "nccl": "A collective between ranks failed or timed out: check the other ranks' first error, NCCL_DEBUG=INFO, "
    "P2P/NVLink support, and --disable-custom-all-reduce.",
    "cuda-graph": "CUDA graph capture failed: try --disable-cuda-graph to confirm, then a smaller --cuda-graph-max-bs; "
    "torch.compile and some attention backends do not capture.",
    "port-in-use": "A port is taken, often by an earlier server still running: stop it or pick another --port.",
    "model-load": "The model could not be found or loaded: check --model-path (local folder or hub id), access to the "
    "hub, and that the checkpoint matches the architecture.",
    "import-error": "A library does not load: sglang, sgl_kernel, torch and CUDA versions do not match.",
    "driver": "The GPU, driver or CUDA build does not support what runs: check the compute capability and versions.",
    "timeout": "Nothing progressed for too long: look at the last stage and the ranks that stopped logging.",
    "other": "See the root error.",
    "healthy": "",
}
MAMBA_OVERRIDE_HINT = (
    " SGLang's model-specific adjustment for hybrid (mamba) models switches the mamba scheduler strategy to "
    "no_buffer when the extra buffer cannot be used, even if extra_buffer was requested; with speculative decoding "
    "that needs the radix cache off (--disable-radix-cache) or the extra buffer kept (SGLANG_ENABLE_SPEC_V2=1 with "
    "--mamba-scheduler-strategy extra_buffer)."
)
NORMALISE = (
    (re.compile(r"0x[0-9a-fA-F]+"), "<hex>"),
    (re.compile(r"(?:/[\w.@+-]+)+/?"), "<path>"),
    (re.compile(r"\b\d+(?:\.\d+)?\s*(?:[KMGT]i?B|bytes)\b"), "<size>"),
    (re.compile(r"\b\d+(?:\.\d+)?\b"), "<n>"),
    (re.compile(r"'[^']*'|\"[^\"]*\""), "<str>"),
    (re.compile(r"dict_keys\(\[.*\]\)"), "<list>"),
)
MAX_TRACEBACK_LINES = 400


@dataclass
class Diagnosis:
    stage: str = "starting"
    stage_percent: int | None = None
    failure_class: str = "healthy"
    root_error: str | None = None
    root_line: int | None = None
    fingerprint: str | None = None
    hint: str = ""
    adjustments: list[str] = field(default_factory=list)
    frames: list[str] = field(default_factory=list)  # innermost in-package frames of the root error
    figures: Figures = field(default_factory=Figures)

    def as_dict(self) -> dict[str, object]:
        return {
            "stage": self.stage if self.stage_percent is None else f"{self.stage} ({self.stage_percent}%)",
            "class": self.failure_class,
            "root_error": self.root_error,
            "fingerprint": self.fingerprint,
            "hint": self.hint,
            "adjustments": self.adjustments,
        }


@dataclass
class _Traceback:
    lines: list[Line] = field(default_factory=list)
    exceptions: list[Line] = field(default_factory=list)
    ended: bool = False


class Analyzer:
    def __init__(self) -> None:
        self._pending = ""
        self._number = 0
        self._stage_index = -1
        self._percent: int | None = None
        self._current: _Traceback | None = None
        self._root: tuple[Line, str] | None = None  # the first fatal exception, with the lines before it
        self._frames: list[str] = []
        self._fatal_line: Line | None = None
        self._adjustments: list[str] = []
        self._figures = Figures()

    def feed(self, chunk: str) -> None:
        text = self._pending + chunk
        physical = text.split("\n")
        self._pending = physical.pop()  # a line is read once its newline has arrived
        for line in physical:
            self._number += 1
            quiet = self._current is None or self._current.ended
            if quiet and self._stage_index == SERVING and (batch := BATCH_LINE.match(line)):
                if batch.group(1) == "Decode":
                    self._figures.see_decode(line)
                continue
            for record in logical_lines(line, self._number):
                self._see(record)

    def finish(self) -> Diagnosis:
        if self._pending:
            self._number += 1
            for record in logical_lines(self._pending, self._number):
                self._see(record)
            self._pending = ""
        self._close_traceback()
        return self._diagnosis()

    def _see(self, line: Line) -> None:
        text = line.text.strip()
        self._track_stage(text)
        self._figures.see(text)
        new = text not in self._adjustments and len(self._adjustments) < 50
        if new and ADJUSTMENT.search(text) and not EXCEPTION.match(text):
            self._adjustments.append(text)
        if "Traceback (most recent call last)" in text:
            if self._current and not self._current.ended:
                self._current.lines.append(line)
            else:
                self._close_traceback()
                self._current = _Traceback([line])
            return
        if self._current is not None and not self._current.ended:
            if FRAME.match(line.text):
                pass
            elif EXCEPTION.match(text):
                self._current.exceptions.append(line)
            elif text.startswith(("During handling of the above exception", "The above exception was the direct")):
                pass
            elif line.prefixed and not line.ranks and self._current.exceptions:
                self._current.ended = True  # the main process logs again: this traceback is over
            if len(self._current.lines) < MAX_TRACEBACK_LINES:
                self._current.lines.append(line)
            return
        if EXCEPTION.match(text) and not line.prefixed and self._root is None:
            # An exception line whose traceback lies outside the window.
            self._root = (line, text)
            return
        fatal = ARGPARSE_ERROR.match(text) or any(pattern.search(text) for pattern in FATAL_LINES)
        if self._fatal_line is None and fatal and not HARMLESS.search(text):
            self._fatal_line = line

    def _close_traceback(self) -> None:
        tb, self._current = self._current, None
        if tb is None or not tb.exceptions or self._root is not None:
            return
        # The first exception printed is the cause; an outer one that only repeats it adds nothing,
        # and an outer one with an empty message means the inner is the root.
        root = next((e for e in tb.exceptions if _message(e)), tb.exceptions[0])
        if not _message(root):
            # A report that lists its causes under an empty header (sgl_kernel's loader): the first one.
            root = next((line for line in tb.lines if DETAIL.match(line.text.strip())), root)
        # What else the traceback says (the outer exceptions, the last lines) can name the kind of failure.
        context = " ".join(line.text for line in [*tb.exceptions, *tb.lines[-12:]])
        self._root = (root, context)
        self._frames = in_package_frames(tb.lines, root)

    def _track_stage(self, text: str) -> None:
        for index, (_, pattern) in enumerate(STAGES):
            if index >= self._stage_index and pattern.search(text):
                if index > self._stage_index:
                    self._percent = None
                self._stage_index = index
                if STAGES[index][0] in ("weights loading", "cuda graph capture"):
                    percent = PERCENT.search(text)
                    if percent:
                        self._percent = int(percent.group(1))

    def _diagnosis(self) -> Diagnosis:
        figures = replace(self._figures, memory=dict(self._figures.memory), decode=list(self._figures.decode))
        result = Diagnosis(adjustments=list(self._adjustments), figures=figures)
        if self._stage_index >= 0:
            result.stage = STAGES[self._stage_index][0]
            result.stage_percent = self._percent
        root = self._root
        if root is None and self._fatal_line is not None:
            root = (self._fatal_line, self._fatal_line.text)
        if root is None:
            return result
        line, context = root
        message = line.text.strip()
        result.root_error = line.raw.strip()
        result.frames = list(self._frames)
        result.root_line = line.number
        result.failure_class = classify(message, context)
        result.hint = HINTS[result.failure_class]
        if "--mamba-scheduler-strategy no_buffer" in message:
            result.hint += MAMBA_OVERRIDE_HINT
        result.fingerprint = fingerprint(result.failure_class, message)
        return result


def in_package_frames(lines: list[Line], root: Line, keep: int = 3) -> list[str]:
    """The innermost SGLang frames that led to `root`, as "sglang/<path>:<function>" (paths cut at
    the package, so they read the same on every host and install)."""
    frames: list[str] = []
    for line in lines:
        if line is root:
            break
        text = line.text.strip()
        if "Traceback (most recent call last)" in text or text.startswith(("During handling", "The above")):
            frames = []  # a new exception's frames start here
        elif (match := FRAME.match(line.text)) and (package := PACKAGE.search(match.group(1))):
            frames.append(f"{match.group(1)[package.start() :]}:{match.group(2)}")
    return frames[-keep:]


def _message(line: Line) -> str:
    match = EXCEPTION.match(line.text.strip())
    return (match.group(2) or "").strip() if match else ""


def classify(message: str, context: str = "") -> str:
    if ARGPARSE_ERROR.match(message):
        return "arg-conflict"
    for name, pattern in CLASSES:
        if pattern.search(message):
            return name
    for name, pattern in CLASSES:
        if name in ("cuda-graph", "timeout", "arg-conflict", "model-load") and pattern.search(context):
            return name
    return "other"


def normalise(message: str) -> str:
    for pattern, replacement in NORMALISE:
        message = pattern.sub(replacement, message)
    return re.sub(r"\s+", " ", message).strip()[:500]


def fingerprint(failure_class: str, message: str) -> str:
    match = EXCEPTION.match(message)
    kind = match.group(1) if match else ""
    detail = match.group(2) or "" if match else message
    return hashlib.sha256(f"{failure_class}|{kind}|{normalise(detail)}".encode()).hexdigest()[:16]


def diagnose(text: str) -> Diagnosis:
    analyzer = Analyzer()
    analyzer.feed(text)
    return analyzer.finish()
