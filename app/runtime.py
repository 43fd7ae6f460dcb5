"""The composition root: every long-lived service, started in order and closed in reverse.

`running` opens the database engine and the services over it, pushing each one's close onto an
exit stack as soon as it exists, so a start that fails closes what had started and a shutdown ends
every task in bounded time. Roles start subsets: every role opens the services (a web role
launches and stops through them, asking the controller that owns a host for the work there, app.host_calls), and
only a controller talks to hosts and runs the background work that must run once per installation
(following attempts, GPU sampling, benchmarks, sweeps)."""

from __future__ import annotations

import asyncio
import hmac
import logging
from collections.abc import AsyncIterator, Callable, Collection
from contextlib import AsyncExitStack, asynccontextmanager
from dataclasses import dataclass, field
from datetime import timedelta
from functools import cached_property

from sqlalchemy.exc import IntegrityError

from app import credentials, db, resources
from app.accounts import setup
from app.accounts.limits import LoginLimiter
from app.accounts.logins import HeldLogins, Timeouts
from app.accounts.proxy import IgnoredHeaders
from app.accounts.setup import SetupLink
from app.casebook.rediagnose import Rediagnosis
from app.config import Network, Settings
from app.db import Sessions
from app.disk import DataDir
from app.gpu.monitor import GpuMonitor
from app.host_calls import HostCalls
from app.host_views import HostViews
from app.launch.attempts import AttemptService
from app.launch.notifications import Notifier
from app.launch.record import Pace
from app.leases import Beat, LeaseKeeper
from app.logs.grep import GrepLimits
from app.logs.live import Fanout
from app.logs.mirror import Mirrors
from app.logs.replicas import LogAnnouncer, LogListener
from app.logs.store import LogStore
from app.metrics import DashboardMetrics
from app.perf.runner import Benchmarks
from app.perf.sweeps import Sweeps
from app.perf.workloads import ensure_built_in
from app.slurm.poller import SlurmPollers
from app.ssh import HostSpec, SSHManager, SSHOptions
from app.ssh.registry import register_hosts
from app.states import AttemptStatus, ServerRole

log = logging.getLogger(__name__)

CLOSE_SECONDS = 3.0  # for the services to close at shutdown, after the requests in flight had theirs


@dataclass
class Runtime:
    """Everything `running` opened; one per process."""

    settings: Settings
    data_dir: DataDir
    token: str
    sessions: Sessions
    ssh: SSHManager
    attempts: AttemptService
    benchmarks: Benchmarks
    sweeps: Sweeps
    rediagnosis: Rediagnosis
    notifier: Notifier
    gpus: GpuMonitor
    logs: LogStore
    mirrors: Mirrors
    fanout: Fanout
    metrics: DashboardMetrics
    grep_limits: GrepLimits
    htmx_version: str
    htmx_sse_version: str
    login_limits: LoginLimiter = field(default_factory=LoginLimiter)
    held_logins: HeldLogins = field(default_factory=HeldLogins)  # begun while the data dir was full
    ignored_headers: IgnoredHeaders = field(default_factory=IgnoredHeaders)
    roles: frozenset[ServerRole] = frozenset(ServerRole)

    def mirror_note(self, attempt_id: int) -> str:
        """What the attempt's log mirror says while it is behind (paused for a full data dir,
        reconnecting); "" while it keeps up or has finished."""
        mirror = self.mirrors.get(attempt_id)
        return mirror.note if mirror else ""

    def token_matches(self, candidate: str) -> bool:
        return bool(candidate) and hmac.compare_digest(candidate.encode(), self.token.encode())

    @cached_property
    def sign_on_proxies(self) -> tuple[Network, ...]:
        return self.settings.resolved_proxy_networks()

    @property
    def login_timeouts(self) -> Timeouts:
        return Timeouts(
            idle=timedelta(hours=self.settings.session_idle_hours), absolute=timedelta(days=self.settings.session_days)
        )


def frontend_versions() -> dict[str, str]:
    """The versions of the front-end packages served, read from static/vendor/<package>@<version>
    (filled from package.json's pins by `make install`, and carried in the wheel)."""
    vendor = resources.folder("static") / "vendor"
    versions = dict(entry.name.rsplit("@", 1) for entry in vendor.glob("*@*") if entry.is_dir())
    if missing := {"htmx.org", "htmx-ext-sse"} - versions.keys():
        raise RuntimeError(f"{vendor} lacks {', '.join(sorted(missing))}: run `make install` to fetch them")
    return versions


def access_token(settings: Settings) -> str:
    if settings.token is not None:
        return settings.token.get_secret_value()
    return credentials.load_or_create(settings.data_dir / "access-token")


