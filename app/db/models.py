"""Tables. Every schema change is an Alembic migration in migrations/versions."""

from __future__ import annotations

from datetime import UTC, datetime
from enum import StrEnum
from typing import Any, TypeVar

from sqlalchemy import (
    JSON,
    BigInteger,
    DateTime,
    Float,
    ForeignKey,
    Index,
    Integer,
    MetaData,
    String,
    Text,
    UniqueConstraint,
    event,
    select,
    text,
)
from sqlalchemy.engine import Connection
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column, relationship
from sqlalchemy.types import TypeDecorator

from app.clock import utcnow
from app.states import AttemptStatus, BenchmarkStatus, HostKind, LimitedBy, Role, SweepMode, SweepStatus

State = TypeVar("State", bound=StrEnum)


class UTCDateTime(TypeDecorator[datetime]):
    """Timezone-aware datetimes on every backend (SQLite stores them naive)."""

    impl = DateTime(timezone=True)
    cache_ok = True

    def process_bind_param(self, value: datetime | None, dialect: Any) -> datetime | None:
        if value is not None and value.tzinfo is None:
            raise ValueError("naive datetime given; use app.clock.utcnow()")
        return value.astimezone(UTC) if value is not None else None

    def process_result_value(self, value: datetime | None, dialect: Any) -> datetime | None:
        if value is not None and value.tzinfo is None:
            return value.replace(tzinfo=UTC)
        return value


class StateType(TypeDecorator[State]):
    """A value of one of app.states' enums in Python, as a plain string column in the database."""

    impl = String(16)
    cache_ok = True

    def __init__(self, states: type[State]):
        super().__init__()
        self.states = states

    def process_bind_param(self, value: State | str | None, dialect: Any) -> str | None:
        return None if value is None else self.states(value).value

    def process_result_value(self, value: str | None, dialect: Any) -> State | None:
        return None if value is None else self.states(value)


# Row ids and byte counts that can outgrow 32 bits on PostgreSQL; SQLite's INTEGER is 64-bit.
BigInt = BigInteger().with_variant(Integer, "sqlite")


class Base(DeclarativeBase):
    type_annotation_map = {datetime: UTCDateTime, dict[str, Any]: JSON, list[Any]: JSON}
    # Named constraints, so later migrations on SQLite (batch mode) can drop and alter them.
    metadata = MetaData(
        naming_convention={
            "ix": "ix_%(column_0_label)s",
            "uq": "uq_%(table_name)s_%(column_0_name)s",
            "ck": "ck_%(table_name)s_%(constraint_name)s",
            "fk": "fk_%(table_name)s_%(column_0_name)s_%(referred_table_name)s",
            "pk": "pk_%(table_name)s",
        }
    )


class Host(Base):
    """A GPU host reachable over SSH (kind "ssh"), or a Slurm cluster reached through its login node
    (kind "slurm"). Address, port and user may be left to ~/.ssh/config."""

    __tablename__ = "host"

    id: Mapped[int] = mapped_column(primary_key=True)
    name: Mapped[str] = mapped_column(String(128), unique=True)
    address: Mapped[str | None] = mapped_column(String(255))
    port: Mapped[int | None]
    user: Mapped[str | None] = mapped_column(String(64))
    labels: Mapped[list[Any]] = mapped_column(default=list)
    ssh_options: Mapped[dict[str, Any]] = mapped_column(default=dict)
    source: Mapped[str] = mapped_column(String(16), default="file")
    kind: Mapped[HostKind] = mapped_column(StateType(HostKind), default=HostKind.SSH)
    # A Slurm cluster's settings: partition, account, time limit, GPUs per node, sbatch options, output dir.
    cluster: Mapped[dict[str, Any]] = mapped_column(default=dict)
    created_at: Mapped[datetime] = mapped_column(default=utcnow)
    updated_at: Mapped[datetime] = mapped_column(default=utcnow, onupdate=utcnow)


