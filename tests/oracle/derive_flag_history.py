"""Derives app/diagnose/flag_history.json from the released SGLang packages themselves.

    python -m tests.oracle.derive_flag_history [--first 0.5.10] [--last 0.5.23] [--oracle DIR]

For each release it downloads the wheel (`pip download --no-deps`), unpacks it, and asks that
release's own parser (tests/oracle/sglang_parser.py, run by the oracle venv's interpreter) for its
flags. Consecutive releases are then compared: a flag that disappeared was removed; one whose
action became one of SGLang's Deprecated* actions, or whose help starts with "Deprecated", was
deprecated (renamed, where its replacement is a plain rename); a Deprecated action with an
error message refuses the flag, so that counts as removed; a choice that left a flag's choices
was removed. The rewrite comes from what SGLang names as the replacement (the action's new_flag,
or "use --flag[=value]" in its help), kept only where it is mechanical.
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import re
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path
from typing import Any

from tests.support.paths import APP, ROOT

TABLE = APP / "diagnose" / "flag_history.json"
PARSER_SCRIPT = Path(__file__).with_name("sglang_parser.py")
ORACLE = Path(os.environ.get("LAUNCHDECK_ORACLE_CACHE") or Path.home() / ".cache/launchdeck/sglang-oracle")
DEPRECATED_ACTIONS = ("DeprecatedStoreTrueAction", "DeprecatedStoreConstAction", "DeprecatedAliasStoreAction")
# "Use --flag=value instead", "(Deprecated, use --flag)", "Alias for --flag value".
USE = re.compile(r"(?:\buse|\balias for) (--[a-z0-9{},-]+)(?:=([^\s)<]+)| ([^\s)<.,]+))?", re.IGNORECASE)
MAPS_TO = re.compile(r"'([^']+)' maps to '([^']+)'")
BRACES = re.compile(r"^(--[a-z0-9-]*)\{([^}]*)\}([a-z0-9-]*)$")

Flags = dict[str, dict[str, Any]]


def release_flags(version: str, wheels: Path, oracle: Path) -> Flags:
    """The flags of one release, as its own parser declares them."""
    subprocess.run(
        [sys.executable, "-m", "pip", "download", "--quiet", "--no-deps", f"sglang=={version}", "-d", str(wheels)],
        check=True,
    )
    wheel = next(wheels.glob(f"sglang-{version}-*.whl"))
    target = wheels / version
    if not (target / "sglang").is_dir():
        with zipfile.ZipFile(wheel) as archive:
            archive.extractall(target, [name for name in archive.namelist() if name.startswith("sglang/")])
    env = {**os.environ, "PYTHONPATH": str(target), "HF_HUB_OFFLINE": "1"}
    found = subprocess.run(
        [str(oracle / "venv" / "bin" / "python"), str(PARSER_SCRIPT), "flags"],
        env=env,
        capture_output=True,
        text=True,
    )
    if found.returncode != 0:
        sys.exit(f"sglang {version}'s parser could not be built:\n{found.stderr[-3000:]}")
    flags: Flags = json.loads(found.stdout)
    return flags


def deprecation(flag: dict[str, Any] | None) -> str | None:
    """What SGLang says of a deprecated flag, or None for a current one."""
    if flag is None or flag["error_message"]:
        return None
    help_text = (flag["help"] or "").strip()
    if flag["action"] in DEPRECATED_ACTIONS or flag["action"] == "DeprecatedAction":
        said_so = "deprecat" in help_text.lower()
        return help_text if said_so else f"Deprecated alias for {flag['new_flag']}."
    if re.match(r"^\W*deprecated", help_text, re.IGNORECASE):
        return help_text
    return None


def rewrite_of(option: str, flag: dict[str, Any], said: str, flags: Flags) -> tuple[list[str] | None, dict[str, str]]:
    """The tokens that replace `option` ("{value}" standing for its value), or None where SGLang's
    advice is not a mechanical substitution; and how its values map, where SGLang says."""
    named, value = flag["new_flag"], ""
    if named:
        named, _, value = named.partition("=")
    elif match := USE.search(said):
        named, value = match[1], match[2] or ""
        choices = flags.get(named, {}).get("choices") or []
        if match[3] and match[3] in choices:  # a value after a space only where it is one of the flag's
            value = match[3]
    if not named or "<" in named or " " in named:
        return None, {}
    spelled = named
    braces = BRACES.match(spelled)
    options = [braces[1] + part + braces[3] for part in braces[2].split(",")] if braces else [spelled]
    tokens: list[str] = []
    for replacement in options:
        if replacement not in flags:
            return None, {}
        takes_value = flags[replacement]["nargs"] != 0
        if value:
            tokens += [replacement, value]
        elif takes_value and flag["nargs"] != 0:
            tokens += [replacement, "{value}"]
        elif takes_value:
            return None, {}  # a switch whose replacement needs a value SGLang does not name
        else:
            tokens.append(replacement)
    return tokens, dict(MAPS_TO.findall(said))


def derive(releases: dict[str, Flags]) -> list[dict[str, Any]]:
    versions = list(releases)
    changes: list[dict[str, Any]] = []
    last_rewrite: dict[str, dict[str, Any]] = {}
    refused: set[str] = set()

    def first_seen(option: str, choice: str | None = None) -> str:
        for version in versions:
            flag = releases[version].get(option)
            if flag and (choice is None or choice in (flag["choices"] or [])):
                return version
        return versions[0]

    for before, version in itertools.pairwise(versions):
        old, new = releases[before], releases[version]
        for option in sorted(set(old) | set(new)):
            was, now = old.get(option), new.get(option)
            if option in ("-h", "--help"):
                continue
            row: dict[str, Any] = {"flag": option, "version": version, "first_seen": first_seen(option)}
            if was and not now and option not in refused:
                carried = last_rewrite.get(option, {})
                row |= {"change": "removed", "nargs": was["nargs"], "note": carried.get("note", "")}
                row |= {key: carried[key] for key in ("rewrite", "values") if key in carried}
                changes.append(row)
                continue
            if now is None:
                continue
            if now["error_message"] and not (was and was["error_message"]):
                refused.add(option)
                rewrite, values = rewrite_of(option, now, now["error_message"], new)
                row |= {"change": "removed", "nargs": now["nargs"], "note": now["error_message"]}
                changes.append(row | ({"rewrite": rewrite, "values": values} if rewrite else {}))
                continue
            said = deprecation(now)
            if said and not deprecation(was):
                rewrite, values = rewrite_of(option, now, said, new)
                renamed = rewrite is not None and (
                    now["action"] == "DeprecatedAliasStoreAction" or (len(rewrite) == 1 and now["nargs"] == 0)
                )
                row |= {"change": "renamed" if renamed else "deprecated", "nargs": now["nargs"], "note": said}
                row["warns"] = now["action"] in DEPRECATED_ACTIONS or now["action"] == "DeprecatedAction"
                if rewrite:
                    row |= {"rewrite": rewrite, "values": values}
                    if renamed:
                        row["replacement_since"] = first_seen(rewrite[0])
                    last_rewrite[option] = row
                else:
                    last_rewrite[option] = {"note": said}
                changes.append(row)
            if was and was["choices"] and now["choices"] is not None:
                for choice in [c for c in was["choices"] if c not in now["choices"]]:
                    changes.append(
                        {
                            "flag": option,
                            "change": "choice-removed",
                            "choice": choice,
                            "version": version,
                            "first_seen": first_seen(option, choice),
                            "nargs": now["nargs"],
                            "note": "",
                        }
                    )
    return changes


def minor_versions(first: str, last: str) -> list[str]:
    major, minor, low = (int(part) for part in first.split("."))
    high = int(last.split(".")[2])
    return [f"{major}.{minor}.{patch}" for patch in range(low, high + 1)]


def main() -> None:
    options = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    options.add_argument("--first", default="0.5.10")
    options.add_argument("--last", default="0.5.23")
    options.add_argument("--oracle", type=Path, default=ORACLE, help="holds venv/ (torch on the CPU, SGLang's deps)")
    options.add_argument("--wheels", type=Path, help="where to keep the downloaded wheels (default: a temporary dir)")
    chosen = options.parse_args()
    versions = minor_versions(chosen.first, chosen.last)
    with tempfile.TemporaryDirectory() as scratch:
        wheels = chosen.wheels or Path(scratch)
        wheels.mkdir(parents=True, exist_ok=True)
        releases = {version: release_flags(version, wheels, chosen.oracle) for version in versions}
    table = {
        "about": "How SGLang's server flags changed, release by release; derived by "
        "tests/oracle/derive_flag_history.py from the released wheels. Do not edit by hand: run it again.",
        "versions": versions,
        "changes": derive(releases),
    }
    TABLE.write_text(json.dumps(table, indent=1) + "\n")
    print(f"{TABLE.relative_to(ROOT)}: {len(table['changes'])} changes across {versions[0]} .. {versions[-1]}")


if __name__ == "__main__":
    main()
