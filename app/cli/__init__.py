"""The `launchdeck` command."""

from __future__ import annotations

import argparse
import gc
import getpass
import logging
import os
import signal
import socket
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

from app.errors import InvalidInput, LaunchdeckError

if TYPE_CHECKING:
    from app.config import Settings
    from app.diagnose.rules import Rule

DEMO_ADMIN = "demo"
ROLES = ("viewer", "operator", "admin")  # app.states.Role, named here so `--help` imports no database code
# Seconds a dashboard told to stop (SIGTERM, Ctrl-C) gives the requests in flight before cutting
# them short: container runtimes send SIGKILL 10 s after SIGTERM, and the services' close
# (app.runtime.CLOSE_SECONDS) and the demo's simulated hosts need the rest.
DRAIN_SECONDS = 3

# What `launchdeck diagnose` prints of a diagnosis: these keys of the API's diagnosis object (a
# StoredDiagnosis), with the same values, and with --rules its `rule` and `built_in` too.
CLI_KEYS = (
    "stage",
    "stage_percent",
    "class",
    "concept",
    "root_error",
    "fingerprint",
    "hint",
    "adjustments",
    "recognised",
)


def cli_actor() -> str:
    """Who changes accounts and tokens from the command line, for the audit trail: the person
    logged in on the server (with a space: a name no account can have, so it never passes for one)."""
    try:
        who = getpass.getuser()
    except (OSError, KeyError):  # a uid with no name, as in some containers
        who = f"uid {os.getuid()}"
    return f"{who} on the command line"


def main(argv: list[str] | None = None) -> int:
    try:
        return _run(argv)
    except BrokenPipeError:
        # The reader went away (`launchdeck logs 12 | head`): stop quietly, as other tools do.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 128 + signal.SIGPIPE


