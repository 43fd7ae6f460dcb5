"""Host definitions: the hosts file (TOML) and what one host's SSH connection needs.

An entry with `kind = "slurm"` is a Slurm cluster: the SSH fields reach its login node, and the
cluster fields (partition, account, time limit, GPUs per node, extra sbatch options, where job
output goes) say how its jobs are submitted. Those fields are refused on a plain host, where they
would be silently ignored.
"""

from __future__ import annotations

import re
import tomllib
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import tomli_w

from app.errors import InvalidInput
from app.states import HostKind

# OpenSSH's default MaxSessions: channels one connection may carry at once.
DEFAULT_MAX_SESSIONS = 10
# Where a Slurm attempt's directory (batch script, job output, exit status) goes on the login
# node, relative to the SSH user's home: it must be on a filesystem the compute nodes share.
DEFAULT_OUTPUT_DIR = ".launchdeck/attempts"


@dataclass(frozen=True)
class SlurmSettings:
    """How a Slurm cluster's jobs are submitted; unset values are left to the cluster's defaults."""

    partition: str | None = None
    account: str | None = None
    time_limit: str | None = None  # in Slurm's notation: minutes, [D-]HH:MM:SS, ...
    gpus_per_node: int | None = None  # for a launch that names no GPUs
    sbatch_options: tuple[str, ...] = ()
    output_dir: str = DEFAULT_OUTPUT_DIR

    def as_dict(self) -> dict[str, Any]:
        """As kept on the Host row."""
        return {
            "partition": self.partition,
            "account": self.account,
            "time_limit": self.time_limit,
            "gpus_per_node": self.gpus_per_node,
            "sbatch_options": list(self.sbatch_options),
            "output_dir": self.output_dir,
        }


@dataclass(frozen=True)
class HostSpec:
    """How to reach one host. Unset address, port and user come from ~/.ssh/config, then defaults."""

    name: str
    address: str | None = None
    port: int | None = None
    user: str | None = None
    labels: tuple[str, ...] = ()
    identity_files: tuple[str, ...] = ()
    known_hosts: str | None = None
    trust_on_first_use: bool = False
    max_sessions: int = DEFAULT_MAX_SESSIONS
    slurm: SlurmSettings | None = None  # set for a Slurm cluster (kind "slurm")

    @property
    def kind(self) -> HostKind:
        return HostKind.SSH if self.slurm is None else HostKind.SLURM

    def ssh_options(self) -> dict[str, Any]:
        """The options kept on the Host row; paths and flags only, never key material."""
        return {
            "identity_files": list(self.identity_files),
            "known_hosts": self.known_hosts,
            "trust_on_first_use": self.trust_on_first_use,
            "max_sessions": self.max_sessions,
        }


_FIELDS: dict[str, type] = {
    "name": str,
    "address": str,
    "port": int,
    "user": str,
    "labels": list,
    "identity_files": list,
    "known_hosts": str,
    "trust_on_first_use": bool,
    "max_sessions": int,
    "kind": str,
    "partition": str,
    "account": str,
    "time_limit": str,
    "gpus_per_node": int,
    "sbatch_options": list,
    "output_dir": str,
}
_SLURM_FIELDS = ("partition", "account", "time_limit", "gpus_per_node", "sbatch_options", "output_dir")
# Names end up in known_hosts lines, URLs and remote paths: keep them to safe characters.
_PATTERNS = {
    "name": (re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,127}"), "letters, digits, '.', '_' and '-'"),
    "address": (re.compile(r"[A-Za-z0-9._:%-]{1,255}"), "a host name or IP address"),
    "user": (re.compile(r"[A-Za-z0-9._][A-Za-z0-9._-]{0,63}"), "a login name"),
    "partition": (re.compile(r"[A-Za-z0-9._-]{1,64}"), "a partition name"),
    "account": (re.compile(r"[A-Za-z0-9._-]{1,64}"), "an account name"),
    # Slurm's forms: MM, MM:SS, HH:MM:SS, D-HH, D-HH:MM, D-HH:MM:SS, or "infinite".
    "time_limit": (
        re.compile(r"\d+(:\d\d){0,2}|\d+-\d+(:\d\d){0,2}|infinite|unlimited", re.IGNORECASE),
        "a Slurm time limit (minutes, HH:MM:SS or D-HH:MM:SS)",
    ),
    "output_dir": (re.compile(r"[A-Za-z0-9._/~+-]{1,255}"), "a directory path (letters, digits, '._/~+-')"),
}
_TYPE_NAMES = {str: "a string", int: "an integer", list: "a list", bool: "true or false"}


