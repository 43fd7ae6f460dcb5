"""SSH to the GPU hosts: one HostConnection per host, shared by every operation."""

from __future__ import annotations

import asyncio
from collections.abc import Iterable

from app.errors import NotFound
from app.ssh.connection import HostConnection, HostState, HostStatus, RunResult, SSHOptions
from app.ssh.hosts import HostSpec, load_hosts_file, parse_hosts, render_hosts

__all__ = [
    "HostConnection",
    "HostSpec",
    "HostState",
    "HostStatus",
    "RunResult",
    "SSHManager",
    "SSHOptions",
    "load_hosts_file",
    "parse_hosts",
    "render_hosts",
]


class SSHManager:
    """The connections to every configured host, opened at start and closed at shutdown."""

    def __init__(self, specs: Iterable[HostSpec], options: SSHOptions):
        self._hosts = {spec.name: HostConnection(spec, options) for spec in specs}

    def start(self) -> None:
        for host in self._hosts.values():
            host.start()

    async def close(self) -> None:
        await asyncio.gather(*(host.close() for host in self._hosts.values()))

    def __iter__(self):  # type: ignore[no-untyped-def]
        return iter(self._hosts.values())

    def __len__(self) -> int:
        return len(self._hosts)

    def get(self, name: str) -> HostConnection:
        try:
            return self._hosts[name]
        except KeyError:
            raise NotFound(f"unknown host {name!r}") from None