def _run(argv: list[str] | None) -> int:
    parser = argparse.ArgumentParser(prog="launchdeck", description="Launch and debug SGLang servers on GPU hosts.")
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    commands.add_parser("serve", help="run the dashboard (settings from LAUNCHDECK_* variables)")
    demo_parser = commands.add_parser("demo", help="run the dashboard with a simulated GPU cluster")
    demo_parser.add_argument(
        "--hosts-only", action="store_true", help="run only the simulated hosts, for a dashboard started with `serve`"
    )
    demo_parser.add_argument("--dir", type=Path, help="where the hosts live (default <data_dir>/demo)")
    demo_parser.add_argument(
        "--host", action="append", metavar="NAME", help="with --hosts-only: run this host only (repeatable)"
    )
    demo_parser.add_argument("--port", type=int, help="with one --host: its SSH port (default the one it had)")
    demo_parser.add_argument(
        "--slurm", action="store_true", help="also run a local Slurm cluster of two simulated GPU nodes (needs Slurm)"
    )
    launch_parser = commands.add_parser(
        "launch",
        help="launch a preset on a host through the running dashboard",
        description="Launch a preset on a host through the running dashboard. Exit status: 0 the server is "
        "ready (or, with --no-wait, the attempt is recorded); 1 the launch failed, or an error; 3 a guard "
        "refused the launch and nothing was launched (a blocking preflight check failed: --override-reason; "
        "the configuration failed before: --confirm-failed-before).",
    )
    launch_parser.add_argument("preset")
    launch_parser.add_argument("host", nargs="?", help="the host (a preset with --nnodes N: --hosts or --label)")
    launch_parser.add_argument("--hosts", help="a multi-node preset's hosts, comma-separated, node 0 first")
    launch_parser.add_argument("--label", help="a multi-node preset: as many hosts with this label as it has nodes")
    launch_parser.add_argument(
        "--dist-port", type=int, help="a multi-node launch: where node 0 waits for the others (default 20000)"
    )
    launch_parser.add_argument("--gpus", default="0", help="comma-separated GPU indices (default 0)")
    launch_parser.add_argument("--port", type=int, help="server port (default the preset's)")
    launch_parser.add_argument(
        "--override-reason",
        "--override",
        dest="override",
        default="",
        metavar="TEXT",
        help="launch despite failed blocking preflight checks; the reason is recorded",
    )
    launch_parser.add_argument(
        "--confirm-failed-before", action="store_true", help="launch even if this configuration failed before"
    )
    launch_parser.add_argument("--no-wait", action="store_true", help="return once the attempt is recorded")
    launch_parser.add_argument("--url", help="dashboard URL (default from LAUNCHDECK_BIND/PORT)")
    attempts_parser = commands.add_parser("attempts", help="list attempts, newest first")
    for option in ("--host", "--preset", "--status"):
        attempts_parser.add_argument(option)
    attempts_parser.add_argument("--limit", type=int, default=20)
    attempts_parser.add_argument("--url", help="dashboard URL (default from LAUNCHDECK_BIND/PORT)")
    logs_parser = commands.add_parser("logs", help="print an attempt's log, follow it, or grep it")
    logs_parser.add_argument("attempt", type=int)
    logs_parser.add_argument("--follow", "-f", action="store_true", help="keep printing what the log gains")
    logs_parser.add_argument("--grep", metavar="PATTERN", help="print matching lines with their numbers")
    logs_parser.add_argument("--regex", action="store_true", help="PATTERN is an extended regular expression")
    logs_parser.add_argument("--ignore-case", "-i", action="store_true")
    logs_parser.add_argument("--url", help="dashboard URL (default from LAUNCHDECK_BIND/PORT)")
    bench_parser = commands.add_parser(
        "bench", help="benchmark a ready attempt with SGLang's bench_serving and store its figures on it"
    )
    bench_parser.add_argument("attempt", type=int)
    bench_parser.add_argument("--workload", help="a stored workload's name (default chat-short)")
    bench_parser.add_argument("--url", help="dashboard URL (default from LAUNCHDECK_BIND/PORT)")
    sweep_parser = commands.add_parser("sweep", help="run a preset over a grid of values, or bisect one argument")
    sweep_commands = sweep_parser.add_subparsers(dest="sweep_command", required=True, metavar="ACTION")
    sweep_start = sweep_commands.add_parser("start", help="start a sweep and follow it until it ends")
    sweep_start.add_argument("preset")
    sweep_start.add_argument("--host", required=True)
    sweep_start.add_argument("--gpus", default="0", help="GPU indices, e.g. 0,1 (default 0)")
    sweep_start.add_argument(
        "--vary", action="append", default=[], metavar="NAME=V1,V2", help="values of an argument or variable (a grid)"
    )
    sweep_start.add_argument(
        "--bisect", metavar="FLAG=LOW:HIGH:STEP[:min]", help="the largest (or :min smallest) value that starts"
    )
    sweep_start.add_argument("--workload", help="a stored workload's name (default chat-short)")
    sweep_start.add_argument("--max-points", type=int, default=50)
    sweep_start.add_argument("--max-minutes", type=float)
    sweep_start.add_argument("--no-wait", action="store_true", help="return once the sweep has started")
    sweep_show = sweep_commands.add_parser("show", help="a sweep's points, best point and limit")
    sweep_show.add_argument("sweep", type=int)
    sweep_stop = sweep_commands.add_parser("stop", help="stop a sweep after its point in flight")
    sweep_stop.add_argument("sweep", type=int)
    for sub in (sweep_start, sweep_show, sweep_stop):
        sub.add_argument("--url", help="dashboard URL (default from LAUNCHDECK_BIND/PORT)")
    compare_parser = commands.add_parser("compare", help="two attempts side by side: what differed, how each ended")
    compare_parser.add_argument("a", type=int)
    compare_parser.add_argument("b", type=int)
    compare_parser.add_argument("--json", action="store_true", help="print the whole comparison as JSON")
    compare_parser.add_argument("--url", help="dashboard URL (default from LAUNCHDECK_BIND/PORT)")
    diagnose_parser = commands.add_parser("diagnose", help="read an SGLang log: stage, root error, class, hint")
    diagnose_parser.add_argument("logfile")
    diagnose_parser.add_argument("--json", action="store_true", help="print the result as JSON")
    diagnose_parser.add_argument(
        "--rules", metavar="FILE", help="a TOML file of team rules that correct the built-in diagnosis"
    )
    rules_parser = commands.add_parser("rules", help="the team's diagnosis rules in the dashboard, as a TOML file")
    rules_commands = rules_parser.add_subparsers(dest="rules_command", required=True, metavar="ACTION")
    export_parser = rules_commands.add_parser("export", help="write the dashboard's rules as a rules file")
    export_parser.add_argument("file", nargs="?", help="where to write it (default: standard output)")
    import_parser = rules_commands.add_parser("import", help="add a rules file's rules (all checked first)")
    import_parser.add_argument("file")
    for rules_command in (export_parser, import_parser):
        rules_command.add_argument("--url", help="dashboard URL (default from LAUNCHDECK_BIND/PORT)")
    users_parser = commands.add_parser("users", help="people who log in, and their roles (on the database directly)")
    users_commands = users_parser.add_subparsers(dest="users_command", required=True, metavar="ACTION")
    add_parser = users_commands.add_parser("add", help="add a user (prompts for the password)")
    add_parser.add_argument("name")
    add_parser.add_argument("--role", choices=ROLES, default="viewer", help="what they may do (default viewer)")
    passwd_parser = users_commands.add_parser("passwd", help="set a user's password; ends their logins")
    passwd_parser.add_argument("name")
    for password_command in (add_parser, passwd_parser):
        password_command.add_argument(
            "--password-stdin", action="store_true", help="read the password from standard input, not a prompt"
        )
    users_commands.add_parser("list", help="list users with their roles")
    disable_parser = users_commands.add_parser("disable", help="stop a user logging in; ends their logins")
    disable_parser.add_argument("name")
    disable_parser.add_argument("--enable", action="store_true", help="let a disabled user log in again")
    role_parser = users_commands.add_parser("role", help="change a user's role")
    role_parser.add_argument("name")
    role_parser.add_argument("role", choices=ROLES)
    hosts_parser = users_commands.add_parser("hosts", help="limit an operator to hosts with some labels, or lift it")
    hosts_parser.add_argument("name")
    limit = hosts_parser.add_mutually_exclusive_group(required=True)
    limit.add_argument("--labels", help="comma-separated host labels, e.g. rtxpro,b200 (any one of them will do)")
    limit.add_argument("--all", action="store_true", help="every host again")
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
    list_tokens_parser = tokens_commands.add_parser("list", help="list tokens (never their secrets)")
    list_tokens_parser.add_argument("--user", help="only this user's")
    revoke_parser = tokens_commands.add_parser("revoke", help="revoke a token at once")
    revoke_parser.add_argument("id", type=int)
    db_parser = commands.add_parser("db", help="database maintenance")
    db_commands = db_parser.add_subparsers(dest="db_command", required=True, metavar="ACTION")
    db_commands.add_parser("upgrade", help="migrate the database to the latest schema")
    args = parser.parse_args(argv)
    if args.command == "logs" and args.follow and args.grep is not None:
        parser.error("logs: --follow and --grep do not go together; grep the log, or follow it")
    if args.command == "tokens" and args.tokens_command == "create":
        if args.name and args.name_option and args.name != args.name_option:
            parser.error("tokens create: give the name once, as NAME or --name")
        args.name = args.name or args.name_option or "cli"
    if args.command == "demo" and not args.hosts_only and (args.host or args.port is not None):
        parser.error("demo: --host and --port go with --hosts-only")
    if args.command == "demo" and args.port is not None and len(args.host or ()) != 1:
        parser.error("demo: --port needs exactly one --host")
    if args.command == "demo" and args.hosts_only and args.slurm:
        parser.error("demo: --slurm goes without --hosts-only")

    if args.command == "diagnose":
        return diagnose_file(args.logfile, as_json=args.json, rules_path=args.rules)
    rules_text = None
    if args.command == "rules" and args.rules_command == "import":
        try:
            rules_text = _checked_rules_text(args.file)
        except InvalidInput as exc:
            print(f"launchdeck: rules file {args.file}: {exc}; nothing was imported", file=sys.stderr)
            return 2
    # Imported only now: `diagnose` needs none of the dashboard and so starts at once.
    import asyncio

    from pydantic import ValidationError

    from app import db
    from app.cli import client
    from app.config import Settings

    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    logging.getLogger("asyncssh").setLevel(logging.WARNING)
    logging.getLogger("httpx").setLevel(logging.WARNING)
    logging.getLogger("uvicorn.error").addFilter(_without_cut_short_requests)
    try:
        settings = Settings()
    except ValidationError as exc:
        problems = "; ".join(
            f"LAUNCHDECK_{'_'.join(map(str, e['loc'])).upper()}: {e['msg'].removeprefix('Value error, ')}"
            for e in exc.errors()
        )
        print(f"launchdeck: bad setting: {problems}", file=sys.stderr)
        return 2
    serves = args.command == "serve" or (args.command == "demo" and not args.hosts_only)
    if serves and (problem := settings.exposure_problem()):
        print(f"launchdeck: {problem}", file=sys.stderr)
        return 2
    try:
        if args.command == "serve":
            return serve(settings)
        if args.command == "demo" and args.hosts_only:
            return asyncio.run(demo_hosts(settings, args.dir, args.host, args.port))
        if args.command == "demo":
            return asyncio.run(demo(settings.model_copy(update={"demo_slurm": settings.demo_slurm or args.slurm})))
        if args.command == "launch":
            api = client.ApiClient(settings, args.url)
            gpus = client.parse_gpus(args.gpus)
            hosts = [name.strip() for name in args.hosts.split(",") if name.strip()] if args.hosts else None
            if not (args.host or hosts or args.label):
                raise LaunchdeckError("launch: give a host, or --hosts a,b or --label for a preset on several nodes")
            return client.launch(
                api, preset=args.preset, host=args.host, gpus=gpus, port=args.port, override=args.override,
                confirm_failed_before=args.confirm_failed_before, wait=not args.no_wait, hosts=hosts,
                label=args.label, dist_port=args.dist_port,
            )  # fmt: skip
        if args.command == "attempts":
            params = {"host": args.host, "preset": args.preset, "status": args.status, "limit": args.limit}
            return client.list_attempts(client.ApiClient(settings, args.url), params=params)
        if args.command == "bench":
            api = client.ApiClient(settings, args.url)
            return client.bench(api, args.attempt, workload=args.workload, out=sys.stdout.buffer, err=_stderr)
        if args.command == "sweep":
            api = client.ApiClient(settings, args.url)
            if args.sweep_command == "start":
                return client.start_sweep(api, args)
            if args.sweep_command == "stop":
                api.call("POST", f"/api/sweeps/{args.sweep}/stop")
                return 0
            return client.show_sweep(api, args.sweep)
        if args.command == "compare":
            return client.compare(client.ApiClient(settings, args.url), args.a, args.b, as_json=args.json)
        if args.command == "logs":
            api = client.ApiClient(settings, args.url)
            if args.grep is not None:
                return client.grep_log(
                    api, args.attempt, args.grep, regex=args.regex, ignore_case=args.ignore_case, err=_stderr
                )
            return client.show_log(api, args.attempt, follow=args.follow, out=sys.stdout.buffer, err=_stderr)
        if args.command == "users":
            return asyncio.run(manage_users(settings, args))
        if args.command == "tokens":
            return asyncio.run(manage_tokens(settings, args))
        if args.command == "rules":
            api = client.ApiClient(settings, args.url)
            if rules_text is not None:
                return client.import_rules(api, rules_text, name=args.file)
            return client.export_rules(api, args.file)
        db.upgrade(settings.resolved_database_url())
        print(f"launchdeck: database at {_redacted(settings.resolved_database_url())} is up to date")
        return 0
    except LaunchdeckError as exc:
        print(f"launchdeck: {exc}", file=sys.stderr)
        return 1