def parse_hosts(text: str, *, source: str = "hosts file") -> list[HostSpec]:
    """Parses `[[host]]` tables; every mistake is reported with the host and field it is in."""
    try:
        document = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise InvalidInput(f"{source}: {exc}") from None
    unknown_top = set(document) - {"host"}
    if unknown_top:
        raise InvalidInput(f"{source}: unknown section(s) {', '.join(sorted(unknown_top))}; expected [[host]] tables")
    specs: list[HostSpec] = []
    for position, table in enumerate(document.get("host", []), start=1):
        where = f"{source}, host #{position}"
        unknown = set(table) - set(_FIELDS)
        if unknown:
            raise InvalidInput(f"{where}: unknown field(s) {', '.join(sorted(unknown))}")
        for key, value in table.items():
            if not isinstance(value, _FIELDS[key]) or (key != "trust_on_first_use" and isinstance(value, bool)):
                raise InvalidInput(f"{where}: {key} must be {_TYPE_NAMES[_FIELDS[key]]}")
        if not table.get("name"):
            raise InvalidInput(f"{where}: name is required")
        for key, (pattern, meaning) in _PATTERNS.items():
            if key in table and not pattern.fullmatch(table[key]):
                raise InvalidInput(f"{where}: {key} {table[key]!r} is not {meaning}")
        where = f"{source}, host {table['name']!r}"
        port = table.get("port")
        if port is not None and not 1 <= port <= 65535:
            raise InvalidInput(f"{where}: port {port} is out of range 1-65535")
        if table.get("max_sessions", DEFAULT_MAX_SESSIONS) < 1:
            raise InvalidInput(f"{where}: max_sessions must be at least 1")
        if table["name"] in {spec.name for spec in specs}:
            raise InvalidInput(f"{where}: the name is used twice")
        slurm = _slurm_settings(table, where)
        specs.append(
            HostSpec(
                name=table["name"],
                address=table.get("address"),
                port=port,
                user=table.get("user"),
                labels=tuple(map(str, table.get("labels", ()))),
                identity_files=tuple(str(Path(p).expanduser()) for p in table.get("identity_files", ())),
                known_hosts=str(Path(table["known_hosts"]).expanduser()) if "known_hosts" in table else None,
                trust_on_first_use=table.get("trust_on_first_use", False),
                max_sessions=table.get("max_sessions", DEFAULT_MAX_SESSIONS),
                slurm=slurm,
            )
        )
    return specs


def _slurm_settings(table: dict[str, Any], where: str) -> SlurmSettings | None:
    kind = table.get("kind", HostKind.SSH)
    if kind not in list(HostKind):
        raise InvalidInput(f"{where}: kind {kind!r} is not one of {', '.join(HostKind)}")
    if kind == HostKind.SSH:
        given = [key for key in _SLURM_FIELDS if key in table]
        if given:
            raise InvalidInput(f'{where}: {", ".join(given)} only apply to kind = "slurm"')
        return None
    if table.get("gpus_per_node", 1) < 1:
        raise InvalidInput(f"{where}: gpus_per_node must be at least 1")
    options = table.get("sbatch_options", [])
    for option in options:
        if not isinstance(option, str) or not option.startswith("--") or "\n" in option:
            raise InvalidInput(f'{where}: sbatch_options must be a list of long options, e.g. ["--qos=high"]')
    output_dir = table.get("output_dir", DEFAULT_OUTPUT_DIR)
    if ".." in output_dir.split("/"):
        raise InvalidInput(f"{where}: output_dir {output_dir!r} must not contain '..'")
    return SlurmSettings(
        partition=table.get("partition"),
        account=table.get("account"),
        time_limit=table.get("time_limit"),
        gpus_per_node=table.get("gpus_per_node"),
        sbatch_options=tuple(options),
        output_dir=output_dir.rstrip("/") or "/",
    )


def load_hosts_file(path: Path) -> list[HostSpec]:
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise InvalidInput(f"cannot read hosts file {path}: {exc.strerror}") from None
    return parse_hosts(text, source=str(path))


def render_hosts(specs: list[HostSpec]) -> str:
    """The TOML that parse_hosts reads back as `specs`, unset and default fields left out."""
    return tomli_w.dumps({"host": [_host_table(spec) for spec in specs]})


def _host_table(spec: HostSpec) -> dict[str, Any]:
    table: dict[str, Any] = {"name": spec.name}
    for key in ("address", "port", "user", "known_hosts"):
        if (value := getattr(spec, key)) is not None:
            table[key] = value
    if spec.labels:
        table["labels"] = list(spec.labels)
    if spec.identity_files:
        table["identity_files"] = list(spec.identity_files)
    if spec.trust_on_first_use:
        table["trust_on_first_use"] = True
    if spec.max_sessions != DEFAULT_MAX_SESSIONS:
        table["max_sessions"] = spec.max_sessions
    if spec.slurm is not None:
        table["kind"] = str(HostKind.SLURM)
        for key in ("partition", "account", "time_limit", "gpus_per_node"):
            if (value := getattr(spec.slurm, key)) is not None:
                table[key] = value
        if spec.slurm.sbatch_options:
            table["sbatch_options"] = list(spec.slurm.sbatch_options)
        if spec.slurm.output_dir != DEFAULT_OUTPUT_DIR:
            table["output_dir"] = spec.slurm.output_dir
    return table
