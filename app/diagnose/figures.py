"""The figures SGLang prints while it starts and serves: its effective arguments (the
`server_args=` dump), memory at each stage, and the decode-batch metrics.

Pure functions over one logical line at a time, so the analyzer can feed them as the log streams.
"""

from __future__ import annotations

import ast
import re
from dataclasses import dataclass, field
from typing import Any

SERVER_ARGS = re.compile(r"server_args=(ServerArgs\(|\{)")
# Where a field may start: a dump cut short is parsed again up to the field before the cut.
FIELD_START = re.compile(r", (?=\w+(?:=|$))")
# Reprs that are not Python syntax, such as an enum's <LoadFormat.AUTO: 'auto'>: kept as text.
ANGLE_REPR = re.compile(r"<[A-Za-z_][\w.]*(?::[^<>]*)?>")
# The newest dump is some 20 kB; a longer line is read as one cut there, so a line of any size
# costs a bounded parse.
MAX_DUMP = 1 << 18
GB = r"(\d+(?:\.\d+)?) GB"
MEMORY = (  # (figure, pattern): the first value seen counts (every TP rank prints its own)
    ("avail_before_weights_gb", re.compile(r"Load weight begin\. avail mem=" + GB)),
    ("avail_after_weights_gb", re.compile(r"Load weight end\..*?avail mem=" + GB)),
    ("weights_gb", re.compile(r"Load weight end\..*?mem usage=" + GB)),
    ("kv_tokens", re.compile(r"KV Cache is allocated\..*?#tokens: (\d+)")),
    ("kv_k_gb", re.compile(r"KV Cache is allocated\..*?K size: " + GB)),
    ("kv_v_gb", re.compile(r"KV Cache is allocated\..*?V size: " + GB)),
    ("avail_after_kv_gb", re.compile(r"Memory pool end\. avail mem=" + GB)),
    ("cuda_graph_gb", re.compile(r"Capture (?:piecewise )?cuda graph end\..*?mem usage=" + GB, re.I)),
    ("avail_after_cuda_graph_gb", re.compile(r"Capture (?:piecewise )?cuda graph end\..*?avail mem=" + GB, re.I)),
    ("max_total_num_tokens", re.compile(r"max_total_num_tokens=(\d+)")),
    ("max_running_requests", re.compile(r"max_running_requests=(\d+)")),
    ("context_len", re.compile(r"context_len=(\d+)")),
)
DECODE = re.compile(r"Decode batch[.,] #running-req: (\d+), #token: (\d+), token usage: ([\d.]+)")
THROUGHPUT = re.compile(r"gen throughput \(token/s\): ([\d.]+)")
ACCEPT_LENGTH = re.compile(r"accept len: ([\d.]+)")
MAX_POINTS = 2000  # decode samples kept: when full, every other one goes and half as many are taken


def parse_server_args(line: str) -> dict[str, Any] | None:
    """The `server_args=` dump as a dict of Python values (None when the line is not one).

    Both forms are read: the dataclass repr `ServerArgs(a=1, ...)` and the dict repr. A dump cut
    short by the log's window keeps the fields before the cut. Values that are not literals (an
    enum's repr, say) are kept as text."""
    match = SERVER_ARGS.search(line)
    if match is None:
        return None
    body = line[match.end() :].rstrip()
    if match.group(1) == "{":
        return _dict_repr("{" + body[:MAX_DUMP])
    return _call_repr(body)


def _call_repr(body: str) -> dict[str, Any]:
    source = ANGLE_REPR.sub(lambda found: repr(found.group(0)), body.removesuffix(")"))
    for _ in range(200):  # one retry per field lost to a cut
        try:
            call = ast.parse(f"f({source})", mode="eval").body
        except SyntaxError:
            cuts = list(FIELD_START.finditer(source))
            if not cuts:
                return {}
            source = source[: cuts[-1].start()]
            continue
        assert isinstance(call, ast.Call)
        return {kw.arg: _value(kw.value, f"f({source})") for kw in call.keywords if kw.arg}
    return {}


def _dict_repr(source: str) -> dict[str, Any]:
    """The newest releases' dump, a dict repr (nested dicts for grouped settings such as
    `cuda_graph_config`). One cut short keeps its whole top-level entries before the cut: a nested
    value is kept whole or not at all, never half a list."""
    source, entry_ends = _scan_dict(source)
    for end in [None, *reversed(entry_ends)][:200]:  # the whole, then one entry less each time
        found = _literal_dict(source if end is None else source[:end] + "}")
        if found is not None:
            return found
    return {}


