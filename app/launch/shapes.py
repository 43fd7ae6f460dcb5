"""The three shapes a launch takes: a server on one host, one server across several nodes (one
part per node), and a Slurm batch job. Each says which hosts it needs, checks them before anything
is recorded (its preflight), and writes its attempt's rows; `AttemptService` runs the guards
around them and follows what they wrote."""

from __future__ import annotations

import asyncio
import hashlib
from dataclasses import dataclass, field
from typing import Any

from sqlalchemy.ext.asyncio import AsyncSession

from app.clock import utcnow
from app.db.models import Attempt, PresetRevision
from app.diagnose.figures import Need
from app.errors import InvalidInput
from app.launch import nodes, remote, slurm_lifecycle
from app.launch.follower import GpuReadings
from app.launch.guards import LaunchPermission
from app.launch.preflight import Check, HostCheck, Preflight
from app.presets.revisions import command_argv
from app.ssh import SSHManager
from app.ssh.hosts import SlurmSettings
from app.states import AttemptStatus


@dataclass
class Shape:
    """A launch of `revision` on `hosts` (node 0 first), before anything is recorded: `argv` and
    `env` are node 0's, the ones the guards compare with earlier attempts."""

    revision: PresetRevision
    hosts: list[str]
    gpus: list[int]
    port: int
    argv: list[str]
    env: dict[str, str]
    audit_detail: dict[str, Any] = field(default_factory=dict)

    def check(self, permission: LaunchPermission | None, ssh: SSHManager) -> None:
        if permission is not None:
            for host in self.hosts:
                permission.check(host, ssh.get(host).spec.labels)

    async def preflight(self, check_host: HostCheck, need: Need | None = None) -> Preflight:
        revision = self.revision
        return await check_host(
            self.hosts[0],
            gpus=self.gpus,
            port=self.port,
            python=revision.python,
            model_path=revision.model_path,
            args=list(revision.args),
            env=dict(revision.env),
            need=need,
        )

    async def add_rows(
        self, session: AsyncSession, attempt: Attempt, host_ids: dict[str, int], gpus: GpuReadings
    ) -> None:
        """Called once the attempt has its id: its script, and the rows it needs besides its own."""
        _with_script(attempt)


@dataclass
class SlurmJob(Shape):
    """One batch job on the cluster whose login node is `hosts[0]`: Slurm places it, so nothing is
    checked on the login node, and the queue says when it starts."""

    cluster: SlurmSettings = field(kw_only=True)

    async def preflight(self, check_host: HostCheck, need: Need | None = None) -> Preflight:
        count = slurm_lifecycle.gpus_per_node(self.cluster, self.gpus)
        gpus = f"{count} GPU{'s' if count != 1 else ''}"
        said = f"Slurm places the job: {gpus} per node on partition {self.cluster.partition or '(the default)'}"
        return Preflight([Check("slurm", True, f"{said}; the node's GPUs are not checked before", blocking=False)])

    async def add_rows(
        self, session: AsyncSession, attempt: Attempt, host_ids: dict[str, int], gpus: GpuReadings
    ) -> None:
        slurm_lifecycle.prepare(attempt, self.cluster)


@dataclass
class Nodes(Shape):
    """One server across the nodes in `hosts`, a part per node, node 0 waiting for the others on
    `dist_port` and serving HTTP on `port`."""

    dist_port: int = field(kw_only=True)
    node_argvs: list[list[str]] = field(kw_only=True)

    async def preflight(self, check_host: HostCheck, need: Need | None = None) -> Preflight:
        """Every node's preflight at once, and all of them as one: each check's message names its node."""
        nnodes, revision = len(self.hosts), self.revision
        prefix = len(command_argv(revision)) - len(revision.args)  # the launcher, model path and port
        checked = await asyncio.gather(
            *(
                check_host(
                    host,
                    gpus=self.gpus,
                    port=self.port,
                    python=revision.python,
                    model_path=revision.model_path,
                    args=self.node_argvs[rank][prefix:],
                    env=dict(revision.env),
                    nnodes=nnodes,
                    node_rank=rank,
                    dist_port=self.dist_port if rank == 0 else None,
                    need=need,
                )
                for rank, host in enumerate(self.hosts)
            )
        )
        combined = Preflight(effective_args=checked[0].effective_args, sglang_version=checked[0].sglang_version)
        for rank, (host, found) in enumerate(zip(self.hosts, checked, strict=True)):
            for check in found.checks:
                check.message = f"node {rank} ({host}): {check.message}"
                check.detail = {**check.detail, "node": rank, "host": host}
                combined.checks.append(check)
        return combined

    async def add_rows(
        self, session: AsyncSession, attempt: Attempt, host_ids: dict[str, int], gpus: GpuReadings
    ) -> None:
        """The attempt's row is node 0's host and command; each node gets a part of its own."""
        for rank, (host, argv) in enumerate(zip(self.hosts, self.node_argvs, strict=True)):
            part = Attempt(
                host_id=host_ids[host],
                preset_revision_id=self.revision.id,
                part_of_id=attempt.id,
                node_rank=rank,
                gpus=list(self.gpus),
                argv=argv,
                env=self.env,
                port=self.port if rank == 0 else None,  # only node 0 serves HTTP
                status=AttemptStatus.PENDING,
                launched_by=attempt.launched_by,
                stage=AttemptStatus.PENDING,
                stages=list(attempt.stages),
                gpu_snapshot={"at_launch": gpus.snapshot_of(host)},
            )
            session.add(part)
            await session.flush()
            _with_script(part)


