"""Real SGLang's own argument parser, and nothing else of it: run by an oracle interpreter with one
SGLang release on PYTHONPATH (`python sglang_parser.py flags` or `... parse`), never imported by
the test process. Standard library plus what that release imports.

`flags` prints every option the release's parser knows, with its action, choices, help and what
the release's deprecation actions say about it. `table` prints what the simulator's argument
layer is built from: each argparse action whole (its options, destination, kind, type, choices,
default and constant) and every field of the record `ServerArgs.from_cli_args` builds, with its
value before resolution. `parse` reads a JSON list of argument lists on
stdin and prints, for each, the exit status argparse gave (0 when it parsed) and what it wrote
to stderr or the log (warnings of deprecated flags, argparse's own error).

Releases between the two the oracle venv was built for import modules it lacks (xgrammar) or
register model configs its transformers already has: a missing module is stood in for by an
empty one, as only the parser is wanted, and such registrations are allowed to repeat.
"""

from __future__ import annotations

import argparse
import contextlib
import importlib.abc
import importlib.machinery
import io
import json
import logging
import sys
import types
from typing import Any

MISSING: set[str] = set()


class _Absent(types.ModuleType):
    """An empty stand-in for a module the environment lacks: any name in it is an inert class."""

    __path__: list[str] = []

    def __getattr__(self, name: str) -> Any:
        if name.startswith("__"):
            raise AttributeError(name)

        def schema(cls: type, source: Any, handler: Any) -> Any:
            from pydantic_core import core_schema

            return core_schema.any_schema()

        return type(
            name,
            (),
            {
                "__init__": lambda self, *args, **kwargs: None,
                "__call__": lambda self, *args, **kwargs: None,
                "__getattr__": lambda self, attribute: None,
                "__get_pydantic_core_schema__": classmethod(schema),
            },
        )


class _StandIns(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    def find_spec(self, name: str, path: Any, target: Any = None) -> importlib.machinery.ModuleSpec | None:
        if name.split(".")[0] not in MISSING:
            return None
        return importlib.machinery.ModuleSpec(name, self, is_package=True)

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> types.ModuleType:
        return _Absent(spec.name)

    def exec_module(self, module: types.ModuleType) -> None:
        pass


def import_server_args() -> Any:
    """sglang.srt.server_args.ServerArgs, with torchvision's fake-op registrations skipped (its
    compiled ops cannot load beside the CPU torch) and missing modules stood in for."""
    import torch.library
    import transformers

    register = transformers.AutoConfig.register
    transformers.AutoConfig.register = staticmethod(  # type: ignore[method-assign]
        lambda model_type, config, exist_ok=False: register(model_type, config, exist_ok=True)
    )
    register_fake = torch.library.register_fake

    def skip_torchvision(op: Any, *args: Any, **kwargs: Any) -> Any:
        if isinstance(op, str) and op.startswith("torchvision::"):
            return lambda function=None: function
        return register_fake(op, *args, **kwargs)

    sys.meta_path.insert(0, _StandIns())
    torch.library.register_fake = skip_torchvision
    try:
        while True:
            try:
                from sglang.srt.server_args import ServerArgs

                return ServerArgs
            except ModuleNotFoundError as exc:
                top = (exc.name or "").split(".")[0]
                if not top or top in MISSING or top == "sglang":
                    raise
                MISSING.add(top)
                for loaded in [name for name in sys.modules if name.split(".")[0] == "sglang"]:
                    del sys.modules[loaded]
    finally:
        torch.library.register_fake = register_fake


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="sglang")
    import_server_args().add_cli_args(parser)
    return parser


def describe_flags(parser: argparse.ArgumentParser) -> dict[str, dict[str, Any]]:
    flags = {}
    for action in parser._actions:
        kind = getattr(action.type, "__name__", None) if action.type else None
        for option in action.option_strings:
            flags[option] = {
                "dest": action.dest,
                "action": type(action).__name__,
                "nargs": action.nargs,
                "type": kind,
                "choices": [str(choice) for choice in action.choices] if action.choices else None,
                "help": action.help if action.help != argparse.SUPPRESS else None,
                "new_flag": getattr(action, "new_flag", None),
                "error_message": getattr(action, "error_message", None),
            }
    return flags


def describe_actions(parser: argparse.ArgumentParser) -> list[dict[str, Any]]:
    return [
        {
            "options": list(action.option_strings),
            "dest": action.dest,
            "kind": type(action).__name__.strip("_"),
            "nargs": action.nargs,
            "type": getattr(action.type, "__name__", None) if action.type else None,
            # A set of choices is listed sorted: its order changes from one interpreter to the next.
            "choices": (sorted(action.choices) if isinstance(action.choices, set) else list(action.choices))
            if action.choices
            else None,
            "default": action.default,
            "const": getattr(action, "const_value", action.const),
            "required": action.required,
            "help": action.help if action.help != argparse.SUPPRESS else None,
            "new_flag": getattr(action, "new_flag", None),
            "error_message": getattr(action, "error_message", None),
        }
        for action in parser._actions
        if action.option_strings and not isinstance(action, argparse._HelpAction)
    ]


def record_defaults(parser: argparse.ArgumentParser) -> dict[str, Any]:
    """Every field of the record built from a command line that names only a model, before any
    resolution: the parser's defaults and those of the fields no flag sets."""
    server_args = import_server_args()
    namespace = parser.parse_args(["--model-path", "MODEL"])
    if hasattr(server_args, "resolve_once"):
        record = server_args.from_cli_args(namespace)
        return {name: getattr(record, name) for name in server_args.__struct_fields__}
    # 0.5.10 resolves while its dataclass is built, so the fields are read off the namespace,
    # named as its from_cli_args names them.
    import dataclasses

    renamed = {"tp_size": "tensor_parallel_size", "pp_size": "pipeline_parallel_size", "dp_size": "data_parallel_size",
               "ep_size": "expert_parallel_size", "attn_cp_size": "attention_context_parallel_size",
               "moe_dp_size": "moe_data_parallel_size"}  # fmt: skip
    return {
        field.name: getattr(namespace, renamed.get(field.name, field.name)) for field in dataclasses.fields(server_args)
    }


def parse_each(parser: argparse.ArgumentParser, argvs: list[list[str]]) -> list[dict[str, Any]]:
    said = io.StringIO()
    handler = logging.StreamHandler(said)
    logging.getLogger().addHandler(handler)
    results = []
    for argv in argvs:
        said.seek(0)
        said.truncate()
        status = 0
        with contextlib.redirect_stderr(said):
            try:
                parser.parse_args(argv)
            except SystemExit as exc:
                status = exc.code if isinstance(exc.code, int) else 1
        # argparse's usage block (hundreds of lines) says nothing the error line after it does not.
        lines = [line for line in said.getvalue().splitlines() if not line.startswith(("usage:", " "))]
        results.append({"argv": argv, "exit": status, "said": "\n".join(lines)})
    return results


def main() -> None:
    parser = build_parser()
    if sys.argv[1:] == ["flags"]:
        json.dump(describe_flags(parser), sys.stdout)
    elif sys.argv[1:] == ["table"]:
        table = {"actions": describe_actions(parser), "fields": record_defaults(parser)}
        json.dump(table, sys.stdout, default=str)
    elif sys.argv[1:] == ["parse"]:
        json.dump(parse_each(parser, json.load(sys.stdin)), sys.stdout)
    else:
        sys.exit("usage: sglang_parser.py flags | table | parse  (JSON list of argument lists on stdin)")


if __name__ == "__main__":
    main()
