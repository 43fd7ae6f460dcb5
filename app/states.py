"""Every fixed set of values the dashboard stores or shows, one enum each, with no SQLAlchemy: the
database columns, the routes, the templates and the CLI all read these rather than copies.

A `look` is the CSS class of the status badge a page shows for a value (`status-<look>`), named
after the attempt status it resembles, so one stylesheet serves every kind of status."""

from __future__ import annotations

from enum import StrEnum


class AttemptStatus(StrEnum):
    """Where an attempt stands. Only evidence from its host (an exit status, its process gone, a
    health check) moves it; the dashboard's own trouble never does."""

    PENDING = "pending"
    UPLOADING = "uploading"
    STARTING = "starting"
    LOADING = "loading"
    READY = "ready"
    UNHEALTHY = "unhealthy"
    FAILED = "failed"
    STOPPED = "stopped"
    LOST = "lost"

    @property
    def active(self) -> bool:
        return self in ACTIVE_STATUSES


# Still followed: the server may be running, or about to.
ACTIVE_STATUSES = frozenset(
    {
        AttemptStatus.PENDING,
        AttemptStatus.UPLOADING,
        AttemptStatus.STARTING,
        AttemptStatus.LOADING,
        AttemptStatus.READY,
        AttemptStatus.UNHEALTHY,
    }
)
FINISHED_STATUSES = frozenset(AttemptStatus) - ACTIVE_STATUSES
# Before the server's process exists: nothing ran on the host yet, so nothing was logged.
UNSTARTED_STATUSES = frozenset({AttemptStatus.PENDING, AttemptStatus.UPLOADING, AttemptStatus.STARTING})


class Role(StrEnum):
    """What a person may do; each role may do everything the ones before it may."""

    VIEWER = "viewer"  # read everything but the whole audit trail
    OPERATOR = "operator"  # also launch, stop, relaunch, edit presets and team rules
    ADMIN = "admin"  # also accounts and the whole audit trail

    def allows(self, needed: Role) -> bool:
        order = list(Role)
        return order.index(self) >= order.index(needed)


class ServerRole(StrEnum):
    """What one dashboard process does (app.runtime): several web processes may serve one
    installation, beside one controller."""

    WEB = "web"  # pages and the API
    CONTROLLER = "controller"  # the background work: following attempts, GPUs, benchmarks, sweeps


class HostKind(StrEnum):
    """How the dashboard reaches a host's GPUs."""

    SSH = "ssh"  # a GPU host: the server runs where the dashboard logs in
    SLURM = "slurm"  # a Slurm cluster: SSH reaches its login node, jobs reach the GPUs


class BenchmarkStatus(StrEnum):
    """One bench_serving run against a ready server."""

    RUNNING = "running"
    DONE = "done"  # it printed its summary: the figures are stored
    FAILED = "failed"

    @property
    def look(self) -> str:
        return {BenchmarkStatus.RUNNING: "loading", BenchmarkStatus.DONE: "ready"}.get(self, "failed")


class SweepStatus(StrEnum):
    RUNNING = "running"
    DONE = "done"  # every point ran, or the budget was spent
    STOPPED = "stopped"  # someone asked it to stop
    FAILED = "failed"  # the dashboard could not go on (the preset, the host or the plan refused)

    @property
    def look(self) -> str:
        return {SweepStatus.RUNNING: "loading", SweepStatus.DONE: "ready"}.get(self, "stopped")


class SweepMode(StrEnum):
    GRID = "grid"  # every combination of the values given per argument
    LIST = "list"  # the points given, one by one
    BISECT = "bisect"  # the largest (or smallest) value of one argument that serves


class PointStatus(StrEnum):
    """One point of a sweep, as its attempt and benchmark left it."""

    TO_DO = "to do"
    RUNNING = "running"
    SERVED = "served"  # started and gave benchmark figures
    FAILED = "failed"  # the server failed (or was lost) before it served
    BENCHMARK_FAILED = "benchmark failed"  # the server was ready, the benchmark gave no figures
    PREDICTED_TO_FAIL = "predicted to fail"  # preflight's memory model ruled it out unlaunched
    STOPPED = "stopped"
    NOT_RUN = "not run"  # the sweep ended first

    @property
    def decided(self) -> bool:
        """Whether the point says if its value serves (what a bisection narrows on)."""
        return self in (
            PointStatus.SERVED,
            PointStatus.FAILED,
            PointStatus.BENCHMARK_FAILED,
            PointStatus.PREDICTED_TO_FAIL,
        )


class FailureClass(StrEnum):
    """What kind of failure a log's root error is: the diagnosis's answer, and a team rule's."""

    OOM = "oom"
    ARG_CONFLICT = "arg-conflict"
    ARG_OVERRIDE = "arg-override"
    NCCL = "nccl"
    CUDA_GRAPH = "cuda-graph"
    PORT_IN_USE = "port-in-use"
    MODEL_LOAD = "model-load"
    IMPORT_ERROR = "import-error"
    DRIVER = "driver"
    TIMEOUT = "timeout"
    OTHER = "other"  # no rule knows the error yet
    HEALTHY = "healthy"  # no failure: the server came up


class LimitedBy(StrEnum):
    """What a failed-login limit counts against (app.accounts.limits)."""

    ADDRESS = "address"
    ACCOUNT = "account"
