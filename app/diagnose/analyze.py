"""What a launch's log says: the stage it reached, the root error and its kind, a fingerprint that
groups one cause across attempts, and the arguments SGLang changed on its own.

`Analyzer` reads the log in chunks of any size and keeps only what the answer needs, so a log of
any length is read in bounded memory and gives the same answer however it was split.
"""

from __future__ import annotations

import codecs
import hashlib
import re
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import Any

from app.diagnose.drift import field_name
from app.diagnose.figures import Figures
from app.diagnose.hints import HYBRID_SIGN, explain, in_release_spelling
from app.diagnose.lines import MAX_RECORD, Line, logical_lines, without_binary_records

# An exception line: a name that says it is one, or any class name qualified by its module
# ("triton.runtime.errors.OutOfResources: ...") with a message.
EXCEPTION = re.compile(
    r"^(?:[A-Za-z_][\w]*\.)*"
    r"([A-Za-z]\w*(?:Error|Exception|Exit|Interrupt)|Exception|(?<=\.)[A-Z]\w*(?=: ))(?:: ?(.*))?$"
)
ARGPARSE_ERROR = re.compile(r"^[\w./ -]+: error: (.+)$")
# A cause given below an exception whose message only announces it: a listed detail, a repr, or
# a bare class name with its message (what torch's compiler wrapper quotes after "raised:").
DETAIL = re.compile(r"^- [A-Z]\w*(?:Error|Exception): .+|^[A-Z]\w*(?:Error|Exception)\(.+\)$|^[A-Z][A-Za-z]+: \S")
QUOTED_KEY = re.compile(r"^'[^' ]+'$")
OOM_ACCOUNTING = re.compile(r"(?<=out of memory)\..*", re.I)
EXCEPTION_REPR = re.compile(r"^(?:[\w]+\.)*([A-Za-z]\w*(?:Error|Exception))\((['\"])(.*)\2\)$")
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
    re.compile(r"\[torch_memory_saver\.cpp\] cudaError error: .+"),
    re.compile(r"ERROR: +\[Errno \d+\] error while attempting to bind on address .+"),
    re.compile(r"Watchdog caught collective operation timeout: .+"),
    re.compile(r"\bwatchdog timeout \(.+\)", re.I),
    # logged, not raised
    re.compile(r"\b(?:CUDA|HIP|NPU|XPU) out of memory\. Tried to allocate"),
    re.compile(r"^Failed to \w+ [^:]*: (?:NCCL error|CUDA error|CUDA out of memory)"),
    re.compile(r"\bfailed\b.* with exception [\w.]*(?:Error|Exception)\b"),  # a request's failure
    re.compile(r"^what\(\): +\S"),  # a C++ exception that ended the process ("terminate called after ...")
    re.compile(r"^(?:Cannot access gated repo|Repository Not Found) for url"),  # the hub's refusal, printed
    re.compile(r"^Fatal Python error: \w|\bCaught signal \d+ \(|^Segmentation fault"),  # a crash below Python
    re.compile(r"^Memory access fault by GPU|^Failed: Cuda error \S"),  # the ROCm runtime's, a CUDA check's
    # a library that does not load, in a wrapper's one-line error
    re.compile(r"\b[Ee]rror\b.*\.so(?:\.[\d.]+)?: undefined symbol: \S"),
)
# A fatal line that announces the error after it: the root only when no exception follows.
PRECURSOR = re.compile(r"is larger than the profiled value -\d+")  # the weights left no room for the KV cache
# Errors a rank raises because another failed first (its peer's socket closed): the root only
# when nothing else in the log failed.
SECONDARY = re.compile(r"gloo.*Connection (?:reset|closed) by peer|Connection (?:reset|closed) by peer.*gloo", re.I)
CAPTURE_DONE = re.compile(r"graph end|^(?:Decode|Prefill) batch|max_total_num_tokens=")
ASSERT_SOURCE = re.compile(r"\bassert \S[^\n]*")
PARALLEL_SIZE = re.compile(r"\b(?:\w+_)?(?:tp|dp|ep|pp|cp)_size\b")
HARMLESS = re.compile(r"Warning: |can be ignored|may not be an issue|Performance might be sub-optimal|^Skipping ", re.I)
ADJUSTMENT = re.compile(
    r"is (?:adjusted|reset|set) to |(?:is|are) disabled (?:because|when|since)|^Disabl(?:e|ing) |^Automatically |"
    r"is turned on|turn off --|Use the profiled value instead|is not supported.*disabl|will be automatically selected|"
    r"not (?:set|specified)\. Use .* by default|^Inferred .* from |"
    r"^(?:Setting|Overriding|Forcing) \S.* to \S|^Set \S.*(?: to |: \w+=)|"
    # the newest releases' wordings: "defaulting --linear-attn-decode-backend to flashinfer", "falling back
    # --linear-attn-verify-backend to triton", "switching to direct io backend", "aligning 24 -> 32"
    r"\bdefaulting --[\w-]+ to |\bfalling back --[\w-]+ to |, switching to \w|\baligning .+ -> \S|"
    r"^Enabl(?:e|ing) \S.* because ",
    re.I,
)
ENVIRONMENT = re.compile(r"\bSGLANG_\w+=[\w.-]+")
READY = "The server is fired up and ready to roll!"
STAGES = (  # in launch order; each recognised by the first line SGLang writes in it
    ("args parsed", re.compile(r"^server_args=")),
    ("weights loading", re.compile(r"Load weight begin|Loading safetensors checkpoint shards")),
    ("weights loaded", re.compile(r"Load weight end")),
    ("kv cache allocated", re.compile(r"KV Cache is allocated|Memory pool end")),
    (
        "cuda graph capture",
        re.compile(r"Capture [\w ()]*?(?:cuda|npu) graph begin|Capturing (?:batches|num tokens)", re.I),
    ),
    ("http server up", re.compile(r"Uvicorn running on")),
    ("ready", re.compile(re.escape(READY))),
    # A prefill before the ready line is the warmup's; decode batches come only from real traffic.
    ("serving", re.compile(r"^Decode batch[.,]")),
)
PERCENT = re.compile(r"(\d{1,3})%")
STAGE_INDEX = {name: index for index, (name, _) in enumerate(STAGES)}
WEIGHTS_STAGE, CAPTURE_STAGE = STAGE_INDEX["weights loading"], STAGE_INDEX["cuda graph capture"]
READY_STAGE, SERVING = STAGE_INDEX["ready"], STAGE_INDEX["serving"]
# A progress bar with no description ("  0%|   | 0/17 [00:00<?, ?it/s]"): once the weights are in,
# only CUDA graph capture draws one (some releases, and DP replicas, leave out its label).
BARE_BAR = re.compile(r"^\d{1,3}%\|[^|]*\| *\d+/\d+ \[")
# A serving log is mostly one record per line of batch statistics and request logs; once
# serving, outside a traceback, such a line is only counted (a decode line may become a chart
# sample) and not taken apart further. Recognised by plain substring tests: they run on every
# line of logs of any size. A line with a carriage return or with a "[" after the marker may
# have another record glued on, and takes the full path.
SKIMMED = ("] Decode batch", "] Prefill batch", 'HTTP/1.1" ')

