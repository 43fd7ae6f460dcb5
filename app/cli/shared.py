"""What the command groups share: how a command that needs the dashboard's settings, or a client
of the running dashboard, is run, so that each group's commands load them, log and fail in the
same way; and how a listing is printed.

Only the standard library is imported here at first: building the parser imports this module,
and `launchdeck --help` and `launchdeck diagnose` should start at once."""

from __future__ import annotations

import argparse
import logging
import sys
from collections.abc import Callable, Coroutine, Iterable, Sequence
from typing import TYPE_CHECKING, Any, TypeAlias

from app.errors import InvalidInput, LaunchdeckError

if TYPE_CHECKING:
    from app.cli.remote import ApiClient
    from app.config import Settings

    Subcommands: TypeAlias = argparse._SubParsersAction[argparse.ArgumentParser]
    # What each subcommand's parser names with set_defaults: `run` runs the command and returns
    # its exit status; `check` says what is wrong with its arguments together, or None.
    Command: TypeAlias = Callable[[argparse.Namespace], int]
    Check: TypeAlias = Callable[[argparse.Namespace], str | None]
    SettingsCommand: TypeAlias = Callable[[Settings, argparse.Namespace], int]
    AsyncSettingsCommand: TypeAlias = Callable[[Settings, argparse.Namespace], Coroutine[Any, Any, int]]
    ClientCommand: TypeAlias = Callable[[ApiClient, argparse.Namespace], int]

URL_HELP = "the dashboard's URL (default: LAUNCHDECK_URL, then client.toml's url, then LAUNCHDECK_BIND/PORT)"
JSON_HELP = "print the answer as JSON"


def with_settings(command: SettingsCommand) -> Command:
    """`command` as a subcommand's `run`: given the settings, as `run_with_settings` loads them."""

    def run(args: argparse.Namespace) -> int:
        return run_with_settings(args, command)

    return run


def in_event_loop(command: AsyncSettingsCommand) -> SettingsCommand:
    """An async command, run in an event loop of its own."""

    def run(settings: Settings, args: argparse.Namespace) -> int:
        import asyncio

        return asyncio.run(command(settings, args))

    return run


def with_client(command: ClientCommand) -> Command:
    """`command` as a subcommand's `run`, given a client of the dashboard that `args.url` or the
    client's configuration names (app.cli.remote). Exit status 2, with its sentence, when the
    dashboard or a token cannot be found; 1 for an error the dashboard answers, or no answer."""

    def run(args: argparse.Namespace) -> int:
        from app.cli.remote import ApiClient

        try:
            client = ApiClient.configured(args.url)
        except InvalidInput as exc:
            print(f"launchdeck: {exc}", file=sys.stderr)
            return 2
        try:
            return command(client, args)
        except LaunchdeckError as exc:
            print(f"launchdeck: {exc}", file=sys.stderr)
            return 1
        finally:
            client.close()

    return run


def print_json(value: object) -> None:
    import json

    print(json.dumps(value, indent=2))


def table(header: Sequence[str], rows: Iterable[Sequence[object]]) -> list[str]:
    """A listing's lines: each column as wide as its widest cell, two spaces apart, the last one
    ragged; None prints as "-"."""
    cells = [list(header), *([("-" if cell is None else str(cell)) for cell in row] for row in rows)]
    widths = [max(len(row[column]) for row in cells) for column in range(len(header))]
    return [
        "  ".join([*(cell.ljust(width) for cell, width in zip(row[:-1], widths, strict=False)), row[-1]]).rstrip()
        for row in cells
    ]


def run_with_settings(args: argparse.Namespace, command: SettingsCommand, *, serves: bool = False) -> int:
    """Sets up logging, loads the settings from LAUNCHDECK_* variables and runs `command` with them.
    Exit status 2 for a bad setting, or (`serves`: the command runs the dashboard) for settings that
    would expose it; 1, with its sentence, for a LaunchdeckError the command raises."""
    from pydantic import ValidationError

    # Before logging is set up: app.db imports alembic, which logs each of its plugins at INFO as
    # it is first imported, and no command should print those lines.
    from app import db  # noqa: F401
    from app.config import Settings

    _configure_logging()
    try:
        settings = Settings()
    except ValidationError as exc:
        problems = "; ".join(
            f"LAUNCHDECK_{'_'.join(map(str, e['loc'])).upper()}: {e['msg'].removeprefix('Value error, ')}"
            for e in exc.errors()
        )
        print(f"launchdeck: bad setting: {problems}", file=sys.stderr)
        return 2
    if serves and (problem := settings.exposure_problem()):
        print(f"launchdeck: {problem}", file=sys.stderr)
        return 2
    try:
        return command(settings, args)
    except LaunchdeckError as exc:
        print(f"launchdeck: {exc}", file=sys.stderr)
        return 1


def _configure_logging() -> None:
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    logging.getLogger("asyncssh").setLevel(logging.WARNING)
    logging.getLogger("httpx").setLevel(logging.WARNING)
    logging.getLogger("apprise").setLevel(logging.WARNING)  # at DEBUG it logs each URL whole, secrets included
    logging.getLogger("uvicorn.error").addFilter(_without_cut_short_requests)


def _without_cut_short_requests(record: logging.LogRecord) -> bool:
    """Drops the traceback uvicorn logs for each request it cancelled at server.DRAIN_SECONDS: its
    own line before them counts them, and the access log shows each one's 500."""
    import asyncio

    return not (record.exc_info and isinstance(record.exc_info[1], asyncio.CancelledError))
