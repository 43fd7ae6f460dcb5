"""`launchdeck users` and `launchdeck tokens`: people's accounts and API tokens, changed on the
database the dashboard uses (as `db upgrade` does), so they need no login and work while the
dashboard is down; a running dashboard sees a change on its next request."""

from __future__ import annotations

import argparse
import getpass
import os
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from datetime import datetime
from typing import TYPE_CHECKING, Any

from app.cli.shared import JSON_HELP, in_event_loop, print_json, with_settings
from app.errors import InvalidInput
from app.states import Role

if TYPE_CHECKING:
    from sqlalchemy.ext.asyncio import AsyncSession

    from app.cli.shared import Subcommands
    from app.config import Settings
    from app.db.models import ApiToken, User

ROLES = tuple(Role)


def cli_actor() -> str:
    """Who changes accounts and tokens from the command line, for the audit trail: the person
    logged in on the server (with a space: a name no account can have, so it never passes for one)."""
    try:
        who = getpass.getuser()
    except (OSError, KeyError):  # a uid with no name, as in some containers
        who = f"uid {os.getuid()}"
    return f"{who} on the command line"


def add_parsers(commands: Subcommands) -> None:
    _add_users_parsers(commands)
    _add_tokens_parsers(commands)


def _add_users_parsers(commands: Subcommands) -> None:
    users_parser = commands.add_parser("users", help="people who log in, and their roles (on the database directly)")
    users_commands = users_parser.add_subparsers(dest="users_command", required=True, metavar="ACTION")
    add_parser = users_commands.add_parser("add", help="add a user (prompts for the password)")
    add_parser.add_argument("name")
    add_parser.add_argument("--role", choices=ROLES, default=Role.VIEWER, help="what they may do (default viewer)")
    add_parser.set_defaults(run=with_settings(in_event_loop(_add_user)))
    passwd_parser = users_commands.add_parser("passwd", help="set a user's password; ends their logins")
    passwd_parser.add_argument("name")
    passwd_parser.set_defaults(run=with_settings(in_event_loop(_set_password)))
    for password_command in (add_parser, passwd_parser):
        password_command.add_argument(
            "--password-stdin", action="store_true", help="read the password from standard input, not a prompt"
        )
    list_parser = users_commands.add_parser("list", help="list users with their roles")
    list_parser.add_argument("--json", action="store_true", help=JSON_HELP)
    list_parser.set_defaults(run=with_settings(in_event_loop(_list_users)))
    disable_parser = users_commands.add_parser("disable", help="stop a user logging in; ends their logins")
    disable_parser.add_argument("name")
    disable_parser.add_argument("--enable", action="store_true", help="let a disabled user log in again")
    disable_parser.set_defaults(run=with_settings(in_event_loop(_disable_user)))
    role_parser = users_commands.add_parser("role", help="change a user's role")
    role_parser.add_argument("name")
    role_parser.add_argument("role", choices=ROLES)
    role_parser.set_defaults(run=with_settings(in_event_loop(_set_role)))
    hosts_parser = users_commands.add_parser("hosts", help="limit an operator to hosts with some labels, or lift it")
    hosts_parser.add_argument("name")
    limit = hosts_parser.add_mutually_exclusive_group(required=True)
    limit.add_argument("--labels", help="comma-separated host labels, e.g. rtxpro,b200 (any one of them will do)")
    limit.add_argument("--all", action="store_true", help="every host again")
    hosts_parser.set_defaults(run=with_settings(in_event_loop(_set_host_labels)))


def _add_tokens_parsers(commands: Subcommands) -> None:
    tokens_parser = commands.add_parser("tokens", help="people's API tokens (on the database directly)")
    tokens_commands = tokens_parser.add_subparsers(dest="tokens_command", required=True, metavar="ACTION")
    create_parser = tokens_commands.add_parser("create", help="make a token for a user and print it, this once")
    create_parser.add_argument("name", nargs="?", help="what the token is for, e.g. ci (or --name)")
    create_parser.add_argument("--name", dest="name_option", metavar="NAME", help="the same as NAME")
    create_parser.add_argument("--user", required=True, help="whose token it is")
    create_parser.add_argument("--role", choices=ROLES, help="at most the user's role (default theirs)")
    create_parser.add_argument(
        "--expires-days", "--expires", dest="expires_days", type=int, metavar="DAYS", help="default: never"
    )
    create_parser.set_defaults(run=with_settings(in_event_loop(_create_token)), check=_create_token_problem)
    list_tokens_parser = tokens_commands.add_parser("list", help="list tokens (never their secrets)")
    list_tokens_parser.add_argument("--user", help="only this user's")
    list_tokens_parser.add_argument("--json", action="store_true", help=JSON_HELP)
    list_tokens_parser.set_defaults(run=with_settings(in_event_loop(_list_tokens)))
    revoke_parser = tokens_commands.add_parser("revoke", help="revoke a token at once")
    revoke_parser.add_argument("id", type=int)
    revoke_parser.set_defaults(run=with_settings(in_event_loop(_revoke_token)))


def _migrated(settings: Settings) -> str:
    """The database's URL, once it is migrated to the latest schema."""
    from app import db

    url = settings.resolved_database_url()
    db.upgrade(url)
    return url


@asynccontextmanager
async def _session(url: str) -> AsyncIterator[AsyncSession]:
    from app import db

    engine = db.create_engine(url)
    try:
        async with db.session_factory(engine)() as session:
            yield session
    finally:
        await engine.dispose()