CLASSES = (  # first match wins; checked against the root error, then a few against its traceback
    (
        "oom",
        re.compile(
            r"out of memory|OutOfMemoryError|Not enought? memory|CUDA_ERROR_OUT_OF_MEMORY|profiled value -", re.I
        ),
    ),
    (
        "port-in-use",
        re.compile(r"address already in use|Errno 98|is not available in \d+ seconds|already in use", re.I),
    ),
    (
        "driver",
        re.compile(
            r"no kernel image is available|driver version is insufficient|no NVIDIA driver|"
            r"No CUDA GPUs are available|CUDA driver|only supports sm\d+|"
            # no kernel built for this device: HIP's wording, Ascend's
            r"invalid device function|does not support opType|"
            r"undefined symbol: cu[A-Z]",  # a CUDA driver API symbol: the driver is older than the build
            re.I,
        ),
    ),
    (
        "import-error",
        re.compile(
            r"ImportError|ModuleNotFoundError|undefined symbol|Could not load any common_ops|PackageNotFoundError|"
            r"minimum required version .* is not installed"
        ),
    ),
    (
        "nccl",  # collectives between ranks and the stores that set them up (HCCL: Ascend's NCCL)
        re.compile(
            r"NCCL|HCCL|DistBackendError|DistNetworkError|DistStoreError|TCPStore|c10d|gloo|Watchdog caught", re.I
        ),
    ),
    (
        "cuda-graph",
        re.compile(
            r"Capture cuda graph failed|stream is capturing|during CUDA graph capture|graph capture|"
            r"graph_runner\.py:capture|sglang/[\w/]+\.py:\w*capture",  # raised while capturing
            re.I,
        ),
    ),
    (
        "model-load",
        re.compile(
            r"not a valid model identifier|Repo id must|huggingface\.co|Model architectures|"
            r"does not recognize this architecture|has no SGLang implementation|"
            # the hub out of reach while the model's files are fetched
            r"ConnectionResetError|Connection aborted|SSLError|NameResolution|Temporary failure in name resolution|"
            r"RepositoryNotFound|GatedRepo|LocalEntryNotFound|safetensors|load_weights|"
            r"config\.json|HFValidationError|params_dict\[|"
            r"KeyError: '[\w.]*(?:\.weight|\.bias|_scale|layers\.\d+)[\w.]*'",  # a parameter the model does not have
            re.I,
        ),
    ),
    ("timeout", re.compile(r"watchdog timeout|timed out|Timeout", re.I)),
    (
        "arg-conflict",
        re.compile(
            r"not compatible with|is incompatible with|cannot be used (?:with|together)|mutually exclusive|"
            r"unrecognized arguments|invalid choice|\brequires SM ?\d+|does not match the [\w\s`-]*argument|"
            r"(?:backend|method|mode|algorithm|strategy) '[\w.-]+' is not supported|"
            r"divisible by.*(?:tensor_parallel_size|_size\b|--[a-z])|(?:partition|_size\b).*not divisible by|"
            r"the following arguments are required|server_args\.py:(?!<module>)\S+$|only supports|must be",
            re.I,
        ),
    ),
)
# The classes that where an error was raised (its traceback) can tell, by the error's type. A slip
# in the code (a name or attribute that does not exist) is a bug wherever it happens: only the
# capture it broke is worth telling. A checkpoint that does not fit its model shows as a lookup or
# a value that is not there, not as a tensor operation or an assertion failing.
CODE_SLIP = ("cuda-graph",)
GENERIC = ("cuda-graph", "arg-conflict")
CONTEXT_CLASSES: dict[str, tuple[str, ...]] = {
    "": ("cuda-graph", "arg-conflict", "model-load"),
    **dict.fromkeys(("NameError", "AttributeError", "UnboundLocalError", "SyntaxError"), CODE_SLIP),
    **dict.fromkeys(("RuntimeError", "AssertionError", "TypeError", "IndexError"), GENERIC),
}
HINTS = {
    "oom": "GPU memory ran out. Lower --mem-fraction-static (leaves more for activations and CUDA graphs), lower "
    "--cuda-graph-max-bs or --max-running-requests, raise --tp-size, or free the GPU of other processes.",
    "arg-conflict": "SGLang refused this combination of arguments; the error names the ones involved.",
    "arg-override": "SGLang changed an argument on its own and then failed with the value it chose (see the "
    "adjustment lines): ask for a combination it keeps, or remove the setting that makes it adjust.",
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
    "other": "Unrecognised failure: launchdeck has no rule for this error yet. The root error is shown as the log "
    "wrote it; once you know the cause, teach launchdeck (a team rule) so the next log like it is placed.",
    "healthy": "",
}
# The answer for input in which no line reads like a server's log: no class fits it, and no
# failure may be read into it, nor health.
NOT_A_LOG_HINT = (
    "This does not look like an SGLang log: no line launchdeck recognises (SGLang's [time] prefix, a server_args "
    "dump, a Python traceback or exception, SGLang's or uvicorn's messages)."
)
# A line that shows the input is a server's log, beside SGLang's prefix and its stages (checked
# apart): the argument dump, Python's tracebacks and warnings, uvicorn's levels, SGLang by name.
RECOGNISABLE = re.compile(
    r"^server_args=|Traceback \(most recent call last\)|^\s*File \"|\b[A-Z]\w*Warning: |"
    r"^(?:DEBUG|INFO|WARNING|ERROR|CRITICAL): +\S|\b(?:sglang|sgl_kernel)[./]|\bSGLang\b"
)
# An import-error of its own kind: what the server needs is not installed where the preset says.
CANNOT_RUN_HINT = (
    "The shell could not run the server's command: check the preset's python (the path of an interpreter with "
    "sglang installed on this host, e.g. what `command -v python3` prints there) and that it is executable."
)


