"""The fingerprint of a root error: what groups one cause across attempts, hosts and runs.

Separate because it decides sameness, not kind: what in a message varies between runs (addresses,
ids, paths, sizes, numbers, quoted text but not quoted names) and is erased, which causes SGLang
words differently and are signed by name, and the exception type and normalised message that the
pages show and the fingerprint hashes together with the class.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Callable, Sequence

from app.diagnose.events import EXCEPTION, MESSAGE_HEAD
from app.diagnose.lexicon import Concept

OOM_ACCOUNTING = re.compile(r"(?<=out of memory)\..*", re.I)
EXCEPTION_REPR = re.compile(r"^(?:[\w]+\.)*([A-Za-z]\w*(?:Error|Exception))\((['\"])(.*)\2\)$")
QUOTED_NAME = re.compile(r"[\w.<>-]+")


def _quoted(found: re.Match[str]) -> str:
    """Quoted text is erased, but not quoted names (a parameter, an architecture): they tell causes apart."""
    return found[0] if QUOTED_NAME.fullmatch(found[0][1:-1]) else "<str>"


# Where in a launch a failure struck, from the frames that led to it or the error's own words (the
# first phase either shows, in this order), else from the stage the log had reached.
PHASES = (
    ("resuming released memory", re.compile(r"resume_memory_occupation|memory_saver|func=resume")),  # RL wake-up
    ("loading weights", re.compile(r"load_model|load_weights|weight_loader|model_loader/")),
    ("allocating the KV cache", re.compile(r"init_memory_pool|memory_pool\.py|_create_buffers|profile_max_num_token")),
    ("speculative decoding", re.compile(r"sglang/srt/speculative/|draft_worker|eagle_worker")),
    ("capturing graphs", re.compile(r"capture", re.I)),
    ("serving", re.compile(r"event_loop|run_batch|forward_thread_func|process_batch_result|sampler\.py")),
)
STAGE_PHASES = {
    "weights loading": "loading weights",
    "weights loaded": "allocating the KV cache",
    "kv cache allocated": "capturing graphs",
    "cuda graph capture": "capturing graphs",
    "http server up": "serving",
    "ready": "serving",
    "serving": "serving",
}
# Exception types that are one error under the name each torch release gives it.
SAME_TYPES = {"AcceleratorError": "RuntimeError"}  # torch 2.8 renamed the CUDA errors' type
# The name of a symbol a library lacks: it differs between builds of the same mismatch.
MISSING_SYMBOL = re.compile(r"(?<=undefined symbol: )\S+")

# A model's class name ("Qwen3NextForCausalLM"): one refusal of a kind of model, whichever it names.
MODEL_CLASS = re.compile(r"\b[A-Z]\w*For(?:CausalLM|ConditionalGeneration)\b")
CURLY_QUOTES = str.maketrans("\u2018\u2019\u201c\u201d", "''\"\"")
# A message that begins with the type of the exception it wraps ("InternalTorchDynamoError:
# RuntimeError: ..."): the wrapped one is the error.
WRAPPED_TYPE = re.compile(r"^(?:[A-Za-z_]\w*\.)*[A-Za-z]\w*(?:Error|Exception): ")

NORMALISE: tuple[tuple[re.Pattern[str], str | Callable[[re.Match[str]], str]], ...] = (
    (MISSING_SYMBOL, "<symbol>"),
    (MODEL_CLASS, "<model class>"),
    (re.compile(r"0x[0-9a-fA-F]+|\(nil\)"), "<hex>"),  # (glibc prints a null pointer as "(nil)")
    (re.compile(r"\b[0-9a-f]{8}-?[0-9a-f]{4}-?[0-9a-f]{4}-?[0-9a-f]{4}-?[0-9a-f]{12}\b|\b[0-9a-f]{16,}\b"), "<id>"),
    # a path, two parts or more from a slash (a hub id's one, "org/Model-8B", leaves the name whole)
    (re.compile(r"(?:/[\w.@+-]+){2,}/?"), "<path>"),
    (re.compile(r"\b\d+(?:\.\d+)?\s*(?:[KMGT]i?B|bytes)\b"), "<size>"),
    (re.compile(r"\b\d+(?:\.\d+)?\b"), "<n>"),
    (re.compile(r"'[^'\n]*'|\"[^\"\n]*\""), _quoted),
    (re.compile(r"dict_keys\(\[.*\]\)"), "<list>"),
)
# One cause that SGLang and the libraries under it word differently across versions, stages and
# tools: signed by its name (with what tells its instances apart, as `\1`), so its attempts group
# under one fingerprint whichever wording a log shows.
CAUSES = (
    # The weights left no room for the KV cache: a negative profiled budget, then the refusal.
    ("no memory for the KV cache", re.compile(r"profiled value -\d|Not enought? memory\. Please try to increase")),
    # A package that is not there, by its import name or its distribution's ("flashinfer_python").
    (
        "package \\1 is not installed",
        re.compile(r"No module named '([A-Za-z0-9]+)|metadata was found for ([A-Za-z0-9]+)"),
    ),
    # A kernel the toolchain could not build, by the tool that refused (a command line or its own error).
    ("\\1 could not build a kernel", re.compile(r"\b(ptxas|nvcc|cicc|hipcc)\b", re.I)),
    # A peer of a collective went away: gloo and the c10d store say it as the socket saw it.
    ("a peer's connection dropped", re.compile(r"Connection (?:reset|closed) by peer")),
    # A package that lacks a name this build uses: a version apart, whichever name a release dropped.
    (
        "\\1 lacks a name this build uses",
        re.compile(r"cannot import name \S+ from \W?(\w+)|module '(\w+)[\w.]*' has no attribute"),
    ),
    # The hub refusing a gated repository to the token given, in the hub's or Transformers' words.
    ("a gated repository the token cannot read", re.compile(r"gated repo", re.I)),
    # A program that launched SGLang and waited for it in vain, in its own words.
    (
        "the launcher waited for a server that was never ready",
        re.compile(r"did not become ready|not ready (?:after|within)"),
    ),
    # A compiled library built against another torch (a C++ symbol), by the installed package it belongs to.
    (
        "\\1 was built against another version",
        re.compile(r"(?:site|dist)-packages/(\w+)/[^\s:]*\.so[\w.]*: undefined symbol: _Z"),
    ),
    # torch's watchdog on a collective that did not finish, whether it says so itself or its thread's end does.
    ("a collective timed out under torch's watchdog", re.compile(r"Watchdog caught collective operation timeout")),
    # SGLang's scheduler watchdog: its timeout line, or the py-spy dump it takes of the stuck scheduler.
    ("the scheduler's watchdog fired", re.compile(r"Watchdog timeout \(self\.watchdog_timeout|^Pyspy dump for PID")),
)


def normalise(message: str) -> str:
    message = message[:MESSAGE_HEAD]
    for pattern, replacement in NORMALISE:
        message = pattern.sub(replacement, message)
    message = re.sub(r"(?<=[a-z_][.;])(?=[A-Z])", " ", message)  # "no_buffer.To use": a release's missing space
    message = message.translate(CURLY_QUOTES)  # a paste's typographic quotes
    return re.sub(r"\s+", " ", message).strip()[:500]


def lasting_part(message: str) -> str:
    """The longest stretch of a message that stays the same from run to run (between the numbers,
    paths, ids and sizes `normalise` erases): what a rule taught from one failure should match to
    catch the next like it. The whole message when no stretch is long enough to mean anything."""
    pieces = [message]
    for pattern, _ in NORMALISE:
        pieces = [part for piece in pieces for part in pattern.split(piece)]
    longest = max((piece.strip(" ,;:()[]=") for piece in pieces), key=len, default="")
    return longest if len(longest) >= 12 else message


def signature_parts(message: str) -> tuple[str, str]:
    """The exception type (empty for a fatal line that is not an exception) and the message with
    everything that varies between runs replaced. A cause given as a detail line ("- KeyError: x")
    or as a repr (`KeyError('x')`) is read as the exception it names."""
    message = message.removeprefix("- ")
    if (as_repr := EXCEPTION_REPR.match(message)) is not None:
        message = f"{as_repr[1]}: {as_repr[3]}"
    match = EXCEPTION.match(message)
    kind = match.group(1) if match else ""
    kind = SAME_TYPES.get(kind, kind)
    detail = match.group(2) or "" if match else message
    while wrapped := WRAPPED_TYPE.match(detail):
        kind, detail = SAME_TYPES.get(name := wrapped[0][:-2].rpartition(".")[2], name), detail[wrapped.end() :]
    # After "out of memory" comes the allocator's accounting, worded differently by each torch version.
    return kind, normalise(OOM_ACCOUNTING.sub("", detail))


def phase_of(frames: Sequence[str], stage: str, message: str = "") -> str:
    """Where in the launch a failure struck: what its frames (or the error itself) show, else the
    stage reached."""
    for name, pattern in PHASES:
        if pattern.search(message) or any(pattern.search(frame) for frame in frames):
            return name
    return STAGE_PHASES.get(stage, "")


def _named(name: str, found: re.Match[str]) -> str:
    told = next((group for group in found.groups() if group), "")
    return name.replace("\\1", told.lower())


def fingerprint(failure_class: str, message: str, concept: Concept | None = None, phase: str = "") -> str:
    """What one cause is known by: a cause SGLang words in several ways by its name, a concept by
    what its `signed_by` says tells its causes apart, anything else by its type and message."""
    cause = next((_named(name, found) for name, pattern in CAUSES if (found := pattern.search(message))), None)
    if cause:
        kind, detail = "", cause
    elif concept is not None and concept.signed_by == "concept":
        kind, detail = "", concept.name
    elif concept is not None and concept.signed_by == "phase":
        kind, detail = "", f"{concept.name} while {phase or 'starting'}"
    elif concept is not None and concept.signed_by == "kind":
        kind, detail = "", f"{concept.name} {concept.kind_in(message)} while {phase or 'starting'}"
    else:
        kind, detail = signature_parts(message)
    return hashlib.sha256(f"{failure_class}|{kind}|{detail}".encode()).hexdigest()[:16]
