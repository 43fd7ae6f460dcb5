"""Keeps the Host rows in step with the configured hosts, so attempts can refer to them."""

from __future__ import annotations

from collections.abc import Iterable

from sqlalchemy import select
from sqlalchemy.ext.asyncio import AsyncSession

from app.db.models import Host
from app.ssh.hosts import HostSpec


async def register_hosts(session: AsyncSession, specs: Iterable[HostSpec], *, source: str = "file") -> None:
    """Inserts new hosts and updates changed ones; rows of removed hosts stay for their history."""
    existing = {host.name: host for host in await session.scalars(select(Host))}
    for spec in specs:
        host = existing.get(spec.name) or Host(name=spec.name)
        host.address = spec.address
        host.port = spec.port
        host.user = spec.user
        host.labels = list(spec.labels)
        host.ssh_options = spec.ssh_options()
        host.kind = spec.kind
        host.cluster = spec.slurm.as_dict() if spec.slurm is not None else {}
        host.source = source
        session.add(host)
    await session.commit()
