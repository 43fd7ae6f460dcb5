"""`launchdeck adopt HOST PORT`: an SGLang server started outside launchdeck becomes an attempt,
followed from then on as a launched one is (POST /api/hosts/{name}/adopt)."""

from __future__ import annotations

import argparse
import shlex
from typing import TYPE_CHECKING
from urllib.parse import quote

from app.cli.shared import JSON_HELP, URL_HELP, print_json, with_client

if TYPE_CHECKING:
    from app.cli.remote import ApiClient
    from app.cli.shared import Subcommands


def add_parsers(commands: Subcommands) -> None:
    adopt_parser = commands.add_parser(
        "adopt",
        help="record an SGLang server started outside launchdeck as an attempt, and follow it",
        description="Adopt the SGLang server listening on PORT of HOST: its command line, environment and log "
        "are read from the host, and its health, log and GPUs followed from then on; `launchdeck stop` stops "
        "it. Exit status: 0 adopted; 1 the dashboard refused (nothing listens there, not an SGLang server, "
        "already an attempt's, not readable), its sentence on stderr; 2 a usage error.",
    )
    adopt_parser.add_argument("host")
    adopt_parser.add_argument("port", type=int)
    adopt_parser.add_argument("--json", action="store_true", help=JSON_HELP)
    adopt_parser.add_argument("--url", help=URL_HELP)
    adopt_parser.set_defaults(run=_adopt)


@with_client
def _adopt(api: ApiClient, args: argparse.Namespace) -> int:
    adopted = api.call("POST", f"/api/hosts/{quote(args.host, safe='')}/adopt", json={"port": args.port})
    if args.json:
        print_json(adopted)
        return 0
    attempt_id, gpus = adopted["id"], ",".join(map(str, adopted["gpus"])) or "unknown"
    print(f"attempt {attempt_id}: {adopted['status']} ({adopted['preset']} r{adopted['revision']})")
    print(f"  {api.url}/attempts/{attempt_id}")
    print(f"  pid {adopted['pid']} · GPUs {gpus} · log {adopted['log'] or 'none: its output goes to no file'}")
    print(f"  {shlex.join(adopted['argv'])}")
    return 0
