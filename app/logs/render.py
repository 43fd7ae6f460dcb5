"""One raw log line as safe HTML for the log viewer, and the line's severity for highlighting.

Logs come from hosts we do not control: SGLang, tqdm progress bars, shells and container runtimes
write ANSI colours, cursor movement, OSC hyperlinks, carriage returns, control bytes and, when a
process dies mid-write, invalid UTF-8. The viewer shows all of it faithfully (a stray byte can be
the clue) but nothing in a line may become markup: every character of text is escaped, and the
only tags are this module's own `<span>`s, with fixed class names or colours computed here from
integers. Plain lines, the vast majority, take a fast path.
"""

from __future__ import annotations

import html
import re
from collections.abc import Callable, Sequence
from itertools import accumulate, groupby
from operator import itemgetter

from app.diagnose.lines import SGLANG_STAMP

# Bytes that send a line down the slow path (with invalid UTF-8): C0 controls except tab, and DEL.
_SLOW_BYTES = re.compile(rb"[\x00-\x08\x0a-\x1f\x7f]")
# Escape sequences in text decoded with surrogateescape. Only a CSI can be SGR; the rest is dropped.
_ESCAPE = (
    r"\x1b\[(?P<params>[\x30-\x3f]*)(?P<inter>[\x20-\x2f]*)(?P<final>[\x40-\x7e]?)"  # CSI
    r"|\x1b[\]PX^_][^\x07\x1b]*(?:\x07|\x1b\\)"  # OSC (titles, OSC 8 links), DCS, SOS, PM, APC, to BEL or ST
    r"|\x1b[\x20-\x2f]*[\x30-\x7e]?"  # two-character sequences (charset, keypad...) and a lone ESC
)
_ESCAPES = re.compile(_ESCAPE)
_TOKENS = re.compile(_ESCAPE + r"|\r")
_SGR_PARAMS = re.compile(r"[0-9;:]*")
# Shown as visible escapes: C0 controls except tab and CR, DEL, and invalid bytes (as surrogates).
_SHOWN = re.compile(r"[\x00-\x08\x0a-\x0c\x0e-\x1f\x7f\udc80-\udcff]")

_WRAPPER = r"(?:\(\w+ pid=\d+(?:, ip=[\d.]+)?\) |[\w.-]+\s*\| )?"  # a Ray actor's or docker compose's
_PREFIX = re.compile(_WRAPPER + SGLANG_STAMP)
_HEAD = re.compile(rf"\A{_WRAPPER}(?:{SGLANG_STAMP} *)?")
_RANK = re.compile(r"[A-Z_]+([0-9]+)")
# A progress bar as tqdm draws it ("desc:  40%|####  | 2/5 [...]") or SGLang's loader ("desc:  25% Completed | 1/4").
_BAR = re.compile(r"(?P<description>[^%]*?)(?<![\d.])\d{1,3}%(?:\||\s+Completed\b)")
_NUMBER = re.compile(r"\d+(?:\.\d+)?")


def _level(*names: str) -> str:
    """A logging level as a token, as in "ERROR:" or "[WARN]" (the lookbehind after the name keeps search fast)."""
    return "|".join(rf"{name}(?<![^\s\[(|]{name})(?=[\s\]:)|]|$)" for name in names)


# Matched at the start of a record (after any wrapper and SGLang's prefix), then searched anywhere in it.
_ERROR_START = re.compile(
    r"(?:[A-Za-z_]\w*\.)*\w*(?:Error|Exception)(?::|$)|KeyboardInterrupt\b|SystemExit\b"  # an exception
    r"|terminate called after throwing|[\w./ -]+: error: "  # a C++ abort, argparse
    r"|(?:\[rank\d+\]:)?\[?[EF]\d{4} \d\d:\d\d:\d\d"  # glog, torch's c10: "[rank0]:[E0105 10:00:01..."
)
_ERROR_ANY = re.compile(
    _level("ERROR", "CRITICAL", "FATAL") + r"|Traceback \(most recent call last\):|Scheduler hit an exception"
)
_WARNING_START = re.compile(r"(?:\[rank\d+\]:)?\[?W\d{4} \d\d:\d\d:\d\d")
_WARNING_ANY = re.compile(_level("WARNING", "WARN") + "|Warning:")  # UserWarning:, FutureWarning:...