SPEC_V2 = re.compile(r"SGLANG_ENABLE_SPEC_V2=(?:1|true)\b|_v2\.py:", re.I)  # the setting, or its worker's frames


def _number(args: dict[str, Any], name: str) -> float:
    value = args.get(name)
    return value if isinstance(value, int | float) and not isinstance(value, bool) else 0


# Combinations SGLang accepts at start-up that fail later with an error that reads like a plain bug
# (a tensor shape, a capture error): with one of them in the effective arguments, such a failure
# is the combination's. Each: the arguments as a user would write them, and when they apply given
# the server_args dump and what else the log shows (environment, the failing frames).
KNOWN_CONFLICTS: tuple[tuple[str, Callable[[dict[str, Any], str], bool]], ...] = (
    (
        "--speculative-eagle-topk > 1 with the spec v2 worker (SGLANG_ENABLE_SPEC_V2=1)",
        lambda args, evidence: _number(args, "speculative_eagle_topk") > 1 and bool(SPEC_V2.search(evidence)),
    ),
    (
        "EAGLE --speculative-num-steps >= 2 with --enable-expert-distribution-metrics",
        lambda args, evidence: (
            str(args.get("speculative_algorithm")).startswith("EAGLE")
            and _number(args, "speculative_num_steps") >= 2
            and bool(args.get("enable_expert_distribution_metrics"))
        ),
    ),
)
QUOTED_NAME = re.compile(r"[\w.<>-]+")