class Preset(Base):
    __tablename__ = "preset"

    id: Mapped[int] = mapped_column(primary_key=True)
    name: Mapped[str] = mapped_column(String(128), unique=True)
    description: Mapped[str] = mapped_column(Text, default="")
    # An incoming webhook told when this preset's attempts become ready, fail or turn unhealthy;
    # "" for none. Kept on the preset, not its revisions: it says who hears, not what runs.
    webhook_url: Mapped[str] = mapped_column(Text, default="")
    archived_at: Mapped[datetime | None]
    created_at: Mapped[datetime] = mapped_column(default=utcnow)

    revisions: Mapped[list[PresetRevision]] = relationship(back_populates="preset", order_by="PresetRevision.number")


class PresetRevision(Base):
    """One immutable saved state of a preset; attempts point at the revision they ran."""

    __tablename__ = "preset_revision"
    __table_args__ = (UniqueConstraint("preset_id", "number"),)

    id: Mapped[int] = mapped_column(primary_key=True)
    preset_id: Mapped[int] = mapped_column(ForeignKey("preset.id", ondelete="CASCADE"))
    number: Mapped[int]
    model_path: Mapped[str] = mapped_column(Text)
    launcher: Mapped[str] = mapped_column(String(64), default="python -m sglang.launch_server")
    python: Mapped[str] = mapped_column(Text, default="python3")
    port: Mapped[int] = mapped_column(default=30000)
    args: Mapped[list[Any]] = mapped_column(default=list)
    env: Mapped[dict[str, Any]] = mapped_column(default=dict)
    created_at: Mapped[datetime] = mapped_column(default=utcnow)
    created_by: Mapped[str] = mapped_column(String(64), default="")

    preset: Mapped[Preset] = relationship(back_populates="revisions")


class Signature(Base):
    """One failure cause, grouped across attempts by its fingerprint."""

    __tablename__ = "signature"
    __table_args__ = (Index("ix_signature_class_last_seen", "failure_class", "last_seen"),)

    id: Mapped[int] = mapped_column(primary_key=True)
    fingerprint: Mapped[str] = mapped_column(String(64), unique=True)
    failure_class: Mapped[str] = mapped_column(String(32))
    exception_type: Mapped[str] = mapped_column(String(255), default="")
    message: Mapped[str] = mapped_column(Text, default="")
    frames: Mapped[list[Any]] = mapped_column(default=list)
    first_seen: Mapped[datetime] = mapped_column(default=utcnow)
    last_seen: Mapped[datetime] = mapped_column(default=utcnow, index=True)
    count: Mapped[int] = mapped_column(default=1)  # attempts that failed this way


def _only_where(condition: str) -> dict[str, Any]:
    """A partial index's condition, for both backends. A query uses such an index only when its own
    WHERE repeats the condition with the same literals (SQLite does not look into parameters)."""
    return {"sqlite_where": text(condition), "postgresql_where": text(condition)}


# The literal `Attempt.sglang_version` holds when the host could not say; queries that read the
# partial index ix_attempt_host_version compare with this literal, not a parameter.
UNKNOWN_VERSION = "''"


