"""Host keys: known_hosts lookups, trust on first use, and saying why a key was refused."""

from __future__ import annotations

import logging
from pathlib import Path

import asyncssh

log = logging.getLogger(__name__)


def known_keys(known_hosts: Path, host: str, addr: str, port: int) -> list[asyncssh.SSHKey]:
    """The keys known_hosts lists for this host, by name or address, with or without the port."""
    if not known_hosts.exists():
        return []
    return list(asyncssh.read_known_hosts(str(known_hosts)).match(host, addr, port)[0])


def record_host_key(known_hosts: Path, host: str, port: int, key: asyncssh.SSHKey) -> None:
    pattern = host if port == 22 else f"[{host}]:{port}"
    known_hosts.parent.mkdir(parents=True, exist_ok=True)
    with known_hosts.open("a", encoding="utf-8") as f:
        f.write(f"{pattern} {key.export_public_key().decode().strip()}\n")
    log.warning("trusted the host key of %s (%s) on first use", pattern, key.get_fingerprint())


def describe_rejection(known_hosts: Path, host: str, addr: str, port: int) -> str:
    if known_keys(known_hosts, host, addr, port):
        return (
            f"host key does not match the one in {known_hosts}: refusing to connect "
            "(if the host was reinstalled, remove its old line from known_hosts)"
        )
    return f"host key is not in {known_hosts}: add it (ssh-keyscan) or set trust_on_first_use for this host"


def generate_key_file(path: Path, comment: str = "") -> asyncssh.SSHKey:
    """A new ed25519 private key at `path` (mode 0600) with its public key beside it."""
    key = asyncssh.generate_private_key("ssh-ed25519", comment=comment or None)
    path.parent.mkdir(parents=True, exist_ok=True)
    key.write_private_key(path)
    path.chmod(0o600)
    key.write_public_key(f"{path}.pub")
    return key
