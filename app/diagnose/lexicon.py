"""The kinds of failure launchdeck names: a taxonomy of concepts, each a few words and exception
types, in one order of specificity, with the class and hint each stands for.

Separate because it is what a person reviews. A root error is placed by the first concept, in the
order below, whose words appear in what the failure says: the root error and the other exceptions
of its chain (what wraps it and what it wraps), weighed together. So the most specific evidence
wins wherever in the chain it is (an out-of-memory inside capture is out of memory; an address in
use raised through a distributed store is a port clash; a `ptxas` that cannot build for the GPU
inside capture is a kernel that cannot be built), and that is said once, by the order. Only when no
concept's words are there does *where* the error was raised (its frames and source) tell, for the
exception types whose place means something (PLACES). Where the root error comes from is decided
elsewhere (root.py).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Literal

from app.diagnose.events import ARGPARSE_ERROR, CANNOT_RUN, EXCEPTION, MESSAGE_HEAD, Evidence
from app.states import FailureClass


@dataclass(frozen=True)
class Concept:
    """A kind of failure a person names, recognised by a few words (regular expressions, any case)
    or by the exception's type alone."""

    name: str
    failure_class: str
    words: tuple[str, ...]
    types: tuple[str, ...] = ()
    hint: str = ""  # what to do, where it says more than the class's hint
    # What tells one cause of this kind from another, for its fingerprint (fingerprint.py):
    # "message", its words once what varies between runs is erased; "phase", only where in the
    # launch it struck (memory runs out differently loading weights and capturing graphs, and
    # whatever the allocator's wording); "kind", which of its `words` it shows (one kind of fault
    # each, in any runtime's wording) and where it struck; "concept", nothing more (one cause in
    # any wording).
    signed_by: Literal["message", "phase", "kind", "concept"] = "message"
    pattern: re.Pattern[str] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "pattern", re.compile("|".join(self.words), re.I))

    def kind_in(self, text: str) -> int:
        """Which of its words `text` shows, by their place in `words`; -1 for none."""
        return next((at for at, words in enumerate(self.words) if re.search(words, text, re.I)), -1)

    def found_in(self, text: str, exception_types: set[str]) -> bool:
        return not exception_types.isdisjoint(self.types) or (
            bool(self.words) and self.pattern.search(text) is not None
        )


