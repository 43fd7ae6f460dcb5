"""`launchdeck launch`, `relaunch`, `stop`, `attempts`, `logs`, `bench`, `sweep` and `compare`: the
commands that ask the running dashboard, through its HTTP API (app.cli.client, imported only when
one of them runs: it imports httpx)."""

from __future__ import annotations

import argparse
import sys
from typing import TYPE_CHECKING, Any

from app.cli.shared import JSON_HELP, URL_HELP, with_client
from app.errors import InvalidInput, LaunchdeckError

if TYPE_CHECKING:
    from app.cli.remote import ApiClient
    from app.cli.shared import Subcommands


def add_parsers(commands: Subcommands) -> None:
    _add_launch_parser(commands)
    _add_relaunch_parser(commands)
    stop_parser = commands.add_parser(
        "stop",
        help="stop an attempt's server (SIGTERM, then SIGKILL after the grace period)",
        description="Stop an attempt's server and wait until it has ended. Exit status: 0 it has ended (or, "
        "with --no-wait, the stop was asked); 1 the dashboard refused, or the attempt was still running after "
        "two minutes.",
    )
    stop_parser.add_argument("attempt", type=int)
    stop_parser.add_argument("--no-wait", action="store_true", help="return once the stop is asked")
    stop_parser.add_argument("--url", help=URL_HELP)
    stop_parser.set_defaults(run=_stop)
    attempts_parser = commands.add_parser(
        "attempts", help="list attempts, newest first, with each failure's class and root error"
    )
    for option in ("--host", "--preset", "--status"):
        attempts_parser.add_argument(option)
    attempts_parser.add_argument("--limit", type=int, default=20)
    attempts_parser.add_argument("--json", action="store_true", help=JSON_HELP)
    attempts_parser.add_argument("--url", help=URL_HELP)
    attempts_parser.set_defaults(run=_list_attempts)
    logs_parser = commands.add_parser("logs", help="print an attempt's log, follow it, or grep it")
    logs_parser.add_argument("attempt", type=int)
    logs_parser.add_argument("--follow", "-f", action="store_true", help="keep printing what the log gains")
    logs_parser.add_argument("--grep", metavar="PATTERN", help="print matching lines with their numbers")
    logs_parser.add_argument("--regex", action="store_true", help="PATTERN is an extended regular expression")
    logs_parser.add_argument("--ignore-case", "-i", action="store_true")
    logs_parser.add_argument("--url", help=URL_HELP)
    logs_parser.set_defaults(run=_logs, check=_logs_problem)
    bench_parser = commands.add_parser(
        "bench", help="benchmark a ready attempt with SGLang's bench_serving and store its figures on it"
    )
    bench_parser.add_argument("attempt", type=int)
    bench_parser.add_argument("--workload", help="a stored workload's name (default chat-short)")
    bench_parser.add_argument("--url", help=URL_HELP)
    bench_parser.set_defaults(run=_bench)
    _add_sweep_parsers(commands)
    compare_parser = commands.add_parser("compare", help="two attempts side by side: what differed, how each ended")
    compare_parser.add_argument("a", type=int)
    compare_parser.add_argument("b", type=int)
    compare_parser.add_argument("--json", action="store_true", help="print the whole comparison as JSON")
    compare_parser.add_argument("--url", help=URL_HELP)
    compare_parser.set_defaults(run=_compare)


def _add_launch_parser(commands: Subcommands) -> None:
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
    launch_parser.add_argument("--url", help=URL_HELP)
    launch_parser.set_defaults(run=_launch)


def _add_relaunch_parser(commands: Subcommands) -> None:
    relaunch_parser = commands.add_parser(
        "relaunch",
        help="launch an attempt's preset revision again on its host, GPUs and port, changed where asked",
        description="Launch an attempt again: its preset revision on its host, GPUs and port; with --set, "
        "--drop or --apply-suggested, a new revision made from its. Exit status as launch's: 0 ready, 1 failed, "
        "3 a guard refused.",
    )
    relaunch_parser.add_argument("attempt", type=int)
    relaunch_parser.add_argument(
        "--set",
        action="append",
        default=[],
        metavar="FLAG=VALUE",
        help="set an argument, e.g. mem-fraction-static=0.9 (FLAG alone: a switch); repeatable",
    )
    relaunch_parser.add_argument(
        "--drop", action="append", default=[], metavar="FLAG", help="drop an argument; repeatable"
    )
    relaunch_parser.add_argument(
        "--apply-suggested", action="store_true", help="apply the change the attempt's diagnosis suggests"
    )
    relaunch_parser.add_argument(
        "--override-reason", dest="override", default="", metavar="TEXT", help="launch despite failed preflight checks"
    )
    relaunch_parser.add_argument(
        "--confirm-failed-before", action="store_true", help="launch even if this configuration failed before"
    )
    relaunch_parser.add_argument("--no-wait", action="store_true", help="return once the attempt is recorded")
    relaunch_parser.add_argument("--url", help=URL_HELP)
    relaunch_parser.set_defaults(run=_relaunch, check=_relaunch_problem)


