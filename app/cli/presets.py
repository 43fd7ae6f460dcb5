"""`launchdeck presets`: the dashboard's presets, listed (`presets`, `presets list`) or one shown
whole (`presets show NAME`) with the command its latest revision runs."""

from __future__ import annotations

import argparse
import shlex
from typing import TYPE_CHECKING, Any
from urllib.parse import quote

from app.cli.shared import JSON_HELP, URL_HELP, print_json, table, with_client

if TYPE_CHECKING:
    from app.cli.remote import ApiClient
    from app.cli.shared import Subcommands


def add_parsers(commands: Subcommands) -> None:
    presets_parser = commands.add_parser("presets", help="list the presets, or show one")
    _add_list_options(presets_parser)
    presets_parser.set_defaults(run=_list_presets)
    actions = presets_parser.add_subparsers(dest="presets_command", metavar="ACTION")
    list_parser = actions.add_parser("list", help="list the presets (the default)")
    _add_list_options(list_parser, default=argparse.SUPPRESS)
    show_parser = actions.add_parser("show", help="one preset: its latest revision and the command it runs")
    show_parser.add_argument("name")
    show_parser.add_argument("--json", action="store_true", default=argparse.SUPPRESS, help=JSON_HELP)
    show_parser.add_argument("--url", default=argparse.SUPPRESS, help=URL_HELP)
    show_parser.set_defaults(run=_show_preset)


def _add_list_options(parser: argparse.ArgumentParser, **default: Any) -> None:
    """An action's options take `default=argparse.SUPPRESS`, so that one given before the action
    (`presets --json show NAME`) is not overwritten by the action's default."""
    parser.add_argument("--archived", action="store_true", help="the archived presets instead", **default)
    parser.add_argument("--json", action="store_true", help=JSON_HELP, **default)
    parser.add_argument("--url", help=URL_HELP, **default)


@with_client
def _list_presets(api: ApiClient, args: argparse.Namespace) -> int:
    presets = api.call("GET", "/api/presets", params={"archived": args.archived})
    if args.json:
        print_json(presets)
        return 0
    if not presets:
        print(f"no {'archived ' if args.archived else ''}presets")
        return 0
    rows = (
        (
            p["name"], p["revision"]["number"], p["revision"]["model_path"],
            f"{p['revision']['created_at'][:16].replace('T', ' ')} by {p['revision']['created_by']}",
            p["description"] or None,
        )
        for p in presets
    )  # fmt: skip
    for line in table(("PRESET", "REVISION", "MODEL", "CHANGED", "DESCRIPTION"), rows):
        print(line)
    return 0


@with_client
def _show_preset(api: ApiClient, args: argparse.Namespace) -> int:
    preset = api.call("GET", f"/api/presets/{quote(args.name, safe='')}")
    if args.json:
        print_json(preset)
        return 0
    revision = preset["revision"]
    fields = {
        "preset": preset["name"] + (" (archived)" if preset["archived"] else ""),
        "description": preset["description"],
        "revision": f"{revision['number']} of {preset['revisions']}, {revision['created_at'][:16].replace('T', ' ')} "
        f"by {revision['created_by']}",
        "model": revision["model_path"],
        "launcher": revision["launcher"],
        "python": revision["python"],
        "port": revision["port"],
        "args": shlex.join(revision["args"]),
        "env": " ".join(f"{name}={shlex.quote(value)}" for name, value in revision["env"].items()),
        "command": shlex.join(revision["command"]),
        "webhook": preset["webhook_url"],
    }
    for name, value in fields.items():
        print(f"{name + ':':13}{value if value not in ('', None) else '-'}")
    return 0
