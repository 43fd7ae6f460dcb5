"""Host definitions: the hosts file (TOML) and what one host's SSH connection needs."""

from __future__ import annotations

import re
import tomllib
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from app.errors import InvalidInput

# OpenSSH's default MaxSessions: channels one connection may carry at once.
DEFAULT_MAX_SESSIONS = 10


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
}
# Names end up in known_hosts lines, URLs and remote paths: keep them to safe characters.
_PATTERNS = {
    "name": (re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,127}"), "letters, digits, '.', '_' and '-'"),
    "address": (re.compile(r"[A-Za-z0-9._:%-]{1,255}"), "a host name or IP address"),
    "user": (re.compile(r"[A-Za-z0-9._][A-Za-z0-9._-]{0,63}"), "a login name"),
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
            )
        )
    return specs


def load_hosts_file(path: Path) -> list[HostSpec]:
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise InvalidInput(f"cannot read hosts file {path}: {exc.strerror}") from None
    return parse_hosts(text, source=str(path))


def render_hosts(specs: list[HostSpec]) -> str:
    """The TOML that parse_hosts reads back as `specs`."""
    blocks = []
    for spec in specs:
        lines = ["[[host]]", f"name = {_toml(spec.name)}"]
        for key in ("address", "port", "user", "known_hosts"):
            value = getattr(spec, key)
            if value is not None:
                lines.append(f"{key} = {_toml(value)}")
        if spec.labels:
            lines.append(f"labels = [{', '.join(map(_toml, spec.labels))}]")
        if spec.identity_files:
            lines.append(f"identity_files = [{', '.join(map(_toml, spec.identity_files))}]")
        if spec.trust_on_first_use:
            lines.append("trust_on_first_use = true")
        if spec.max_sessions != DEFAULT_MAX_SESSIONS:
            lines.append(f"max_sessions = {spec.max_sessions}")
        blocks.append("\n".join(lines))
    return "\n\n".join(blocks) + "\n"


def _toml(value: object) -> str:
    if isinstance(value, int):
        return str(value)
    text = str(value)
    return '"' + text.replace("\\", "\\\\").replace('"', '\\"') + '"'
