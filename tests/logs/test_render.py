"""Rendering raw log lines as HTML: escaping, ANSI colours, stripped sequences, controls, bad bytes, ranks."""

from __future__ import annotations

import html
import re

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from app.logs.render import line_class, progress_key, render_line, render_states

BAD = '<span class="bad-byte" title="invalid UTF-8 byte">\\x{}</span>'
# Every tag render_line may emit; anything else that looks like markup is a bug.
COLOUR = r"(?:color|background-color):#[0-9a-f]{6}"
TAG = re.compile(
    rf'<span(?: class="(?P<classes>[a-z0-9 -]+)")?(?: style="{COLOUR}(?:;{COLOUR})?")?>'
    r'|<span class="bad-byte" title="invalid UTF-8 byte">|</span>|<mark>|</mark>'
)
CLASSES = re.compile(r"ansi-(?:bold|dim|italic|underline|fg-\d\d?|bg-\d\d?)|ctl|rank|rank-[0-7]|ts")


def visible(fragment: str) -> str:
    """What the browser shows: the text with the tags removed and the entities decoded."""
    return html.unescape(TAG.sub("", fragment))


def span(classes: str, text: str) -> str:
    return f'<span class="{classes}">{text}</span>'


def rank(tag: str, n: int) -> str:
    return span(f"rank rank-{n}", tag)


def ts(time: str) -> str:
    return span("ts", time)


def check_markup(fragment: str) -> None:
    """Only this module's tags, balanced, none empty, and no raw text that a browser could read as markup."""
    depth = 0
    for tag in TAG.finditer(fragment):
        if tag["classes"]:
            assert all(CLASSES.fullmatch(name) for name in tag["classes"].split()), tag[0]
        depth += -1 if tag[0].startswith("</") else 1
        assert depth >= 0, fragment
    assert depth == 0, fragment
    text = TAG.sub("", fragment)
    assert not set("<>\"'") & set(text), fragment
    assert not re.search(r"&(?!(?:amp|lt|gt|quot|#x27);)", text), fragment
    assert not re.search(r"<(span|mark)[^>]*></\1>", fragment), fragment
    assert not re.search(r"[\x00-\x08\x0b-\x1f\x7f]", fragment), fragment  # tab and \n only
    fragment.encode("utf-8")  # no lone surrogates left over from the bad bytes


# Escaping


@pytest.mark.parametrize(
    ("raw", "expected"),
    [
        (b"<script>alert(1)</script>", "&lt;script&gt;alert(1)&lt;/script&gt;"),
        (b"<img src=x onerror=alert(1)>", "&lt;img src=x onerror=alert(1)&gt;"),
        (b"\" onmouseover='alert(1)' &amp;", "&quot; onmouseover=&#x27;alert(1)&#x27; &amp;amp;"),
        (b"a < b && c > d", "a &lt; b &amp;&amp; c &gt; d"),
    ],
)
def test_text_is_escaped(raw: bytes, expected: str) -> None:
    assert render_line(raw) == expected
    assert render_line(raw + b"\r") == expected  # the slow path escapes the same way


def test_markup_inside_colours_and_prefix_is_escaped() -> None:
    raw = b"[2026-01-05 10:00:01 TP0] \x1b[31m<script>alert(1)</script>\x1b[0m <img src=x onerror=alert(1)>"
    out = render_line(raw)
    check_markup(out)
    assert "<script" not in out and "<img" not in out
    assert span("ansi-fg-1", "&lt;script&gt;alert(1)&lt;/script&gt;") in out


# OSC sequences, hyperlinks included


@pytest.mark.parametrize("st_", [b"\x1b\\", b"\x07"])
def test_osc8_hyperlink_keeps_its_text_and_drops_the_uri(st_: bytes) -> None:
    raw = b"see \x1b]8;id=1;javascript:alert(document.cookie)" + st_ + b"the docs\x1b]8;;" + st_ + b" now"
    out = render_line(raw)
    assert out == "see the docs now"
    assert "href" not in out and "javascript" not in out and "alert" not in out