@asynccontextmanager
async def closing_within(seconds: float) -> AsyncIterator[AsyncExitStack]:
    """An exit stack whose callbacks, run when the block ends, get `seconds` in all: a dashboard
    told to stop must be gone before the SIGKILL that follows SIGTERM (10 s in container runtimes).
    What a close cut short leaves running, the event loop cancels as it ends; statuses are not
    written on the way out (servers keep running, and a restart follows them again)."""
    stack = AsyncExitStack()
    try:
        yield stack
    finally:
        try:
            async with asyncio.timeout(seconds):
                await stack.aclose()
        except TimeoutError:
            log.warning("the services did not all stop within %g s; going on without them", seconds)


def lease_keeper(settings: Settings, sessions: db.Sessions, specs: list[HostSpec]) -> LeaseKeeper | None:
    """Leases where several controllers may share the hosts (PostgreSQL); None on SQLite, whose one
    process owns every host."""
    if not db.shared(settings.resolved_database_url()):
        return None
    hosts = {spec.name: spec.labels for spec in specs}
    return LeaseKeeper(sessions, hosts, pins=settings.resolved_controller_pins(), lease_seconds=settings.lease_seconds)


def owner_of_hosts(
    ssh: SSHManager, gpus: GpuMonitor, attempts: AttemptService, benchmarks: Benchmarks, sweeps: Sweeps
) -> Callable[[Beat], None]:
    """What a controller does as leases come and go: a host taken is connected to and watched, its
    attempts followed, the benchmarks it left running marked interrupted (its sweeps are claimed by
    `Sweeps`); a host lost is let go of, its connection closed last (another controller does it all now).

    Beats' changes are applied one after another, in order: a host given up at one beat and taken
    back at the next (hosts spreading again) is connected and followed once the letting go is
    over, not started while it is under way and then closed by it."""
    pending: set[asyncio.Task[None]] = set()
    in_order = asyncio.Lock()  # FIFO: each beat's changes wait for the earlier beats'

    def changed(beat: Beat) -> None:
        async def apply() -> None:
            async with in_order:
                if lost := beat.lost:
                    await sweeps.let_go(lost)
                    await benchmarks.let_go(lost)
                    await gpus.unwatch(lost)
                    await attempts.let_go(lost)
                    await ssh.stop(lost)
                if gained := list(beat.gained):
                    ssh.start(gained)
                    gpus.watch(gained)
                    await attempts.follow_hosts(gained)
                    await benchmarks.follow_hosts(gained)

        if beat.lost or beat.gained:
            log.info("leases: taken %s, given up %s", sorted(beat.gained) or "none", beat.lost or "none")
            task = asyncio.create_task(apply(), name="lease-change")
            pending.add(task)
            task.add_done_callback(pending.discard)

    return changed


async def _register(sessions: db.Sessions, specs: list[HostSpec], setup_link: SetupLink | None) -> None:
    """The hosts file's hosts and the built-in workloads, in the database. Replicas starting
    together may insert the same rows at once: the one that loses reads the winner's and goes on."""
    for attempt in range(2):
        try:
            async with sessions.write() as session:
                await register_hosts(session, specs)
            async with sessions.write.begin() as session:
                await ensure_built_in(session)
                if setup_link is not None:  # printed: good on every replica from now on
                    await setup.offer(session, setup_link)
            return
        except IntegrityError:
            if attempt:
                raise