def _quoted(found: re.Match[str]) -> str:
    """Quoted text is erased, but not quoted names (a parameter, an architecture): they tell causes apart."""
    return found[0] if QUOTED_NAME.fullmatch(found[0][1:-1]) else "<str>"


NORMALISE: tuple[tuple[re.Pattern[str], str | Callable[[re.Match[str]], str]], ...] = (
    (re.compile(r"0x[0-9a-fA-F]+"), "<hex>"),
    (re.compile(r"\b[0-9a-f]{8}-?[0-9a-f]{4}-?[0-9a-f]{4}-?[0-9a-f]{4}-?[0-9a-f]{12}\b|\b[0-9a-f]{16,}\b"), "<id>"),
    (re.compile(r"(?:/[\w.@+-]+)+/?"), "<path>"),
    (re.compile(r"\b\d+(?:\.\d+)?\s*(?:[KMGT]i?B|bytes)\b"), "<size>"),
    (re.compile(r"\b\d+(?:\.\d+)?\b"), "<n>"),
    (re.compile(r"'[^'\n]*'|\"[^\"\n]*\""), _quoted),
    (re.compile(r"dict_keys\(\[.*\]\)"), "<list>"),
)
# One cause that SGLang words differently across versions or stages: signed by its name, so its
# attempts group under one fingerprint whichever wording a log shows.
CAUSES = (
    # The weights left no room for the KV cache: a negative profiled budget, then the refusal.
    ("no memory for the KV cache", re.compile(r"profiled value -\d|Not enought? memory\. Please try to increase")),
)
MAX_TRACEBACK_LINES = 400
FLAG = re.compile(r"--([a-z][a-z0-9]*(?:-[a-z0-9]+)+)")
FIELD = re.compile(r"\b([a-z][a-z0-9]*(?:_[a-z0-9]+){1,5})\b")


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
    error_type: str = ""  # the root error's exception type, and its message normalised
    error_message: str = ""
    figures: Figures = field(default_factory=Figures)
    # What the log says around the root error (its traceback, lines that tell the model's kind),
    # for hints that also weigh the argv the attempt ran.
    evidence: str = ""
    # False when no rule placed the failure (class `other`) or the input is no SGLang log at all
    # (no root error): the answer then says it does not know, rather than a class or "healthy".
    recognised: bool = True

    def as_dict(self) -> dict[str, object]:
        return {
            "stage": self.stage if self.stage_percent is None else f"{self.stage} ({self.stage_percent}%)",
            "class": self.failure_class,
            "root_error": self.root_error,
            "fingerprint": self.fingerprint,
            "hint": self.hint,
            "adjustments": self.adjustments,
            "recognised": self.recognised,
        }


@dataclass
class _Traceback:
    lines: list[Line] = field(default_factory=list)
    exceptions: list[Line] = field(default_factory=list)
    ended: bool = False


