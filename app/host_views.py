"""Each host as the controller that owns it sees it, for the processes that do not talk to it: the
SSH connection's state and the GPU readings, kept in the host_view table.

The owner writes a host's row when its state changes, and its readings at most every
PUBLISH_EVERY seconds, all its hosts in one short transaction; every process on the shared
database reads the rows written since its last look, once a second, and shows them for the hosts
it does not own (a web process owns none). On SQLite one process owns every host: none of this runs.
"""

from __future__ import annotations

import asyncio
import logging
import time
from dataclasses import asdict
from datetime import datetime, timedelta
from typing import Any

from sqlalchemy import func, select
from sqlalchemy.dialects.postgresql import insert

from app.db import Sessions
from app.db.models import HostView
from app.gpu.monitor import GpuMonitor, HostGpus
from app.gpu.partitions import NodeGpus, PartitionGpus
from app.gpu.probe import GpuProcess, GpuReading, Snapshot
from app.leases import Ownership
from app.ssh import SSHManager
from app.ssh.connection import HostState, HostStatus

log = logging.getLogger(__name__)

PUBLISH_EVERY = 2.0  # seconds between a host's readings written (a change of state goes at once)
LOOK_EVERY = 1.0  # seconds between reads of what changed
LOOK_BACK = timedelta(seconds=5)  # longer than a publishing transaction takes


def gpus_as_json(gpus: HostGpus) -> dict[str, Any]:
    return {
        "state": gpus.state,
        "message": gpus.message,
        "source": gpus.source,
        "since": gpus.since.isoformat(),
        "every": max(gpus.every, PUBLISH_EVERY),
        "snapshot": asdict(gpus.snapshot) if gpus.snapshot is not None else None,
        "partitions": [asdict(partition) for partition in gpus.partitions],
    }


def show_gpus(target: HostGpus, data: dict[str, Any]) -> None:
    """Sets what the views show of the host to what its owner stored."""
    target.state, target.message, target.source = data["state"], data["message"], data["source"]
    target.since, target.every = datetime.fromisoformat(data["since"]), data["every"]
    if (snapshot := data.get("snapshot")) is not None:
        target.snapshot = Snapshot(
            taken_at=snapshot["taken_at"],
            gpus=[GpuReading(**gpu) for gpu in snapshot["gpus"]],
            processes=[GpuProcess(**process) for process in snapshot["processes"]],
        )
    target.partitions = [
        PartitionGpus(p["name"], [NodeGpus(**node) for node in p["nodes"]]) for p in data.get("partitions", [])
    ]


class HostViews:
    """Started by the lifespan wherever several processes share the database. `ownership` is the
    controller's leases (its hosts' views it writes); None in a web process, which writes none."""

    def __init__(self, sessions: Sessions, ssh: SSHManager, gpus: GpuMonitor, ownership: Ownership | None, owner: str):
        self.sessions = sessions
        self.ssh = ssh
        self.gpus = gpus
        self.ownership = ownership
        self.owner = owner
        self._written: dict[str, tuple[Any, ...]] = {}  # host -> what its row says now
        self._written_at: dict[str, float] = {}
        self._seen_until: datetime | None = None
        self._tasks: list[asyncio.Task[None]] = []

    def start(self) -> None:
        if self.ownership is not None:
            self._tasks.append(asyncio.create_task(self._forever(self.publish), name="host-views-publish"))
        self._tasks.append(asyncio.create_task(self._forever(self.look), name="host-views-look"))

    async def close(self) -> None:
        for task in self._tasks:
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)

    async def _forever(self, step: Any) -> None:
        while True:
            try:
                await step()
            except Exception as exc:  # the database away: the views wait, the hosts are unaffected
                log.warning("host views: %s", exc)
            await asyncio.sleep(LOOK_EVERY)

    async def publish(self) -> None:
        """Writes the rows of the hosts this controller owns whose state or readings changed."""
        assert self.ownership is not None
        now, rows = time.monotonic(), []
        for connection in self.ssh:
            if not self.ownership.owns(connection.name):
                self._written.pop(connection.name, None)
                continue
            status, gpus = connection.status, self.gpus.hosts[connection.name]
            state = (status.state, status.since, status.last_error, gpus.state, gpus.message)
            readings = gpus.snapshot.taken_at if gpus.snapshot else None
            written = self._written.get(connection.name)
            if written is not None and written[:-1] == state:
                recent = now - self._written_at[connection.name] < PUBLISH_EVERY
                if written[-1] == readings or recent:
                    continue
            self._written[connection.name], self._written_at[connection.name] = (*state, readings), now
            rows.append(
                {
                    "host": connection.name,
                    "owner": self.owner,
                    "state": status.state.value,
                    "since": status.since,
                    "last_error": status.last_error,
                    "gpus": gpus_as_json(gpus),
                    "updated_at": func.now(),
                }
            )
        if not rows:
            return
        statement = insert(HostView).values(rows)
        replaced = {column: statement.excluded[column] for column in rows[0] if column != "host"}
        try:
            async with self.sessions.write.begin() as session:
                await session.execute(statement.on_conflict_do_update(index_elements=["host"], set_=replaced))
        except Exception:
            for row in rows:  # written again at the next round
                self._written.pop(str(row["host"]), None)
            raise

    async def look(self) -> None:
        """Shows what the owners wrote since the last look, for the hosts this process does not own."""
        query = select(HostView)
        if self._seen_until is not None:
            # A row committed late may carry an earlier now(): look back a little; rows are idempotent.
            query = query.where(HostView.updated_at > self._seen_until - LOOK_BACK)
        async with self.sessions.read() as session:
            now = await session.scalar(select(func.now()))
            found = (await session.scalars(query)).all()
        self._seen_until = now
        changed = False
        for view in found:
            if view.host not in self.ssh or (self.ownership is not None and self.ownership.owns(view.host)):
                continue
            self.ssh.get(view.host).observe(HostStatus(HostState(view.state), view.since, view.last_error))
            show_gpus(self.gpus.hosts[view.host], view.gpus)
            changed = True
        if changed:
            self.gpus.bump()