def _new_password(from_stdin: bool) -> str:
    if from_stdin:
        return sys.stdin.readline().rstrip("\n")
    import getpass

    password = getpass.getpass("New password: ")
    if getpass.getpass("Again: ") != password:
        raise InvalidInput("the passwords differ; nothing was changed")
    return password


async def manage_users(settings: Settings, args: argparse.Namespace) -> int:
    """Works on the database the dashboard uses (as `db upgrade` does), so it needs no login and
    works while the dashboard is down; a running dashboard sees the change on the next request."""
    from app import db
    from app.accounts import users

    url = settings.resolved_database_url()
    db.upgrade(url)
    password = _new_password(args.password_stdin) if args.users_command in ("add", "passwd") else ""
    engine = db.create_engine(url)
    try:
        async with db.session_factory(engine)() as session:
            if args.users_command == "add":
                await users.add_user(
                    session, name=args.name, password=password, role=users.role_of(args.role), actor=cli_actor()
                )
                print(f"launchdeck: added {args.name} ({args.role})")
            elif args.users_command == "passwd":
                await users.set_password(session, args.name, password, actor=cli_actor())
                print(f"launchdeck: new password for {args.name}; their logins have ended")
            elif args.users_command == "disable":
                await users.set_disabled(session, args.name, not args.enable, actor=cli_actor())
                done = "may log in again" if args.enable else "is disabled; their logins have ended"
                print(f"launchdeck: {args.name} {done}")
            elif args.users_command == "role":
                await users.set_role(session, args.name, users.role_of(args.role), actor=cli_actor())
                print(f"launchdeck: {args.name} is now {args.role}")
            elif args.users_command == "hosts":
                labels = None if args.all else args.labels.split(",")
                await users.set_host_labels(session, args.name, labels, actor=cli_actor())
                limited = await users.host_labels_of(session, args.name)
                where = f"hosts labelled {' or '.join(limited)}" if limited else "every host"
                print(f"launchdeck: {args.name} may launch on {where}")
            else:
                for user in await users.list_users(session):
                    state = "disabled" if user.disabled_at else "enabled"
                    hosts = ",".join(user.host_labels) if user.host_labels else "all hosts"
                    print(f"{user.name:24} {user.role:9} {state:9} since {user.created_at:%Y-%m-%d}  {hosts}")
    finally:
        await engine.dispose()
    return 0


