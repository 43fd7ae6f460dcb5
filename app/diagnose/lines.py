"""Logical lines of an SGLang log: wrapper prefixes removed, SGLang's own prefix read, glued
records split apart. Pure functions over text."""

from __future__ import annotations

import re
from dataclasses import dataclass

# Prefixes that launchers and pastes put before SGLang's own, stripped before anything else.
ANSI = re.compile(r"\x1b\[[0-9;]*[A-Za-z]")
WRAPPERS = (
    # a multi-node log's node tag: "[node1 rtxpro-02] " (launchdeck's merged log), "[node-1] "
    re.compile(r"^\[node[-_]?\d+(?:[ :][\w.-]+)?\] "),
    re.compile(r"^ ?\(\w+ pid=\d+(?:, ip=[\d.]+)?\) "),  # Ray: "(WorkerDict pid=616, ip=10.0.0.1) "
    re.compile(r"^[\w.-]+\s*\| "),  # docker compose: "<service><pad> | "
    re.compile(r"^\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3} - \S+ - [A-Z]+ - "),  # a Python logger
    re.compile(r"^\d{4}-\d\d-\d\d \d\d:\d\d:\d\d \| [A-Z]+ \| \S+ \| "),  # "time | LEVEL | name | " (FastChat)
    re.compile(r"^> ?(?:\[\d{4}-\d\d-\d\dT[\d:.]+Z\] )?"),  # a quoted CI log
    re.compile(r"^\d{4}-\d\d-\d\dT[\d:.]+(?:Z|[+-]\d\d:?\d\d)\s+[A-Z]+\s+\S+\.go:\d+\s+"),  # a Go logger
    # a container runtime's log file (CRI, what kubelet keeps): "<RFC 3339 time> stdout F "
    re.compile(r"^\d{4}-\d\d-\d\dT[\d:.]+(?:Z|[+-]\d\d:?\d\d) std(?:out|err) [FP] "),
    re.compile(r"^\d{4}-\d\d-\d\dT[\d:.]+(?:Z|[+-]\d\d:?\d\d) "),  # docker logs -t, kubectl --timestamps
    re.compile(r"^[A-Z]+ \d{4}-\d\d-\d\dT[\d:.]+Z \[severity: [A-Z]+\] "),  # a cloud logging export
    re.compile(r"^\d\d-\d\d \d\d:\d\d:\d\d\.\d{3} "),  # a collector's month-day stamp ("04-20 13:32:25.784 ")
    re.compile(r"^`+|^\*\*(?=\S)|^\* (?=\S)"),  # Markdown residue: a code fence, bold, a list's bullet
    re.compile(r"^(?:DEBUG|INFO|WARNING|ERROR|CRITICAL):[\w.]+:"),  # Python's default logging format
    re.compile(r"^\[rank\d+\]: ?"),  # torchrun's per-rank output
    # torch's C++ log location (glog's): "[E1209 02:28:15.281862353 ProcessGroupNCCL.cpp:2057] "; it
    # names the file that logged, not the error
    re.compile(r"^\[[EWIF]\d{4} [\d:.]+ (?:\d+ )?[\w.]+:\d+\] "),
    re.compile(r"^\d{1,4}: "),  # srun --label: the task number
    # OpenMPI's --tag-output (and --timestamp-output): "Thu Jan 23 11:55:50 2025[1,1]<stderr>:"
    re.compile(r"^(?:\w{3} \w{3} +\d+ [\d:]{8} \d{4})?\[\d+,\d+\]<std(?:out|err)>:"),
)
# What follows a record: Ray's note on a line it printed once for several workers, Markdown's bold.
SUFFIXES = re.compile(r" ?\[repeated \d+x across cluster\]$|\*\*$")
# The tags after the time: ranks (" DP0 TP1", " ATTN_CP0 MOE_DP1 TP3 EP3") and, in the newest
# releases, a role named in lower case with its index (" encode_server", " encode_dp_worker[0]").
# The log viewer marks the same time and tags (app.logs.render).
SGLANG_STAMP = (
    r"\[(?P<time>(?:\d{4}-\d\d-\d\d )?\d\d:\d\d:\d\d(?:\.\d+)?)"
    r"(?P<tags>(?: (?:[A-Z_]+\d+|[a-z][a-z_]*(?:\[\d+\])?))*)\]"
)
SGLANG_PREFIX = re.compile(rf"^{SGLANG_STAMP} ")
# The level and source location that some SGLang builds log after that prefix.
LEVEL_AND_SOURCE = re.compile(r"^(?:DEBUG|INFO|WARNING|ERROR|CRITICAL) [\w.]+\.py:\d+: ")
# Where a record starts in the middle of a physical line (after a progress bar redrawn with \r).
# Or right after a progress bar's statistics ("[00:04<?, ?it/s]").
GLUED = re.compile(r"(?<=\S)(?=\[\d{4}-\d\d-\d\d \d\d:\d\d:\d\d(?:\.\d+)?[ \]])|(?<=it/s\]|s/it\])(?=\S)")
# The most of one record (a line, or a part of it between carriage returns) that is read: the
# longest SGLang writes, the server_args dump, is some 20 kB. A longer record is read as its first
# MAX_RECORD characters and the rest of it, up to the next carriage return or newline, is skipped,
# so a line that never ends costs neither memory nor time in proportion to its length.
MAX_RECORD = 1 << 16
# Control characters no text carries (all but tab, the line ends, vertical tab and form feed, and
# the bell, backspace and escape of terminals and colours): a record with one is binary data.
BINARY_BYTE = re.compile(rb"[\x00-\x06\x0e-\x1a\x1c-\x1f]")
BINARY_CHAR = re.compile("[\x00-\x06\x0e-\x1a\x1c-\x1f]")


