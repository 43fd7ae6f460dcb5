"""Argument drift: what the launch asked SGLang for against what SGLang says it used.

SGLang changes arguments on its own (model-specific adjustments, speculative decoding, hardware
rules) and says so only in passing: in its `server_args=` dump, in warnings, or in the message
of the error it then raises. These pure functions line the requested argv up with each of them.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Any

from app.diagnose import flag_history

# A value quoted in a message: a word or a number; a sentence's full stop is not part of it, even
# with no space after it (SGLang writes "no_buffer.To use ...").
VALUE = r"-?[\w-]+(?:\.\d+)?"
# Warnings that name the argument they changed: (pattern, field, value; a group number or a constant).
ADJUSTED: tuple[tuple[re.Pattern[str], str | int, Any], ...] = (
    (re.compile(r"Automatically reduce --mem-fraction-static to ([\d.]+)"), "mem_fraction_static", 1),
    (re.compile(r"Overlap schedul\w* is disabled|Disabling overlap schedul"), "disable_overlap_schedule", True),
    (re.compile(r"Custom allreduce is disabled"), "disable_custom_all_reduce", True),
    (re.compile(r"Automatically turn off --chunked-prefill-size and disable radix cache"), "disable_radix_cache", True),
    (re.compile(r"Attention backend not (?:set|specified)\. Use (\w+) backend"), "attention_backend", 1),
    # "speculative_num_draft_tokens is adjusted to 2", "Max running requests is reset to 48": the
    # field, or the sentence's words naming it, before the verb.
    (re.compile(r"(?:^|[.:] )([A-Za-z][\w ]*?) (?:is|was) (?:adjusted|reset|set) to (" + VALUE + ")"), 1, 2),
    (re.compile(r"--([a-z][a-z0-9-]+) (?:is|was) (?:adjusted|reset|set) to (" + VALUE + ")"), 1, 2),
    # The newest releases: "defaulting --linear-attn-decode-backend to flashinfer", "falling back --x to triton".
    (re.compile(r"(?:defaulting|falling back) --([a-z][a-z0-9-]+) to (" + VALUE + ")"), 1, 2),
)
# An error that names the value SGLang ended up with: "... when using --mamba-scheduler-strategy no_buffer."
IN_ERROR = re.compile(r"when using --([a-z][a-z0-9-]+) (" + VALUE + ")")
# Settings the newest dump groups in a nested dict, named here by the flags that set them:
# cuda_graph_config={'decode': {'max_bs': 8, ...}} is what --cuda-graph-max-bs-decode asked for.
NESTED = {"cuda_graph_config": "cuda_graph_{setting}_{part}"}


@dataclass(frozen=True)
class Drift:
    name: str  # the ServerArgs field
    requested: Any  # None when the launch left it to SGLang
    effective: Any
    source: str  # "server_info", "server_args", "warning" or "error"
    line: str = ""  # the log line that says so, for warnings and errors
    predicted: Any = None  # what preflight's run of the host's argument parser foresaw, if it ran

    @property
    def changed(self) -> bool:
        """SGLang used another value than the one asked for (or chose one where none was asked)."""
        return self.requested is None or self.requested != self.effective

    @property
    def unforeseen(self) -> bool:
        """Preflight predicted another value than the one SGLang used."""
        return self.predicted is not None and self.predicted != self.effective


def field_name(flag: str) -> str:
    """`--max-running-requests`, `max_running_requests` and `Max running requests` alike."""
    return flag.removeprefix("--").replace("-", "_").replace(" ", "_").lower()


def requested_args(argv: Sequence[str]) -> dict[str, Any]:
    """`--flag value`, `--flag=value`, a bare `--flag` (True) and `--flag v1 v2` (a list), by field."""
    requested: dict[str, Any] = {}
    name: str | None = None
    for token in argv:
        if token.startswith("--"):
            flag, equals, value = token.partition("=")
            name = field_name(flag)
            requested[name] = value if equals else True
            if equals:
                name = None
        elif name is not None:
            current = requested[name]
            if current is True:
                requested[name] = token
            else:
                requested[name] = [*current, token] if isinstance(current, list) else [current, token]
    return requested


def effective_fields(server_args: dict[str, Any] | None) -> dict[str, Any]:
    """A dump as one value per flag: the resolved values of nested settings take the place of the
    top-level fields that only echo what was given (None where the flag was left out)."""
    fields = dict(server_args or {})
    for group, name in NESTED.items():
        parts = fields.get(group)
        if not isinstance(parts, dict):
            continue
        for part, settings in parts.items():
            if isinstance(settings, dict):
                fields.update({name.format(setting=key, part=part): value for key, value in settings.items()})
    for old, new in renamed_fields().items():
        if old not in fields and new in fields:
            fields[old] = fields[new]
    return fields


@functools.cache
def renamed_fields() -> dict[str, str]:
    """Fields a later release renamed one for one, read under the new name when a dump lacks the old
    one (--mamba-scheduler-strategy became --mamba-radix-cache-strategy in 0.5.14)."""
    return {
        field_name(row.flag): field_name(row.rewrite[0])
        for row in flag_history.history()[1]
        if row.change == "renamed" and row.rewrite and row.rewrite[1:] == ("{value}",) and not row.values
    }


def coerce(value: Any, like: Any) -> Any:
    """A value from the command line in the type of the effective one, so 0.80 equals 0.8."""
    if isinstance(value, list):
        return [coerce(item, like[0] if isinstance(like, list) and like else None) for item in value]
    if isinstance(like, bool):
        return value is True or str(value).lower() in ("true", "1", "yes")
    try:
        if isinstance(like, int):
            return int(value)
        if isinstance(like, float):
            return float(value)
    except (TypeError, ValueError):
        return value
    return value


def drift(
    argv: Sequence[str],
    server_args: dict[str, Any] | None,
    adjustments: Sequence[str] = (),
    root_error: str | None = None,
    *,
    server_info: dict[str, Any] | None = None,
    predicted: dict[str, Any] | None = None,
) -> list[Drift]:
    """Every requested argument SGLang used otherwise, every argument its warnings or its error say
    it changed, and every requested one preflight foresaw wrongly. The most direct witness wins: a
    live server's /get_server_info, then the `server_args=` dump, then the error, then warnings."""
    requested = requested_args(argv)
    found: dict[str, Drift] = {}
    for field, effective, source, line in _stated(adjustments, root_error):
        found[field] = _drift(field, requested, effective, source, line)
    for source, effective_args in (("server_args", server_args), ("server_info", server_info)):
        for field, effective in effective_fields(effective_args).items():
            if field in requested:
                found[field] = _drift(field, requested, effective, source)
    if predicted:
        predicted = effective_fields(predicted)  # a preflight of the newest release resolves the same dict
        found = {
            field: replace(item, predicted=coerce(predicted[field], item.effective)) if field in predicted else item
            for field, item in found.items()
        }
    return [item for item in found.values() if item.changed or item.unforeseen]