_ATTRIBUTE_ON = {1: "bold", 2: "dim", 3: "italic", 4: "underline"}
_ATTRIBUTES_OFF = {22: ("bold", "dim"), 23: ("italic",), 24: ("underline",)}


def render_line(raw: bytes, marks: Sequence[tuple[int, int]] = ()) -> str:
    """`raw`, one log line without its newline, as an HTML fragment for a `white-space: pre-wrap` viewer.
    `marks` are byte ranges of `raw` (a search's matches) wrapped in <mark>; they are shown on lines
    without escape sequences or control bytes, where a byte of `raw` is a character on screen."""
    if _SLOW_BYTES.search(raw) is None:
        try:
            text = raw.decode()
        except UnicodeDecodeError:
            pass
        else:
            return _html([("", text)], html.escape, _char_ranges(raw, marks))
    return _render_escaped(raw.decode("utf-8", "surrogateescape"))


def _char_ranges(raw: bytes, marks: Sequence[tuple[int, int]]) -> list[tuple[int, int]]:
    """Byte ranges of valid UTF-8 `raw` as character ranges."""
    if raw.isascii():
        return list(marks)
    return [(len(raw[:start].decode(errors="ignore")), len(raw[:end].decode(errors="ignore"))) for start, end in marks]


def line_class(raw: bytes) -> str:
    """The line's highlight, "error", "warning" or "", judged on its text without escape sequences."""
    text = raw.decode("utf-8", "replace")
    if "\x1b" in text:
        text = _ESCAPES.sub("", text)
    found = ""
    for record in text.split("\r"):  # a progress bar redrawn with \r can be glued to a record
        body = _HEAD.sub("", record, count=1)
        if _ERROR_START.match(body) or _ERROR_ANY.search(body):
            return "error"
        if _WARNING_START.match(body) or _WARNING_ANY.search(body):
            found = "warning"
    return found


class _Style:
    """SGR state: attributes on or off, a colour per layer (palette index "0".."15" or "#rrggbb")."""

    def __init__(self) -> None:
        self.flags = dict.fromkeys(_ATTRIBUTE_ON.values(), False)
        self.fg: str | None = None
        self.bg: str | None = None
        self.tag = ""  # the opening tag of the current state

    def apply(self, params: str) -> None:
        """Apply the parameters of one SGR sequence, e.g. "1;31" or "38;2;255;128;0" (or "38:2::255:128:0")."""
        parts = params.split(";")
        i = 0
        while i < len(parts):
            code, *sub = (_number(digits) for digits in parts[i].split(":"))
            i += 1
            if code in (38, 48):
                if not sub:  # 38;5;n or 38;2;r;g;b: the arguments are the next parameters
                    sub = [_number(digits) for digits in parts[i : i + 4]]
                    i += 2 if sub[:1] == [5] else 4 if sub[:1] == [2] else len(parts)
                elif sub[0] == 2 and len(sub) > 4:  # 38:2:colour-space:r:g:b
                    del sub[1]
                if code == 38:
                    self.fg = _colour(sub) or self.fg
                else:
                    self.bg = _colour(sub) or self.bg
            elif code == 0:
                self.flags = dict.fromkeys(self.flags, False)
                self.fg = self.bg = None
            elif code == 4 and sub[:1] == [0]:  # 4:0, "not underlined" in the colon form
                self.flags["underline"] = False
            elif code in _ATTRIBUTE_ON:
                self.flags[_ATTRIBUTE_ON[code]] = True
            elif code in _ATTRIBUTES_OFF:
                self.flags.update(dict.fromkeys(_ATTRIBUTES_OFF[code], False))
            elif 30 <= code <= 37 or 90 <= code <= 97:
                self.fg = str(code - 30 if code < 90 else code - 82)
            elif 40 <= code <= 47 or 100 <= code <= 107:
                self.bg = str(code - 40 if code < 100 else code - 92)
            elif code == 39:
                self.fg = None
            elif code == 49:
                self.bg = None
        self.tag = self._open_tag()

    def _open_tag(self) -> str:
        """The <span> that shows this state, "" for the default."""
        classes = [f"ansi-{name}" for name, on in self.flags.items() if on]
        styles = []
        for layer, prop, colour in (("fg", "color", self.fg), ("bg", "background-color", self.bg)):
            if colour is not None and colour.startswith("#"):
                styles.append(f"{prop}:{colour}")
            elif colour is not None:
                classes.append(f"ansi-{layer}-{colour}")
        attrs = f' class="{" ".join(classes)}"' if classes else ""
        attrs += f' style="{";".join(styles)}"' if styles else ""
        return f"<span{attrs}>" if attrs else ""