class Attempt(Base):
    """One launch of a preset revision on a host, recorded exactly as it ran."""

    __tablename__ = "attempt"
    # Lists page newest first by id: each filter's index ends in id, so a filtered page is read
    # in order from the index, without a sort (SQLite appends the rowid itself; PostgreSQL does not).
    __table_args__ = (
        Index("ix_attempt_host_id", "host_id", "id"),
        Index("ix_attempt_preset_id", "preset_id", "id"),
        # The failures of one revision, and of one configuration, for the "failed before" guard.
        Index("ix_attempt_revision_id", "preset_revision_id", "status"),
        Index("ix_attempt_configuration", "configuration", "status"),
        Index("ix_attempt_signature_id", "signature_id", "id"),
        Index("ix_attempt_status", "status", "id"),
        # Two filters together: a pair no attempt matches would otherwise walk every attempt of one.
        Index("ix_attempt_host_status", "host_id", "status", "id"),
        Index("ix_attempt_preset_status", "preset_id", "status", "id"),
        Index("ix_attempt_preset_host", "preset_id", "host_id", "id"),
        # Where each cause struck, read from the index alone.
        Index("ix_attempt_signature_places", "signature_id", "host_id", "preset_revision_id"),
        # Which attempt owns a process group seen on a host's GPUs.
        Index("ix_attempt_host_pgid", "host_id", "pgid"),
        # Only the parts of multi-node attempts: with every other row in it (part_of_id NULL), the
        # planner took it for `part_of_id IS NULL`, walked the whole table and sorted it on every list.
        Index("ix_attempt_parts", "part_of_id", "node_rank", **_only_where("part_of_id IS NOT NULL")),
        # The attempts whose host said which SGLang it runs, newest first per host.
        Index("ix_attempt_host_version", "host_id", "id", **_only_where(f"sglang_version <> {UNKNOWN_VERSION}")),
    )

    id: Mapped[int] = mapped_column(primary_key=True)
    host_id: Mapped[int] = mapped_column(ForeignKey("host.id"))
    preset_revision_id: Mapped[int] = mapped_column(ForeignKey("preset_revision.id"))
    # The revision's preset, kept on the row so that a preset's attempts page newest first from an
    # index: through the revisions, every page sorted all of the preset's attempts.
    preset_id: Mapped[int] = mapped_column(ForeignKey("preset.id"))
    gpus: Mapped[list[Any]] = mapped_column(default=list)
    argv: Mapped[list[Any]] = mapped_column(default=list)
    env: Mapped[dict[str, Any]] = mapped_column(default=dict)
    # A digest of argv and env less what each launch may change (port, GPUs): attempts of the same
    # configuration share it (app.launch.guards.configuration_key); "" where none was given.
    configuration: Mapped[str] = mapped_column(String(64), default="")
    script: Mapped[str] = mapped_column(Text, default="")
    script_sha256: Mapped[str] = mapped_column(String(64), default="")
    remote_dir: Mapped[str] = mapped_column(Text, default="")
    port: Mapped[int | None]
    pid: Mapped[int | None]
    pgid: Mapped[int | None]
    # The process's start time in clock ticks (/proc/<pid>/stat), which tells it from a later one
    # that reuses its pid.
    pid_start_time: Mapped[int | None] = mapped_column(BigInt)
    status: Mapped[AttemptStatus] = mapped_column(StateType(AttemptStatus), default=AttemptStatus.PENDING)
    stage: Mapped[str] = mapped_column(String(32), default="")
    stages: Mapped[list[Any]] = mapped_column(default=list)
    preflight: Mapped[dict[str, Any]] = mapped_column(default=dict)
    override_reason: Mapped[str] = mapped_column(Text, default="")
    stop_requested_at: Mapped[datetime | None]
    error: Mapped[str] = mapped_column(Text, default="")
    exit_code: Mapped[int | None]
    log_size: Mapped[int] = mapped_column(BigInt, default=0)
    signature_id: Mapped[int | None] = mapped_column(ForeignKey("signature.id"))
    # The effective arguments preflight predicted by running the host's own argument parser.
    effective_args: Mapped[dict[str, Any]] = mapped_column(default=dict)
    # The SGLang version the preset's Python reported on the host at launch ("" if it could not say).
    sglang_version: Mapped[str] = mapped_column(String(64), default="")
    # What the log says, kept up to date as it streams: a StoredDiagnosis as JSON (app.diagnose.stored).
    diagnosis: Mapped[dict[str, Any]] = mapped_column(default=dict)
    gpu_snapshot: Mapped[dict[str, Any]] = mapped_column(default=dict)
    launched_by: Mapped[str] = mapped_column(String(64), default="")
    created_at: Mapped[datetime] = mapped_column(default=utcnow, index=True)
    started_at: Mapped[datetime | None]
    ready_at: Mapped[datetime | None]
    ended_at: Mapped[datetime | None] = mapped_column(index=True)
    # A multi-node attempt is a row of its own (what lists, pages and compare show) plus one part per
    # node: a row with `part_of_id` and `node_rank`, its own host, process group, log and mirror.
    part_of_id: Mapped[int | None] = mapped_column(ForeignKey("attempt.id", ondelete="CASCADE"))
    node_rank: Mapped[int | None]
    # On a Slurm cluster: the job's id, and what the scheduler last said of it (state, reason,
    # queue position, nodes, and how it ended in Slurm's words).
    job_id: Mapped[str | None] = mapped_column(String(32))
    scheduler: Mapped[dict[str, Any]] = mapped_column(default=dict)
    # A point of a sweep: the sweep, and the values this attempt tried ({"--flag": "value", "ENV": ..}).
    sweep_id: Mapped[int | None] = mapped_column(ForeignKey("sweep.id", ondelete="SET NULL"), index=True)
    sweep_point: Mapped[dict[str, Any]] = mapped_column(default=dict)
    # A server started outside launchdeck and adopted (app.launch.adopt): by whom and when, what the
    # host's process table said of it (owner, cwd, where its output goes, secrets withheld); {}
    # for a launched attempt.
    adopted: Mapped[dict[str, Any]] = mapped_column(default=dict)

    host: Mapped[Host] = relationship()
    revision: Mapped[PresetRevision] = relationship()
    signature: Mapped[Signature | None] = relationship()