def test_osc8_link_with_markup_in_text_is_escaped() -> None:
    out = render_line(b'\x1b]8;;https://x.test/"><script>\x1b\\<b>bold</b>\x1b]8;;\x1b\\')
    assert out == "&lt;b&gt;bold&lt;/b&gt;"


def test_window_title_and_other_strings_are_dropped() -> None:
    raw = b"\x1b]0;my title\x07a\x1b]2;other\x1b\\b\x1bPdevice control\x1b\\c\x1b_app command\x1b\\d"
    assert render_line(raw) == "abcd"


def test_unterminated_osc_hides_nothing_but_its_introducer() -> None:
    assert render_line(b"x\x1b]8;;javascript:alert(1)") == "x8;;javascript:alert(1)"


# SGR colours and attributes


@pytest.mark.parametrize(
    ("code", "classes"),
    [(30 + n, f"ansi-fg-{n}") for n in range(8)]
    + [(90 + n, f"ansi-fg-{8 + n}") for n in range(8)]
    + [(40 + n, f"ansi-bg-{n}") for n in range(8)]
    + [(100 + n, f"ansi-bg-{8 + n}") for n in range(8)]
    + [(1, "ansi-bold"), (2, "ansi-dim"), (3, "ansi-italic"), (4, "ansi-underline")],
)
def test_sgr_code_becomes_a_class(code: int, classes: str) -> None:
    assert render_line(f"a\x1b[{code}mb\x1b[0mc".encode()) == f"a{span(classes, 'b')}c"


def test_sgr_attributes_combine_and_carry_across_the_line() -> None:
    out = render_line(b"\x1b[1;4;32;44mA\x1b[33mB\x1b[22mC\x1b[24mD\x1b[39mE\x1b[49mF")
    assert out == (
        span("ansi-bold ansi-underline ansi-fg-2 ansi-bg-4", "A")
        + span("ansi-bold ansi-underline ansi-fg-3 ansi-bg-4", "B")
        + span("ansi-underline ansi-fg-3 ansi-bg-4", "C")
        + span("ansi-fg-3 ansi-bg-4", "D")
        + span("ansi-bg-4", "E")
        + "F"
    )


@pytest.mark.parametrize("reset", [b"\x1b[0m", b"\x1b[m", b"\x1b[;m", b"\x1b[00m"])
def test_reset_closes_the_span(reset: bytes) -> None:
    assert (
        render_line(b"\x1b[1;3;31;42mhot" + reset + b" cold")
        == span("ansi-bold ansi-italic ansi-fg-1 ansi-bg-2", "hot") + " cold"
    )


def test_22_ends_bold_and_dim_23_italic() -> None:
    out = render_line(b"\x1b[1;2;3ma\x1b[22mb\x1b[23mc")
    assert out == span("ansi-bold ansi-dim ansi-italic", "a") + span("ansi-italic", "b") + "c"


def test_unclosed_colour_is_closed_at_the_end_of_the_line() -> None:
    assert render_line(b"\x1b[31mred to the end") == span("ansi-fg-1", "red to the end")


def test_no_empty_spans_and_same_style_runs_merge() -> None:
    assert render_line(b"\x1b[31m\x1b[0m") == ""
    assert render_line(b"\x1b[31m\x1b[1m\x1b[0mplain") == "plain"
    assert render_line(b"\x1b[31mre\x1b[31m\x1b[Kd") == span("ansi-fg-1", "red")


def test_sgr_inside_a_log_line_with_the_sglang_prefix() -> None:
    raw = b"[2026-01-05 10:00:01 TP0] \x1b[32mINFO\x1b[0m: Load weight begin."
    prefix = f"[{ts('2026-01-05 10:00:01 ')}{rank('TP0', 0)}]"
    assert render_line(raw) == f"{prefix} {span('ansi-fg-2', 'INFO')}: Load weight begin."