CONCEPTS = (  # most specific first: the first whose words the failure shows places it
    Concept(
        "kernel workspace too small",  # a kernel library's own buffer, sized at start, not the GPU's memory
        "oom",
        (r"in AlignedAllocator|workspace (?:buffer )?(?:is )?too small",),
        hint="A kernel library's workspace buffer is too small for this batch (FlashInfer's AlignedAllocator): "
        "raise its size (SGLANG_FLASHINFER_WORKSPACE_SIZE) or lower --max-running-requests / --chunked-prefill-size.",
        signed_by="concept",
    ),
    Concept(
        "memory exhausted",
        "oom",
        (
            r"out of memory",
            r"\bnot enought? (?:\w+ )?memory",  # "not enough host memory" (sglang/srt/mem_cache/pool_host)
            r"\binsufficient (?:\w+ )?memory",
            r"\b(?:cannot|can't|could not|unable to|failed to) allocate "
            r"(?:\S+ ){0,3}?(?:memory|buffer|blocks?|pages?|tensor)",
            r"memory allocation failed|std::bad_alloc",
            r"Error(?:Memory)?Allocation\b|_ALLOC_FAILED|OUT_OF_(?:DEVICE_|HOST_)?MEMORY|OutOfMemory|RESOURCE_EXHAUSTED",
            r"_MEMORY_ALLOCATION\b",  # Ascend's ACL_ERROR_RT_MEMORY_ALLOCATION
            r"profiled value -\d",  # the weights left no room for the KV cache
            # the pools sized from what the weights left (sglang/srt/mem_cache/kv_cache_configurator.py,
            # sglang/srt/model_executor/pool_configurator.py, sglang/srt/managers/tp_worker.py)
            r"leaves? no (?:GPU memory|room) for the (?:full )?KV|too small to serve any request",
            r"\b(?:memory|KV) pool size is too small|not enough space for [\w ]{0,30}(?:cache|pool)",
        ),
        types=("OutOfMemoryError", "MemoryError"),
        signed_by="phase",
    ),
    Concept(
        "killed by the system",  # SIGKILL, as SGLang's launcher reports it (sglang/srt/entrypoints/engine.py)
        "oom",
        (r"\bexit ?code:? -9\b",),
        hint="A process was killed (SIGKILL), most often by the host's OOM killer when CPU RAM runs out loading "
        "the model: check `dmesg -T | grep -i oom`, the host's and the container's memory limit.",
        signed_by="concept",
    ),
    Concept(
        "address in use",
        "port-in-use",
        (
            r"address already in use",
            r"errno:? ?(?:98|48|10048)\b|EADDRINUSE|only one usage of each socket address",  # Linux, macOS, Windows
            r"Could not bind port",  # sglang/srt/utils/network.py
            r"is not available in \d+ seconds",
            r"already in use",
        ),
    ),
    Concept(
        "kernel not built for this GPU",
        "driver",
        (
            r"no kernel image is available",
            r"invalid device function",
            r"\bsm_?\d+a?\b.{0,60}\bnot (?:defined|supported)",  # a toolchain that does not know the GPU
            r"unsupported (?:gpu |cuda )?arch",
            r"only supports sm_?\d+",
            # a kernel or backend that refuses this GPU's compute capability
            r"(?:does not support|not supported|unsupported|no support)\b.{0,80}\b(?:compute )?capabilit(?:y|ies)\b",
            r"does not support opType",  # Ascend: no operator binary for this device
            r"NoBinaryForGpu|Unable to find code object for all current devices",  # ROCm's
            r"CUBLAS_STATUS_ARCH_MISMATCH|HSA_STATUS_ERROR_INVALID_ISA",
            r"unsupported (?:PTX|toolchain)|PTX (?:was compiled with|JIT compil)",
        ),
        hint="No kernel is built for this GPU's compute capability (sm_XX): use a build of sglang, sgl_kernel, "
        "torch and Triton that supports it, or an attention or GEMM backend that does.",
    ),
    Concept(
        "kernel build failed",
        "driver",
        (
            r"\bptxas\b",
            r"\bnvcc\b.{0,80}(?:fatal|error|non-zero)",
            r"\bninja\b.{0,80}(?:stopped|failed|non-zero)",
            r"Error building extension",
            r"error compiling objects",
            r"LLVM ERROR",  # Triton's compiler aborting
        ),
        hint="A kernel could not be compiled for this GPU (JIT, nvcc or ptxas): the CUDA toolkit, Triton or the "
        "GPU's sm_XX do not match; check the toolchain's error above it.",
    ),
    Concept(
        "driver too old or missing",  # (signed by message: no driver at all is another cause)
        "driver",
        (
            r"driver version is insufficient",
            r"no NVIDIA driver",
            r"No CUDA GPUs are available",
            r"\b0 active drivers\b",  # Triton finding no GPU driver to compile for
            r"CUDA driver",
            r"undefined symbol: cu[A-Z]",
        ),  # a CUDA driver API symbol: the driver is older than the build
    ),
    Concept(
        "distributed store timed out",  # the ranks never all met: one cause, worded by client or server
        "nccl",
        (
            r"(?:TCPStore|DistStoreError|DistNetworkError|c10d|rendezvous|\bstore\b).{0,200}(?:timed out|timeout)",
            r"(?:timed out|timeout).{0,200}(?:TCPStore|c10d|rendezvous|\bstore\b|waiting for clients)",
            r"client socket has timed out",  # torch's TCPStore client, raised as RuntimeError before DistNetworkError
        ),
        hint="The ranks could not meet at the distributed store: every node started, --dist-init-addr reachable "
        "from all of them (firewall, interface), the port free, and --dist-timeout long enough for the slowest.",
        signed_by="concept",
    ),
    Concept(
        "distributed store",  # where ranks meet before their collectives: torch's c10d TCPStore
        "nccl",
        (
            r"TCPStore",
            r"\bc10d\b",
            r"DistStoreError",
            r"DistNetworkError",
            r"rendezvous",
            r"recvValue|recvBytes|sendBytes|failed to recv, got 0 bytes",
            r"(?:client|server) socket has failed to (?:connect|listen)",  # torch's c10d socket.cpp
        ),
        types=("DistStoreError", "DistNetworkError"),
    ),
    Concept(
        "collective communication",
        "nccl",
        (
            # (not torch's "Process group watchdog ... terminated with exception": it reports what it caught)
            r"\b[NHR]CCL\b|NCCL_|(?-i:\bnccl[A-Z]\w+)|ProcessGroup",
            r"DistBackendError",
            r"\bgloo\b",
            r"Watchdog caught collective|Heartbeat monitor timed out",  # torch's ProcessGroupNCCL
            # GPUs reaching each other's memory (peer access, IPC handles), what the custom all-reduce needs
            r"peer access|\bcudaIpc\w+|\bhipIpc\w+",
        ),
    ),
    Concept(
        "library built against another version",  # a compiled extension's ABI: torch's, CUDA's runtime
        "import-error",
        (r"undefined symbol",),
        hint="A compiled library was built against another version of torch or CUDA than the one installed "
        "(an undefined symbol): install the build of it (sgl_kernel, flashinfer, …) that matches this torch.",
        signed_by="concept",
    ),
    Concept(
        "packages disagree",
        "import-error",
        (
            r"ImportError|ModuleNotFoundError|PackageNotFoundError|cannot import name|No module named",
            r"Could not load any common_ops",
            r"minimum required version",  # sglang/srt/utils/common.py: assert_pkg_version
            r"\bis not installed\b.{0,40}\bplease install\b",
            # an integrating program and SGLang, or SGLang and a kernel library, disagree on an API
            r"got an unexpected keyword argument|missing \d+ required (?:positional|keyword-only) argument",
            r"takes (?:from )?\d+ (?:to \d+ )?positional arguments? but \d+ (?:were|was) given",
            r"\bmodule '[\w.]+' has no attribute",
            # one package that needs another's version: "needs to work with X 2.6.*, but 2.7.0 is found"
            r"\b(?:needs|requires) (?:to work with )?[\w.*+ -]{1,40}\d[\w.*]*,? "
            r"but [\w.+ -]{1,40} (?:is|was) (?:found|installed)",
        ),
    ),
    Concept(
        "remote code not trusted",  # a model or tokenizer whose code lives in its repository (Transformers)
        "model-load",
        (r"`trust_remote_code=True`|contains custom code which must be executed|requires you to execute the \w+ file",),
        hint="The model or its tokenizer ships its own code: pass --trust-remote-code if you trust its repository.",
        signed_by="concept",
    ),
    Concept(
        "architecture not supported",
        "model-load",
        (
            r"Model architectures",
            r"has no SGLang implementation",
            r"Cannot find model module",  # sglang/srt/model_loader/utils.py
        ),
        signed_by="concept",
    ),
    Concept(
        "quantization scales not in the model",  # a quantized checkpoint for another build of the model
        "model-load",
        (
            r"KeyError: '[\w.]*_scale\w*'",
            r"\b[\w.]*_scale\w*\b.{0,40}\bnot (?:found|in)\b",
            r"\bmissing\b.{0,40}\bscales?\b",
        ),
        signed_by="concept",
    ),
    Concept(
        "model does not fit",
        "model-load",
        (
            r"does not recognize this architecture",  # Transformers, too old for the model's type
            r"KeyError: '[\w.]*(?:\.weight|\.bias|layers\.\d+)[\w.]*'",  # a parameter the model lacks
            r"\b(?:weight|param\w*|scale)s?\b.{0,80}\bnot (?:found|in)\b",
            r"\bmissing\b.{0,40}\b(?:weight|param\w*|scale|key)s?\b|Missing key|Unexpected key",
            r"size mismatch for",
            r"'\w*Config' object has no attribute",  # the model's config lacks a field SGLang reads
            r"safetensors|SafetensorError|config\.json|Cannot find any model weights",
        ),
    ),
    Concept(
        "model out of reach",
        "model-load",
        (
            r"not a valid model identifier|Repo id must|HFValidationError",
            r"huggingface\.co(?!/docs)|RepositoryNotFound|Repository Not Found|GatedRepo|gated repo|EntryNotFound",
            # huggingface_hub/errors.py; Transformers' and SGLang's tokenizer loaders
            r"RevisionNotFound|HfHubHTTPError|OfflineModeIsEnabled|\b40[13] Client Error|Incorrect path_or_model_id",
            r"Can't load (?:the )?(?:tokenizer|config)|Failed to load the tokenizer",
            # the hub out of reach while the model's files are fetched
            r"ConnectionResetError|Connection aborted|SSLError|NameResolution|Temporary failure in name resolution",
        ),
    ),
    Concept(
        "graph capture",
        "cuda-graph",
        (
            r"Capture cuda graph failed",
            r"stream is capturing",
            r"during CUDA graph capture",
            r"graph capture",
            r"StreamCapture",
        ),
    ),
    Concept(
        "GPU kernel fault",
        "other",
        (  # one kind of fault a line, in CUDA's, ROCm's and Ascend's wordings
            r"illegal memory access|ILLEGAL_ADDRESS|IllegalAddress|Memory access fault by GPU|"
            r"HSA_STATUS_ERROR_(?:MEMORY_APERTURE_VIOLATION|MEMORY_FAULT)",
            r"illegal instruction|HSA_STATUS_ERROR_ILLEGAL_INSTRUCTION",
            r"misaligned address",
            r"unspecified launch failure|too many resources requested for launch|HSA_STATUS_ERROR_EXCEPTION",
            r"CUBLAS_STATUS_(?:EXECUTION_FAILED|INTERNAL_ERROR|INVALID_VALUE|MAPPING_ERROR)",
            r"CUDNN_STATUS_(?:EXECUTION_FAILED|INTERNAL_ERROR)",
            r"device-side assert|\.cuh?:\d+: .*Assertion `",  # (a kernel's assert, as CUDA prints it)
            r"Kernel task happen error",  # Ascend's
        ),
        signed_by="kind",
        hint="A GPU kernel faulted (an illegal access or a device-side assert): a kernel bug or a kernel that does "
        "not fit these shapes. Rerun with CUDA_LAUNCH_BLOCKING=1 to find it, and try another attention backend, "
        "--disable-cuda-graph, or without speculative decoding to narrow it down.",
    ),
    Concept(
        "process crashed",  # below Python: a signal, with no exception to say why
        "other",
        (r"Segmentation fault|SIGSEGV|Fatal Python error|Caught signal \d+|core dumped",),
        hint="A process crashed below Python (a segmentation fault or another signal), with no error to say why: "
        "the frames printed with it, or the last lines before it, show which library; try the launch without the "
        "newest options (attention backend, custom all-reduce, CPU kernels) to narrow it down.",
        signed_by="phase",
    ),
    Concept(
        "timed out",
        "timeout",
        (
            r"watchdog timeout",
            r"timed out",
            r"timeout",
            r"deadline exceeded",
            r"did not become ready|not ready (?:after|within)",  # a wrapper that waited for the server
            r"^Pyspy dump for PID",  # SGLang's watchdog dumping a scheduler that stopped making progress
        ),
        types=("TimeoutError",),
    ),
    Concept(
        "arguments refused",
        "arg-conflict",
        (
            r"not compatible with|is incompatible with|cannot be used (?:with|together)|mutually exclusive",
            r"unrecognized arguments|invalid choice|the following arguments are required",
            r"\brequires SM ?\d+|does not match the [\w\s`-]*argument",
            r"(?:backend|method|mode|algorithm|strategy) '[\w.-]+' is not supported",
            r"divisible by.*(?:tensor_parallel_size|_size\b|--[a-z])|(?:partition|_size\b).*not divisible by",
            r"only supports|must be|\bis (?:not|only) supported (?:with|when|together)",
            r"\brequires? (?:the |a |an )?`?--[a-z]|\bplease (?:set|specify|pass|use|add) `?--[a-z]",  # a flag it needs
            # a flag named beside a refusal: SGLang's argument checks (sglang/srt/arg_groups/)
            r"--[a-z][\w-]*\b.{0,80}\b(?:requires|needs|does not support|is not supported|is required|must differ|"
            r"cannot be (?:combined|set|used))\b",
            r"\b(?:does not support|cannot be set together with|cannot set|invalid (?:type|value) for) `?--[a-z]",
        ),
    ),
)
CONCEPT_BY_NAME = {concept.name: concept for concept in CONCEPTS}