@event.listens_for(Attempt, "before_insert")
def _copy_preset_of_revision(_mapper: Any, connection: Connection, attempt: Attempt) -> None:
    """An attempt's preset is always its revision's: read here, at insert, for every way a row is made."""
    preset_id = connection.scalar(
        select(PresetRevision.preset_id).where(PresetRevision.id == attempt.preset_revision_id)
    )
    if preset_id is None:
        raise ValueError(f"attempt for revision {attempt.preset_revision_id}: no such preset revision")
    attempt.preset_id = preset_id


class Workload(Base):
    """A named benchmark load, the same every time it runs, so figures compare across attempts."""

    __tablename__ = "workload"

    id: Mapped[int] = mapped_column(primary_key=True)
    name: Mapped[str] = mapped_column(String(64), unique=True)
    description: Mapped[str] = mapped_column(Text, default="")
    dataset: Mapped[str] = mapped_column(String(32), default="random")
    num_prompts: Mapped[int]
    input_len: Mapped[int]
    output_len: Mapped[int]
    range_ratio: Mapped[float] = mapped_column(Float, default=1.0)
    request_rate: Mapped[float | None] = mapped_column(Float)  # None: all at once, as bench_serving's inf
    max_concurrency: Mapped[int | None]
    created_by: Mapped[str] = mapped_column(String(64), default="")
    created_at: Mapped[datetime] = mapped_column(default=utcnow)


class Benchmark(Base):
    """One run of SGLang's bench_serving against an attempt's server: its output is a file,
    `<data_dir>/benchmarks/<id>.log`; the summary's figures are here."""

    __tablename__ = "benchmark"
    __table_args__ = (
        Index("ix_benchmark_attempt_id", "attempt_id", "id"),
        Index("ix_benchmark_preset_id", "preset_id", "id"),
    )

    id: Mapped[int] = mapped_column(primary_key=True)
    attempt_id: Mapped[int] = mapped_column(ForeignKey("attempt.id", ondelete="CASCADE"))
    # The attempt's preset, so that a preset's chart reads its benchmarks from an index.
    preset_id: Mapped[int] = mapped_column(ForeignKey("preset.id"))
    workload_id: Mapped[int | None] = mapped_column(ForeignKey("workload.id", ondelete="SET NULL"))
    workload: Mapped[dict[str, Any]] = mapped_column(default=dict)  # its settings as they ran
    status: Mapped[BenchmarkStatus] = mapped_column(StateType(BenchmarkStatus), default=BenchmarkStatus.RUNNING)
    argv: Mapped[list[Any]] = mapped_column(default=list)
    figures: Mapped[dict[str, Any]] = mapped_column(default=dict)
    error: Mapped[str] = mapped_column(Text, default="")
    started_by: Mapped[str] = mapped_column(String(64), default="")
    created_at: Mapped[datetime] = mapped_column(default=utcnow)
    ended_at: Mapped[datetime | None]


