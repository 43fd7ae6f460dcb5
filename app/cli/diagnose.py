"""`launchdeck diagnose` and `launchdeck rules`: reading an SGLang log on this machine, and the team's
diagnosis rules kept in the dashboard. `diagnose` needs none of the dashboard, and neither loads
its settings nor imports it, so it starts at once."""

from __future__ import annotations

import argparse
import sys
from typing import TYPE_CHECKING, BinaryIO

from app.cli.shared import URL_HELP, with_client
from app.errors import InvalidInput

if TYPE_CHECKING:
    from app.cli.remote import ApiClient
    from app.cli.shared import Subcommands
    from app.diagnose.rules import Rule
    from app.diagnose.stored import StoredDiagnosis

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
    "cut_off",
    "observations",
)


def add_parsers(commands: Subcommands) -> None:
    diagnose_parser = commands.add_parser(
        "diagnose",
        help="read an SGLang log: stage, root error, class, hint",
        description="Read an SGLang log on this machine: the stage it reached, its root error, failure class, "
        "fingerprint and hint. Exit status: 0 the log shows no failure; 1 it shows one (any class); 2 a usage "
        "error (a log or rules file that cannot be read).",
    )
    diagnose_parser.add_argument("logfile", help="the log; - reads standard input")
    diagnose_parser.add_argument("--json", action="store_true", help="print the result as JSON")
    diagnose_parser.add_argument(
        "--rules", metavar="FILE", help="a TOML file of team rules that correct the built-in diagnosis"
    )
    diagnose_parser.set_defaults(run=_diagnose)
    rules_parser = commands.add_parser("rules", help="the team's diagnosis rules in the dashboard, as a TOML file")
    rules_commands = rules_parser.add_subparsers(dest="rules_command", required=True, metavar="ACTION")
    export_parser = rules_commands.add_parser("export", help="write the dashboard's rules as a rules file")
    export_parser.add_argument("file", nargs="?", help="where to write it (default: standard output)")
    export_parser.set_defaults(run=_export_rules)
    import_parser = rules_commands.add_parser("import", help="add a rules file's rules (all checked first)")
    import_parser.add_argument("file")
    import_parser.set_defaults(run=_import_rules)
    for rules_command in (export_parser, import_parser):
        rules_command.add_argument("--url", help=URL_HELP)


def _diagnose(args: argparse.Namespace) -> int:
    return diagnose_file(args.logfile, as_json=args.json, rules_path=args.rules)


@with_client
def _export_rules(api: ApiClient, args: argparse.Namespace) -> int:
    from app.cli import client

    return client.export_rules(api, args.file)


def _import_rules(args: argparse.Namespace) -> int:
    """Checks the whole file before asking the dashboard."""
    try:
        rules_text = _checked_rules_text(args.file)
    except InvalidInput as exc:
        print(f"launchdeck: rules file {args.file}: {exc}; nothing was imported", file=sys.stderr)
        return 2

    @with_client
    def import_rules(api: ApiClient, args: argparse.Namespace) -> int:
        from app.cli import client

        return client.import_rules(api, rules_text, name=args.file)

    return import_rules(args)


def diagnose_file(path: str, *, as_json: bool, rules_path: str | None = None) -> int:
    """Reads the log (`-`: standard input) in chunks, so a log of any size takes bounded memory;
    team rules, when given, read the same chunks and then decide over the built-in answer. Exit
    status 1 when the log shows a failure, 0 when it does not, 2 when a file cannot be read."""
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

    def feed(log: BinaryIO) -> None:
        while chunk := log.read(1 << 20):
            analyzer.feed_bytes(chunk)
            scanner.feed_bytes(chunk)

    try:
        if path == "-":
            feed(sys.stdin.buffer)
        else:
            with open(path, "rb") as log:
                feed(log)
    except OSError as exc:
        print(f"launchdeck: cannot read {_named(path)}: {exc.strerror or exc}", file=sys.stderr)
        return 2
    found, decision = stored(analyzer.finish()).decided_by(scanner)
    for warning in scanner.warnings:
        print(f"launchdeck: warning: {warning}", file=sys.stderr)
    if decision is not None:
        found = replace(found, rule=AppliedRule.of(decision, None, decision.line))
    as_kept = found.to_json()
    keys = (*CLI_KEYS, "rule", "built_in") if rules_path is not None else CLI_KEYS
    result = {key: as_kept.get(key) for key in keys}
    status = 1 if shows_failure(found) else 0
    if as_json:
        print(json.dumps(result, indent=2))
        return status
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
    if found.root_error is not None:
        print(f"{'evidence:':13} {len(found.observations) or '-'}")
        for seen in found.observations:
            weighed = f"[{seen.points_to} +{seen.weight}] " if seen.points_to else ""
            print(f"  {weighed}{seen.says}")
    return status


def shows_failure(found: StoredDiagnosis) -> bool:
    """Whether the answer is a failure: any class but healthy, except for input that is no SGLang
    log at all (class `other`, unrecognised, with no error line in it), which shows none."""
    from app.states import FailureClass

    if found.failure_class == FailureClass.HEALTHY:
        return False
    return found.recognised or found.root_error is not None or found.fingerprint is not None


def _named(path: str) -> str:
    return "standard input" if path == "-" else path


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