@pytest.mark.parametrize(
    ("params", "style"),
    [
        ("38;5;196", "color:#ff0000"),
        ("38;5;16", "color:#000000"),
        ("38;5;67", "color:#5f87af"),
        ("38;5;231", "color:#ffffff"),
        ("38;5;232", "color:#080808"),
        ("38;5;255", "color:#eeeeee"),
        ("38;5;999", "color:#eeeeee"),  # clamped to 255
        ("48;5;208", "background-color:#ff8700"),
        ("38;2;255;128;0", "color:#ff8000"),
        ("38;2;300;99999999999;7", "color:#ffff07"),  # clamped
        ("48;2;1;2;3", "background-color:#010203"),
        ("38:2::1:2:3", "color:#010203"),  # ITU colon form, empty colour space
        ("38:2:4:5:6", "color:#040506"),
        ("38:5:196", "color:#ff0000"),
        ("38;2;10;20;30;48;5;21", "color:#0a141e;background-color:#0000ff"),
    ],
)
def test_extended_colours_become_computed_styles(params: str, style: str) -> None:
    assert render_line(f"\x1b[{params}mx".encode()) == f'<span style="{style}">x</span>'


def test_256_colour_below_16_uses_the_palette_class() -> None:
    assert render_line(b"\x1b[38;5;9mx\x1b[48;5;4my") == span("ansi-fg-9", "x") + span("ansi-fg-9 ansi-bg-4", "y")


def test_extended_colour_with_attributes_has_class_and_style() -> None:
    out = render_line(b"\x1b[1;38;2;0;0;255mx")
    assert out == '<span class="ansi-bold" style="color:#0000ff">x</span>'


@pytest.mark.parametrize(
    "params",
    ["38;5", "38;2;1;2", "38;7;1", "38", "48;5;", "38;5;" + "9" * 5000, "9" * 5000, "38:2", "38:5"],
)
def test_malformed_or_huge_sgr_is_harmless(params: str) -> None:
    out = render_line(f"\x1b[{params}mx".encode())
    check_markup(out)
    assert visible(out) == "x"


def test_sgr_that_tries_to_inject_into_the_style_is_stripped() -> None:
    out = render_line(b'\x1b[38;2;1;2;3;" onmouseover="alert(1)mx')  # '" ' are intermediate bytes: not SGR
    check_markup(out)
    assert out == "nmouseover=&quot;alert(1)mx"


# Other escape sequences


@pytest.mark.parametrize(
    "sequence",
    [b"\x1b[2K", b"\x1b[K", b"\x1b[1A", b"\x1b[10;20H", b"\x1b[?25l", b"\x1b[?2004h", b"\x1b[>4;1m", b"\x1b[1 q"],
)
def test_non_sgr_csi_is_stripped(sequence: bytes) -> None:
    assert render_line(b"a" + sequence + b"b") == "ab"


@pytest.mark.parametrize("sequence", [b"\x1b(B", b"\x1b)0", b"\x1b7", b"\x1b8", b"\x1b=", b"\x1bM", b"\x1b", b"\x1b["])
def test_two_character_sequences_and_lone_escapes_are_stripped(sequence: bytes) -> None:
    assert render_line(b"a" + sequence) == "a"
    assert render_line(sequence + "中 b".encode()) == "中 b"


def test_progress_bar_with_erase_line_redraws() -> None:
    raw = b"\x1b[2K\r 10%|#   |\x1b[2K\r 50%|##  |\x1b[2K\r100%|####|\r"
    assert render_line(raw) == " 10%|#   |\n 50%|##  |\n100%|####|"


# Carriage returns, tabs, controls