@dataclass(frozen=True)
class Line:
    number: int  # 1-based physical line in the file
    raw: str  # as it stands in the log
    text: str  # without wrappers and SGLang's prefix
    ranks: str  # e.g. "TP3" or "DP1 TP1"; empty on main-process lines and unprefixed ones
    prefixed: bool  # carried SGLang's [timestamp] prefix


def strip_wrappers(text: str) -> str:
    text = SUFFIXES.sub("", ANSI.sub("", text))
    for _ in range(3):  # wrappers can nest (a quoted compose log)
        before = text
        for wrapper in WRAPPERS:
            text = wrapper.sub("", text, count=1)
        if text == before:
            break
    return text


def is_binary(record: str) -> bool:
    """A record of binary data written to the log (a binary file, random bytes): it holds a control
    character no text does (see BINARY_BYTE), or a quarter or more of it is undecodable. A few such
    undecodable characters in a line of text leave it text."""
    return BINARY_CHAR.search(record) is not None or record.count("\ufffd") * 4 >= len(record) > 0


def without_binary_records(chunk: bytes) -> bytes:
    """Raw log bytes with the records that hold a control character no text has emptied before
    they are decoded: decoding random bytes costs more than all else the analyzer does with them.
    The result reads the same as the chunk (`is_binary` skips those records anyway). A chunk
    without a NUL, any log of text, is returned as it is after one scan: binary data of any length
    holds NULs. The first and last pieces, which may be parts
    of lines in the chunks around it, are left to `is_binary`."""
    if b"\x00" not in chunk:
        return chunk
    first, *lines, last = chunk.split(b"\n") if b"\n" in chunk else (chunk, chunk)
    if not lines:
        return chunk
    # Such a byte within the first MAX_RECORD bytes lies within the first MAX_RECORD characters.
    kept = [
        line
        if not BINARY_BYTE.search(line)
        else b""
        if b"\r" not in line and BINARY_BYTE.search(line, 0, MAX_RECORD)
        else b"\r".join(b"" if BINARY_BYTE.search(r, 0, MAX_RECORD) else r for r in line.split(b"\r"))
        for line in lines
    ]
    return b"\n".join([first, *kept, last])


def logical_lines(physical: str, number: int) -> list[Line]:
    """One physical line (without its newline) as the records in it."""
    lines = []
    for segment in physical.split("\r"):
        segment = segment[:MAX_RECORD]
        if is_binary(segment):
            continue
        for piece in GLUED.split(segment):
            if not piece.strip():
                continue
            text = strip_wrappers(piece.rstrip("\n"))
            match = SGLANG_PREFIX.match(text)
            if match:
                message = LEVEL_AND_SOURCE.sub("", text[match.end() :], count=1)
                lines.append(Line(number, piece, message, match["tags"].strip(), True))
            else:
                lines.append(Line(number, piece, text, "", False))
    return lines