def _number(digits: str) -> int:
    """An SGR parameter; empty is 0, and a huge one is clamped rather than parsed (int() refuses 4300 digits)."""
    return (int(digits) if len(digits) < 10 else 10**9) if digits else 0


def _colour(args: list[int]) -> str | None:
    """The colour of SGR 38/48's arguments [5, index] or [2, r, g, b]; None when malformed."""
    if len(args) >= 2 and args[0] == 5:
        index = min(args[1], 255)
        if index < 16:
            return str(index)
        if index < 232:  # the 6x6x6 cube
            cube = index - 16
            return "#" + "".join(f"{55 + 40 * c if c else 0:02x}" for c in (cube // 36, cube // 6 % 6, cube % 6))
        return "#" + f"{8 + 10 * (index - 232):02x}" * 3  # the grey ramp
    if len(args) >= 4 and args[0] == 2:
        return "#" + "".join(f"{min(c, 255):02x}" for c in args[1:4])
    return None


def render_states(raw: bytes) -> list[str]:
    """`raw` as a terminal draws it: the rows its carriage returns separate (a progress bar redrawn
    in place), each an HTML fragment as `render_line` makes it, the last the one left on screen."""
    if b"\r" not in raw:
        return [render_line(raw)]
    rows: list[list[tuple[str, str]]] = [[]]
    for tag, chunk in _runs(raw.decode("utf-8", "surrogateescape")):
        if chunk.startswith("\r"):
            rows.append([])
            chunk = chunk[1:]
        rows[-1].append((tag, chunk))
    return [_html(_merged(row), _escape_shown) for row in rows if row] or [""]


def progress_key(raw: bytes) -> str | None:
    """What tells a progress bar from another: its description before the percentage, numbers
    left out ("Capturing batches (bs=# avail_mem=# GB)"), of the last state drawn; None for a line
    that shows no bar there."""
    if b"%" not in raw:
        return None
    text = raw.decode("utf-8", "replace")
    text = _ESCAPES.sub("", text) if "\x1b" in text else text
    state = next((row for row in reversed(text.split("\r")) if row.strip()), "")
    bar = _BAR.match(_HEAD.sub("", state, count=1))
    return None if bar is None else _NUMBER.sub("#", bar["description"].strip())


def _render_escaped(text: str) -> str:
    """The slow path: escape sequences applied or dropped, CR as a row break, controls and bad bytes shown."""
    return _html(_merged(_runs(text)), _escape_shown)


def _runs(text: str) -> list[tuple[str, str]]:
    """(opening tag, text) of each piece of `text` between escape sequences, a \r at the start of
    a piece marking a row break (empty rows left out, as a terminal shows them)."""
    style = _Style()
    runs: list[tuple[str, str]] = []
    row_has_text = pending_break = False
    pos = 0
    line = text + "\r"  # the sentinel flushes the last text; a final \r shows nothing anyway
    for token in _TOKENS.finditer(line):
        if token.start() > pos:
            runs.append((style.tag, ("\r" if pending_break else "") + line[pos : token.start()]))
            row_has_text, pending_break = True, False
        pos = token.end()
        if token[0] == "\r":  # a \r at the start of a row (leading, or doubled) changes nothing
            pending_break, row_has_text = pending_break or row_has_text, False
        elif token["final"] == "m" and not token["inter"] and _SGR_PARAMS.fullmatch(token["params"]):
            style.apply(token["params"])
    return runs


def _merged(runs: list[tuple[str, str]]) -> list[tuple[str, str]]:
    return [(tag, "".join(chunk for _, chunk in group)) for tag, group in groupby(runs, key=itemgetter(0))]


def _html(runs: list[tuple[str, str]], escape: Callable[[str], str], marks: Sequence[tuple[int, int]] = ()) -> str:
    """Runs of (opening tag, text) as HTML, with SGLang's record prefix picked out (its time, to be
    hidden at will, and its rank tags coloured) and the character ranges `marks` in <mark>."""
    text = runs[0][1] if len(runs) == 1 else "".join(run for _, run in runs)
    spans = _prefix_spans(text)
    if len(runs) > 1:  # a rank tag split by an escape sequence stays plain
        ends = list(accumulate(len(run) for _, run in runs))
        spans = [s for s in spans if s[2] == "ts" or not any(s[0] < end < s[1] for end in ends)]

    def marked(start: int, end: int) -> str:
        """text[start:end] escaped, with the parts inside `marks` in <mark>."""
        pieces: list[str] = []
        pos = start
        for first, last in marks:
            first, last = max(first, pos), min(last, end)
            if first < last:
                pieces += (escape(text[pos:first]), f"<mark>{escape(text[first:last])}</mark>")
                pos = last
        pieces.append(escape(text[pos:end]))
        return "".join(pieces)

    out = []
    start = 0
    for tag, run in runs:
        end = start + len(run)
        pieces: list[str] = []
        pos = start
        for first, last, name in spans:
            first, last = max(first, pos), min(last, end)
            if first < last:
                pieces += (marked(pos, first), f'<span class="{name}">{marked(first, last)}</span>')
                pos = last
        pieces.append(marked(pos, end))
        body = "".join(pieces)
        out.append(f"{tag}{body}</span>" if tag else body)
        start = end
    return "".join(out)


def _prefix_spans(text: str) -> list[tuple[int, int, str]]:
    """(start, end, class) of the time and of each rank tag ("TP3", "DP1"...) in the record prefix at
    the start of text. The time's span takes the brackets with it when no rank tag is left inside."""
    prefix = _PREFIX.match(text)
    if prefix is None:
        return []
    offset = prefix.start("tags")
    if prefix["tags"]:
        spans = [(prefix.start("time"), offset + 1, "ts")]
    else:
        spans = [(prefix.start("time") - 1, prefix.end() + (text[prefix.end() : prefix.end() + 1] == " "), "ts")]
    # The last three digits suffice for the rank modulo 8, and int() refuses 4300 digits.
    for tag in _RANK.finditer(prefix["tags"]):
        spans.append((offset + tag.start(), offset + tag.end(), f"rank rank-{int(tag[1][-3:]) % 8}"))
    return spans


def _escape_shown(text: str) -> str:
    """html.escape, and controls and invalid bytes made visible; CR markers become newlines."""
    return _SHOWN.sub(_show, html.escape(text)).replace("\r", "\n")


def _show(match: re.Match[str]) -> str:
    """A control character or an invalid byte as a visible, classed span."""
    code = ord(match[0])
    if code >= 0xDC80:  # surrogateescape's stand-in for an invalid byte
        return f'<span class="bad-byte" title="invalid UTF-8 byte">\\x{code - 0xDC00:02x}</span>'
    return f'<span class="ctl">^{chr(code ^ 0x40)}</span>'  # caret notation: ^@ for NUL, ^? for DEL