@pytest.mark.parametrize(
    ("raw", "expected"),
    [
        (b"a\rb", "a\nb"),
        (b"crlf line\r", "crlf line"),
        (b"trailing\r\r", "trailing"),
        (b"\rleading", "leading"),
        (b"a\r\r\rb", "a\nb"),
        (b"a\r\x1b[K\rb", "a\nb"),
        (b"\r", ""),
        (b"col1\tcol2", "col1\tcol2"),
    ],
)
def test_carriage_returns_and_tabs(raw: bytes, expected: str) -> None:
    assert render_line(raw) == expected


def test_carriage_return_inside_a_colour_keeps_the_colour() -> None:
    assert render_line(b"\x1b[33mLoading 1/4\rLoading 2/4\r") == span("ansi-fg-3", "Loading 1/4\nLoading 2/4")


@pytest.mark.parametrize(
    ("raw", "caret"),
    [
        (b"\x00", "^@"),
        (b"\x01", "^A"),
        (b"\x07", "^G"),
        (b"\x08", "^H"),
        (b"\n", "^J"),
        (b"\x0c", "^L"),
        (b"\x1c", "^\\"),
        (b"\x1f", "^_"),
        (b"\x7f", "^?"),
    ],
)
def test_controls_are_shown_in_caret_notation(raw: bytes, caret: str) -> None:
    assert render_line(b"a" + raw + b"b") == f"a{span('ctl', caret)}b"


# Invalid UTF-8


@pytest.mark.parametrize(
    ("raw", "expected"),
    [
        (b"\xff", BAD.format("ff")),
        (b"x\x80y", "x" + BAD.format("80") + "y"),
        (b"cut \xe4\xb8", "cut " + BAD.format("e4") + BAD.format("b8")),
        (b"\xc0\xaf", BAD.format("c0") + BAD.format("af")),  # overlong "/"
        (b"\xed\xa0\x80", BAD.format("ed") + BAD.format("a0") + BAD.format("80")),  # an encoded surrogate
        (b"\xe4\xb8\xad\xf0\x9f\x9a\x80 ok", "中🚀 ok"),
        (b"<\xff>", "&lt;" + BAD.format("ff") + "&gt;"),
    ],
)
def test_invalid_utf8_bytes_are_shown(raw: bytes, expected: str) -> None:
    assert render_line(raw) == expected


def test_invalid_bytes_inside_a_colour() -> None:
    assert render_line(b"\x1b[31m\xfe!") == span("ansi-fg-1", BAD.format("fe") + "!")


# Rank tags in SGLang's record prefix


@pytest.mark.parametrize(
    ("raw", "expected"),
    [
        (
            b"[2026-01-05 10:00:01 TP0] Load weight begin. avail mem=78.50 GB",
            f"[{ts('2026-01-05 10:00:01 ')}{rank('TP0', 0)}] Load weight begin. avail mem=78.50 GB",
        ),
        (
            b"[2026-01-05 10:00:01 DP1 TP3 EP3] Decode batch, #running-req: 4",
            f"[{ts('2026-01-05 10:00:01 ')}{rank('DP1', 1)} {rank('TP3', 3)} {rank('EP3', 3)}] "
            "Decode batch, #running-req: 4",
        ),
        (b"[10:00:01 TP2] Init", f"[{ts('10:00:01 ')}{rank('TP2', 2)}] Init"),
        (b"[10:00:01 PP1 TP9] x", f"[{ts('10:00:01 ')}{rank('PP1', 1)} {rank('TP9', 1)}] x"),
        (b"[2026-01-05 10:00:01 TP15] x", f"[{ts('2026-01-05 10:00:01 ')}{rank('TP15', 7)}] x"),
        (
            b"(SchedulerActor pid=123) [2026-01-05 10:00:01 TP4] x",
            f"(SchedulerActor pid=123) [{ts('2026-01-05 10:00:01 ')}{rank('TP4', 4)}] x",
        ),
        (b"sglang-1  | [2026-01-05 10:00:01 TP5] x", f"sglang-1  | [{ts('2026-01-05 10:00:01 ')}{rank('TP5', 5)}] x"),
        (b"[2026-01-05 10:00:01] The server is fired up", f"{ts('[2026-01-05 10:00:01] ')}The server is fired up"),
    ],
)
def test_rank_tags_in_the_prefix_are_highlighted(raw: bytes, expected: str) -> None:
    assert render_line(raw) == expected
    assert render_line(raw + b"\r") == expected  # the slow path finds the same tags


