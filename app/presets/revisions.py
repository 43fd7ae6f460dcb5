"""Presets: what to launch, kept as immutable revisions so every attempt can name exactly what it ran.

A revision stores the server arguments as one list. The editor shows the common SGLang flags
as fields and the rest as free text; both map to and from that list, so there is one source
of truth for what runs.

The functions that change presets take a write session and commit it once, audit row included:
each is one unit of work, and none of them waits on anything but the database.
"""

from __future__ import annotations

import functools
import re
import shlex
from dataclasses import dataclass, field
from typing import Any

from sqlalchemy import select
from sqlalchemy.ext.asyncio import AsyncSession
from sqlalchemy.orm import selectinload

from app import audit
from app.clock import utcnow
from app.config import Destinations, http_url_problem, redacted_url
from app.db.models import Preset, PresetRevision
from app.diagnose import flag_history
from app.errors import InvalidInput, NotFound

LAUNCHERS = ("python -m sglang.launch_server", "sglang serve")
NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,127}")
ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
# Set by launchdeck from the chosen GPUs, never by a preset.
RESERVED_ENV = frozenset({"CUDA_VISIBLE_DEVICES"})


@dataclass(frozen=True)
class Flag:
    """A common SGLang flag shown as its own field in the editor."""

    name: str
    flag: str
    kind: type  # int, float, bool (a switch) or str
    choices: tuple[str, ...] = ()
    aliases: tuple[str, ...] = ()

    @property
    def spelling_key(self) -> str:
        """The form field that carries the option this field is spelled with."""
        return f"{self.name}.flag"

    @functools.cached_property
    def spellings(self) -> tuple[str, ...]:
        """Every option that sets this field: its own, its aliases, and the names later SGLang
        releases gave it (--mamba-scheduler-strategy became --mamba-radix-cache-strategy)."""
        later = (
            row.rewrite[0]
            for row in flag_history.history()[1]
            if row.flag == self.flag and row.change == "renamed" and row.rewrite and not row.values
        )
        return tuple(dict.fromkeys((self.flag, *self.aliases, *later)))


FLAGS = (
    Flag("tp_size", "--tp-size", int, aliases=("--tensor-parallel-size",)),
    Flag("mem_fraction_static", "--mem-fraction-static", float),
    Flag("context_length", "--context-length", int),
    Flag("chunked_prefill_size", "--chunked-prefill-size", int),
    Flag("cuda_graph_max_bs", "--cuda-graph-max-bs", int),
    Flag("speculative_algorithm", "--speculative-algorithm", str, ("EAGLE", "EAGLE3", "NEXTN", "STANDALONE", "NGRAM")),
    Flag("speculative_num_steps", "--speculative-num-steps", int),
    Flag("speculative_eagle_topk", "--speculative-eagle-topk", int),
    Flag("speculative_num_draft_tokens", "--speculative-num-draft-tokens", int),
    Flag("mamba_scheduler_strategy", "--mamba-scheduler-strategy", str, ("auto", "no_buffer", "extra_buffer")),
    Flag("max_mamba_cache_size", "--max-mamba-cache-size", int),
    Flag("mamba_full_memory_ratio", "--mamba-full-memory-ratio", float),
    Flag("disable_radix_cache", "--disable-radix-cache", bool),
    Flag("trust_remote_code", "--trust-remote-code", bool),
    # The server's own figures for the serving panel and Prometheus (on in a new preset's editor).
    Flag("enable_metrics", "--enable-metrics", bool),
)
FLAG_BY_OPTION = {option: flag for flag in FLAGS for option in (flag.flag, *flag.aliases)}
# The editor's fields by every option that fills them, a later release's name included: a field
# keeps the spelling the revision used, so saving from the editor never renames a flag.
FIELD_BY_OPTION = {option: flag for flag in FLAGS for option in flag.spellings}
# Options that have their own preset field, so they cannot also appear among the arguments.
OWN_FIELDS = {"--model-path": "model_path", "--model": "model_path", "--port": "port"}


# Sizes a preset's values may have, in UTF-8 bytes. Real SGLang command lines are a few hundred
# bytes; these leave room for long JSON arguments (--json-model-override-args) while keeping every
# preset small enough to list, diff and render at once, and its preflight request and launch script
# far from what a host or the pages would choke on.
MAX_MODEL_PATH = 1024
MAX_PYTHON = 1024
MAX_ARG = 4096
MAX_ARGS_TOTAL = 64 * 1024
MAX_ENV_NAME = 256
MAX_ENV_VALUE = 16 * 1024
MAX_ENV_TOTAL = 64 * 1024
MAX_DESCRIPTION = 8 * 1024
MAX_WEBHOOK_URL = 2048
MAX_OVERRIDE_REASON = 4096  # the reason a launch went ahead despite its preflight


