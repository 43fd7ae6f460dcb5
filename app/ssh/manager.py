"""The connections to every configured host."""

from __future__ import annotations

import asyncio
from collections.abc import Iterable, Iterator

from app.errors import NotFound
from app.ssh.connection import HostConnection, SSHOptions
from app.ssh.hosts import HostSpec


class SSHManager:
    """Opened at start and closed at shutdown by the app's lifespan."""

    def __init__(self, specs: Iterable[HostSpec], options: SSHOptions):
        self._hosts = {spec.name: HostConnection(spec, options) for spec in specs}

    def start(self) -> None:
        for host in self._hosts.values():
            host.start()

    async def close(self) -> None:
        await asyncio.gather(*(host.close() for host in self._hosts.values()))

    def unsupervised(self) -> list[str]:
        """The hosts whose connection is not kept by a running task: none once started, until closed."""
        return [name for name, host in self._hosts.items() if not host.supervised]

    def __iter__(self) -> Iterator[HostConnection]:
        return iter(self._hosts.values())

    def __len__(self) -> int:
        return len(self._hosts)

    def __contains__(self, name: object) -> bool:
        return name in self._hosts

    def get(self, name: str) -> HostConnection:
        try:
            return self._hosts[name]
        except KeyError:
            raise NotFound(f"unknown host {name!r}") from None