@pytest.mark.parametrize(
    "raw",
    [
        b"Using TP0 as the leader",
        b"note [2026-01-05 10:00:01 TP0] quoted later in the line",
        b"[TP0] not a timestamp",
        b"[2026-01-05 10:00:01 tp0] lower case",
    ],
)
def test_rank_words_outside_the_prefix_stay_plain(raw: bytes) -> None:
    assert render_line(raw) == html.escape(raw.decode())


def test_rank_words_after_a_bare_time_stay_plain() -> None:
    out = render_line(b"[2026-01-05 10:00:01] Started with TP0 and DP1 ranks")
    assert out == f"{ts('[2026-01-05 10:00:01] ')}Started with TP0 and DP1 ranks"


def test_rank_tags_only_in_the_prefix_when_the_message_repeats_them() -> None:
    out = render_line(b"[2026-01-05 10:00:01 TP1] peer TP1 is slow")
    assert out == f"[{ts('2026-01-05 10:00:01 ')}{rank('TP1', 1)}] peer TP1 is slow"


def test_rank_tag_inside_a_coloured_prefix() -> None:
    out = render_line(b"\x1b[36msglang-1  |\x1b[0m [2026-01-05 10:00:01 TP3] x")
    assert out == span("ansi-fg-6", "sglang-1  |") + f" [{ts('2026-01-05 10:00:01 ')}{rank('TP3', 3)}] x"
    out = render_line(b"\x1b[2m[10:00:01 DP0 TP2]\x1b[0m x")
    assert out == span("ansi-dim", f"[{ts('10:00:01 ')}{rank('DP0', 0)} {rank('TP2', 2)}]") + " x"


def test_rank_tag_split_by_a_colour_change_stays_plain() -> None:
    out = render_line(b"[10:00:01 TP\x1b[1m1] x")
    check_markup(out)
    assert out == f"[{ts('10:00:01 ')}TP" + span("ansi-bold", "1] x")


# Search matches


def test_matches_are_marked_after_escaping() -> None:
    raw = b"<b>mamba</b> & mamba_x"
    out = render_line(raw, [(3, 8), (15, 20)])
    check_markup(out)
    assert out == "&lt;b&gt;<mark>mamba</mark>&lt;/b&gt; &amp; <mark>mamba</mark>_x"


def test_a_match_across_the_prefix_is_cut_at_its_spans() -> None:
    out = render_line(b"[10:00:01 TP1] go", [(7, 16)])
    check_markup(out)
    time = span("ts", "10:00:<mark>01 </mark>")
    assert out == f"[{time}{span('rank rank-1', '<mark>TP1</mark>')}<mark>] g</mark>o"


def test_match_ranges_are_bytes_of_utf8() -> None:
    raw = "é <x> é".encode()
    start = raw.index(b"<x>")
    assert render_line(raw, [(start, start + 3)]) == "é <mark>&lt;x&gt;</mark> é"


def test_matches_are_left_out_of_lines_with_escape_sequences() -> None:
    assert render_line(b"\x1b[31mred\x1b[0m", [(5, 8)]) == span("ansi-fg-1", "red")


def test_huge_rank_number_is_harmless() -> None:
    out = render_line(b"[10:00:01 TP" + b"9" * 5000 + b"] x")
    assert 'class="rank rank-7"' in out  # 10**5000 - 1 is 7 modulo 8


# line_class


