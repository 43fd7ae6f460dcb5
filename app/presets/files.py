"""Presets as files: one TOML (or YAML) file per preset, named after it, which `launchdeck presets
export` writes and `presets apply` reads back, so that a team can keep its presets in git.

A file holds what the API's preset body holds but the name (that is the file's): the latest
revision's fields, the description and, where asked for, the webhook. A key left out takes the
dashboard's default, except `webhook_url`, which then stays as the dashboard has it: the URL's path
is a secret that a shared repository should not hold. Export writes the keys in one order and
leaves out empty ones (webhook_url aside), so the same presets always give the same bytes and git
diffs stay small. YAML holds the same keys with the same types (a port is a number, an argument a
string): read with yaml.safe_load, so a file can only ever give plain data. docs/presets-as-files.md
is the format's reference.
"""

from __future__ import annotations

import dataclasses
import difflib
import hashlib
import tomllib
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import tomli_w
import yaml

from app.config import redacted_url
from app.errors import InvalidInput
from app.presets.revisions import NAME, PresetInput

SUFFIX = ".toml"
YAML_SUFFIXES = (".yaml", ".yml")
FORMATS = {"toml": SUFFIX, "yaml": ".yaml"}  # what export writes
# Each key a file may hold, in the order export writes it, with the TOML type it must have.
KEYS: dict[str, type] = {
    "description": str,
    "model_path": str,
    "launcher": str,
    "python": str,
    "port": int,
    "webhook_url": str,
    "args": list,
    "env": dict,
}
# The keys that make up a revision: a change to any other key changes the preset, not its revision.
REVISION_KEYS = ("model_path", "launcher", "python", "port", "args", "env")
# What a left-out key means: the dashboard's default for a new preset (webhook_url aside).
DEFAULTS: dict[str, Any] = {
    key: value for key, value in dataclasses.asdict(PresetInput(name="", model_path="")).items() if key in KEYS
}
_TOML_TYPES = {bool: "true or false", str: "a string", int: "a whole number", float: "a number"}
_TOML_TYPES |= {list: "a list", dict: "a table"}


@dataclass(frozen=True)
class PresetFile:
    """One preset as its file says: every key, defaults filled in and values trimmed as the dashboard
    trims them; `webhook_url` only where the file gives it."""

    path: Path
    name: str
    fields: dict[str, Any]


def preset_paths(path: Path) -> list[Path]:
    """The preset files `path` names: itself, or the `*.toml`, `*.yaml` and `*.yml` files in it by
    name. Two files of one preset are refused: which one meant it cannot be told."""
    if path.is_file():
        return [path]
    if not path.is_dir():
        raise InvalidInput(f"{path}: no such file or directory")
    found = sorted(child for child in path.iterdir() if child.is_file() and child.suffix in (SUFFIX, *YAML_SUFFIXES))
    if not found:
        raise InvalidInput(f"{path}: holds no preset files (*{SUFFIX}, *.yaml, *.yml)")
    by_name: dict[str, list[str]] = {}
    for child in found:
        by_name.setdefault(child.stem, []).append(child.name)
    if twice := [names for names in by_name.values() if len(names) > 1]:
        raise InvalidInput(f"{path}: one preset, two files: {'; '.join(' and '.join(names) for names in twice)}")
    return found


def read_preset_file(path: Path) -> PresetFile:
    """The preset in `path`; InvalidInput naming the file and the key at fault."""
    name = path.stem
    if path.suffix not in (SUFFIX, *YAML_SUFFIXES) or not NAME.fullmatch(name):
        raise InvalidInput(
            f"{path}: a preset file is named after its preset, NAME{SUFFIX} or NAME.yaml, where NAME is 1-128 "
            "letters, digits, '.', '_' or '-', starting with a letter or digit"
        )
    try:
        text = path.read_text(encoding="utf-8")
        table = tomllib.loads(text) if path.suffix == SUFFIX else yaml.safe_load(text)
    except OSError as exc:
        raise InvalidInput(f"{path}: cannot be read: {exc.strerror or exc}") from None
    except UnicodeDecodeError:
        raise InvalidInput(f"{path}: is not UTF-8 text") from None
    except tomllib.TOMLDecodeError as exc:
        raise InvalidInput(f"{path}: is not TOML: {exc}") from None
    except yaml.YAMLError as exc:
        raise InvalidInput(f"{path}: is not YAML: {' '.join(str(exc).split())}") from None
    if not isinstance(table, dict):
        raise InvalidInput(f"{path}: must hold keys and values (model_path: ...), not {_kind(table)}")
    try:
        return PresetFile(path, name, _checked(table, name))
    except InvalidInput as exc:
        raise InvalidInput(f"{path}: {exc}") from None