@dataclass(frozen=True)
class Place:
    """Where an error was raised that tells its kind when its words do not: a frame or source line."""

    concept: Concept
    pattern: re.Pattern[str]
    innermost: bool = False  # only the frame that raised it counts


def _place(name: str, pattern: str, *, innermost: bool = False) -> Place:
    return Place(CONCEPT_BY_NAME[name], re.compile(pattern), innermost)


PLACES = (
    # a kernel being built just in time: Triton's compiler, torch's extension builder, a JIT kernel
    _place(
        "kernel build failed",
        r"triton/compiler/compiler\.py:(?:compile|make_\w+)|triton/backends/\w+/compiler\.py|cpp_extension\.py:_?"
        r"(?:run_ninja_build|jit_compile|write_ninja)|/jit(?:_kernel)?/\w+\.py:\w*(?:build|compile)",
    ),
    _place("graph capture", r"graph_runner\.py:capture|sglang/[\w/]+\.py:\w*capture"),
    _place("arguments refused", r"server_args\.py:(?!<module>)\S+$", innermost=True),  # SGLang's argument checks
    _place(
        "model does not fit",
        r":load_weights\b|:weight_loader\b|params_dict\[|sglang/srt/model_loader/|[:.]load_model\b|\bget_model\(",
    ),
    # Transformers looking up a model type it does not know (its config's `model_type`)
    _place("architecture not supported", r"transformers/models/auto/configuration_auto\.py"),
    # a package being imported: the import machinery's own frames
    _place(
        "packages disagree",
        r"(?m)<frozen importlib\._bootstrap>|importlib/__init__\.py:import_module|^(?:from [\w.]+ )?import [\w.(]",
    ),
    # ranks meeting to set up their collectives: a store, a rendezvous, a process group
    _place(
        "collective communication",
        r":init_torch_distributed\b|:init_distributed_environment\b|:initialize_model_parallel\b|sglang/srt/distributed/|"
        r"torch/distributed/(?:rendezvous|distributed_c10d)\.py",
    ),
)
# Which places can tell an error of each type. A slip in the code (a name or attribute that does
# not exist) is a bug wherever it happens: only the capture it broke is worth telling. An assertion,
# a type or an index error raised while a kernel is compiled is the kernel's own code, not the
# toolchain. Types not listed can be told by every place.
CODE_SLIP = ("graph capture",)
GENERIC = ("graph capture", "arguments refused", "collective communication", "model does not fit")
PLACES_BY_TYPE: dict[str, tuple[str, ...]] = {
    **dict.fromkeys(("NameError", "AttributeError", "UnboundLocalError", "SyntaxError"), CODE_SLIP),
    **dict.fromkeys(("AssertionError", "TypeError", "IndexError"), GENERIC),
    "RuntimeError": ("kernel build failed", *GENERIC),  # (an assert in a kernel's code is no toolchain's)
}
ARGPARSE_REFUSAL = CONCEPT_BY_NAME["arguments refused"]
CANNOT_RUN_CONCEPT = Concept(
    "command not found",
    "import-error",  # the server's program is not there to run: as a library that does not load
    (),
    hint="The shell could not run the server's command: check the preset's python (the path of an interpreter "
    "with sglang installed on this host, e.g. what `command -v python3` prints there) and that it is executable.",
)
AS_REPR = re.compile(r"^(?:\w+\.)*([A-Za-z]\w*(?:Error|Exception))\(")
ASSERT_SOURCE = re.compile(r"\bassert \S[^\n]*")
PARALLEL_SIZE = re.compile(r"\b(?:\w+_)?(?:tp|dp|ep|pp|cp)_size\b")