class Analyzer:
    def __init__(self) -> None:
        self._pending = ""  # the last line, until its newline arrives
        self._partial = False  # its first records, ended by carriage returns, were read already
        self._skipping = False  # the rest of a record longer than MAX_RECORD is being skipped
        self._number = 0
        self._stage_index = -1
        self.reached: list[str] = []  # the stages the log has shown, in order
        self._percent: int | None = None
        self._current: _Traceback | None = None
        self._root: tuple[Line, str] | None = None  # the first fatal exception, with the lines before it
        self._orphan = False  # the root is an exception line seen without its traceback
        self._secondary: tuple[Line, str] | None = None  # a rank's error caused by another's failure
        self._frames: list[str] = []
        self._fatal_line: Line | None = None  # the first fatal line that is not an exception
        self._precursor: Line | None = None
        self._cut: _Traceback | None = None  # a traceback the log ended in, before its exception
        self._progress: Line | None = None  # the last line that showed the launch moving on
        self._capture_done = False  # a line that only comes once CUDA graph capture is over
        self._adjustments: list[Line] = []
        self._environment: set[str] = set()  # SGLANG_* settings the log shows (an echoed command line)
        self._hybrid_lines: list[str] = []  # the first lines that show a hybrid (mamba) model, if any
        self._figures = Figures()
        self._recognisable = False  # a line read so far shows the input is a server's log
        self._decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")

    def feed_bytes(self, chunk: bytes) -> None:
        """Raw log bytes: a character split between chunks is joined, invalid bytes become U+FFFD,
        records of binary data are skipped."""
        self.feed(self._decoder.decode(without_binary_records(chunk)))

    def feed(self, chunk: str) -> None:
        if self._skipping:  # the rest of a record too long to read, up to its end
            ends = [at for at in (chunk.find("\r"), chunk.find("\n")) if at >= 0]
            if not ends:
                return
            chunk, self._skipping = chunk[min(ends) :], False
        text = self._pending + chunk
        physical = text.split("\n")
        self._pending = physical.pop()  # a line is read once its newline has arrived
        if self._partial and physical:
            self._partial = False  # the end of a line whose first records were read before it ended
            self._read(physical.pop(0), self._number)
        for line in physical:
            self._number += 1
            # (a line too long for one record, or one with a NUL, is read as any other, the same
            # whether it arrived whole or in pieces)
            skim = "\r" not in line and len(line) <= MAX_RECORD
            if skim and self._stage_index == SERVING and (self._current is None or self._current.ended):
                decode = line.find(SKIMMED[0])
                if decode >= 0 and line.find("[", decode + 1) < 0 and "\x00" not in line:
                    self._figures.see_decode(line)
                    continue
                if any((at := line.find(marker)) >= 0 and line.find("[", at + 1) < 0 for marker in SKIMMED[1:]):
                    continue
            if line:
                self._read(line, self._number)
        if len(self._pending) > MAX_RECORD:
            self._read_unfinished()

    def _read(self, physical: str, number: int) -> None:
        for record in logical_lines(physical, number):
            self._see(record)

    def _read_unfinished(self) -> None:
        """A line longer than a record can be, still without its newline: the records that have
        ended (at a carriage return) are read now, and one that is too long is cut (see MAX_RECORD)."""
        if not self._partial:
            self._number += 1
            self._partial = True
        ended, carriage_return, self._pending = self._pending.rpartition("\r")
        if carriage_return:
            self._read(ended, self._number)
        if len(self._pending) > MAX_RECORD:
            self._read(self._pending[:MAX_RECORD], self._number)
            self._pending, self._skipping = "", True

    def finish(self, *, silence_is_hang: bool = True) -> Diagnosis:
        """The answer for the whole log. With `silence_is_hang`, a log that stops during CUDA graph
        capture with no error (the bar short of 100%) is a hang: how capture hangs look in a log
        nobody is still watching."""
        self.feed(self._decoder.decode(b"", final=True))
        if self._pending or self._partial:
            self._number += 0 if self._partial else 1
            self._read(self._pending, self._number)
            self._pending, self._partial, self._skipping = "", False, False
        if self._current is not None and not self._current.exceptions:
            self._cut = self._current  # the log ends inside this traceback
        self._close_traceback()
        result = self.snapshot()
        stuck_bar = result.stage_percent is not None and result.stage_percent < 100
        capturing = result.stage == "cuda graph capture" and stuck_bar and not self._capture_done
        if silence_is_hang and result.root_error is None and capturing:
            return self.hung()
        return result

    def snapshot(self) -> Diagnosis:
        """The answer so far, for a log that is still growing; the analyzer reads on unchanged."""
        root, frames = self._root, self._frames
        current = self._current
        if root is None and current is not None and not _stopped(current.exceptions) and (found := _root_of(current)):
            root, frames = found
        fatal = self._fatal_line
        if fatal is not None and (root is None or fatal.number < root[0].number):
            root, frames = (fatal, fatal.text), []  # a fatal line logged before any exception
        if root is None and self._precursor is not None:
            root = (self._precursor, self._precursor.text)
        if root is None and self._cut is not None:
            return self._cut_off(self._cut)
        return self._diagnosis(root or self._secondary, frames)

    def hung(self) -> Diagnosis:
        """The answer for a launch that stopped making progress: rooted in its last progress line."""
        result = self.snapshot()
        line = self._progress
        if result.root_error is not None or line is None:
            return result
        result.failure_class, result.hint = "timeout", HINTS["timeout"]
        result.root_error, result.root_line = line.raw.strip(), line.number
        message = f"no progress during {result.stage}"
        result.fingerprint = fingerprint("timeout", message)
        result.error_type, result.error_message = "", message
        return result

    def _cut_off(self, tb: _Traceback) -> Diagnosis:
        """A log that ends inside a traceback, before its exception (a window cut short, a process
        killed while printing): the traceback's first line stands for the error, known by the
        frame where it was cut off."""
        context, frames = _context(tb, None)
        header = tb.lines[0]
        named = replace(header, text=f"{header.text.strip()} (cut off in {frames[-1] if frames else 'no frame'})")
        return self._diagnosis((named, context), _sglang_frames(frames))

    def _see(self, line: Line) -> None:
        text = line.text.strip()
        self._track_stage(line, text)
        if not self._recognisable:
            self._recognisable = line.prefixed or self._stage_index >= 0 or _recognisable(line, text)
        if not self._capture_done and CAPTURE_DONE.search(text):
            self._capture_done = True
        self._figures.see(text)
        # The substring tests spare the regular expression on the many lines that cannot match.
        hybrid_sign = "Mamba Cache" in text or "type=" in text
        if hybrid_sign and len(self._hybrid_lines) < 2 and HYBRID_SIGN.search(text):
            self._hybrid_lines.append(text)
        if "SGLANG_" in text and len(self._environment) < 50:
            self._environment.update(ENVIRONMENT.findall(text))
        adjusted = ADJUSTMENT.search(text) and not EXCEPTION.match(text) and not PRECURSOR.search(text)
        if adjusted and len(self._adjustments) < 50 and all(text != seen.text.strip() for seen in self._adjustments):
            self._adjustments.append(line)
        # A window that starts inside a traceback: its first frame opens it.
        outside = self._current is None or self._current.ended
        headless = outside and not line.prefixed and 'File "' in text and FRAME.match(line.text)
        if "Traceback (most recent call last)" in text or headless:
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
        if EXCEPTION.match(text) and not line.prefixed:
            # An exception line whose traceback lies outside the window; one with an empty message
            # may give its cause in the lines below, read as the rest of its traceback.
            self._close_traceback()  # a traceback that ended before it comes first
            if self._root is not None:
                return
            if _message(line) and not _stopped([line]):
                self._root, self._orphan = (line, text), True
            else:
                self._current = _Traceback([line], [line])
            return
        if self._fatal_line is None and not HARMLESS.search(text):
            if ARGPARSE_ERROR.match(text) or any(pattern.search(text) for pattern in FATAL_LINES):
                self._fatal_line = line
            elif self._precursor is None and PRECURSOR.search(text):
                self._precursor = line

    def _close_traceback(self) -> None:
        tb, self._current = self._current, None
        if tb is None or (found := _root_of(tb)) is None or _stopped(tb.exceptions):
            return
        if self._root is not None:
            # An exception line printed before its own traceback (output of several processes
            # interleaved): the traceback, with its frames, takes the root's place.
            if not (self._orphan and found[0][0].text.strip() == self._root[0].text.strip()):
                return
            self._orphan = False
        if SECONDARY.search(found[0][0].text):
            self._secondary = self._secondary or found[0]
            return
        self._root, self._frames = found

    def _track_stage(self, line: Line, text: str) -> None:
        if text.startswith("Prefill batch") and self._stage_index == READY_STAGE:
            text = "Decode batch."  # traffic after the ready line: serving
        weights_in = self._stage_index > WEIGHTS_STAGE or (self._stage_index == WEIGHTS_STAGE and self._percent == 100)
        if weights_in and self._stage_index <= CAPTURE_STAGE and not self._capture_done and BARE_BAR.match(text):
            text = f"Capturing batches: {text}"
        for index, (_, pattern) in enumerate(STAGES):
            if index >= self._stage_index and pattern.search(text):
                if index > self._stage_index:
                    self._percent = None
                    self.reached.append(STAGES[index][0])
                    self._progress = line
                self._stage_index = index
                if index in (WEIGHTS_STAGE, CAPTURE_STAGE) and (percent := PERCENT.search(text)):
                    # A bar moving on is progress; another rank's line entering the stage is not.
                    self._percent = int(percent.group(1))
                    self._progress = line

    def _diagnosis(self, root: tuple[Line, str] | None, frames: list[str]) -> Diagnosis:
        figures = replace(self._figures, memory=dict(self._figures.memory), decode=list(self._figures.decode))
        result = Diagnosis(adjustments=[line.text.strip() for line in self._adjustments], figures=figures)
        if self._stage_index >= 0:
            result.stage = STAGES[self._stage_index][0]
            result.stage_percent = self._percent
        if root is None:
            if not self._recognisable:
                result.failure_class, result.hint, result.recognised = "other", NOT_A_LOG_HINT, False
            return result
        line, context = root
        message = signed = line.text.strip()
        result.failure_class = classify(message, context)
        if result.failure_class in ("arg-conflict", "other") and (override := self._override_behind(message)):
            # The failure names an argument SGLang changed on its own: the change is the cause.
            line, message, result.failure_class = override, override.text.strip(), "arg-override"
            signed = message
        elif not _message(line) and (source := ASSERT_SOURCE.search(context)):
            signed = f"{message} {source.group(0)}"  # a bare assertion is known by its assert
        hint = hint_for(result.failure_class, message)
        if result.failure_class in ("other", "cuda-graph") and (conflict := self._known_conflict(frames)):
            result.failure_class = "arg-conflict"
            hint = f"SGLang accepts {conflict} at start-up but fails with it later: change one of them."
        result.evidence = "\n".join([context, *self._hybrid_lines])
        if explained := explain(
            message, result.failure_class, server_args=figures.server_args, context=result.evidence
        ):
            result.failure_class, hint = explained.failure_class, explained.hint
        else:
            hint = in_release_spelling(hint, figures.server_args)
        result.root_error = line.raw.strip()
        result.frames = list(frames)
        result.root_line = line.number
        result.hint = hint
        result.recognised = result.failure_class != "other"  # `other` is what no rule above placed
        result.fingerprint = fingerprint(result.failure_class, signed)
        result.error_type, result.error_message = signature_parts(signed)
        return result

    def _known_conflict(self, frames: list[str]) -> str | None:
        args = self._figures.server_args
        if not args:
            return None
        evidence = " ".join([*frames, *self._environment])
        return next((name for name, applies in KNOWN_CONFLICTS if applies(args, evidence)), None)

    def _override_behind(self, message: str) -> Line | None:
        named = argument_names(message)
        return next((line for line in self._adjustments if argument_names(line.text) & named), None)