class Sweep(Base):
    """A preset tried over a space of argument values, one ordinary attempt per point, each
    benchmarked. The points' revisions live in a preset of the sweep's own (archived), so the
    attempts point at exact revisions and the preset's own history stays as people made it."""

    __tablename__ = "sweep"

    id: Mapped[int] = mapped_column(primary_key=True)
    name: Mapped[str] = mapped_column(String(128), default="")
    preset_id: Mapped[int] = mapped_column(ForeignKey("preset.id", ondelete="CASCADE"), index=True)
    revision_number: Mapped[int]
    points_preset_id: Mapped[int | None] = mapped_column(ForeignKey("preset.id", ondelete="SET NULL"))
    host: Mapped[str] = mapped_column(String(128))
    gpus: Mapped[list[Any]] = mapped_column(default=list)
    port: Mapped[int | None]
    workload_id: Mapped[int | None] = mapped_column(ForeignKey("workload.id", ondelete="SET NULL"))
    mode: Mapped[SweepMode] = mapped_column(StateType(SweepMode), default=SweepMode.GRID)
    space: Mapped[dict[str, Any]] = mapped_column(default=dict)
    budget: Mapped[dict[str, Any]] = mapped_column(default=dict)  # max_points, max_seconds
    status: Mapped[SweepStatus] = mapped_column(StateType(SweepStatus), default=SweepStatus.RUNNING)
    result: Mapped[dict[str, Any]] = mapped_column(default=dict)
    error: Mapped[str] = mapped_column(Text, default="")
    created_by: Mapped[str] = mapped_column(String(64), default="")
    created_at: Mapped[datetime] = mapped_column(default=utcnow)
    stop_requested_at: Mapped[datetime | None]
    ended_at: Mapped[datetime | None]

    preset: Mapped[Preset] = relationship(foreign_keys=[preset_id])
    workload: Mapped[Workload | None] = relationship()

    @property
    def workload_name(self) -> str | None:
        return self.workload.name if self.workload else None


class Controller(Base):
    """A process that owns hosts (app.leases): alive while its heartbeat is recent."""

    __tablename__ = "controller"

    id: Mapped[str] = mapped_column(String(128), primary_key=True)
    pins: Mapped[list[Any]] = mapped_column(default=list)  # host labels it is pinned to; [] for any host
    started_at: Mapped[datetime]
    heartbeat_at: Mapped[datetime]


class HostLease(Base):
    """Which controller owns a host (or a Slurm cluster), until when, under which fencing token."""

    __tablename__ = "host_lease"

    host: Mapped[str] = mapped_column(String(128), primary_key=True)
    owner: Mapped[str] = mapped_column(String(128), default="")
    token: Mapped[int] = mapped_column(BigInt, default=0)  # grows with every change of owner
    expires_at: Mapped[datetime]


class HostView(Base):
    """What the controller that owns a host last saw of it (app.host_views): the connection's
    state and the GPU readings, for the processes that do not talk to the host themselves."""

    __tablename__ = "host_view"

    host: Mapped[str] = mapped_column(String(128), primary_key=True)
    owner: Mapped[str] = mapped_column(String(128))
    state: Mapped[str] = mapped_column(String(16))  # the SSH connection's: connecting | online | offline
    since: Mapped[datetime]
    last_error: Mapped[str | None] = mapped_column(Text)
    gpus: Mapped[dict[str, Any]] = mapped_column(default=dict)  # app.gpu.monitor.HostGpus as stored
    updated_at: Mapped[datetime] = mapped_column(index=True)


class HostCall(Base):
    """Work on a host asked by a process that does not own it (app.host_calls), answered in the
    row by the controller that does: claimed by one at a time, taken over from one that lost the host."""

    __tablename__ = "host_call"
    __table_args__ = (Index("ix_host_call_waiting", "claimed_by", "deadline"),)

    id: Mapped[int] = mapped_column(BigInt, primary_key=True, autoincrement=True)
    host: Mapped[str] = mapped_column(String(128))
    kind: Mapped[str] = mapped_column(String(32))
    payload: Mapped[dict[str, Any]] = mapped_column(default=dict)
    asked_at: Mapped[datetime]
    deadline: Mapped[datetime]  # not claimed after it: whoever asked has stopped waiting
    claimed_by: Mapped[str | None] = mapped_column(String(128))
    answered_at: Mapped[datetime | None]
    answer: Mapped[dict[str, Any] | None] = mapped_column(JSON)
    error: Mapped[dict[str, Any] | None] = mapped_column(JSON)  # {"type": ..., "message": ..., "host": ...}


class Notification(Base):
    """A status change people are told of (app.launch.notifications), written in the transaction
    that writes the status, and sent by the controller that owns the attempt's host: a failover
    neither loses it nor sends it under a second key."""

    __tablename__ = "notification"
    __table_args__ = (Index("ix_notification_done_at", "done_at", "id"),)

    id: Mapped[int] = mapped_column(BigInt, primary_key=True, autoincrement=True)
    attempt_id: Mapped[int] = mapped_column(ForeignKey("attempt.id", ondelete="CASCADE"))
    status: Mapped[AttemptStatus] = mapped_column(StateType(AttemptStatus))
    at: Mapped[datetime] = mapped_column(default=utcnow)
    delivered: Mapped[list[Any]] = mapped_column(default=list)  # the destinations done with it, by key
    done_at: Mapped[datetime | None]  # every destination told, or given up on


