"""`launchdeck db`: database maintenance, on the database the dashboard uses."""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING

from app.cli.shared import with_settings

if TYPE_CHECKING:
    from app.cli.shared import Subcommands
    from app.config import Settings


def add_parsers(commands: Subcommands) -> None:
    db_parser = commands.add_parser("db", help="database maintenance")
    db_commands = db_parser.add_subparsers(dest="db_command", required=True, metavar="ACTION")
    upgrade_parser = db_commands.add_parser("upgrade", help="migrate the database to the latest schema")
    upgrade_parser.set_defaults(run=_upgrade)


@with_settings
def _upgrade(settings: Settings, args: argparse.Namespace) -> int:
    from app import db

    db.upgrade(settings.resolved_database_url())
    print(f"launchdeck: database at {_redacted(settings.resolved_database_url())} is up to date")
    return 0


def _redacted(url: str) -> str:
    from sqlalchemy.engine import make_url

    return make_url(url).render_as_string(hide_password=True)
