"""Adopting a server started outside launchdeck: the SGLang process listening on a port of a host,
recorded as an attempt and followed from then on like a launched one.

What is kept is what the host's process table says of it (app.launch.process_table), never a
guess. A regular file on its stdout or stderr is its log, mirrored from its first byte: the file
holds the server's whole story since it started, which the diagnosis reads in order (the
arguments line, the stages, the ready line), so its page reads as a launched attempt's does. Output
to a pipe, a terminal or /dev/null leaves no log to mirror, and the page says so.

The adopted attempt gets a directory of its own on the host, as a launched one has: a pid file and
`server.log`, a link to the server's log. The probe and the log mirror then work on it unchanged.
There is no exit code file: launchdeck did not start the process, so an end it did not cause is
`lost`, its exit status unknown; one it caused (a stop) is `stopped`.

The preset is one per model path (`adopted-<model>`, made archived), whose revision holds the
model path and the arguments parsed from argv; a revision is made only where no revision of it
holds them yet, the port aside.
"""

from __future__ import annotations

import asyncio
import re
import secrets
from dataclasses import replace
from typing import Any, Protocol

import httpx
from sqlalchemy import select
from sqlalchemy.ext.asyncio import AsyncSession
from sqlalchemy.orm import selectinload

from app import audit
from app.clock import utcnow
from app.db import Sessions
from app.db.models import Attempt, Host, Preset, PresetRevision
from app.diagnose.stored import StoredDiagnosis
from app.errors import Conflict, HostError, InvalidInput, NotFound
from app.launch import remote
from app.launch.follower import SERVER_INFO_STATE, Follower, GpuReadings
from app.launch.guards import LaunchPermission, configuration_key
from app.launch.process_table import (
    ServerCommand,
    ServerProcess,
    find_server,
    kept_env,
    server_command,
    withheld_argv,
    without_options,
)
from app.launch.record import Pace
from app.presets.revisions import RESERVED_ENV, PresetInput, same_revision
from app.ssh import HostConnection, SSHManager
from app.states import ACTIVE_STATUSES, AttemptStatus, HostKind

PRESET_DESCRIPTION = "Servers started outside launchdeck and adopted: each revision holds what one of them ran."
STAGE = "adopted"  # the first entry of an adopted attempt's timeline
# How an adopted server's end reads when launchdeck did not cause it.
ENDED_UNSEEN = "the adopted server's process has ended; launchdeck did not start it, so its exit status is unknown"


class Adopting(Protocol):
    """What adopting uses of the attempt service."""

    sessions: Sessions
    ssh: SSHManager
    gpus: GpuReadings
    pace: Pace


def preset_name(model_path: str) -> str:
    slug = re.sub(r"[^A-Za-z0-9._-]+", "-", model_path).strip("-._") or "model"
    return f"adopted-{slug}"[:128]


async def ask_server(connection: HostConnection, address: str, port: int, timeout: float) -> tuple[int | None, Any]:
    """The status /health answers (None for no answer) and what /get_server_info says (None)."""
    try:
        listener = await connection.forward_local_port(port, address)
    except HostError:
        return None, None
    try:
        async with httpx.AsyncClient(timeout=timeout, verify=False) as client:  # plain HTTP through SSH

            async def get(path: str) -> httpx.Response | None:
                try:
                    return await client.get(f"http://127.0.0.1:{listener.get_port()}{path}")
                except httpx.HTTPError:
                    return None

            health, info = await asyncio.gather(get("/health"), get("/get_server_info"))
    finally:
        listener.close()
    try:
        reported = info.json() if info is not None and info.status_code == 200 else None
    except ValueError:
        reported = None
    return (health.status_code if health is not None else None), reported