def check_text(name: str, value: str, limit: int) -> None:
    """Refuses a NUL (no C string on the host, nor PostgreSQL, can hold one) and a value over `limit` bytes."""
    if "\0" in value:
        raise InvalidInput(f"{name}: contains a NUL byte")
    size = len(value.encode(errors="surrogatepass"))
    if size > limit:
        raise InvalidInput(f"{name}: {size:,} bytes is over the limit of {limit:,}")


@dataclass
class PresetInput:
    """What a user submits for a preset; `validate` checks it and names the field at fault."""

    name: str
    model_path: str
    args: list[str] = field(default_factory=list)
    env: dict[str, str] = field(default_factory=dict)
    description: str = ""
    launcher: str = LAUNCHERS[0]
    python: str = "python3"
    port: int = 30000
    webhook_url: str = ""  # told when the preset's attempts become ready, fail or turn unhealthy

    def validate(self) -> None:
        self.model_path, self.python = self.model_path.strip(), self.python.strip()
        self.webhook_url = self.webhook_url.strip()
        check_text("model_path", self.model_path, MAX_MODEL_PATH)
        check_text("python", self.python, MAX_PYTHON)
        check_text("description", self.description, MAX_DESCRIPTION)
        check_text("webhook_url", self.webhook_url, MAX_WEBHOOK_URL)
        if self.webhook_url and (problem := http_url_problem(self.webhook_url)):
            raise InvalidInput(f"webhook_url: {problem}")
        if not NAME.fullmatch(self.name):
            raise InvalidInput("name: use 1-128 letters, digits, '.', '_' or '-', starting with a letter or digit")
        if not self.model_path:
            raise InvalidInput("model_path: a model path or Hugging Face repo id is required")
        if self.launcher not in LAUNCHERS:
            raise InvalidInput(f"launcher: choose {' or '.join(repr(name) for name in LAUNCHERS)}")
        if not self.python or any(c.isspace() for c in self.python):
            raise InvalidInput("python: give the path of a Python executable on the host, without spaces")
        if not 1 <= self.port <= 65535:
            raise InvalidInput(f"port: {self.port} is out of range (1-65535)")
        for name, value in self.env.items():
            if len(name) > MAX_ENV_NAME or not ENV_NAME.fullmatch(name):
                raise InvalidInput(f"env: {name[:MAX_ENV_NAME]!r} is not a valid variable name")
            if name in RESERVED_ENV:
                raise InvalidInput(f"env: {name} is set from the GPUs chosen at launch")
            check_text(f"env {name}", value, MAX_ENV_VALUE)
        check_text("env", "".join(f"{name}={value}" for name, value in self.env.items()), MAX_ENV_TOTAL)
        validate_args(self.args)


def validate_args(args: list[str]) -> None:
    """Checks each argument's size, the common flags' values and that no flag is given twice."""
    for position, arg in enumerate(args, 1):
        check_text(f"args: argument {position}", arg, MAX_ARG)
    check_text("args", "".join(args), MAX_ARGS_TOTAL)
    seen: dict[str, str] = {}
    i = 0
    while i < len(args):
        arg = args[i]
        if not arg.startswith("--"):
            i += 1
            continue
        option, has_value, inline = arg.partition("=")
        if option in OWN_FIELDS:
            raise InvalidInput(f"args: {option} is set by the preset's {OWN_FIELDS[option]} field")
        known = FLAG_BY_OPTION.get(option)
        canonical = known.flag if known else option
        if canonical in seen:
            raise InvalidInput(f"args: {canonical} is given twice ({seen[canonical]} and {arg})")
        seen[canonical] = arg
        if known is None or known.kind is bool:
            if known and has_value:
                raise InvalidInput(f"{known.name}: {option} is a switch and takes no value")
            i += 1
            continue
        if has_value:
            value = inline
        elif i + 1 < len(args) and not args[i + 1].startswith("--"):
            value = args[i + 1]
            i += 1
        else:
            raise InvalidInput(f"{known.name}: {option} needs a value")
        _check_value(known, value)
        i += 1


def _check_value(flag: Flag, value: str) -> None:
    if flag.kind is int:
        try:
            number: float = int(value)
        except ValueError:
            raise InvalidInput(f"{flag.name}: {value!r} is not a whole number") from None
        if number < (0 if flag.name == "max_mamba_cache_size" else 1):
            raise InvalidInput(f"{flag.name}: {value} must be positive")
    elif flag.kind is float:
        try:
            number = float(value)
        except ValueError:
            raise InvalidInput(f"{flag.name}: {value!r} is not a number") from None
        if flag.name == "mem_fraction_static" and not 0 < number < 1:
            raise InvalidInput(f"{flag.name}: {value} must be between 0 and 1")
        if number <= 0:
            raise InvalidInput(f"{flag.name}: {value} must be positive")
    elif flag.choices and value not in flag.choices:
        raise InvalidInput(f"{flag.name}: {value!r} is not one of {', '.join(flag.choices)}")