def _checked(table: dict[str, Any], name: str) -> dict[str, Any]:
    if "name" in table:
        raise InvalidInput("name: is the file's name, not a key")
    if unknown := sorted(set(table) - set(KEYS)):
        raise InvalidInput(f"{', '.join(unknown)}: unknown key(s); a preset file holds {', '.join(KEYS)}")
    if "model_path" not in table:
        raise InvalidInput("model_path: is required")
    for key, value in table.items():
        if type(value) is not KEYS[key]:  # `type`, not isinstance: true is not a port
            raise InvalidInput(f"{key}: must be {_TOML_TYPES[KEYS[key]]}, not {_kind(value)}")
    for position, arg in enumerate(table.get("args", []), 1):
        if not isinstance(arg, str):
            raise InvalidInput(f"args: argument {position} must be a string, not {_kind(arg)} (quote it)")
    for variable, value in table.get("env", {}).items():
        if not isinstance(value, str):
            raise InvalidInput(f"env.{variable}: must be a string, not {_kind(value)} (quote it)")
    fields = DEFAULTS | table
    # The dashboard's own checks, so that one bad file stops the whole apply before anything changes.
    data = PresetInput(name=name, **(fields | {"webhook_url": fields.get("webhook_url", "")}))
    data.validate()
    checked = {key: getattr(data, key) for key in KEYS}
    if "webhook_url" not in table:
        del checked["webhook_url"]
    return checked


def _kind(value: object) -> str:
    if value is None:
        return "nothing (an empty value)"
    return _TOML_TYPES.get(type(value), "a date or time")


def fields_of(preset: Mapping[str, Any]) -> dict[str, Any]:
    """A preset as the API answers it (PresetPublic), in a file's keys."""
    revision = preset["revision"]
    fields = {key: revision[key] for key in REVISION_KEYS}
    return {"description": preset["description"], "webhook_url": preset["webhook_url"], **fields}


def render_preset(fields: Mapping[str, Any], suffix: str = SUFFIX) -> str:
    """The file for `fields`, TOML or (by `suffix`) YAML: keys in KEYS' order, env sorted by name,
    empty ones left out but for a webhook_url that `fields` holds: `webhook_url = ""` says "no
    webhook", where leaving it out says "the dashboard's"."""
    table: dict[str, Any] = {}
    for key in KEYS:
        value = fields.get(key)
        if value is None or (value in ("", [], {}) and key != "webhook_url"):
            continue
        table[key] = dict(sorted(value.items())) if key == "env" else value
    if suffix in YAML_SUFFIXES:
        return str(yaml.safe_dump(table, sort_keys=False, allow_unicode=True, default_flow_style=False, width=1 << 16))
    return tomli_w.dumps(table)


def changed_keys(current: Mapping[str, Any], wanted: PresetFile) -> list[str]:
    """The keys whose value the file changes, in KEYS' order; those it leaves out are not compared."""
    return [key for key, value in wanted.fields.items() if current.get(key) != value]


def diff_preset(current: Mapping[str, Any] | None, wanted: PresetFile, *, shown_as: str) -> str:
    """A unified diff from the dashboard's preset (None: there is none) to the file's, each rendered as
    export would, with webhooks shown without their secret path."""
    suffix = wanted.path.suffix
    before = render_preset(_shown(current, wanted), suffix).splitlines(keepends=True) if current is not None else []
    after = render_preset(_shown(wanted.fields, wanted), suffix).splitlines(keepends=True)
    source = shown_as if current is not None else "/dev/null"
    return "".join(difflib.unified_diff(before, after, fromfile=source, tofile=str(wanted.path)))


def _shown(fields: Mapping[str, Any], wanted: PresetFile) -> dict[str, Any]:
    """`fields` as far as `wanted` speaks of them; a webhook as its scheme and host and a short hash,
    which tells two URLs apart without printing either one's secret into a CI log."""
    shown = {key: value for key, value in fields.items() if key in wanted.fields}
    if url := shown.get("webhook_url"):
        shown["webhook_url"] = f"{redacted_url(url)} sha256:{hashlib.sha256(url.encode()).hexdigest()[:12]}"
    return shown
