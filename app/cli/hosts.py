"""`launchdeck hosts`: the GPU hosts the dashboard keeps, with their state and free GPU memory, as
its hosts page shows them."""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING, Any

from app.cli.shared import JSON_HELP, URL_HELP, print_json, table, with_client

if TYPE_CHECKING:
    from app.cli.remote import ApiClient
    from app.cli.shared import Subcommands


def add_parsers(commands: Subcommands) -> None:
    hosts_parser = commands.add_parser("hosts", help="list the GPU hosts: state, GPUs and their free memory")
    hosts_parser.add_argument("--json", action="store_true", help=JSON_HELP)
    hosts_parser.add_argument("--url", help=URL_HELP)
    hosts_parser.set_defaults(run=_list_hosts)


@with_client
def _list_hosts(api: ApiClient, args: argparse.Namespace) -> int:
    hosts = api.call("GET", "/api/hosts")
    if args.json:
        print_json(hosts)
        return 0
    if not hosts:
        print("no hosts: add [[host]] tables to the dashboard's hosts file")
        return 0
    for line in table(("HOST", "STATE", "GPUS", "FREE GiB", "NOTE"), map(_host_row, hosts)):
        print(line)
    return 0


def _host_row(host: dict[str, Any]) -> tuple[object, ...]:
    """GPUs as a count and model, free memory per GPU as INDEX:GiB; a Slurm cluster's partitions
    with their free GPUs instead."""
    gpus: list[dict[str, Any]] = host["gpus"]
    models = free = None
    if gpus:
        models = f"{len(gpus)} x {' / '.join(sorted({gpu['name'] for gpu in gpus}))}"
        free = " ".join(f"{gpu['index']}:{_gib(gpu['memory_free_mib'])}" for gpu in gpus)
    elif host["partitions"]:
        models = ", ".join(f"{p['name']}: {p['gpus_free']} of {p['gpus_total']} free" for p in host["partitions"])
    note = host["last_error"] if host["state"] != "online" else host["gpu_error"]
    return host["name"], host["state"], models, free, note or ""


def _gib(mib: int | None) -> str:
    return "?" if mib is None else f"{mib / 1024:.1f}"