def args_from_form(fields: dict[str, str], extra: str) -> list[str]:
    """The argument list for the editor's fields (empty ones left out) and its free-text extras."""
    args: list[str] = []
    for flag in FLAGS:
        value = (fields.get(flag.name) or "").strip()
        option = fields.get(flag.spelling_key) or flag.flag
        if option not in flag.spellings:
            raise InvalidInput(f"{flag.spelling_key}: {option!r} is not a name of {flag.flag}")
        if flag.kind is bool:
            if value in ("on", "true", "1"):
                args.append(option)
        elif value:
            args += [option, value]
    try:
        args += shlex.split(extra)
    except ValueError as exc:
        raise InvalidInput(f"extra_args: {exc} (check the quotes)") from None
    return args


def form_from_args(args: list[str]) -> tuple[dict[str, str], str]:
    """The editor's fields and extra-arguments text for an argument list."""
    fields: dict[str, str] = {}
    extra: list[str] = []
    i = 0
    while i < len(args):
        option, has_value, inline = args[i].partition("=")
        known = FIELD_BY_OPTION.get(option)
        if known is None or known.name in fields:
            extra.append(args[i])
            i += 1
            continue
        if option != known.flag:
            fields[known.spelling_key] = option
        if known.kind is bool:
            fields[known.name] = "on"
        elif has_value:
            fields[known.name] = inline
        elif i + 1 < len(args):
            fields[known.name] = args[i + 1]
            i += 1
        i += 1
    return fields, shlex.join(extra)


def command_argv(revision: PresetRevision) -> list[str]:
    """The server's command line, exactly as the launch script runs it."""
    if revision.launcher == "sglang serve":
        directory = revision.python.rpartition("/")[0]
        prefix = [f"{directory}/sglang" if directory else "sglang", "serve"]
    else:
        prefix = [revision.python, "-m", "sglang.launch_server"]
    return [*prefix, "--model-path", revision.model_path, "--port", str(revision.port), *revision.args]


def revision_fields(revision: PresetRevision) -> dict[str, Any]:
    return {
        "model_path": revision.model_path,
        "launcher": revision.launcher,
        "python": revision.python,
        "port": revision.port,
        "args": list(revision.args),
        "env": dict(revision.env),
    }


def diff_revisions(old: PresetRevision, new: PresetRevision) -> list[tuple[str, str, str]]:
    """(what, before, after) for every difference, flags compared one by one."""
    changes: list[tuple[str, str, str]] = []
    for key in ("model_path", "launcher", "python", "port"):
        before, after = getattr(old, key), getattr(new, key)
        if before != after:
            changes.append((key, str(before), str(after)))
    for name in sorted(set(old.env) | set(new.env)):
        before, after = old.env.get(name), new.env.get(name)
        if before != after:
            changes.append((f"env {name}", _shown(before), _shown(after)))
    old_flags, new_flags = _flag_values(old.args), _flag_values(new.args)
    for option in sorted(set(old_flags) | set(new_flags)):
        before, after = old_flags.get(option), new_flags.get(option)
        if before != after:
            changes.append((option, _shown(before), _shown(after)))
    return changes


def _shown(value: str | None) -> str:
    return "(unset)" if value is None else value


def _flag_values(args: list[str]) -> dict[str, str]:
    """Each option with its value ("on" for a switch); positional words attach to the option before them."""
    values: dict[str, str] = {}
    current = ""
    for arg in args:
        if arg.startswith("--"):
            option, has_value, inline = arg.partition("=")
            current = FLAG_BY_OPTION[option].flag if option in FLAG_BY_OPTION else option
            values[current] = inline if has_value else "on"
        elif current:
            values[current] = arg if values[current] == "on" else f"{values[current]} {arg}"
        else:
            values[arg] = "on"
    return values


async def list_presets(session: AsyncSession, *, archived: bool = False) -> list[Preset]:
    query = select(Preset).options(selectinload(Preset.revisions)).order_by(Preset.name)
    query = query.where(Preset.archived_at.is_not(None) if archived else Preset.archived_at.is_(None))
    return list((await session.scalars(query)).all())


async def preset_names(session: AsyncSession) -> list[str]:
    """Names of the active presets, for filters: no revisions loaded."""
    query = select(Preset.name).where(Preset.archived_at.is_(None)).order_by(Preset.name)
    return list((await session.scalars(query)).all())