def _root_of(tb: _Traceback) -> tuple[tuple[Line, str], list[str]] | None:
    """A traceback's root exception with what else it says, and the SGLang frames leading to it."""
    if not tb.exceptions:
        return None
    # The first exception printed is the cause; an outer one that only repeats it adds nothing,
    # and an outer one with an empty message means the inner is the root.
    # A rank's error caused by another's failure yields to that failure.
    primary = [e for e in tb.exceptions if not SECONDARY.search(e.text)] or tb.exceptions
    root = next((e for e in primary if _message(e)), primary[0])
    if QUOTED_KEY.match(_message(root)):
        # A bare key (a KeyError's): an outer exception raised about that key says what it means.
        key = _message(root)[1:-1]
        root = next((e for e in primary[primary.index(root) + 1 :] if key in _message(e)), root)
    if not _message(root):
        # A report that gives its cause after an empty header (sgl_kernel's loader lists its
        # attempts; Triton quotes the kernel source first): the first cause below it.
        after = tb.lines[tb.lines.index(root) + 1 :] if root in tb.lines else tb.lines
        root = next((line for line in after if DETAIL.match(line.text.strip()) and line not in tb.exceptions), root)
    context, frames = _context(tb, root)
    return (root, context), _sglang_frames(frames)


def _recognisable(line: Line, text: str) -> bool:
    """A line that shows the input is a server's log (see RECOGNISABLE), or an exception's. (A
    fatal line need not be looked for: it becomes the root error, which no log of nothing has.)"""
    return bool(RECOGNISABLE.search(text) or EXCEPTION.match(text) or FRAME.match(line.text))