def _add_sweep_parsers(commands: Subcommands) -> None:
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
    sweep_start.set_defaults(run=_start_sweep)
    sweep_show = sweep_commands.add_parser("show", help="a sweep's points, best point and limit")
    sweep_show.add_argument("sweep", type=int)
    sweep_show.set_defaults(run=_show_sweep)
    sweep_stop = sweep_commands.add_parser("stop", help="stop a sweep after its point in flight")
    sweep_stop.add_argument("sweep", type=int)
    sweep_stop.set_defaults(run=_stop_sweep)
    for sub in (sweep_start, sweep_show, sweep_stop):
        sub.add_argument("--url", help=URL_HELP)


def _stderr(message: str) -> None:
    print(message, file=sys.stderr)


@with_client
def _launch(api: ApiClient, args: argparse.Namespace) -> int:
    from app.cli import client

    gpus = client.parse_gpus(args.gpus)
    hosts = [name.strip() for name in args.hosts.split(",") if name.strip()] if args.hosts else None
    if not (args.host or hosts or args.label):
        raise LaunchdeckError("launch: give a host, or --hosts a,b or --label for a preset on several nodes")
    return client.launch(
        api, preset=args.preset, host=args.host, gpus=gpus, port=args.port, override=args.override,
        confirm_failed_before=args.confirm_failed_before, wait=not args.no_wait, hosts=hosts,
        label=args.label, dist_port=args.dist_port,
    )  # fmt: skip


def change_of(text: str, *, remove: bool = False) -> dict[str, Any]:
    """A relaunch's change from `FLAG=VALUE`, `FLAG` (a switch) or, with `remove`, the flag to drop;
    the flag with or without its leading dashes (`mem-fraction-static=0.9`)."""
    flag, equals, value = text.partition("=")
    name = flag.strip().lstrip("-")
    if not name or (remove and equals):
        option, form = ("--drop", "FLAG") if remove else ("--set", "FLAG=VALUE (or FLAG for a switch)")
        raise InvalidInput(f"relaunch: {option} {text!r}: give {form}, e.g. mem-fraction-static")
    return {"flag": f"--{name}", "value": value if equals else None, "remove": remove}


def _changes(args: argparse.Namespace) -> list[dict[str, Any]]:
    return [change_of(item) for item in args.set] + [change_of(item, remove=True) for item in args.drop]


def _relaunch_problem(args: argparse.Namespace) -> str | None:
    try:
        _changes(args)
    except InvalidInput as exc:
        return str(exc)
    return None


@with_client
def _relaunch(api: ApiClient, args: argparse.Namespace) -> int:
    from app.cli import client

    changes = _changes(args)
    body = {
        "changes": changes, "apply_suggested": args.apply_suggested, "override_reason": args.override,
        "confirm_failed_before": args.confirm_failed_before,
    }  # fmt: skip
    return client.relaunch(api, args.attempt, body=body, wait=not args.no_wait)


@with_client
def _stop(api: ApiClient, args: argparse.Namespace) -> int:
    from app.cli import client

    return client.stop(api, args.attempt, wait=not args.no_wait)


@with_client
def _list_attempts(api: ApiClient, args: argparse.Namespace) -> int:
    from app.cli import client

    params = {"host": args.host, "preset": args.preset, "status": args.status, "limit": args.limit}
    return client.list_attempts(api, params=params, as_json=args.json)


def _logs_problem(args: argparse.Namespace) -> str | None:
    if args.follow and args.grep is not None:
        return "logs: --follow and --grep do not go together; grep the log, or follow it"
    return None


@with_client
def _logs(api: ApiClient, args: argparse.Namespace) -> int:
    from app.cli import client

    if args.grep is not None:
        return client.grep_log(
            api, args.attempt, args.grep, regex=args.regex, ignore_case=args.ignore_case, err=_stderr
        )
    return client.show_log(api, args.attempt, follow=args.follow, out=sys.stdout.buffer, err=_stderr)


@with_client
def _bench(api: ApiClient, args: argparse.Namespace) -> int:
    from app.cli import client

    return client.bench(api, args.attempt, workload=args.workload, out=sys.stdout.buffer, err=_stderr)


@with_client
def _start_sweep(api: ApiClient, args: argparse.Namespace) -> int:
    from app.cli import client

    return client.start_sweep(api, args)


@with_client
def _show_sweep(api: ApiClient, args: argparse.Namespace) -> int:
    from app.cli import client

    return client.show_sweep(api, args.sweep)


@with_client
def _stop_sweep(api: ApiClient, args: argparse.Namespace) -> int:
    api.call("POST", f"/api/sweeps/{args.sweep}/stop")
    return 0


@with_client
def _compare(api: ApiClient, args: argparse.Namespace) -> int:
    from app.cli import client

    return client.compare(api, args.a, args.b, as_json=args.json)
