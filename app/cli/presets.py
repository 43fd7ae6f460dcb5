"""`launchdeck presets`: the dashboard's presets, listed (`presets`, `presets list`) or one shown
whole (`presets show NAME`) with the command its latest revision runs; and kept as files
(`presets export DIR`, `presets apply DIR|FILE`), one TOML or YAML file per preset, in app.presets.files'
format, so that a team keeps its presets in git and applies them from CI."""

from __future__ import annotations

import argparse
import os
import shlex
import sys
import tempfile
from pathlib import Path
from typing import TYPE_CHECKING, Any
from urllib.parse import quote

from app.cli.shared import JSON_HELP, URL_HELP, print_json, table, with_client
from app.errors import InvalidInput, LaunchdeckError

if TYPE_CHECKING:
    from app.cli.remote import ApiClient
    from app.cli.shared import Subcommands
    from app.presets.files import PresetFile


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
    export_parser = actions.add_parser(
        "export", help="write each preset's latest revision to DIR, one file each (docs/presets-as-files.md)"
    )
    export_parser.add_argument("directory", metavar="DIR", type=Path)
    export_parser.add_argument(
        "--format", choices=("toml", "yaml"), default="toml", help="the files' format (default: toml)"
    )
    export_parser.add_argument(
        "--webhooks",
        action="store_true",
        help="write the webhook URLs too: secrets, keep them out of shared repositories",
    )
    export_parser.add_argument("--url", default=argparse.SUPPRESS, help=URL_HELP)
    export_parser.set_defaults(run=_export_presets)
    apply_parser = actions.add_parser(
        "apply", help="create or revise the presets that files describe, where they differ from the dashboard's"
    )
    apply_parser.add_argument("path", metavar="DIR|FILE", type=Path)
    apply_parser.add_argument(
        "--dry-run", action="store_true", help="print what would change, as diffs; change nothing"
    )
    apply_parser.add_argument("--prune", action="store_true", help="archive the presets that DIR has no file for")
    apply_parser.add_argument("--url", default=argparse.SUPPRESS, help=URL_HELP)
    apply_parser.set_defaults(run=_apply_presets)


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


@with_client
def _export_presets(api: ApiClient, args: argparse.Namespace) -> int:
    """Every active preset to DIR/NAME.toml (or .yaml), each written whole or not at all; files of
    presets the dashboard no longer has are named, and left alone."""
    from app.presets import files

    presets = api.call("GET", "/api/presets")
    if args.webhooks and any(preset["webhook_url"].endswith("/…") for preset in presets):
        raise LaunchdeckError("this token sees only the webhooks' hosts: export --webhooks with an operator's token")
    directory: Path = args.directory
    suffix = files.FORMATS[args.format]
    try:
        directory.mkdir(parents=True, exist_ok=True)
        for preset in presets:
            fields = files.fields_of(preset)
            if not args.webhooks:
                del fields["webhook_url"]
            path = directory / f"{preset['name']}{suffix}"
            _write_atomically(path, files.render_preset(fields, suffix))
            print(f"{path}: revision {preset['revision']['number']}")
    except OSError as exc:
        raise LaunchdeckError(f"cannot write {exc.filename or directory}: {exc.strerror or exc}") from None
    exported = {f"{preset['name']}{suffix}" for preset in presets}
    for stale in sorted(directory.glob(f"*{suffix}")):
        if stale.name not in exported:
            print(f"{stale}: no such preset on the dashboard (the file is left as it is)")
    return 0


def _write_atomically(path: Path, text: str) -> None:
    """Writes beside `path` and renames, so a reader (git, an apply) never sees half a file."""
    handle, temporary = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(handle, "w", encoding="utf-8") as file:
            file.write(text)
        os.chmod(temporary, 0o644)
        os.replace(temporary, path)
    except BaseException:
        Path(temporary).unlink(missing_ok=True)
        raise


@with_client
def _apply_presets(api: ApiClient, args: argparse.Namespace) -> int:
    """Each file's preset created, restored or revised where it differs from the dashboard's, in
    the files' order; every file is read and checked before the dashboard is asked anything."""
    from app.presets import files

    try:
        paths = files.preset_paths(args.path)
    except InvalidInput as exc:
        print(f"launchdeck: {exc}", file=sys.stderr)
        return 2
    if args.prune and not args.path.is_dir():
        print("launchdeck: --prune needs a directory: it archives the presets that have no file in it", file=sys.stderr)
        return 2
    wanted: list[PresetFile] = []
    problems: list[str] = []
    for path in paths:
        try:
            wanted.append(files.read_preset_file(path))
        except InvalidInput as exc:
            problems.append(str(exc))
    for problem in problems:
        print(f"launchdeck: {problem}", file=sys.stderr)
    if problems:
        return 2
    active = {preset["name"]: preset for preset in api.call("GET", "/api/presets")}
    archived = {preset["name"]: preset for preset in api.call("GET", "/api/presets", params={"archived": True})}
    for preset_file in wanted:
        current = active.get(preset_file.name) or archived.get(preset_file.name)
        try:
            outcome = _apply_file(api, preset_file, current, dry_run=args.dry_run)
        except LaunchdeckError as exc:
            raise LaunchdeckError(f"preset {preset_file.name!r}: {exc}") from None
        print(f"{preset_file.name}: {outcome}")
    if args.prune:
        for name in sorted(set(active) - {preset_file.name for preset_file in wanted}):
            if not args.dry_run:
                try:
                    api.call("POST", f"/api/presets/{quote(name, safe='')}/archive")
                except LaunchdeckError as exc:
                    raise LaunchdeckError(f"preset {name!r}: {exc}") from None
            print(f"{name}: {'would be archived' if args.dry_run else 'archived'} (no file)")
    return 0


def _apply_file(api: ApiClient, wanted: PresetFile, current: dict[str, Any] | None, *, dry_run: bool) -> str:
    """What applying one file did (or, `dry_run`, would do, with the diff below it)."""
    from app.presets import files

    if current is None:
        if dry_run:
            return "would be created\n" + files.diff_preset(None, wanted, shown_as="").rstrip("\n")
        api.call("POST", "/api/presets", json={"name": wanted.name, **wanted.fields})
        return "created"
    path = f"/api/presets/{quote(wanted.name, safe='')}"
    fields = files.fields_of(current)
    number = current["revision"]["number"]
    changed = files.changed_keys(fields, wanted)
    revised = any(key in files.REVISION_KEYS for key in changed)
    done = []
    if current["archived"]:
        done.append("restored")
    if revised:
        done.append(f"revised (r{number + 1})")
    elif changed:
        done.append(f"updated ({', '.join(changed)})")
    if dry_run:
        if not done:
            return "unchanged"
        shown_as = f"dashboard: {wanted.name} (r{number}{', archived' if current['archived'] else ''})"
        diff = files.diff_preset(fields, wanted, shown_as=shown_as)
        return f"would be {', '.join(done)}\n{diff}".rstrip("\n")
    if current["archived"]:
        api.call("POST", f"{path}/archive", params={"restore": True})
    if changed:
        answer = api.call("PUT", path, json=fields | wanted.fields)
        if revised:  # the number the dashboard gave, should another edit have come in between
            done[-1] = f"revised (r{answer['revision']['number']})"
    return ", ".join(done) or "unchanged"