async def adopt_server(
    service: Adopting, *, host: str, port: int, actor: str, permission: LaunchPermission | None = None
) -> Attempt:
    """Records the SGLang server listening on `port` of `host` as an attempt, ready (its /health
    answers 200) or loading. Refused, with nothing recorded: nothing listens there (NotFound), the
    process is not an SGLang server or cannot be read (InvalidInput), it is an attempt's already
    (Conflict). The host's evidence is read first, then one unit of work records it."""
    if not 1 <= port <= 65535:
        raise InvalidInput(f"port: {port} is out of range (1-65535)")
    connection = service.ssh.get(host)
    if permission is not None:
        permission.check(connection.name, connection.spec.labels)
    if connection.spec.kind == HostKind.SLURM:
        raise InvalidInput(f"{connection.name} is a Slurm cluster: adopt a server on the GPU host it runs on")
    server, address = await find_server(connection, port)
    command = server_command(server.argv)
    if command is None:
        raise InvalidInput(
            f"port {port} on {connection.name} is served by pid {server.pid} ({_short(server.argv)}), which is not "
            "an SGLang server: its command line has neither `-m sglang.launch_server` nor `sglang serve`"
        )
    argv, withheld = withheld_argv(server.argv)
    env, withheld_env = kept_env(server.environ or {})
    preset_in = adopted_preset(command, withheld, env, port)
    async with service.sessions.read() as session:
        await _refuse_if_followed(session, connection.name, server, port)
    health, info = await ask_server(connection, address, port, service.pace.health_timeout)
    directory = f"{remote.ATTEMPTS_DIR}/adopted-{secrets.token_hex(4)}"
    details = {
        "by": actor,
        "at": utcnow().isoformat(),
        "owner": server.owner,
        "cwd": server.cwd,
        "address": address,
        "group_leader": server.pgid == server.pid,
        "log": server.log.target if server.log else None,
        "log_size": server.log.size if server.log else None,
        "output": {"stdout": server.outputs[0].described, "stderr": server.outputs[1].described},
        "health": health,
        "withheld": [*withheld, *withheld_env],
    }
    # The directory first, so that no attempt is ever recorded without it; a refusal from here on
    # (another adoption of the same server that came first) leaves it behind, three small files.
    await connection.run(
        ["sh", "-c", remote.RECORD_ADOPTED, "sh", directory, str(server.pid), str(server.start_time), server.log_link()]
    )
    async with service.sessions.write.begin() as session:
        await _refuse_if_followed(session, connection.name, server, port)
        revision, preset, saved = await _revision_for(session, preset_in, actor)
        host_id = await session.scalar(select(Host.id).where(Host.name == connection.name))
        if host_id is None:
            raise NotFound(f"unknown host {connection.name!r}")
        attempt = Attempt(
            host_id=host_id,
            preset_revision_id=revision.id,
            gpus=_gpus_of(server, env, service.gpus.snapshot_of(connection.name)),
            argv=argv,
            env=env,
            configuration=configuration_key(argv, env),
            remote_dir=directory,
            port=port,
            pid=server.pid,
            pgid=server.pgid,
            pid_start_time=server.start_time,
            status=AttemptStatus.READY if health == 200 else AttemptStatus.LOADING,
            stage=STAGE,
            stages=[{"stage": STAGE, "at": details["at"]}],
            launched_by=actor,
            started_at=server.started_at,
            sglang_version=str(info.get("version") or "") if isinstance(info, dict) else "",
            diagnosis=_with_server_info(info),
            gpu_snapshot={"at_adoption": service.gpus.snapshot_of(connection.name)},
            adopted=details,
        )
        session.add(attempt)
        await session.flush()
        audit.record(
            session, actor=actor, action="adopt", target=f"attempt {attempt.id}",
            detail={"host": connection.name, "port": port, "pid": server.pid, "preset": preset,
                    "revision": revision.number, "revision_saved": saved},
        )  # fmt: skip
    return attempt


async def _refuse_if_followed(session: AsyncSession, host: str, server: ServerProcess, port: int) -> None:
    """Conflict when an unfinished attempt has the process: its pid, or its process group (a
    launched server's group is its launch script's; an adopted server owns its group only when it
    leads it)."""
    query = (
        select(Attempt.id, Attempt.part_of_id, Attempt.pid, Attempt.pgid)
        .join(Host, Attempt.host_id == Host.id)
        .where(Host.name == host, Attempt.status.in_(ACTIVE_STATUSES))
        .where((Attempt.pid == server.pid) | (Attempt.pgid == server.pgid))
    )
    for attempt_id, part_of_id, pid, pgid in (await session.execute(query)).all():
        if pid == server.pid or pgid == pid:
            raise Conflict(
                f"the server on port {port} on {host} (pid {server.pid}) is attempt {part_of_id or attempt_id}'s "
                "already: launchdeck follows it there"
            )