@pytest.mark.parametrize(
    "raw",
    [
        b"[2026-01-05 10:00:01] ERROR:    [Errno 98] error while attempting to bind on address ('0.0.0.0', 30000): "
        b"address already in use",
        b"[2026-01-05 10:00:01 TP1] Scheduler hit an exception: Traceback (most recent call last):",
        b"Traceback (most recent call last):",
        b"torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. GPU 1 has a total capacity of "
        b"79.19 GiB of which 120.00 MiB is free.",
        b"RuntimeError: Not enough memory. Please try to increase --mem-fraction-static. Current value: "
        b"mem_fraction_static=0.9",
        b"ValueError: Speculative decoding for Qwen3NextForCausalLM is not compatible with radix cache",
        b"huggingface_hub.errors.RepositoryNotFoundError: 404 Client Error. (Request ID: Root=1-abc)",
        b"Exception: Capture cuda graph failed: CUDA out of memory.",
        b"KeyboardInterrupt",
        b"2026-01-05 10:00:01,123 - sglang.srt.managers.scheduler - ERROR - Scheduler died",
        b"ERROR:root:something failed",
        b"[ERROR] worker lost",
        b"[2026-01-05 10:00:01 TP0] CRITICAL: rank lost",
        b"FATAL: NCCL init failed",
        b"sglang serve: error: argument --tp-size: invalid int value: 'two'",
        b"[rank0]:[E0105 10:00:01.123456789 ProcessGroupNCCL.cpp:632] [Rank 0] Watchdog caught collective operation "
        b"timeout",
        b"terminate called after throwing an instance of 'c10::DistBackendError'",
        b"(SchedulerActor pid=616) RuntimeError: CUDA error: an illegal memory access was encountered",
        b"sglang-1  | [2026-01-05 10:00:01] ERROR:    Exception in ASGI application",
        b"\x1b[31mERROR\x1b[0m: coloured level",
        b"\x1b[1;31mRuntimeError\x1b[0m: coloured exception",
        b"Loading 100%|##########|\r[2026-01-05 10:00:01 TP0] Scheduler hit an exception: x",
    ],
)
def test_error_lines(raw: bytes) -> None:
    assert line_class(raw) == "error"


@pytest.mark.parametrize(
    "raw",
    [
        b"/usr/lib/python3/dist-packages/sglang/launch_server.py:48: UserWarning: 'python -m sglang.launch_server' "
        b"is still supported, but 'sglang serve' is the recommended entrypoint.",
        b"/opt/venv/lib/python3.11/site-packages/torch/cuda/__init__.py:61: FutureWarning: The pynvml package is "
        b"deprecated.",
        b"x.py:3: DeprecationWarning: pkg_resources is deprecated",
        b"[2026-01-05 10:00:01] WARNING:  Invalid HTTP request received.",
        b"2026-01-05 10:00:01,123 - transformers - WARNING - Special tokens have been added",
        b"WARNING 01-05 10:00:01 [config.py:12] Casting torch.bfloat16 to torch.float16.",
        b"[WARN] slow disk",
        b"[2026-01-05 10:00:01 TP0] WARN: fallback kernel",
        b"W0105 10:00:01.123456 12345 init.cc:12] GPU clock throttled",
    ],
)
def test_warning_lines(raw: bytes) -> None:
    assert line_class(raw) == "warning"


