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
        self._started: set[str] = set()

    def start(self, names: Iterable[str] | None = None) -> None:
        """Connects to `names` (default: every host); a controller sharing the hosts connects to
        the ones it owns, as it takes them."""
        for name in self._hosts if names is None else names:
            if not self._hosts[name].supervised:
                self._hosts[name].start()
                self._started.add(name)

    async def stop(self, names: Iterable[str]) -> None:
        """Closes the connections to `names` (another controller owns them now)."""
        names = [name for name in names if name in self._started]
        self._started.difference_update(names)
        await asyncio.gather(*(self._hosts[name].close() for name in names))

    async def close(self) -> None:
        """At shutdown: the hosts started stay started, so that readiness names them as unsupervised."""
        await asyncio.gather(*(self._hosts[name].close() for name in self._started))

    def unsupervised(self) -> list[str]:
        """The hosts started whose connection is not kept by a running task: none, until closed."""
        return [name for name, host in self._hosts.items() if name in self._started and not host.supervised]

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
