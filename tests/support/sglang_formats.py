"""SGLang's log line formats, as templates, with where each was seen.

Templates use the notation of the format catalogue (`<ts>`, `<ranks>`, `<float>`, ...). A source
is a public thread where the line was seen in a real log (`sgl#N` is
https://github.com/sgl-project/sglang/issues/N), or "(code)" with the file the wording comes
from when no log in the catalogue shows it.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from functools import cached_property

PLACEHOLDERS = {
    "<ts>": r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d",
    "<hms>": r"\d\d:\d\d:\d\d",
    "<ranks>": r"(?: [A-Z_]+\d+)*",
    "<int>": r"-?\d+",
    "<float>": r"-?\d+\.\d+",
    "<pct>": r"[ \d]{2}\d",
    "<bool>": r"(?:True|False)",
    "<bar>": r"[ ▏▎▍▌▋▊▉█]*",
    "<tq>": r"\[[^\]]*\]",
    "<size>": r"\d+(?:\.\d+)? (?:bytes|MiB|GiB)",
    "<list>": r"\[.*\]",
    "<repr>": r".*",
    "<text>": r".*",
    "<path>": r"\S+",
    "<model>": r"\S+",
    "<Arch>": r"\w+",
    "<dtype>": r"torch\.\w+",
    "<pid>": r"\d+",
    "<port>": r"\d+",
    "<host>": r"\S+",
    "<client-ip>": r"[\d.:a-f]+",
    "<name>": r"[\w<>.]+",
    "<request>": r"[A-Z]+ \S+ HTTP/1\.1",
    "<status>": r"\d{3} [A-Za-z ]+",
    "<mmdd>": r"\d{4}",
    "<hms-ns>": r"\d\d:\d\d:\d\d\.\d{9}",
    "<indent>": r" +",
}
_PLACEHOLDER = re.compile("|".join(re.escape(p) for p in PLACEHOLDERS))


@dataclass(frozen=True)
class LineTemplate:
    template: str
    source: str
    literal: bool = False  # the template's text has angle brackets of its own, not placeholders

    @cached_property
    def pattern(self) -> re.Pattern[str]:
        if self.literal:
            return re.compile(re.escape(self.template))
        parts, last = [], 0
        for match in _PLACEHOLDER.finditer(self.template):
            parts.append(re.escape(self.template[last : match.start()]))
            parts.append(PLACEHOLDERS[match.group()])
            last = match.end()
        parts.append(re.escape(self.template[last:]))
        return re.compile("".join(parts))

    def matches(self, line: str) -> bool:
        return self.pattern.fullmatch(line) is not None


def t(template: str, source: str, *, literal: bool = False) -> LineTemplate:
    return LineTemplate(template, source, literal)


TEMPLATES = [
    # Entry point and argument handling (catalogue §2.0, §2.2, §3 arg-conflict)
    t(
        "<path>:<int>: UserWarning: 'python -m sglang.launch_server' is still supported, but 'sglang serve' is the "
        "recommended entrypoint.",
        "§2.0 [sgl#24414, model-launch#119]",
    ),
    t("  Example: sglang serve --model-path <model> [options]", "§2.0 [sgl#24414]", literal=True),
    t("  warnings.warn(", "§2.0 [sgl#24414, model-launch#119]"),
    t("usage: sglang serve <text>", "§3 arg-conflict: argparse usage (standard Python)"),
    t("<indent>[<text>]<text>", "§3 arg-conflict: argparse usage continuation (standard Python)"),
    t("sglang serve: error: <text>", "§3 arg-conflict: `<prog>: error: <message>` (standard Python)"),
    t(
        "Overlap scheduler is disabled when spec v2 is off or using unsupported speculative algorithm. You can set env "
        "SGLANG_ENABLE_SPEC_V2=True to enable the experimental overlap scheduler. ",
        "§2.2 (code) sglang 0.5.10 srt/server_args.py; the 2025 wording was seen bare in [sgl#8974]",
    ),
    t(
        "Spec v2 is enabled for eagle/eagle3 speculative decoding and overlap schedule is turned on.",
        "(code) sglang 0.5.10 srt/server_args.py _handle_speculative_decoding",
    ),
    t(
        "Max running requests is reset to 48 for speculative decoding. You can override this by explicitly setting "
        "--max-running-requests.",
        "(code) sglang 0.5.10 srt/server_args.py _handle_speculative_decoding",
    ),
    t(
        "speculative_num_draft_tokens is adjusted to speculative_num_steps + 1 when speculative_eagle_topk == 1",
        "(code) sglang 0.5.10 srt/server_args.py _handle_speculative_decoding",
    ),
    t(
        "Disabling overlap schedule since mamba no_buffer is not compatible with overlap schedule, try to use "
        "--disable-radix-cache if overlap schedule is necessary",
        "§2.2 (code search)",
    ),
    t(
        "[<ts>] Attention backend not specified. Use <name> backend by default.",
        "(code) sglang 0.5.23 srt/arg_groups/overrides.py; logged once 0.5.23 configures logging before resolving",
    ),
    t(
        "[<ts>] Max running requests is reset to 48 for speculative decoding. You can override this by explicitly "
        "setting --max-running-requests.",
        "(code) sglang 0.5.23 srt/arg_groups/speculative_hook.py _handle_eagle_family",
    ),
    t(
        "[<ts>] Non-overlap (synchronous) spec v2 is used for eagle/eagle3/standalone speculative decoding.",
        "(code) sglang 0.5.23 srt/arg_groups/speculative_hook.py _handle_eagle_family",
    ),
    t(
        "\033[1;33m'--<name>' is deprecated and will be removed in a future release.<text>\033[0m",
        "(code) sglang 0.5.23 srt/arg_groups/argparse_actions.py DeprecatedStoreTrueAction, printed while parsing",
    ),
    # server_args and scheduler start-up (§2.1, §2.3 - §2.7)
    t("[<ts>] server_args=ServerArgs(model_path=<repr>)", "§2.1 [sgl#5896, sgl#5813, sgl#8974]"),
    t("[<ts>] server_args={'model_path': <repr>}", "§2.1 (code) sglang 0.5.23 entrypoints/engine.py resolved_dict"),
    t("[<ts><ranks>] Init torch distributed begin.", "§2.3 [olmocr#105, sgl#8081]"),
    t("[<ts><ranks>] Init torch distributed ends. mem usage=<float> GB", "§2.3 [sgl#4127, sgl#8081, sgl#11716]"),
    t("[<ts><ranks>] Load weight begin. avail mem=<float> GB", "§2.4 [sgl#4127, olmocr#105, sgl#8081, sgl#11716]"),
    t("[<ts><ranks>] Using model weights format <list>", "§2.4 [olmocr#105, sgl#11716]"),
    t("Loading safetensors checkpoint shards: <pct>% Completed | <int>/<int> <tq>", "§2.4 [sgl#11716]"),
    t(
        "[<ts><ranks>] Load weight end. elapsed=<float> s, type=<Arch>, dtype=<dtype>, avail mem=<float> GB, "
        "mem usage=<float> GB.",
        "§2.4 [ktransformers#1870]",
    ),
    t("[<ts><ranks>] Using KV cache dtype: <dtype>", "§2.5 [sgl#12419, ktransformers#1870, sgl#17157]"),
    t(
        "[<ts><ranks>] Mamba Cache is allocated. max_mamba_cache_size: <int>, conv_state size: <float>GB, "
        "ssm_state size: <float>GB ",
        "§2.5 [sgl#12419, ktransformers#1870]",
    ),
    t(
        "[<ts><ranks>] Mamba Cache is allocated. max_mamba_cache_size: <int>, conv_state size: <float>GB, "
        "ssm_state size: <float>GB intermediate_ssm_state_cache size: <float>GB "
        "intermediate_conv_window_cache size: <float>GB ",
        "§2.5 (code) speculative branch of MambaPool.__init__, sglang 0.5.10 srt/mem_cache/memory_pool.py",
    ),
    t(
        "[<ts><ranks>] KV Cache is allocated. dtype: <dtype>, #tokens: <int>, K size: <float> GB, V size: <float> GB",
        "§2.5 [sgl#27537, sgl#29853]",
    ),
    t("[<ts><ranks>] Memory pool end. avail mem=<float> GB", "§2.5 [sgl#2468, sgl#2431, sgl#4826]"),
    t(
        "[<ts><ranks>] Capture cuda graph begin. This can take up to several minutes. avail mem=<float> GB",
        "§2.6 [sgl#4826, sgl#11716, sgl#11275, sgl#27537]",
    ),
    t("[<ts><ranks>] Capture cuda graph bs <list>", "§2.6 [sgl#11716, sgl#11275, sgl#17157, sgl#27537]"),
    t(
        "Capturing batches (bs=<int> avail_mem=<float> GB): <pct>%|<bar>| <int>/<int> <tq>",
        "§2.6 [sgl#11275, sgl#11830, sgl#12978, sgl#27537]",
    ),
    t(
        "[<ts><ranks>] Capture cuda graph end. Time elapsed: <float> s. mem usage=<float> GB. avail mem=<float> GB.",
        "§2.6 [sgl#11830, sgl#12978]",
    ),
    t(
        "[<ts><ranks>] max_total_num_tokens=<int>, chunked_prefill_size=<int>, max_prefill_tokens=<int>, "
        "max_running_requests=<int>, context_len=<int>, available_gpu_mem=<float> GB",
        "§2.7 [sgl#11830, sgl#14422, ktransformers#1870]",
    ),
    # HTTP server, warmup, serving (§2.8 - §2.10)
    t("[<ts>] INFO:     Started server process [<pid>]", "§2.8 [sgl#2468, sgl#2431, sgl#11830]"),
    t("[<ts>] INFO:     Waiting for application startup.", "§2.8 [sgl#2468, sgl#2431, sgl#11830]"),
    t("[<ts>] INFO:     Application startup complete.", "§2.8 [sgl#2468, sgl#2431, sgl#11830]"),
    t(
        "[<ts>] INFO:     Uvicorn running on http://<host>:<port> (Press CTRL+C to quit)",
        "§2.8 [sgl#2468, sgl#2431, sgl#4339, club-3090#1261]",
    ),
    t(
        "[<ts>] ERROR:    [Errno 98] error while attempting to bind on address ('<host>', <port>): "
        "address already in use",
        "§2.8 [sgl#2430]",
    ),
    t(
        "[<ts>] Endpoint '/get_model_info' is deprecated and will be removed in a future version. "
        "Please use '/model_info' instead.",
        "§2.9 [sgl#11830, sgl#14422]",
    ),
    t('[<ts>] INFO:     <client-ip>:<port> - "<request>" <status>', "§2.9 [sgl#2431, club-3090#1261]"),
    t("[<ts>] The server is fired up and ready to roll!", "§2.9, §5 [sgl#2431]"),
    t(
        "[<ts>] Health check failed. Server couldn't get a response from detokenizer for last <int> seconds. "
        "tic start time: <hms>. last_heartbeat time: <hms>",
        "§2.9 (code) entrypoints/http_server.py health_generate",
    ),
    t(
        "[<ts><ranks>] Prefill batch, #new-seq: <int>, #new-token: <int>, #cached-token: <int>, token usage: <float>, "
        "#running-req: <int>, #queue-req: <int>, cuda graph: <bool>, input throughput (token/s): <float>",
        "§2.10 [sgl#22166]",
    ),
    t(
        "[<ts><ranks>] Decode batch, #running-req: <int>, #token: <int>, token usage: <float>, cuda graph: <bool>, "
        "gen throughput (token/s): <float>, #queue-req: <int>",
        "§2.10 [sgl#22166]",
    ),
    t(
        "[<ts><ranks>] Decode batch, #running-req: <int>, #token: <int>, token usage: <float>, accept len: <float>, "
        "accept rate: <float>, cuda graph: <bool>, gen throughput (token/s): <float>, #queue-req: <int>",
        "§2.10 (code) accept len + accept rate fields; clipped form seen in [sgl#25960]",
    ),
    # Failures and shutdown (§2.11, §3)
    t(
        "[<ts><ranks>] Scheduler hit an exception: Traceback (most recent call last):",
        "§2.11 [sgl#3460, sgl#14527, sgl#10090, sgl#19781, sgl#11218]",
    ),
    t(
        "[<ts>] Received sigquit from a child process. It usually means the child failed.",
        "§2.11 [sgl#4289, sgl#8974, sgl#19781, sgl#12031]",
    ),
    t(
        "[<ts>] Subprocess scheduler_<int> (pid=<pid>) crashed with exit code <int>. Triggering SIGQUIT for cleanup...",
        "§2.11 (code) the 2026 subprocess watchdog in entrypoints/engine.py",
    ),
    t(
        "[<ts>] SIGQUIT received. signum=None, frame=None. It usually means one child failed.",
        "(code) managers/tokenizer_manager.py running_phase_sigquit_handler",
    ),
    t("Traceback (most recent call last):", "§3.0 (standard Python)"),
    t('  File "<path>", line <int>, in <name>', "§3.0 (standard Python)"),
    t('  File "<frozen runpy>", line <int>, in <name>', "§2.0 [model-launch#119]"),
    t("During handling of the above exception, another exception occurred:", "§3.0 [sgl#7918, sgl#6342]"),
    t("The above exception was the direct cause of the following exception:", "§3.0 (standard Python)"),
    t(
        "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate <size>. GPU <int> has a total capacity of "
        "<size> of which <size> is free. <text>Including non-PyTorch memory, this process has <size> memory in use. "
        "Of the allocated memory <size> is allocated by PyTorch, and <size> is reserved by PyTorch but unallocated. "
        "If reserved but unallocated memory is large try setting PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True to "
        "avoid fragmentation.  See documentation for Memory Management  "
        "(https://pytorch.org/docs/stable/notes/cuda.html#environment-variables)",
        "§3 oom [sgl#1463, sgl#12496]",
    ),
    t(
        "Exception: Capture cuda graph failed: CUDA out of memory. Tried to allocate <size>. GPU <int> has a total "
        "capacity of <size> of which <size> is free. <text>",
        "§3 oom [sgl#5285]",
    ),
    t("Possible solutions:", "§2.6 [sgl#11218]"),
    t("1. set --mem-fraction-static to a smaller value (e.g., 0.8 or 0.7)", "§2.6 [sgl#11218]"),
    t("2. set --cuda-graph-max-bs to a smaller value (e.g., 16)", "§2.6 [sgl#11218]"),
    t("3. disable torch compile by not using --enable-torch-compile", "§2.6 [sgl#11218, sgl#1467]"),
    t("4. disable CUDA graph by --disable-cuda-graph. (Not recommended. Huge performance loss)", "§2.6 [sgl#11218]"),
    t(
        "2. set --cuda-graph-max-bs-decode to a smaller value (e.g., 16)",
        "(code) sglang 0.5.23 srt/model_executor/runner_backend_utils",
    ),
    t(
        "3. disable decode CUDA graph by --cuda-graph-backend-decode=disabled. "
        "(Not recommended. Huge performance loss)",
        "(code) sglang 0.5.23 srt/model_executor/runner_backend_utils",
    ),
    t("Open an issue on GitHub https://github.com/sgl-project/sglang/issues/new/choose ", "§2.6 [sgl#11218]"),
    t("torch.AcceleratorError: CUDA error: invalid device ordinal", "§3 driver: the AcceleratorError form [sgl#24224]"),
    t(
        "CUDA kernel errors might be asynchronously reported at some other API call, so the stacktrace below might be "
        "incorrect.",
        "§3.0 CUDA-error trailer",
    ),
    t("For debugging consider passing CUDA_LAUNCH_BLOCKING=1", "§3.0 CUDA-error trailer"),
    t("Compile with `TORCH_USE_CUDA_DSA` to enable device-side assertions.", "§3.0 CUDA-error trailer"),
    t(
        "RuntimeError: Not enough memory. Please try to increase --mem-fraction-static. Current value: "
        "mem_fraction_static=<float>",
        "§3 oom (code) newest pool configurator",
    ),
    t(
        "ValueError: Speculative decoding for <Arch> is not compatible with radix cache when using "
        "--mamba-scheduler-strategy no_buffer.To use radix cache with speculative decoding, please use "
        "--mamba-scheduler-strategy extra_buffer and set SGLANG_ENABLE_SPEC_V2=1.",
        "(code) sglang 0.5.10 srt/server_args.py _handle_mamba_radix_cache",
    ),
    t(
        "ValueError: mamba extra_buffer is not compatible with --disable-radix-cache Overlap scheduling is already "
        "supported with no_buffer + disable_radix_cache. Please use --mamba-scheduler-strategy no_buffer instead.",
        "(code) sglang 0.5.10 srt/server_args.py _handle_mamba_radix_cache",
    ),
    t(
        "AssertionError: no_buffer do not support overlap schedule. Try to set disable_overlap_schedule=True.",
        "(code) sglang 0.5.23 srt/arg_groups/mamba_hook.py validate_mamba_no_buffer",
    ),
    t(
        "huggingface_hub.errors.RepositoryNotFoundError: 404 Client Error. (Request ID: Root=<text>)",
        "(code) huggingface_hub errors",
    ),
    t(
        "Repository Not Found for url: https://huggingface.co/api/models/<model>/revision/main.",
        "(code) huggingface_hub errors",
    ),
    t("Please make sure you specified the correct `repo_id` and `repo_type`.", "(code) huggingface_hub errors"),
    t(
        "If you are trying to access a private or gated repo, make sure you are authenticated. For more details, see "
        "https://huggingface.co/docs/huggingface_hub/authentication",
        "(code) huggingface_hub errors",
    ),
    t(
        "huggingface_hub.errors.HFValidationError: Repo id must be in the form 'repo_name' or "
        "'namespace/repo_name': '<model>'. Use `repo_type` argument if needed.",
        "(code) huggingface_hub utils/_validators.py; seen run with sglang 0.5.10",
    ),
    t(
        "OSError: Repo id must be in the form 'repo_name' or 'namespace/repo_name': '<model>'. Use `repo_type` "
        "argument if needed.",
        "(code) transformers utils/hub.py cached_files; seen run with sglang 0.5.10",
    ),
    t(
        "OSError: <model> is not a local folder and is not a valid model identifier listed on "
        "'https://huggingface.co/models'",
        "(code) transformers utils/hub.py cached_files",
    ),
    t(
        "If this is a private repository, make sure to pass a token having permission to this repo either by logging "
        "in with `hf auth login` or by passing `token=<your_token>`",
        "(code) transformers utils/hub.py cached_files",
        literal=True,
    ),
    # torch's NCCL watchdog, written by C++ straight to stderr (§1.2 c10 prefix)
    t("[rank<int>]:[E<mmdd> <hms-ns> ProcessGroupNCCL.cpp:<int>] <text>", "§1.2 [sgl#17157]; (code) torch 2.7"),
    t("Exception raised from checkTimeout at <path> (most recent call first):", "(code) torch 2.7 ProcessGroupNCCL"),
    t("frame #<int>: <text>", "(code) torch 2.7 c10::Error backtrace"),
    t("terminate called after throwing an instance of 'c10::DistBackendError'", "(code) torch 2.7 ProcessGroupNCCL"),
    t("  what():  <text>", "(code) torch 2.7 ProcessGroupNCCL"),
    # Several nodes: the ranks meet at torch's TCPStore, then talk over gloo pairs
    t(
        "[W<mmdd> <hms-ns> socket.cpp:<int>] [c10d] The client socket has failed to connect to [<host>]:<port> "
        "(errno: <int> - <text>).",
        "[gensyn-ai/rl-swarm#197]; (code) torch 2.13 libtorch socket.cpp",
    ),
    t(
        "torch.distributed.DistStoreError: Timed out after <int> seconds waiting for clients. <int>/<int> clients "
        "joined.",
        "[vllm-project/vllm#17056, OpenRLHF/OpenRLHF#1040, Ascend/sglang#708]; (code) torch 2.13 TCPStore.cpp",
    ),
    t(
        "torch.distributed.DistNetworkError: The client socket has timed out after <int>ms while trying to connect "
        "to (<host>, <port>).",
        "(code) torch 2.13 libtorch socket.cpp",
    ),
    t(
        "torch.distributed.DistNetworkError: Failed to recv, got 0 bytes. Connection was likely closed. Did the "
        "remote server shutdown or crash?",
        "(code) torch 2.13 libtorch TCPStore client",
    ),
    t("RuntimeError: [<path>] Connection closed by peer [<client-ip>]:<port>", "[sgl#3685, sgl#26375]"),
    t(
        "[<ts>] Dummy health check server started in background thread at <host>:<port>",
        "(code) sglang 0.5.10 and 0.5.23 srt/utils/common.py launch_dummy_health_check_server",
    ),
    # Not SGLang's: the shell that ran the server reports its SIGKILL (§1.2)
    t("Killed", "§1.2 [sgl#2468]"),
]


def template_for(line: str) -> LineTemplate | None:
    return next((template for template in TEMPLATES if template.matches(line)), None)