def _scan_dict(source: str) -> tuple[str, list[int]]:
    """The dict's text with reprs that are not Python syntax quoted (outside strings only), and
    where each of its top-level entries ends."""
    out: list[str] = []
    entry_ends: list[int] = []
    length = depth = index = 0
    quote = ""
    while index < len(source):
        char, step = source[index], 1
        if quote:
            if char == "\\":
                char, step = source[index : index + 2], 2
            elif char == quote:
                quote = ""
        elif char in "'\"":
            quote = char
        elif char == "<" and (angle := ANGLE_REPR.match(source, index)) is not None:
            char, step = repr(angle.group(0)), angle.end() - index
        elif char in "([{":
            depth += 1
        elif char in ")]}":
            depth -= 1
        elif char == "," and depth == 1:
            entry_ends.append(length)
        out.append(char)
        length += len(char)
        index += step
    return "".join(out), entry_ends


def _literal_dict(source: str) -> dict[str, Any] | None:
    try:
        tree = ast.parse(source, mode="eval").body
    except (SyntaxError, ValueError, RecursionError):  # not Python, a NUL byte, or nested beyond reading
        return None
    if not isinstance(tree, ast.Dict):
        return None
    return {
        str(_value(key, source)): _value(value, source)
        for key, value in zip(tree.keys, tree.values, strict=True)
        if key is not None
    }


def _value(node: ast.expr, source: str) -> Any:
    try:
        return ast.literal_eval(node)
    except ValueError:
        return ast.get_source_segment(source, node)


@dataclass
class Figures:
    """What a log says about arguments, memory and serving, gathered line by line."""

    server_args: dict[str, Any] | None = None
    memory: dict[str, float | int] = field(default_factory=dict)
    decode: list[dict[str, float]] = field(default_factory=list)
    decode_lines: int = 0
    decode_stride: int = 1  # one decode line in this many becomes a sample

    def see(self, text: str) -> None:
        if self.server_args is None and "server_args=" in text:
            self.server_args = parse_server_args(text)
            return
        if "Decode batch" in text:
            self.see_decode(text)
            return
        if " GB" not in text and "max_total_num_tokens=" not in text:  # no memory figure: skip the patterns
            return
        for name, pattern in MEMORY:
            if name not in self.memory and (found := pattern.search(text)) is not None:
                value = found.group(1)
                self.memory[name] = float(value) if "." in value else int(value)

    def see_decode(self, text: str) -> None:
        """A decode-batch line; a long log's series is sampled evenly, so it stays bounded and
        cheap to gather."""
        self.decode_lines += 1
        if (self.decode_lines - 1) % self.decode_stride:
            return
        found = DECODE.search(text)
        if found is None:
            return
        point = {"running_requests": float(found[1]), "tokens": float(found[2]), "token_usage": float(found[3])}
        for key, pattern in (("gen_throughput", THROUGHPUT), ("accept_length", ACCEPT_LENGTH)):
            if (value := pattern.search(text)) is not None:
                point[key] = float(value[1])
        self.decode.append(point)
        if len(self.decode) >= MAX_POINTS:
            self.decode = self.decode[::2]
            self.decode_stride *= 2


def small_capacity(memory: dict[str, Any], need: Need) -> str | None:
    """Why a server that came up serves too little to be useful, from the figures its log printed:
    fewer requests at a time than `need` runs at once, or a KV cache that cannot hold them (a cache
    shorter than the model's whole context is common and fine). None when neither shows (or is not
    known)."""
    running = memory.get("max_running_requests")
    tokens = memory.get("max_total_num_tokens") or memory.get("kv_tokens")
    said = []
    if isinstance(running, int | float) and running < need.requests:
        requests = f"{running:,.0f} request{'s' if running != 1 else ''}"
        said.append(f"serves at most {requests} at a time, where {need.by} runs {need.requests} at once")
    wanted = need.requests * need.tokens_each
    if isinstance(tokens, int | float) and tokens < wanted:
        said.append(f"the KV cache holds {tokens:,.0f} tokens, fewer than the {wanted:,} those requests need")
    return "; ".join(said) or None


@dataclass(frozen=True)
class Need:
    """What a server must take at once to be of use: `requests` of `tokens_each` (prompt and
    output), as `by` (a benchmark workload) runs them."""

    requests: int
    tokens_each: int
    by: str