def _stopped(exceptions: list[Line]) -> bool:
    """Exceptions that start with Ctrl-C: someone stopped the process, which is no failure of its own."""
    found = EXCEPTION.match(exceptions[0].text.strip()) if exceptions else None
    return found is not None and found.group(1) == "KeyboardInterrupt"


def _context(tb: _Traceback, root: Line | None) -> tuple[str, list[str]]:
    """What else a traceback says that can name the kind of failure (its exceptions, its last lines,
    and last the frames that led to `root`, innermost at the end), with those frames."""
    frames = frames_before(tb.lines, root)
    return "\n".join([*(line.text for line in [*tb.exceptions, *tb.lines[-12:]]), "frames:", *frames]), frames


def _sglang_frames(frames: list[str], keep: int = 3) -> list[str]:
    return [frame for frame in frames if frame.startswith(PACKAGE_NAMES)][-keep:]


def argument_names(text: str) -> set[str]:
    """The server arguments a line names, as fields: `--max-running-requests` and
    `max_running_requests` both give max_running_requests."""
    return {field_name(flag) for flag in FLAG.findall(text)} | set(FIELD.findall(text))


def frames_before(lines: list[Line], root: Line | None) -> list[str]:
    """The frames that led to `root`, outermost first, as "<path>:<function>"; SGLang's paths cut
    at the package ("sglang/srt/..."), so they read the same on every host and install."""
    frames: list[str] = []
    for line in lines:
        if line is root:
            break
        text = line.text.strip()
        if "Traceback (most recent call last)" in text or text.startswith(("During handling", "The above")):
            frames = []  # a new exception's frames start here
        elif match := FRAME.match(line.text):
            path = match.group(1)
            package = PACKAGE.search(path)
            frames.append(f"{path[package.start() :] if package else path}:{match.group(2)}")
    return frames


