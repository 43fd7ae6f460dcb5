"""The `launchdeck` command. Each command group's module adds its subcommands, and each subcommand
names the function that runs it (`set_defaults(run=...)`), so `main` only parses and runs."""

from __future__ import annotations

import argparse
import os
import signal
import sys
from typing import TYPE_CHECKING

from app.cli import accounts, adopt, attempts, database, diagnose, hosts, presets, server
from app.cli.accounts import cli_actor

if TYPE_CHECKING:
    from app.cli.shared import Check, Command

__all__ = ["cli_actor", "main"]


def main(argv: list[str] | None = None) -> int:
    """Runs the command `argv` names (default: the process's arguments); returns its exit status."""
    try:
        return _run(argv)
    except BrokenPipeError:
        # The reader went away (`launchdeck logs 12 | head`): stop quietly, as other tools do.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 128 + signal.SIGPIPE


def _run(argv: list[str] | None) -> int:
    parser = _parser()
    args = parser.parse_args(argv)
    check: Check = args.check
    if problem := check(args):
        parser.error(problem)  # said as argparse says a usage error: exit status 2
    run: Command = args.run
    return run(args)


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="launchdeck", description="Launch and debug SGLang servers on GPU hosts.")
    parser.add_argument("--version", action=_Version, help="print the installed launchdeck's version and exit")
    parser.set_defaults(check=_no_problem)
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    # In the order `--help` lists them.
    for group in (server, attempts, adopt, hosts, presets, diagnose, accounts, database):
        group.add_parsers(commands)
    return parser


def _no_problem(args: argparse.Namespace) -> None:
    return None


class _Version(argparse.Action):
    """`--version`: the installed distribution's version, looked up only when asked for."""

    def __init__(self, option_strings: list[str], dest: str, help: str | None = None):
        super().__init__(option_strings, dest, nargs=0, default=argparse.SUPPRESS, help=help)

    def __call__(self, parser: argparse.ArgumentParser, *_: object) -> None:
        from importlib.metadata import PackageNotFoundError, version

        try:
            installed = version("launchdeck")
        except PackageNotFoundError:
            installed = "unknown (not installed: run from a checkout)"
        print(f"launchdeck {installed}")
        parser.exit()
