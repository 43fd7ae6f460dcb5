"""The kinds of failure launchdeck names, the words each is recognised by, and what to do about each.

Separate because it is the taxonomy a person reviews: the failure classes in their order of
precedence (the first that matches wins), which classes an error's traceback may tell by the
error's type, and each class's hint. It decides the class of a root error from its message and
what its traceback says; where the root error came from is decided elsewhere (root.py).
"""

from __future__ import annotations

import re

from app.diagnose.events import ARGPARSE_ERROR, CANNOT_RUN, EXCEPTION

ASSERT_SOURCE = re.compile(r"\bassert \S[^\n]*")
PARALLEL_SIZE = re.compile(r"\b(?:\w+_)?(?:tp|dp|ep|pp|cp)_size\b")
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
# An import-error of its own kind: what the server needs is not installed where the preset says.
CANNOT_RUN_HINT = (
    "The shell could not run the server's command: check the preset's python (the path of an interpreter with "
    "sglang installed on this host, e.g. what `command -v python3` prints there) and that it is executable."
)


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