@asynccontextmanager
async def running(
    settings: Settings,
    specs: list[HostSpec],
    *,
    roles: Collection[ServerRole] = frozenset(ServerRole),
    setup_link: SetupLink | None = None,
) -> AsyncIterator[Runtime]:
    """The services for `roles`, open until the block ends. The database must be migrated and the
    hosts file read already (`create_app` does both, so their errors come before any server)."""
    data_dir = DataDir(settings.data_dir.absolute(), reserve_mb=settings.disk_reserve_mb)
    engine = db.create_engine(settings.resolved_database_url(), on_full=data_dir.full)
    controller = ServerRole.CONTROLLER in roles
    try:
        # Each service's close is pushed as soon as the service exists; they run in reverse, the
        # services using others first.
        async with closing_within(CLOSE_SECONDS) as services:
            sessions = db.Sessions.of(engine)
            await _register(sessions, specs, setup_link)
            options = SSHOptions(
                known_hosts=settings.known_hosts.expanduser(),
                ssh_config=settings.ssh_config,
                keepalive_interval=settings.ssh_keepalive_interval,
                connect_timeout=settings.ssh_connect_timeout,
            )
            ssh = SSHManager(specs, options)
            services.push_async_callback(ssh.close)
            shared = db.shared(settings.resolved_database_url())
            leases = lease_keeper(settings, sessions, specs) if controller else None
            # Only the owner of a host talks to it: every host here on SQLite, those whose lease
            # this controller takes otherwise (owner_of_hosts), none in a web process.
            if controller and leases is None:
                ssh.start()
            calls = HostCalls(sessions, leases, controller=controller)
            services.push_async_callback(calls.close)
            # Each Slurm cluster's poller: it polls while a follower or the GPU view here wants it.
            slurm = SlurmPollers(ssh, every=settings.slurm_poll_seconds)
            services.push_async_callback(slurm.close)
            gpus = GpuMonitor(sessions, ssh, metrics_source=settings.resolved_gpu_metrics(), slurm=slurm)
            services.push_async_callback(gpus.close)
            logs = LogStore(settings.data_dir / "logs", data_dir)
            mirrors = Mirrors(logs)
            services.push_async_callback(mirrors.close)
            webhook = settings.webhook_url.get_secret_value() if settings.webhook_url else None
            notifier = Notifier(
                sessions,
                public_url=settings.resolved_public_url(),
                webhook_url=webhook,
                notify_urls=settings.resolved_notify_urls(),
                destinations=settings.webhook_destinations(),
                ownership=leases,
            )
            services.push_async_callback(notifier.close)
            attempts = AttemptService(
                sessions,
                ssh,
                mirrors,
                stop_grace=settings.stop_grace_seconds,
                pace=Pace(hang=settings.hang_seconds),
                gpus=gpus,
                ownership=leases,
                controller=controller,
                slurm=slurm,
                calls=calls,
            )
            services.push_async_callback(attempts.close)
            benchmarks = Benchmarks(
                sessions,
                ssh,
                settings.data_dir / "benchmarks",
                timeout=settings.bench_timeout_seconds,
                memory_mib=settings.bench_memory_mib,
                calls=calls,
            )
            services.push_async_callback(benchmarks.close)
            sweeps = Sweeps(sessions, attempts, benchmarks)
            services.push_async_callback(sweeps.close)
            rediagnosis = Rediagnosis(sessions, logs, attempts.signatures)
            services.push_async_callback(rediagnosis.close)
            attempts.on_followed = rediagnosis.attempt_ended
            fanout = Fanout(logs)
            metrics = DashboardMetrics(sessions, ssh, gpus, mirrors, fanout, attempts.serving)
            services.push_async_callback(metrics.close)

            def status_changed(attempt_id: int, status: AttemptStatus) -> None:
                notifier.status_changed(attempt_id, status)
                metrics.attempt_became(attempt_id, status)

            attempts.on_status = status_changed
            if shared:
                # Replicas may share this database: what the owners of hosts see of them is shown
                # everywhere, and live logs are announced and listened for across them.
                views = HostViews(sessions, ssh, gpus, leases, owner=leases.owner if leases else "")
                services.push_async_callback(views.close)
                views.start()
                if controller:
                    announcer = LogAnnouncer(settings.resolved_database_url(), mirrors)
                    services.push_async_callback(announcer.close)
                    announcer.start()
                if ServerRole.WEB in roles:
                    listener = LogListener(settings.resolved_database_url(), logs, own=mirrors)
                    services.push_async_callback(listener.close)
                    listener.start()
            rediagnosis.start()  # a pass a person asks for runs where they asked; an ended attempt's, on its controller
            if controller:
                owned = [spec.name for spec in specs if leases is None or leases.owns(spec.name)]
                gpus.start(owned)
                await attempts.start()
                await benchmarks.follow_hosts(owned)
                if leases is not None:
                    services.push_async_callback(leases.close)
                    leases.on_change = owner_of_hosts(ssh, gpus, attempts, benchmarks, sweeps)
                    leases.start()
                    calls.start()
                await sweeps.start()
                notifier.start()
            versions = frontend_versions()
            yield Runtime(
                settings=settings,
                data_dir=data_dir,
                token=access_token(settings),
                sessions=sessions,
                ssh=ssh,
                attempts=attempts,
                benchmarks=benchmarks,
                sweeps=sweeps,
                rediagnosis=rediagnosis,
                notifier=notifier,
                gpus=gpus,
                logs=logs,
                mirrors=mirrors,
                fanout=fanout,
                metrics=metrics,
                grep_limits=GrepLimits(
                    seconds=settings.grep_timeout_seconds,
                    memory_bytes=settings.grep_memory_mib << 20,
                    at_once=settings.grep_max_running,
                    wait_seconds=settings.grep_wait_seconds,
                ),
                htmx_version=versions["htmx.org"],
                htmx_sse_version=versions["htmx-ext-sse"],
                roles=frozenset(roles),
            )
    finally:
        await engine.dispose()  # always, and last: an open SQLite connection's thread would keep the process alive