@dataclass(frozen=True)
class Where:
    """Where a request asks to run: a host (or a Slurm cluster), or the nodes of a multi-node
    preset as `hosts` or a `label`; the GPUs (on each node), node 0's HTTP port and the port where
    it waits for the other nodes (None: the preset's, the default)."""

    host: str | None
    hosts: list[str] | None
    label: str | None
    gpus: list[int]
    port: int | None
    dist_port: int | None


def shape_of(ssh: SSHManager, revision: PresetRevision, where: Where, *, asked: str) -> Shape:
    """The shape a request takes: a Slurm job when `host` is a cluster, several nodes when the
    preset asks for them (`--nnodes N`: `hosts` or N hosts with `label`), else one host. `asked`
    names what the request does, for the sentence that says a host is missing."""
    host, hosts, label, gpus = where.host, where.hosts, where.label, where.gpus
    port = where.port or revision.port
    argv = command_argv(revision)
    argv[argv.index("--port") + 1] = str(port)
    cluster = ssh.get(host).spec.slurm if host is not None and hosts is None and not label else None
    nnodes = nodes.nnodes_of(revision.args)
    if cluster is None and (nnodes > 1 or hosts is not None or label):
        names = _node_hosts(ssh, nnodes, host=host, hosts=hosts, label=label)
        dist_port = where.dist_port or nodes.DEFAULT_DIST_PORT
        leader = f"{nodes.address_of(ssh.get(names[0]))}:{dist_port}"
        node_argvs = [
            nodes.node_argv(argv, nnodes=len(names), node_rank=rank, dist_init_addr=leader)
            for rank in range(len(names))
        ]
        env = {**revision.env, "CUDA_VISIBLE_DEVICES": ",".join(map(str, gpus))}
        detail = {"hosts": names, "gpus": gpus, "dist_port": dist_port}
        return Nodes(
            revision, names, gpus, port, node_argvs[0], env, detail, dist_port=dist_port, node_argvs=node_argvs
        )
    if host is None:
        raise InvalidInput(f"host: say which host to {asked}")
    name = ssh.get(host).name
    detail = {"host": host, "gpus": gpus}
    if cluster is not None:
        return SlurmJob(revision, [name], gpus, port, argv, {**revision.env}, detail, cluster=cluster)
    env = {**revision.env, "CUDA_VISIBLE_DEVICES": ",".join(map(str, gpus))}
    return Shape(revision, [name], gpus, port, argv, env, detail)


def new_attempt(
    shape: Shape,
    *,
    host_id: int,
    actor: str,
    override_reason: str,
    preflight: Preflight,
    configuration: str,
    sweep: tuple[int, dict[str, Any]] | None,
) -> Attempt:
    """The attempt's row as every shape records it, pending."""
    return Attempt(
        host_id=host_id,
        preset_revision_id=shape.revision.id,
        gpus=list(shape.gpus),
        argv=shape.argv,
        env=shape.env,
        configuration=configuration,
        port=shape.port,
        status=AttemptStatus.PENDING,
        launched_by=actor,
        override_reason=override_reason,
        stage=AttemptStatus.PENDING,
        stages=[{"stage": AttemptStatus.PENDING, "at": utcnow().isoformat()}],
        preflight=preflight.as_dict(),
        effective_args=preflight.effective_args,
        sglang_version=preflight.sglang_version,
        sweep_id=sweep[0] if sweep else None,
        sweep_point=sweep[1] if sweep else {},
    )


def _with_script(attempt: Attempt) -> None:
    """The attempt's directory on its host and the script that starts its server there."""
    attempt.remote_dir = remote.attempt_dir(attempt.id)
    attempt.script = remote.render_script(
        attempt_id=attempt.id, directory=attempt.remote_dir, argv=attempt.argv, env=attempt.env
    )
    attempt.script_sha256 = hashlib.sha256(attempt.script.encode()).hexdigest()


def _node_hosts(
    ssh: SSHManager, nnodes: int, *, host: str | None, hosts: list[str] | None, label: str | None
) -> list[str]:
    """The hosts of a launch on `nnodes` nodes, node 0 first."""
    if hosts is None and label:
        return nodes.pick_hosts(list(ssh), label, nnodes)
    chosen = hosts if hosts is not None else [host] if host else []
    if nnodes == 1:
        raise InvalidInput("hosts: the preset runs on one node (its arguments have no --nnodes above 1); give one host")
    if len(chosen) != nnodes:
        raise InvalidInput(
            f"hosts: the preset asks for {nnodes} nodes (--nnodes {nnodes}); give {nnodes} hosts or a label"
        )
    if len(set(chosen)) != len(chosen):
        raise InvalidInput("hosts: give each host once")
    return [ssh.get(name).name for name in chosen]