def _new_password(from_stdin: bool) -> str:
    if from_stdin:
        return sys.stdin.readline().rstrip("\n")
    password = getpass.getpass("New password: ")
    if getpass.getpass("Again: ") != password:
        raise InvalidInput("the passwords differ; nothing was changed")
    return password


async def _add_user(settings: Settings, args: argparse.Namespace) -> int:
    from app.accounts import users

    url = _migrated(settings)
    password = _new_password(args.password_stdin)
    async with _session(url) as session:
        await users.add_user(
            session, name=args.name, password=password, role=users.role_of(args.role), actor=cli_actor()
        )
        print(f"launchdeck: added {args.name} ({args.role})")
    return 0


async def _set_password(settings: Settings, args: argparse.Namespace) -> int:
    from app.accounts import users

    url = _migrated(settings)
    password = _new_password(args.password_stdin)
    async with _session(url) as session:
        await users.set_password(session, args.name, password, actor=cli_actor())
        print(f"launchdeck: new password for {args.name}; their logins have ended")
    return 0


async def _list_users(settings: Settings, args: argparse.Namespace) -> int:
    from app.accounts import users

    async with _session(_migrated(settings)) as session:
        found = await users.list_users(session)
    if args.json:
        print_json([_user_json(user) for user in found])
        return 0
    for user in found:
        state = "disabled" if user.disabled_at else "enabled"
        hosts = ",".join(user.host_labels) if user.host_labels else "all hosts"
        print(f"{user.name:24} {user.role:9} {state:9} since {user.created_at:%Y-%m-%d}  {hosts}")
    return 0


def _user_json(user: User) -> dict[str, Any]:
    return {
        "name": user.name,
        "role": user.role,
        "disabled": user.disabled_at is not None,
        "created_at": user.created_at.isoformat(),
        "host_labels": user.host_labels or None,  # None: every host
    }


async def _disable_user(settings: Settings, args: argparse.Namespace) -> int:
    from app.accounts import users

    async with _session(_migrated(settings)) as session:
        await users.set_disabled(session, args.name, not args.enable, actor=cli_actor())
        done = "may log in again" if args.enable else "is disabled; their logins have ended"
        print(f"launchdeck: {args.name} {done}")
    return 0


async def _set_role(settings: Settings, args: argparse.Namespace) -> int:
    from app.accounts import users

    async with _session(_migrated(settings)) as session:
        await users.set_role(session, args.name, users.role_of(args.role), actor=cli_actor())
        print(f"launchdeck: {args.name} is now {args.role}")
    return 0


async def _set_host_labels(settings: Settings, args: argparse.Namespace) -> int:
    from app.accounts import users

    async with _session(_migrated(settings)) as session:
        labels = None if args.all else args.labels.split(",")
        await users.set_host_labels(session, args.name, labels, actor=cli_actor())
        limited = await users.host_labels_of(session, args.name)
        where = f"hosts labelled {' or '.join(limited)}" if limited else "every host"
        print(f"launchdeck: {args.name} may launch on {where}")
    return 0


def _create_token_problem(args: argparse.Namespace) -> str | None:
    if args.name and args.name_option and args.name != args.name_option:
        return "tokens create: give the name once, as NAME or --name"
    return None


async def _create_token(settings: Settings, args: argparse.Namespace) -> int:
    """Prints the secret once, alone on standard output, so that `$(launchdeck tokens create ...)`
    captures just it."""
    from app.accounts import tokens, users

    async with _session(_migrated(settings)) as session:
        token, secret = await tokens.create_token(
            session,
            user=await users.get_user(session, args.user),
            name=args.name or args.name_option or "cli",
            role=users.role_of(args.role) if args.role else None,
            expires_days=args.expires_days,
            actor=cli_actor(),
        )
        expires = f"expires {token.expires_at:%Y-%m-%d}" if token.expires_at else "never expires"
        print(
            f"launchdeck: token {token.id} {token.name!r} for {args.user} ({token.role}, {expires}); "
            "it is not shown again:",
            file=sys.stderr,
        )
        print(secret)
    return 0


async def _list_tokens(settings: Settings, args: argparse.Namespace) -> int:
    from app.accounts import tokens
    from app.clock import utcnow

    async with _session(_migrated(settings)) as session:
        listed = [_token_json(token, utcnow()) for token in await tokens.list_tokens(session, user_name=args.user)]
    if args.json:
        print_json(listed)
        return 0
    for token in listed:
        expires = token["expires_at"][:10] if token["expires_at"] else "never"
        used = token["last_used_at"][:16].replace("T", " ") if token["last_used_at"] else "never"
        print(
            f"{token['id']:5} {token['user']:16} {token['name']:16} {token['prefix']}… {token['role']:9} "
            f"{token['state']:8} expires {expires:10} last used {used}"
        )
    return 0


def _token_json(token: ApiToken, now: datetime) -> dict[str, Any]:
    expired = token.expires_at is not None and token.expires_at <= now
    return {
        "id": token.id,
        "user": token.user.name,
        "name": token.name,
        "prefix": token.prefix,
        "role": token.role,
        "state": "revoked" if token.revoked_at else "expired" if expired else "active",
        "expires_at": _iso(token.expires_at),
        "last_used_at": _iso(token.last_used_at),
    }


def _iso(moment: datetime | None) -> str | None:
    return moment.isoformat() if moment else None


async def _revoke_token(settings: Settings, args: argparse.Namespace) -> int:
    from app.accounts import tokens

    async with _session(_migrated(settings)) as session:
        token = await tokens.revoke_token(session, args.id, actor=cli_actor())
        print(f"launchdeck: token {token.id} {token.name!r} of {token.user.name} is revoked")
    return 0