def stated_values(adjustments: Sequence[str] = (), root_error: str | None = None) -> dict[str, Any]:
    """The values SGLang's warnings and its error say it took, by field: what a refused launch
    still tells of the arguments it would have used."""
    stated = _stated(adjustments, root_error)
    return {field: _typed(value) if isinstance(value, str) else value for field, value, *_ in stated}


def _stated(adjustments: Sequence[str], root_error: str | None) -> list[tuple[str, Any, str, str]]:
    """(field, value, source, line) for each warning that names an argument it changed, then the error."""
    stated = []
    for line in adjustments:
        for pattern, name, value in ADJUSTED:
            if (match := pattern.search(line)) is not None:
                field = field_name(match.group(name)) if isinstance(name, int) else name
                effective = match.group(value) if isinstance(value, int) and not isinstance(value, bool) else value
                stated.append((field, effective, "warning", line))
                break
    if root_error and (match := IN_ERROR.search(root_error)):
        stated.append((field_name(match.group(1)), match.group(2), "error", root_error))
    return stated


def _drift(field: str, requested: dict[str, Any], effective: Any, source: str, line: str = "") -> Drift:
    if isinstance(effective, str) and source in ("warning", "error"):
        effective = _typed(effective)
    wanted = requested.get(field)
    return Drift(field, None if wanted is None else coerce(wanted, effective), effective, source, line)


def _typed(text: str) -> Any:
    """A value quoted in a log line as the number it spells, if it spells one."""
    for kind in (int, float):
        try:
            return kind(text)
        except ValueError:
            pass
    return text
