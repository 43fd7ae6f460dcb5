"""SGLang's command-line flags per release, every one of them, as the release's own parser declares
them: names, aliases, types, choices, defaults and the retired flags' warnings or refusals.

The tables (releases/<version>.json) are derived from the real releases by
tests/oracle/derive_release_tables.py and turned back into a parser here, with SGLang's own
argument types and deprecation actions. A flag the simulator gives no effect is still accepted
and reported with its value, as a flag the real server reads and the demo cannot show.
"""

from __future__ import annotations

import argparse
import copy
import functools
import json
import logging
import re
from decimal import Decimal
from pathlib import Path
from typing import Any

logger = logging.getLogger("sglang.srt.arg_groups.argparse_actions")

RELEASES = Path(__file__).with_name("releases")
CUDA_GRAPH_PHASE_KEYS = {
    "decode": ("backend", "max_bs", "bs"),
    "prefill": (
        "backend", "max_bs", "bs", "max_context_size", "full_prefill_max_req", "full_prefill_prefix_chunk_tokens",
        "max_seq_len",
    ),
}  # fmt: skip


@functools.cache
def release_table(version: str) -> dict[str, Any]:
    table: dict[str, Any] = json.loads((RELEASES / f"{version}.json").read_text())
    return table


def field_defaults(version: str) -> dict[str, Any]:
    """Every field of the release's record with its value before resolution; a copy, as lists and
    dicts among them are changed in place by resolution."""
    return copy.deepcopy(release_table(version)["fields"])


def filled_by_resolution(version: str) -> dict[str, Any]:
    """What resolution sets fields left at their default to, on any GPU and model (see the
    derivation script)."""
    return copy.deepcopy(release_table(version)["filled"])


def warn_deprecated(message: str) -> None:
    logger.warning(f"\033[1;33m{message}\033[0m")


# SGLang's argument types, by the name the table gives them.


def nullable_str(value: str) -> str | None:
    return None if not value or value == "None" else value


def human_readable_int(value: str) -> int:
    """An integer, or one with an SI (k, M, G, T) or IEC (Ki, Mi, Gi, Ti) suffix."""
    value = value.strip()
    found = re.fullmatch(r"(\d+(?:\.\d+)?)(Ki|Mi|Gi|Ti|k|M|G|T)", value)
    if found is None:
        return int(value)
    number, suffix = found.groups()
    if suffix.endswith("i"):
        if "." in number:
            raise argparse.ArgumentTypeError(
                f"Decimals are not allowed with IEC suffixes like '{suffix}'. "
                f"Use an integer IEC value such as '{int(Decimal(number))}{suffix}', "
                f"or an SI value such as '{number}{suffix[0]}'."
            )
        return int(number) * 2 ** (10 * ("KMGT".index(suffix[0]) + 1))
    return int(Decimal(number) * 10 ** (3 * ("kMGT".index(suffix) + 1)))


def json_list_type(value: str) -> Any:
    try:
        return json.loads(value)
    except json.JSONDecodeError:
        raise argparse.ArgumentTypeError(f"Invalid JSON list: {value}. Please provide a valid JSON list.") from None


def parse_cuda_graph_backend_arg(value: str) -> str:
    if value == "tc_piecewise":
        raise argparse.ArgumentTypeError("tc_piecewise was removed; select breakable, full, or disabled")
    return value


def parse_cuda_graph_config_arg(value: str) -> dict[str, dict[str, Any]]:
    """A JSON object of phase -> settings, each key one the phase takes."""
    try:
        parsed = json.loads(value)
    except json.JSONDecodeError as exc:
        raise argparse.ArgumentTypeError(f"--cuda-graph-config must be JSON: {exc}") from None
    if not isinstance(parsed, dict):
        raise argparse.ArgumentTypeError(f"--cuda-graph-config must be a JSON object, got {type(parsed).__name__}")
    settings: dict[str, dict[str, Any]] = {}
    for phase, phase_settings in parsed.items():
        if phase not in CUDA_GRAPH_PHASE_KEYS:
            raise argparse.ArgumentTypeError(
                f"--cuda-graph-config: unknown phase '{phase}', expected one of {tuple(CUDA_GRAPH_PHASE_KEYS)}"
            )
        if not isinstance(phase_settings, dict):
            raise argparse.ArgumentTypeError(
                f"--cuda-graph-config['{phase}'] must be a JSON object, got {type(phase_settings).__name__}"
            )
        if "backend" in phase_settings:
            parse_cuda_graph_backend_arg(phase_settings["backend"])
        for key in phase_settings:
            if key not in CUDA_GRAPH_PHASE_KEYS[phase]:
                raise argparse.ArgumentTypeError(
                    f"--cuda-graph-config['{phase}']: unknown key '{key}', expected one of {CUDA_GRAPH_PHASE_KEYS[phase]}"
                )
        settings[phase] = dict(phase_settings)
    return settings