@pytest.mark.parametrize(
    "raw",
    [
        b"[2026-01-05 10:00:01 TP0] Decode batch, #running-req: 0, #token: 0, token usage: 0.00, cuda graph: True, "
        b"gen throughput (token/s): 0.00, #queue-req: 0, error_count=0",
        b"[2026-01-05 10:00:01] INFO:     Uvicorn running on http://0.0.0.0:30000 (Press CTRL+C to quit) errors=0",
        b"[2026-01-05 10:00:01] server_args=ServerArgs(model_path='org/model', tp_size=2, enable_error_log=False, "
        b"log_level='info', log_level_http='WARNING', crash_dump_folder=None)",
        b"[2026-01-05 10:00:05 TP0] The following error message 'operation scheduled before its operands' can be "
        b"ignored.",
        b'[2026-01-05 10:00:01] INFO:     127.0.0.1:51234 - "GET /ERROR_LOG HTTP/1.1" 404 Not Found',
        b"[2026-01-05 10:00:01 TP0] Load weight begin. avail mem=78.50 GB",
        b"[2026-01-05 10:00:01] The server is fired up and ready to roll!",
        b"Loading safetensors checkpoint shards: 100% Completed | 4/4 [00:03<00:00,  1.21it/s]",
        b'  File "/opt/sglang/python/sglang/srt/managers/scheduler.py", line 2340, in run_scheduler_process',
        b'    raise RuntimeError("boom")',
        b"CUDA kernel errors might be asynchronously reported at some other API call",
        b"NVML_ERROR_UNINITIALIZED = 1",
        b"the WARNINGS_AS_ERRORS flag is off",
        b"Exception raised from checkTimeout at /pytorch/torch/csrc/distributed/c10d/ProcessGroupNCCL.cpp:632",
        b"",
    ],
)
def test_ordinary_lines_are_not_highlighted(raw: bytes) -> None:
    assert line_class(raw) == ""


def test_error_wins_over_warning() -> None:
    assert line_class(b"WARNING: retrying\rRuntimeError: gave up") == "error"


def test_line_class_ignores_escape_sequences() -> None:
    assert line_class(b"\x1b]0;ERROR\x07all good") == ""
    assert line_class(b"\x1b[33mWARNING\x1b[0m slow") == "warning"


# Properties

PRINTABLE = st.text(st.characters(min_codepoint=0x20, max_codepoint=0x7E))
ESCAPES = st.one_of(
    st.from_regex(r"\x1b\[[0-9;]{0,12}m", fullmatch=True),  # SGR
    st.from_regex(r"\x1b\[[0-9;?<=>]{0,8}[ -/]?[@-~]", fullmatch=True),  # any CSI
    st.from_regex(r"\x1b\][ -~]{0,20}(?:\x07|\x1b\\)", fullmatch=True),  # OSC, terminated
    st.from_regex(r"\x1b[ -/]{0,2}[0-~]", fullmatch=True).filter(lambda s: s[1] not in "[]PX^_"),
    st.just("\r"),
)


@settings(max_examples=300, deadline=None)
@given(st.binary(max_size=300))
def test_any_bytes_render_to_safe_markup(raw: bytes) -> None:
    check_markup(render_line(raw))
    assert line_class(raw) in {"", "warning", "error"}


@settings(max_examples=200, deadline=None)
@given(st.lists(st.sampled_from([b"\x1b", b"[", b"]", b"38;5;", b"2;", b"m", b"\x07", b"\\", b"\r", b"\xff", b"a"])))
def test_escape_fragments_render_to_safe_markup(pieces: list[bytes]) -> None:
    check_markup(render_line(b"".join(pieces)))


@settings(max_examples=200, deadline=None)
@given(PRINTABLE)
def test_printable_ascii_shows_as_itself(text: str) -> None:
    out = render_line(text.encode())
    assert visible(out) == text
    assert render_line(text.encode() + b"\r") == out  # the fast and the slow path agree


@settings(max_examples=200, deadline=None)
@given(st.text(st.characters(exclude_categories=("Cc", "Cs"))))
def test_unicode_text_shows_as_itself(text: str) -> None:
    assert visible(render_line(text.encode())) == text


@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(PRINTABLE, ESCAPES)), PRINTABLE)
def test_escape_sequences_leave_exactly_the_text(pieces: list[tuple[str, str]], last: str) -> None:
    raw = "".join(text + escape for text, escape in pieces) + last
    out = render_line(raw.encode())
    check_markup(out)
    rows = "".join(text + ("\r" if escape == "\r" else "") for text, escape in pieces) + last
    expected = "\n".join(row for row in rows.split("\r") if row)  # empty rows collapse, as in a terminal
    assert visible(out) == expected