async def manage_tokens(settings: Settings, args: argparse.Namespace) -> int:
    """Like `manage_users`: on the database directly. The secret is printed once, alone on
    standard output, so that `$(launchdeck tokens create ...)` captures just it."""
    from app import db
    from app.accounts import tokens, users
    from app.clock import utcnow

    url = settings.resolved_database_url()
    db.upgrade(url)
    engine = db.create_engine(url)
    try:
        async with db.session_factory(engine)() as session:
            if args.tokens_command == "create":
                token, secret = await tokens.create_token(
                    session,
                    user=await users.get_user(session, args.user),
                    name=args.name,
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
            elif args.tokens_command == "revoke":
                token = await tokens.revoke_token(session, args.id, actor=cli_actor())
                print(f"launchdeck: token {token.id} {token.name!r} of {token.user.name} is revoked")
            else:
                for token in await tokens.list_tokens(session, user_name=args.user):
                    expired = token.expires_at is not None and token.expires_at <= utcnow()
                    state = "revoked" if token.revoked_at else "expired" if expired else "active"
                    expires = f"{token.expires_at:%Y-%m-%d}" if token.expires_at else "never"
                    used = f"{token.last_used_at:%Y-%m-%d %H:%M}" if token.last_used_at else "never"
                    print(
                        f"{token.id:5} {token.user.name:16} {token.name:16} {token.prefix}… {token.role:9} "
                        f"{state:8} expires {expires:10} last used {used}"
                    )
    finally:
        await engine.dispose()
    return 0


def _stderr(message: str) -> None:
    print(message, file=sys.stderr)


def diagnose_file(path: str, *, as_json: bool, rules_path: str | None = None) -> int:
    """Reads the log in chunks, so a log of any size takes bounded memory; team rules, when given,
    read the same chunks and then decide over the built-in answer."""
    import json
    from dataclasses import replace

    from app.diagnose.analyze import Analyzer
    from app.diagnose.rules import RuleScanner
    from app.diagnose.stored import AppliedRule, stored

    try:
        rules = _read_rules(rules_path) if rules_path is not None else ()
    except InvalidInput as exc:
        print(f"launchdeck: rules file {rules_path}: {exc}", file=sys.stderr)
        return 2
    analyzer, scanner = Analyzer(), RuleScanner(rules)
    try:
        with open(path, "rb") as log:
            while chunk := log.read(1 << 20):
                analyzer.feed_bytes(chunk)
                scanner.feed_bytes(chunk)
    except OSError as exc:
        print(f"launchdeck: cannot read {path}: {exc.strerror or exc}", file=sys.stderr)
        return 1
    found, decision = stored(analyzer.finish()).decided_by(scanner)
    for warning in scanner.warnings:
        print(f"launchdeck: warning: {warning}", file=sys.stderr)
    if decision is not None:
        found = replace(found, rule=AppliedRule.of(decision, None, decision.line))
    as_kept = found.to_json()
    keys = (*CLI_KEYS, "rule", "built_in") if rules_path is not None else CLI_KEYS
    result = {key: as_kept.get(key) for key in keys}
    if as_json:
        print(json.dumps(result, indent=2))
        return 0
    if found.rule is not None:
        print(f"{'team rule:':13} {found.rule.title}{f' (by {found.rule.author})' if found.rule.author else ''}")
    if found.stage_percent is not None:
        result["stage"] = f"{found.stage} ({found.stage_percent}%)"
    if not found.recognised:  # said beside the class, which stays one of the contracted names
        unknown = "unrecognised failure" if found.root_error else "not an SGLang log"
        result["class"] = f"{found.failure_class} ({unknown})"
    for key in ("stage", "class", "root_error", "fingerprint", "hint"):
        print(f"{key + ':':13} {result[key] if result[key] is not None else '-'}")
    if found.built_in is not None:
        built_in = found.built_in
        print(f"{'built-in:':13} {built_in.failure_class} ({built_in.fingerprint or '-'}): {built_in.hint or '-'}")
    print(f"{'adjustments:':13} {len(found.adjustments) or '-'}")
    for line in found.adjustments:
        print(f"  {line}")
    return 0


def _read_rules(path: str) -> tuple[Rule, ...]:
    from app.diagnose.rules import parse_rules

    return parse_rules(_read_rules_text(path))


def _read_rules_text(path: str) -> str:
    try:
        with open(path, "rb") as rules_file:
            text = rules_file.read().decode()
    except OSError as exc:
        raise InvalidInput(f"cannot read it: {exc.strerror or exc}") from None
    except UnicodeDecodeError:
        raise InvalidInput("not UTF-8 text") from None
    return text


def _checked_rules_text(path: str) -> str:
    """A rules file to import, checked here first: `InvalidInput` says what is wrong with it."""
    from app.diagnose.rules import parse_rules

    text = _read_rules_text(path)
    if not parse_rules(text):
        raise InvalidInput("it holds no [[rule]] table")
    return text


def _check_port(settings: Settings) -> None:
    """Fails with a sentence, before anything starts, when the dashboard's port is taken."""
    try:
        with socket.create_server((settings.bind, settings.port)):
            pass
    except OSError as exc:
        raise InvalidInput(
            f"cannot listen on {settings.bind}:{settings.port}: {os.strerror(exc.errno) if exc.errno else exc}; "
            "set LAUNCHDECK_PORT to a free port"
        ) from None


def serve(settings: Settings) -> int:
    import asyncio

    from app.accounts.setup import SetupLink
    from app.runtime import access_token
    from app.web.app import create_app

    _check_port(settings)
    setup_link, secret = SetupLink.issue()
    app = create_app(settings, setup_link=setup_link)
    enabled, any_account = asyncio.run(_accounts(settings))
    if problem := settings.accounts_problem(accounts=enabled):
        print(f"launchdeck: {problem}", file=sys.stderr)
        return 2
    setup_link.spent = any_account  # only a dashboard with no accounts prints it, and honours it
    access_token(settings)  # created now, so its file exists before the first login
    where = "LAUNCHDECK_TOKEN" if settings.token else settings.data_dir / "access-token"
    print(f"\nlaunchdeck dashboard: {_url(settings)}  (access token: {where})", flush=True)
    if not any_account:
        print(f"no accounts yet; create the first admin, once, at {_url(settings)}setup/{secret}", flush=True)
    if (hosts := settings.resolved_allowed_hosts()) is not None:
        print(f"answering to the hosts {', '.join(sorted(hosts))}  (LAUNCHDECK_ALLOWED_HOSTS)", flush=True)
    print(flush=True)
    import uvicorn

    _freeze_startup_objects()
    uvicorn.run(app, log_level="info", **_server_options(settings))
    return 0


def _server_options(settings: Settings) -> dict[str, Any]:
    """How uvicorn serves the dashboard, for `serve` and `demo` alike. Told to stop, it gives the
    requests in flight DRAIN_SECONDS and then cancels them: by default it would wait for each to
    end, and a download to a reader who stopped reading does not."""
    return {
        "host": settings.bind,
        "port": settings.port,
        "proxy_headers": _forwarded_for(settings),
        "timeout_graceful_shutdown": DRAIN_SECONDS,
    }


def _without_cut_short_requests(record: logging.LogRecord) -> bool:
    """Drops the traceback uvicorn logs for each request it cancelled at DRAIN_SECONDS: its own
    line before them counts them, and the access log shows each one's 500."""
    import asyncio

    return not (record.exc_info and isinstance(record.exc_info[1], asyncio.CancelledError))


async def _accounts(settings: Settings) -> tuple[int, bool]:
    """How many accounts are enabled, and whether there is any; read once the database is
    migrated (create_app has done it)."""
    from app import db
    from app.accounts import setup, users

    engine = db.create_engine(settings.resolved_database_url())
    try:
        async with db.Sessions.of(engine).read() as session:
            return await users.count_enabled(session), await setup.any_account(session)
    finally:
        await engine.dispose()


def _forwarded_for(settings: Settings) -> bool:
    """Whether uvicorn takes the client's address from X-Forwarded-For (as it does by default for
    a peer on 127.0.0.1). Not with single sign-on: there the peer must be the proxy itself."""
    return not settings.auth_proxy_header


def _freeze_startup_objects() -> None:
    """Takes what is imported and built so far out of the garbage collector's sight, and collects
    less often: its full collections then scan only what requests and background work create. On
    two busy cores they took 80-130 ms each, every few seconds, and made the slowest requests
    under load (api_load's p99 went from 98.7 to 64.2 ms with the higher thresholds)."""
    gc.collect()
    gc.freeze()
    gc.set_threshold(20_000, 20, 20)


async def demo(settings: Settings) -> int:
    """Starts the simulated cluster, points the dashboard at it, and stops both on SIGTERM or Ctrl-C."""
    slurm = None
    if settings.demo_slurm:  # checked before the dashboard's imports, which take seconds
        from app.demo.slurm import SlurmError, demo_site, unavailable

        if problem := unavailable():
            print(f"launchdeck: {problem}.", file=sys.stderr)
            return 2
        slurm = demo_site(settings.data_dir.resolve() / "demo" / "slurm", settings.demo_time_scale)
    import uvicorn

    from app.demo.cluster import SimCluster
    from app.demo.inventory import parse_host_specs
    from app.runtime import access_token
    from app.web.app import create_app

    try:
        host_specs = parse_host_specs(settings.demo_hosts)
    except ValueError as exc:
        print(f"launchdeck: LAUNCHDECK_DEMO_HOSTS: {exc}", file=sys.stderr)
        return 2
    _check_port(settings)
    cluster = SimCluster(settings.data_dir.resolve() / "demo", host_specs, time_scale=settings.demo_time_scale)
    specs = await cluster.start()
    try:
        hosts_file = cluster.write_hosts_file(specs)
        if slurm:
            try:
                login = await slurm.start()
            except SlurmError as exc:
                print(f"launchdeck: the local Slurm cluster did not start: {exc}", file=sys.stderr)
                return 1
            hosts_file = slurm.write_hosts_file(hosts_file)
            nodes = ", ".join(f"{node.name} ({node.gpu_count} x {node.gpu_model})" for node in slurm.slurm.nodes)
            print(f"Slurm cluster {login.name}: {nodes}; login node ssh on 127.0.0.1:{login.port}")
        settings = settings.model_copy(update={"hosts_file": hosts_file})
        app = create_app(settings)
        await _seed_demo_presets(settings)
        demo_password = await _seed_demo_admin(settings)
        for spec, sim in zip(specs, host_specs, strict=True):
            print(f"simulated host {spec.name}: {sim.gpu_count} x {sim.gpu_model} GPUs, ssh on 127.0.0.1:{spec.port}")
        server = uvicorn.Server(uvicorn.Config(app, **_server_options(settings)))
        print(
            f"\nlaunchdeck dashboard: {_url(settings)}\naccess token:         {access_token(settings)}"
            f"\ndemo admin:           {DEMO_ADMIN} / {demo_password}\n",
            flush=True,
        )
        # uvicorn re-raises the signal that stopped it once it is done; a no-op handler lets the
        # cluster be stopped after it instead of the process dying with its servers still running.
        for signum in (signal.SIGTERM, signal.SIGINT):
            signal.signal(signum, lambda *_: None)
        await server.serve()
    finally:
        await cluster.stop()
        if slurm:
            await slurm.stop()
    return 0


async def demo_hosts(settings: Settings, directory: Path | None, names: list[str] | None, port: int | None) -> int:
    """Runs the simulated hosts (all, or those named) until SIGTERM or Ctrl-C, for a dashboard
    started with `serve` against the hosts file written here. One process per host lets a host's
    SSH server be killed and started again alone, on the port the hosts file gives it."""
    from app.demo.cluster import SimCluster
    from app.demo.inventory import parse_host_specs

    try:
        host_specs = parse_host_specs(settings.demo_hosts)
    except ValueError as exc:
        print(f"launchdeck: LAUNCHDECK_DEMO_HOSTS: {exc}", file=sys.stderr)
        return 2
    cluster = SimCluster(
        (directory or settings.data_dir / "demo").resolve(), host_specs, time_scale=settings.demo_time_scale
    )
    ports = cluster.recorded_ports()
    if names and port is not None:
        ports[names[0]] = port
    import asyncio

    stopping = asyncio.Event()
    loop = asyncio.get_running_loop()
    for signum in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(signum, stopping.set)
    started = await cluster.start(only=names, ports=ports)
    try:
        hosts_file = cluster.write_hosts_file(started)
        for spec, sim in zip(started, [s for s in host_specs if not names or s.name in names], strict=True):
            print(f"simulated host {spec.name}: {sim.gpu_count} x {sim.gpu_model} GPUs, ssh on 127.0.0.1:{spec.port}")
        print(f"known_hosts: {cluster.known_hosts_path}\nclient key:  {cluster.client_key_path}")
        # Last, so whoever waits for this line finds the hosts listening and the files written.
        print(f"hosts file:  {hosts_file}  (LAUNCHDECK_HOSTS_FILE for `launchdeck serve`)", flush=True)
        await stopping.wait()
    finally:
        await cluster.stop()
    return 0


async def _seed_demo_presets(settings: Settings) -> None:
    from app import db
    from app.demo.presets import seed_demo_presets

    engine = db.create_engine(settings.resolved_database_url())
    try:
        async with db.session_factory(engine)() as session:
            await seed_demo_presets(session)
    finally:
        await engine.dispose()


async def _seed_demo_admin(settings: Settings) -> str:
    """Makes the demo's admin account the first time, with a password kept in the data dir; returns it."""
    from app import credentials, db
    from app.accounts import users
    from app.states import Role

    password = credentials.load_or_create(settings.data_dir / "demo-password")
    engine = db.create_engine(settings.resolved_database_url())
    try:
        async with db.session_factory(engine)() as session:
            if DEMO_ADMIN not in {user.name for user in await users.list_users(session)}:
                await users.add_user(session, name=DEMO_ADMIN, password=password, role=Role.ADMIN)
    finally:
        await engine.dispose()
    return password


def _url(settings: Settings) -> str:
    host = settings.bind if settings.bind not in ("0.0.0.0", "::") else "127.0.0.1"
    return f"http://{host}:{settings.port}/"


def _redacted(url: str) -> str:
    from sqlalchemy.engine import make_url

    return make_url(url).render_as_string(hide_password=True)