class ServingSample(Base):
    """A ready server's own figures at one scrape of its /metrics (app.launch.serving)."""

    __tablename__ = "serving_sample"
    __table_args__ = (Index("ix_serving_sample_attempt_time", "attempt_id", "taken_at"),)

    id: Mapped[int] = mapped_column(BigInt, primary_key=True)
    attempt_id: Mapped[int] = mapped_column(ForeignKey("attempt.id", ondelete="CASCADE"))
    taken_at: Mapped[datetime]
    figures: Mapped[dict[str, Any]] = mapped_column(default=dict)


class GpuSample(Base):
    """One GPU's memory and load at one time; downsampled as it ages."""

    __tablename__ = "gpu_sample"
    __table_args__ = (Index("ix_gpu_sample_host_gpu_time", "host_id", "gpu_index", "taken_at"),)

    id: Mapped[int] = mapped_column(BigInt, primary_key=True)
    host_id: Mapped[int] = mapped_column(ForeignKey("host.id", ondelete="CASCADE"))
    gpu_index: Mapped[int]
    taken_at: Mapped[datetime]
    memory_total_mib: Mapped[int]
    memory_used_mib: Mapped[int]
    memory_reserved_mib: Mapped[int] = mapped_column(default=0)
    utilization_pct: Mapped[int | None]
    temperature_c: Mapped[int | None]
    power_w: Mapped[float | None]


class AuditEvent(Base):
    """Who did what: logins, launches, stops. Never holds a secret."""

    __tablename__ = "audit_event"
    __table_args__ = (
        Index("ix_audit_event_actor_id", "actor", "id"),
        Index("ix_audit_event_action_id", "action", "id"),
        # Each person's last login, one index seek per person.
        Index("ix_audit_event_action_actor_at", "action", "actor", "at"),
    )

    id: Mapped[int] = mapped_column(BigInt, primary_key=True)
    at: Mapped[datetime] = mapped_column(default=utcnow, index=True)
    actor: Mapped[str] = mapped_column(String(64))
    action: Mapped[str] = mapped_column(String(64))
    target: Mapped[str] = mapped_column(String(255), default="")
    detail: Mapped[dict[str, Any]] = mapped_column(default=dict)
    remote_addr: Mapped[str] = mapped_column(String(64), default="")


class DiagnosisRule(Base):
    """A team rule (the knowledge base): what to look for in a log and what it means. The fields
    are those of a `[[rule]]` table in a rules file; rules apply in the order they were made."""

    __tablename__ = "diagnosis_rule"

    id: Mapped[int] = mapped_column(primary_key=True)
    match: Mapped[str] = mapped_column(Text, default="")
    regex: Mapped[bool] = mapped_column(default=False)
    failure_class: Mapped[str] = mapped_column(String(32))
    title: Mapped[str] = mapped_column(Text)
    hint: Mapped[str] = mapped_column(Text, default="")
    scope: Mapped[str] = mapped_column(String(8), default="root")
    flag_aware: Mapped[bool] = mapped_column(default=True)
    merge: Mapped[list[Any]] = mapped_column(default=list)
    author: Mapped[str] = mapped_column(String(64), default="")
    # Why diagnoses stopped running it ("" while they run it): its regular expression ran out of
    # time on a log. Editing the rule clears it.
    stalled: Mapped[str] = mapped_column(Text, default="")
    created_at: Mapped[datetime] = mapped_column(default=utcnow)
    updated_at: Mapped[datetime] = mapped_column(default=utcnow, onupdate=utcnow)