# The hint for a server that exited with a status that names no signal, and left no error in its log.
UNEXPLAINED_EXIT = (
    "The server exited with {code} and its log shows no error: look at what ran around it (its wrapper's "
    "or launcher's own output, the host's journal) for the reason."
)
# The hint for a failure no rule places, in two parts: where it was raised goes between them.
UNPLACED = "Unrecognised failure: launchdeck has no rule for this error yet."
TEACH_IT = (
    "The root error is shown as the log wrote it; once you know the cause, teach launchdeck (a team rule) so the "
    "next log like it is placed."
)
HINTS: dict[str, str] = {
    FailureClass.OOM: (
        "GPU memory ran out. Lower --mem-fraction-static (leaves more for activations and CUDA graphs), lower "
        "--cuda-graph-max-bs or --max-running-requests, raise --tp-size, or free the GPU of other processes."
    ),
    FailureClass.ARG_CONFLICT: "SGLang refused this combination of arguments; the error names the ones involved.",
    FailureClass.ARG_OVERRIDE: (
        "SGLang changed an argument on its own and then failed with the value it chose (see the "
        "adjustment lines): ask for a combination it keeps, or remove the setting that makes it adjust."
    ),
    FailureClass.NCCL: (
        "A collective between ranks failed or timed out: check the other ranks' first error, NCCL_DEBUG=INFO, "
        "P2P/NVLink support, and --disable-custom-all-reduce."
    ),
    FailureClass.CUDA_GRAPH: (
        "CUDA graph capture failed: try --disable-cuda-graph to confirm, then a smaller --cuda-graph-max-bs; "
        "torch.compile and some attention backends do not capture."
    ),
    FailureClass.PORT_IN_USE: (
        "A port is taken, often by an earlier server still running: stop it or pick another --port."
    ),
    FailureClass.MODEL_LOAD: (
        "The model could not be found or loaded: check --model-path (local folder or hub id), access to the "
        "hub, and that the checkpoint matches the architecture."
    ),
    FailureClass.IMPORT_ERROR: "A library does not load: sglang, sgl_kernel, torch and CUDA versions do not match.",
    FailureClass.DRIVER: (
        "The GPU, driver or CUDA build does not support what runs: check the compute capability and versions."
    ),
    FailureClass.TIMEOUT: "Nothing progressed for too long: look at the last stage and the ranks that stopped logging.",
    FailureClass.OTHER: f"{UNPLACED} {TEACH_IT}",
    FailureClass.HEALTHY: "",
}
# The answer for input in which no line reads like a server's log: no class fits it, and no
# failure may be read into it, nor health.
NOT_A_LOG_HINT = (
    "This does not look like an SGLang log: no line launchdeck recognises (SGLang's [time] prefix, a server_args "
    "dump, a Python traceback or exception, SGLang's or uvicorn's messages)."
)