def adopted_preset(command: ServerCommand, withheld: list[str], env: dict[str, str], port: int) -> PresetInput:
    """The adopted servers' preset for the model, its revision holding the command; arguments
    withheld as secrets are left out. InvalidInput where the command cannot be a preset revision."""
    if not command.model_path:
        raise InvalidInput("the server's command line names no --model-path: it cannot be kept as a preset")
    data = PresetInput(
        name=preset_name(command.model_path), model_path=command.model_path,
        args=without_options(command.args, set(withheld)),
        env={name: value for name, value in env.items() if name not in RESERVED_ENV},
        description=PRESET_DESCRIPTION, launcher=command.launcher, python=command.python, port=port,
    )  # fmt: skip
    try:
        data.validate()
    except InvalidInput as exc:
        raise InvalidInput(f"the server's arguments cannot be kept as a preset revision: {exc}") from None
    return data


async def _revision_for(session: AsyncSession, data: PresetInput, actor: str) -> tuple[PresetRevision, str, bool]:
    """The preset's revision that holds `data`, its port aside (a new one only where none does),
    the preset's name, and whether the revision was made now."""
    query = select(Preset).options(selectinload(Preset.revisions)).where(Preset.name == data.name)
    preset = await session.scalar(query)
    if preset is None:
        # Archived, as a sweep's points preset is: a record of what ran, kept out of the launch form
        # and the presets list until someone restores it to launch it themselves.
        preset = Preset(name=data.name, description=PRESET_DESCRIPTION, archived_at=utcnow())
        session.add(preset)
        await session.flush()
        number = 1
    else:
        # The port is where this one listens, not its configuration: a revision on another port serves.
        found = next((r for r in preset.revisions if same_revision(r, replace(data, port=r.port))), None)
        if found is not None:
            return found, preset.name, False
        number = preset.revisions[-1].number + 1 if preset.revisions else 1
    fields = {key: getattr(data, key) for key in ("model_path", "launcher", "python", "port", "args", "env")}
    revision = PresetRevision(preset_id=preset.id, number=number, created_by=actor, **fields)
    session.add(revision)
    await session.flush()
    return revision, preset.name, True


def _gpus_of(server: ServerProcess, env: dict[str, str], snapshot: dict[str, Any]) -> list[int]:
    """The GPUs it runs on: CUDA_VISIBLE_DEVICES (indices, or UUIDs the readings name), else the
    GPUs its processes hold memory on in the latest readings; [] where neither says."""
    readings = snapshot.get("gpus", [])
    by_uuid = {gpu.get("uuid"): gpu.get("index") for gpu in readings if gpu.get("uuid")}
    visible = [word.strip() for word in env.get("CUDA_VISIBLE_DEVICES", "").split(",") if word.strip()]
    if visible and all(word.isdigit() or word in by_uuid for word in visible):
        return [int(word) if word.isdigit() else int(by_uuid[word]) for word in visible]
    held = {process["gpu"] for process in snapshot.get("processes", []) if process.get("pid") in server.tree}
    return sorted(gpu for gpu in held if isinstance(gpu, int) and gpu >= 0)


def _with_server_info(info: Any) -> dict[str, Any]:
    """The diagnosis column holding the arguments the live server reports (for drift), as the
    follower keeps them when a launched server becomes ready."""
    if not isinstance(info, dict):
        return {}
    arguments = {key: value for key, value in info.items() if key not in SERVER_INFO_STATE}
    return replace(StoredDiagnosis(), server_info=arguments).to_json()


def _short(argv: list[str], limit: int = 80) -> str:
    text = " ".join(argv)
    return text if len(text) <= limit else text[: limit - 1] + "…"


class AdoptedFollower(Follower):
    """Follows an adopted server as a launched one, but for what was not known: its log may lack
    the ready line (truncated or rotated since) or be none at all, so its /health alone says whether
    it serves; and it leaves no exit status, so an end launchdeck did not cause is lost."""

    async def _resume(self) -> tuple[Attempt, HostConnection]:
        attempt, connection = await super()._resume()
        # A copy: the log's own ready line still goes on the timeline when the log shows it.
        self.seen = {*self.watch.seen, "ready line"}
        return attempt, connection

    async def _finish_process(self, probe: Any, mirror: Any, *, hung: bool) -> None:
        if probe.exit_code is None and not await self._stop_requested():
            await self._record_log_progress(mirror, hung=hung, final=True)
            await self.record.finish(AttemptStatus.LOST, error=ENDED_UNSEEN)
            return
        await super()._finish_process(probe, mirror, hung=hung)