def _message(line: Line) -> str:
    """The exception's message; empty too for a wrapper that announces a cause it does not give
    ("Capture cuda graph failed: ")."""
    match = EXCEPTION.match(line.text.strip())
    message = (match.group(2) or "").strip() if match else ""
    return "" if message.endswith(":") else message


def hint_for(failure_class: str, message: str) -> str:
    """What to do about a failure of this class; a command the shell could not run gets its own
    explanation."""
    if failure_class == "import-error" and CANNOT_RUN.match(message):
        return CANNOT_RUN_HINT
    return HINTS[failure_class]


def classify(message: str, context: str = "") -> str:
    if ARGPARSE_ERROR.match(message):
        return "arg-conflict"
    if CANNOT_RUN.match(message):
        return "import-error"  # the server's program is not there to run: as a library that does not load
    bare_assertion = message.rstrip(": ").endswith("AssertionError")
    if bare_assertion and (source := ASSERT_SOURCE.search(context)) and PARALLEL_SIZE.search(source[0]):
        return "arg-conflict"  # a bare assertion that the model's shape divides by a parallel size
    for name, pattern in CLASSES:
        if pattern.search(message):
            return name
    kind = found.group(1) if (found := EXCEPTION.match(message)) else ""
    told = CONTEXT_CLASSES.get(kind, CONTEXT_CLASSES[""])
    for name, pattern in CLASSES:
        if name in told and pattern.search(context):
            return name
    return "other"


def normalise(message: str) -> str:
    for pattern, replacement in NORMALISE:
        message = pattern.sub(replacement, message)
    return re.sub(r"\s+", " ", message).strip()[:500]


def signature_parts(message: str) -> tuple[str, str]:
    """The exception type (empty for a fatal line that is not an exception) and the message with
    everything that varies between runs replaced. A cause given as a detail line ("- KeyError: x")
    or as a repr (`KeyError('x')`) is read as the exception it names."""
    message = message.removeprefix("- ")
    if (as_repr := EXCEPTION_REPR.match(message)) is not None:
        message = f"{as_repr[1]}: {as_repr[3]}"
    match = EXCEPTION.match(message)
    kind = match.group(1) if match else ""
    detail = match.group(2) or "" if match else message
    # After "out of memory" comes the allocator's accounting, worded differently by each torch version.
    return kind, normalise(OOM_ACCOUNTING.sub("", detail))


def fingerprint(failure_class: str, message: str) -> str:
    cause = next((name for name, pattern in CAUSES if pattern.search(message)), None)
    kind, detail = ("", cause) if cause else signature_parts(message)
    return hashlib.sha256(f"{failure_class}|{kind}|{detail}".encode()).hexdigest()[:16]


def diagnose(text: str) -> Diagnosis:
    analyzer = Analyzer()
    analyzer.feed(text)
    return analyzer.finish()