TYPES = {
    "str": str,
    "int": int,
    "float": float,
    "loads": json.loads,
    "nullable_str": nullable_str,
    "human_readable_int": human_readable_int,
    "json_list_type": json_list_type,
    "parse_cuda_graph_backend_arg": parse_cuda_graph_backend_arg,
    "parse_cuda_graph_config_arg": parse_cuda_graph_config_arg,
}


# SGLang's own actions.


class LoRAPathAction(argparse.Action):
    """Adapter paths, each a path or a JSON object naming `lora_name` and `lora_path`."""

    def __call__(self, parser: Any, namespace: Any, values: Any, option_string: str | None = None) -> None:
        paths: list[Any] = []
        for path in values or []:
            path = path.strip()
            if path.startswith("{") and path.endswith("}"):
                adapter = json.loads(path)
                assert "lora_path" in adapter and "lora_name" in adapter, (
                    f"{path!r} looks like a JSON str, but it does not contain 'lora_name' and 'lora_path' keys."
                )
                paths.append(adapter)
            else:
                paths.append(path)
        setattr(namespace, self.dest, paths)


class DeprecatedAction(argparse.Action):
    """A retired flag: refused with SGLang's sentence where the release gives one, else warned about."""

    def __init__(self, option_strings: list[str], dest: str, error_message: str | None = None, **kwargs: Any):
        self.error_message = error_message
        super().__init__(option_strings, dest, **{"nargs": 0, **kwargs})

    def __call__(self, parser: Any, namespace: Any, values: Any, option_string: str | None = None) -> None:
        if self.error_message is not None:
            parser.error(self.error_message)
        warn_deprecated(
            f"The command line argument '{option_string}' is deprecated and will be removed in future versions."
        )


class DeprecatedStoreTrueAction(argparse.Action):
    """A deprecated switch that still stores True, and warns (in yellow) while parsing."""

    def __init__(self, option_strings: list[str], dest: str, new_flag: str | None = None, **kwargs: Any):
        self.new_flag = new_flag
        super().__init__(option_strings, dest, **{**kwargs, "nargs": 0, "const": True})

    def __call__(self, parser: Any, namespace: Any, values: Any, option_string: str | None = None) -> None:
        replacement = f" Use '{self.new_flag}' instead." if self.new_flag else ""
        warn_deprecated(f"'{option_string}' is deprecated and will be removed in a future release.{replacement}")
        setattr(namespace, self.dest, True)


class DeprecatedStoreConstAction(DeprecatedStoreTrueAction):
    """A deprecated flag replaced by one value of another: warns, and stores that value."""

    def __init__(self, option_strings: list[str], dest: str, const: Any = True, nargs: Any = 0, **kwargs: Any):
        super().__init__(option_strings, dest, **kwargs)
        self.const_value, self.nargs = const, nargs

    def __call__(self, parser: Any, namespace: Any, values: Any, option_string: str | None = None) -> None:
        super().__call__(parser, namespace, values, option_string)
        setattr(namespace, self.dest, self.const_value)


ACTIONS: dict[str, Any] = {
    "StoreAction": "store",
    "StoreTrueAction": "store_true",
    "StoreFalseAction": "store_false",
    "StoreConstAction": "store_const",
    "BooleanOptionalAction": argparse.BooleanOptionalAction,
    "LoRAPathAction": LoRAPathAction,
    "DeprecatedAction": DeprecatedAction,
    "DeprecatedStoreTrueAction": DeprecatedStoreTrueAction,
    "DeprecatedStoreConstAction": DeprecatedStoreConstAction,
}


def build_parser(version: str) -> argparse.ArgumentParser:
    """The parser `sglang serve` builds in this release."""
    parser = argparse.ArgumentParser(prog="sglang serve")
    for action in release_table(version)["actions"]:
        kind = action["kind"]
        options: list[str] = action["options"]
        settings: dict[str, Any] = {"dest": action["dest"], "action": ACTIONS[kind], "default": action["default"]}
        if kind == "BooleanOptionalAction":  # argparse adds each `--no-` form itself
            options = [option for option in options if not option.startswith("--no-")]
        if action["required"]:
            settings["required"] = True
        if kind in ("StoreAction", "LoRAPathAction", "DeprecatedStoreConstAction"):
            settings |= {"nargs": action["nargs"], "choices": action["choices"]}
            if action["type"] is not None:
                settings["type"] = TYPES[action["type"]]
        if kind in ("StoreAction", "StoreConstAction", "DeprecatedStoreConstAction") and action["const"] is not None:
            settings["const"] = action["const"]
        if kind.startswith("Deprecated"):
            if action["new_flag"] is not None:
                settings["new_flag"] = action["new_flag"]
            if kind == "DeprecatedAction":
                settings["error_message"] = action["error_message"]
        parser.add_argument(*options, **settings)
    return parser