SGLANG_PREFIX = st.from_regex(
    r"\[(?:20[0-9]{2}-[01][0-9]-[0-3][0-9] )?[0-2][0-9]:[0-5][0-9]:[0-5][0-9](?: (?:TP|DP|EP|PP)[0-9]{1,3}){0,4}\] ",
    fullmatch=True,
)


@settings(max_examples=200, deadline=None)
@given(SGLANG_PREFIX, PRINTABLE)
def test_prefixed_lines_keep_their_text(prefix: str, message: str) -> None:
    out = render_line((prefix + message).encode())
    assert visible(out) == prefix + message
    assert out.count('class="rank ') == len(re.findall(r" [A-Z]{2}[0-9]", prefix))


@settings(max_examples=200, deadline=None)
@given(
    st.sampled_from(["", "ERROR: ", "[2026-01-05 10:00:01 TP0] ", "RuntimeError: ", "WARNING ", "x.py:1: "]), PRINTABLE
)
def test_line_class_is_blind_to_colours(head: str, text: str) -> None:
    plain = (head + text).encode()
    coloured = b"\x1b[1;31m" + head.encode() + b"\x1b[0m\x1b]0;title\x07" + text.encode() + b"\x1b[K"
    assert line_class(coloured) == line_class(plain)


# Progress bars


def test_a_bar_redrawn_with_carriage_returns_is_its_states_the_last_on_screen() -> None:
    raw = b"\x1b[33mLoading  0%|    | 0/4\r\x1b[2KLoading 50%|##  | 2/4\rLoading <100%>|####| 4/4\r"
    states = render_states(raw)
    assert [visible(state) for state in states] == ["Loading  0%|    | 0/4", "Loading 50%|##  | 2/4",
                                                    "Loading <100%>|####| 4/4"]  # fmt: skip
    assert states[-1] == span("ansi-fg-3", "Loading &lt;100%&gt;|####| 4/4")  # the colour carries on, escaped
    for state in states:
        check_markup(state)
    glued = render_states(b"Loading 100%|##|\r[2026-01-05 10:00:01 TP0] Scheduler hit an exception: x")
    assert glued[-1] == f"[{ts('2026-01-05 10:00:01 ')}{rank('TP0', 0)}] Scheduler hit an exception: x"


@pytest.mark.parametrize(
    ("first", "second", "same"),
    [
        (b"Loading safetensors checkpoint shards:  25% Completed | 1/4 [00:01<00:03, 1.00it/s]",
         b"Loading safetensors checkpoint shards: 100% Completed | 4/4 [00:04<00:00, 1.00it/s]", True),
        (b"[2026-01-01 10:00:00 TP0] Capturing batches (bs=8 avail_mem=70.12 GB):  40%|####      | 2/5 [00:01<00:01]",
         b"[2026-01-01 10:00:01 TP1] Capturing batches (bs=4 avail_mem=70.02 GB):  60%|######    | 3/5 [00:02<00:01]",
         True),
        (b"  0%|          | 0/17 [00:00<?, ?it/s]", b" 6%|6         | 1/17 [00:00<00:03]", True),
        (b"Loading safetensors checkpoint shards:  25% Completed | 1/4",
         b"Capturing batches (bs=8 avail_mem=70.12 GB):  40%|####      | 2/5", False),
    ],
)  # fmt: skip
def test_states_of_one_bar_share_a_key_whatever_their_numbers_and_rank(first: bytes, second: bytes, same: bool) -> None:
    assert progress_key(first) is not None and progress_key(second) is not None
    assert (progress_key(first) == progress_key(second)) is same


@pytest.mark.parametrize("raw", [b"token usage: 95% of the pool", b"plain line", b"50 % done", b""])
def test_a_line_that_draws_no_bar_has_no_key(raw: bytes) -> None:
    assert progress_key(raw) is None