class User(Base):
    """A person who logs in with a name and password. Never deleted, so the audit trail's names
    keep meaning someone; `disabled_at` ends their access instead."""

    __tablename__ = "user_account"

    id: Mapped[int] = mapped_column(primary_key=True)
    name: Mapped[str] = mapped_column(String(64), unique=True)
    password_hash: Mapped[str] = mapped_column(String(255))
    role: Mapped[Role] = mapped_column(StateType(Role), default=Role.VIEWER)
    disabled_at: Mapped[datetime | None]
    created_at: Mapped[datetime] = mapped_column(default=utcnow)
    password_changed_at: Mapped[datetime] = mapped_column(default=utcnow)
    # The labels of the hosts an operator may launch on (one of them); None: every host.
    host_labels: Mapped[list[Any] | None]


class LoginSession(Base):
    """One browser login. The cookie carries a random id; only its sha256 is kept here, so this
    table cannot be replayed. A row with no user is a login with the access token (the built-in
    admin); its `token_check` ties it to that token, so a new token ends such logins."""

    __tablename__ = "login_session"

    id: Mapped[int] = mapped_column(BigInt, primary_key=True)
    id_hash: Mapped[str] = mapped_column(String(64), unique=True)
    user_id: Mapped[int | None] = mapped_column(ForeignKey("user_account.id", ondelete="CASCADE"), index=True)
    token_check: Mapped[str] = mapped_column(String(64), default="")
    remote_addr: Mapped[str] = mapped_column(String(64), default="")
    created_at: Mapped[datetime] = mapped_column(default=utcnow)
    last_seen_at: Mapped[datetime] = mapped_column(default=utcnow)

    user: Mapped[User | None] = relationship()


class LoginLimit(Base):
    """Failed logins of one address or one account (app.accounts.limits), shared by every replica.
    Times are Unix seconds. An address's row also carries its current burst of failed logins, for
    the burst's one audit row."""

    __tablename__ = "login_limit"
    __table_args__ = (UniqueConstraint("kind", "name"),)

    id: Mapped[int] = mapped_column(BigInt, primary_key=True)
    kind: Mapped[LimitedBy] = mapped_column(StateType(LimitedBy))
    name: Mapped[str] = mapped_column(String(128))
    recent: Mapped[list[Any]] = mapped_column(default=list)  # failure times within the window
    strikes: Mapped[int] = mapped_column(default=0)  # locks so far
    locked_until: Mapped[float] = mapped_column(Float, default=0.0)
    last_failure: Mapped[float] = mapped_column(Float, default=0.0)
    # The last failure or refusal: beyond the table's bound, the longest quiet rows go first.
    last_at: Mapped[float] = mapped_column(Float, index=True)
    burst_account: Mapped[str | None] = mapped_column(String(128))
    burst_first: Mapped[float | None] = mapped_column(Float)
    burst_last: Mapped[float | None] = mapped_column(Float)
    burst_failures: Mapped[int] = mapped_column(default=0)
    burst_refused: Mapped[int] = mapped_column(default=0)
    burst_audit_id: Mapped[int | None] = mapped_column(BigInt)  # the burst's audit row, once written


class SetupLinkDigest(Base):
    """A setup link that `launchdeck serve` printed (app.accounts.setup): the sha256 of its secret,
    never the secret, so that any replica honours it."""

    __tablename__ = "setup_link"

    id: Mapped[int] = mapped_column(primary_key=True)
    digest: Mapped[str] = mapped_column(String(64), unique=True)
    expires_at: Mapped[datetime]


class ApiToken(Base):
    """A person's token for the API and the CLI. Only the sha256 of its secret is kept (the
    secret is random, so a plain hash cannot be reversed), with its first characters for telling
    tokens apart. Its role is at most its owner's; at use the lower of the two applies, so a
    demoted or disabled owner takes their tokens down with them."""

    __tablename__ = "api_token"

    id: Mapped[int] = mapped_column(primary_key=True)
    user_id: Mapped[int] = mapped_column(ForeignKey("user_account.id", ondelete="CASCADE"), index=True)
    name: Mapped[str] = mapped_column(String(64))
    prefix: Mapped[str] = mapped_column(String(16))
    secret_sha256: Mapped[str] = mapped_column(String(64), unique=True)
    role: Mapped[Role] = mapped_column(StateType(Role))
    created_at: Mapped[datetime] = mapped_column(default=utcnow)
    expires_at: Mapped[datetime | None]
    last_used_at: Mapped[datetime | None]
    revoked_at: Mapped[datetime | None]

    user: Mapped[User] = relationship()