def hint_for(concept: Concept | None, failure_class: str) -> str:
    """What to do about a failure: its concept's own advice, else its class's."""
    return concept.hint if concept is not None and concept.hint else HINTS[failure_class]


def said(message: str, evidence: Evidence | None = None) -> Concept | None:
    """The concept a failure's own words name: the root error's and its chain's."""
    if ARGPARSE_ERROR.match(message):
        return ARGPARSE_REFUSAL
    if CANNOT_RUN.match(message):
        return CANNOT_RUN_CONCEPT
    evidence = evidence or Evidence()
    bare_assertion = message.rstrip(": ").endswith("AssertionError")
    if bare_assertion and (source := ASSERT_SOURCE.search(evidence.where)) and PARALLEL_SIZE.search(source[0]):
        return ARGPARSE_REFUSAL  # a bare assertion that the model's shape divides by a parallel size
    said = "\n".join(text[:MESSAGE_HEAD] for text in [message, *evidence.chain])
    chain_types = {_type_of(message), *evidence.chain_types}
    return next((concept for concept in CONCEPTS if concept.found_in(said, chain_types)), None)


def placed_at(message: str, evidence: Evidence) -> Concept | None:
    """The concept where an error was raised stands for, for the types whose place tells."""
    told = PLACES_BY_TYPE.get(_type_of(message))
    for where in PLACES:
        if told is not None and where.concept.name not in told:
            continue
        text = (evidence.frames[-1] if evidence.frames else "") if where.innermost else evidence.where
        if where.pattern.search(text):
            return where.concept
    return None


def _type_of(message: str) -> str:
    """The exception's type, also of one printed as a repr (Triton's `AssertionError('...')`)."""
    typed = EXCEPTION.match(message) or AS_REPR.match(message)
    return typed.group(1) if typed else ""