async def get_preset(session: AsyncSession, name: str) -> Preset:
    if not NAME.fullmatch(name):  # no such preset can exist; PostgreSQL would refuse a NUL in the query
        raise NotFound(f"no preset named {name!r}")
    query = (
        select(Preset)
        .options(selectinload(Preset.revisions))
        .where(Preset.name == name)
        .execution_options(populate_existing=True)
    )
    preset = await session.scalar(query)
    if preset is None:
        raise NotFound(f"no preset named {name!r}")
    return preset


def latest(preset: Preset) -> PresetRevision:
    return preset.revisions[-1]


def revision_of(preset: Preset, number: int) -> PresetRevision:
    for revision in preset.revisions:
        if revision.number == number:
            return revision
    raise NotFound(f"preset {preset.name!r} has no revision {number}")


async def create_preset(
    session: AsyncSession, data: PresetInput, *, actor: str, destinations: Destinations | None = None
) -> Preset:
    """Saves a new preset with its first revision; one unit of work, committed here. Its webhook
    must reach an address `destinations` allows (by default, public ones)."""
    _check_webhook(data.webhook_url, destinations)
    created = await _create(session, data, actor=actor)
    await session.commit()
    return created


def _check_webhook(url: str, destinations: Destinations | None) -> None:
    """A webhook written as an internal address is refused when it is saved; one written as a name
    is checked, address by address, each time it is posted to (app.launch.notifications)."""
    if url and (problem := (destinations or Destinations()).literal_problem(url)):
        raise InvalidInput(f"webhook_url: {problem}")


async def _create(session: AsyncSession, data: PresetInput, *, actor: str) -> Preset:
    data.validate()
    if await session.scalar(select(Preset.id).where(Preset.name == data.name)) is not None:
        raise InvalidInput(f"name: a preset named {data.name!r} exists already")
    preset = Preset(name=data.name, description=data.description, webhook_url=data.webhook_url)
    session.add(preset)
    await session.flush()
    session.add(_revision(preset, 1, data, actor))
    audit.record(session, actor=actor, action="preset-create", target=data.name, detail={"revision": 1})
    return await get_preset(session, data.name)


async def save_preset(
    session: AsyncSession,
    preset: Preset,
    data: PresetInput,
    *,
    actor: str,
    action: str = "preset-edit",
    detail: dict[str, Any] | None = None,
    destinations: Destinations | None = None,
) -> PresetRevision | None:
    """Saves a new revision; None when nothing changed. The name stays; the description may change.
    The audit row says `action`, with `detail` beside the revision number. A new webhook must reach
    an address `destinations` allows (by default, public ones)."""
    data.name = preset.name
    data.validate()
    current = latest(preset)
    if data.webhook_url != preset.webhook_url:
        _check_webhook(data.webhook_url, destinations)
    preset.description = data.description
    if data.webhook_url != preset.webhook_url:  # who hears of the attempts: audited, without the URL's secret path
        shown = redacted_url(data.webhook_url) if data.webhook_url else "none"
        audit.record(session, actor=actor, action="preset-webhook", target=preset.name, detail={"webhook": shown})
        preset.webhook_url = data.webhook_url
    if same_revision(current, data):
        await session.commit()
        return None
    revision = _revision(preset, current.number + 1, data, actor)
    session.add(revision)
    detail = {"revision": revision.number, **(detail or {})}
    audit.record(session, actor=actor, action=action, target=preset.name, detail=detail)
    await session.commit()
    return revision


async def clone_preset(session: AsyncSession, preset: Preset, new_name: str, *, actor: str) -> Preset:
    source = latest(preset)
    data = PresetInput(
        name=new_name, description=preset.description, webhook_url=preset.webhook_url, **revision_fields(source)
    )
    clone = await _create(session, data, actor=actor)
    audit.record(session, actor=actor, action="preset-clone", target=new_name, detail={"from": preset.name})
    await session.commit()
    return clone


async def archive_preset(session: AsyncSession, preset: Preset, *, actor: str, archived: bool = True) -> None:
    preset.archived_at = utcnow() if archived else None
    action = "preset-archive" if archived else "preset-restore"
    audit.record(session, actor=actor, action=action, target=preset.name)
    await session.commit()


def same_revision(revision: PresetRevision, data: PresetInput) -> bool:
    fields = revision_fields(revision)
    return all(fields[key] == getattr(data, key) for key in fields)


def _revision(preset: Preset, number: int, data: PresetInput, actor: str) -> PresetRevision:
    return PresetRevision(
        preset_id=preset.id,
        number=number,
        model_path=data.model_path,
        launcher=data.launcher,
        python=data.python,
        port=data.port,
        args=list(data.args),
        env=dict(data.env),
        created_by=actor,
    )
