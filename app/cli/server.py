"""`launchdeck serve` and `launchdeck demo`: the commands that run the dashboard, or the simulated
GPU hosts it is pointed at. uvicorn and the dashboard are imported only by the command that runs
them, so the parser stays quick to build."""

from __future__ import annotations

import argparse
import gc
import os
import signal
import socket
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

from app.cli.shared import in_event_loop, run_with_settings
from app.errors import InvalidInput
from app.logging_setup import use_format, uvicorn_log_config
from app.states import ServerRole

if TYPE_CHECKING:
    from app.cli.shared import Subcommands
    from app.config import Settings

DEMO_ADMIN = "demo"
# Seconds a dashboard told to stop (SIGTERM, Ctrl-C) gives the requests in flight before cutting
# them short: container runtimes send SIGKILL 10 s after SIGTERM, and the services' close
# (app.runtime.CLOSE_SECONDS) and the demo's simulated hosts need the rest.
DRAIN_SECONDS = 3
# What the dashboard writes (database, logs, keys, tokens) is for its own user only: files 0600, folders 0700.
PRIVATE = 0o077


def add_parsers(commands: Subcommands) -> None:
    serve_parser = commands.add_parser("serve", help="run the dashboard (settings from LAUNCHDECK_* variables)")
    serve_parser.add_argument(
        "--role",
        choices=("all", "web", "controller"),
        default="all",
        help="all (the default): one process does everything; web: pages, the API and live logs; controller: the "
        "hosts and everything that talks to them. Several processes need PostgreSQL (docs/deploy.md#replicas)",
    )
    serve_parser.set_defaults(run=_run_serve)
    demo_parser = commands.add_parser("demo", help="run the dashboard with a simulated GPU cluster")
    demo_parser.add_argument(
        "--hosts-only", action="store_true", help="run only the simulated hosts, for a dashboard started with `serve`"
    )
    demo_parser.add_argument("--dir", type=Path, help="where the hosts live (default <data_dir>/demo)")
    demo_parser.add_argument(
        "--host", action="append", metavar="NAME", help="with --hosts-only: run this host only (repeatable)"
    )
    demo_parser.add_argument("--port", type=int, help="with one --host: its SSH port (default the one it had)")
    demo_parser.add_argument(
        "--slurm", action="store_true", help="also run a local Slurm cluster of two simulated GPU nodes (needs Slurm)"
    )
    demo_parser.set_defaults(run=_run_demo, check=_demo_problem)


def _demo_problem(args: argparse.Namespace) -> str | None:
    if not args.hosts_only and (args.host or args.port is not None):
        return "demo: --host and --port go with --hosts-only"
    if args.port is not None and len(args.host or ()) != 1:
        return "demo: --port needs exactly one --host"
    if args.hosts_only and args.slurm:
        return "demo: --slurm goes without --hosts-only"
    return None


def _run_serve(args: argparse.Namespace) -> int:
    return run_with_settings(args, lambda settings, _: serve(settings, role=args.role), serves=True)


def roles_of(role: str, settings: Settings) -> frozenset[ServerRole]:
    """The roles `--role` names; InvalidInput where one process of several would run on SQLite."""
    if role == "all":
        return frozenset(ServerRole)
    from app import db

    if not db.shared(settings.resolved_database_url()):
        raise InvalidInput(
            f"--role {role} is one of several processes, which share one PostgreSQL database "
            "(LAUNCHDECK_DATABASE_URL=postgresql://...); SQLite is one process's: run `launchdeck serve` alone"
        )
    return frozenset({ServerRole(role)})


def _run_demo(args: argparse.Namespace) -> int:
    if args.hosts_only:
        return run_with_settings(args, in_event_loop(_demo_hosts))
    return run_with_settings(args, in_event_loop(_demo), serves=True)


async def _demo_hosts(settings: Settings, args: argparse.Namespace) -> int:
    return await demo_hosts(settings, args.dir, args.host, args.port)


async def _demo(settings: Settings, args: argparse.Namespace) -> int:
    return await demo(settings.model_copy(update={"demo_slurm": settings.demo_slurm or args.slurm}))


def _check_port(settings: Settings) -> None:
    """Fails with a sentence, before anything starts, when the dashboard's port is taken."""
    try:
        with socket.create_server((settings.bind, settings.port)):
            pass
    except OSError as exc:
        raise InvalidInput(
            f"cannot listen on {settings.bind}:{settings.port}: {os.strerror(exc.errno) if exc.errno else exc}; "
            "set LAUNCHDECK_PORT to a free port"
        ) from None


def serve(settings: Settings, role: str = "all") -> int:
    import asyncio

    from app.accounts.setup import SetupLink
    from app.runtime import access_token
    from app.web.app import create_app

    use_format(settings.log_format)
    try:
        roles = roles_of(role, settings)
    except InvalidInput as exc:  # the settings and the role disagree: a usage error
        print(f"launchdeck: {exc}", file=sys.stderr)
        return 2
    _check_port(settings)
    os.umask(PRIVATE)
    setup_link, secret = SetupLink.issue()
    app = create_app(settings, setup_link=setup_link, roles=roles)
    if settings.admin_password_file is not None:
        try:
            asyncio.run(_admin_from_file(settings))
        except InvalidInput as exc:
            print(f"launchdeck: {exc}", file=sys.stderr)
            return 2
    enabled, any_account = asyncio.run(_accounts(settings))
    if problem := settings.accounts_problem(accounts=enabled):
        print(f"launchdeck: {problem}", file=sys.stderr)
        return 2
    setup_link.spent = any_account  # only a dashboard with no accounts prints it, and honours it
    access_token(settings)  # created now, so its file exists before the first login
    where = "LAUNCHDECK_TOKEN" if settings.token else settings.data_dir / "access-token"
    print(f"\nlaunchdeck dashboard: {_url(settings)}  (access token: {where})", flush=True)
    if not any_account:
        print(f"no accounts yet; create the first admin, once, at {_url(settings)}setup/{secret}", flush=True)
    if (hosts := settings.resolved_allowed_hosts()) is not None:
        print(f"answering to the hosts {', '.join(sorted(hosts))}  (LAUNCHDECK_ALLOWED_HOSTS)", flush=True)
    print(flush=True)
    import uvicorn

    _freeze_startup_objects()
    uvicorn.run(app, log_level="info", **_server_options(settings))
    return 0


def _server_options(settings: Settings) -> dict[str, Any]:
    """How uvicorn serves the dashboard, for `serve` and `demo` alike. Told to stop, it gives the
    requests in flight DRAIN_SECONDS and then cancels them: by default it would wait for each to
    end, and a download to a reader who stopped reading does not. Its access log is written as ours
    is with LAUNCHDECK_LOG_FORMAT=json, and as uvicorn writes it by default otherwise."""
    options: dict[str, Any] = {
        "host": settings.bind,
        "port": settings.port,
        "proxy_headers": False,  # the dashboard reads X-Forwarded-For itself, from its proxies only
        "timeout_graceful_shutdown": DRAIN_SECONDS,
    }
    if settings.log_format == "json":
        options["log_config"] = uvicorn_log_config()
    return options


async def _admin_from_file(settings: Settings) -> None:
    from app import db
    from app.accounts import setup

    name, password_file = settings.admin_name, settings.admin_password_file
    assert password_file is not None
    engine = db.create_engine(settings.resolved_database_url())
    try:
        async with db.Sessions.of(engine).write() as session:
            if await setup.admin_from_file(session, name=name, password_file=password_file):
                print(f"created the first admin, {name}, from LAUNCHDECK_ADMIN_PASSWORD_FILE", flush=True)
    finally:
        await engine.dispose()


async def _accounts(settings: Settings) -> tuple[int, bool]:
    """How many accounts are enabled, and whether there is any; read once the database is
    migrated (create_app has done it)."""
    from app import db
    from app.accounts import setup, users

    engine = db.create_engine(settings.resolved_database_url())
    try:
        async with db.Sessions.of(engine).read() as session:
            return await users.count_enabled(session), await setup.any_account(session)
    finally:
        await engine.dispose()


def _freeze_startup_objects() -> None:
    """Takes what is imported and built so far out of the garbage collector's sight, and collects
    less often: its full collections then scan only what requests and background work create. On
    two busy cores they took 80-130 ms each, every few seconds, and made the slowest requests
    under load (api_load's p99 went from 98.7 to 64.2 ms with the higher thresholds)."""
    gc.collect()
    gc.freeze()
    gc.set_threshold(20_000, 20, 20)


async def demo(settings: Settings) -> int:
    """Starts the simulated cluster, points the dashboard at it, and stops both on SIGTERM or Ctrl-C."""
    use_format(settings.log_format)
    slurm = None
    if settings.demo_slurm:  # checked before the dashboard's imports, which take seconds
        from app.demo.slurm import SlurmError, demo_site, unavailable

        if problem := unavailable():
            print(f"launchdeck: {problem}.", file=sys.stderr)
            return 2
        slurm = demo_site(settings.data_dir.resolve() / "demo" / "slurm", settings.demo_time_scale)
    import uvicorn

    from app.demo.cluster import SimCluster
    from app.demo.inventory import parse_host_specs
    from app.runtime import access_token
    from app.web.app import create_app

    try:
        host_specs = parse_host_specs(settings.demo_hosts)
    except ValueError as exc:
        print(f"launchdeck: LAUNCHDECK_DEMO_HOSTS: {exc}", file=sys.stderr)
        return 2
    _check_port(settings)
    cluster = SimCluster(settings.data_dir.resolve() / "demo", host_specs, time_scale=settings.demo_time_scale)
    specs = await cluster.start()
    try:
        hosts_file = cluster.write_hosts_file(specs)
        if slurm:
            try:
                login = await slurm.start()
            except SlurmError as exc:
                print(f"launchdeck: the local Slurm cluster did not start: {exc}", file=sys.stderr)
                return 1
            hosts_file = slurm.write_hosts_file(hosts_file)
            nodes = ", ".join(f"{node.name} ({node.gpu_count} x {node.gpu_model})" for node in slurm.slurm.nodes)
            print(f"Slurm cluster {login.name}: {nodes}; login node ssh on 127.0.0.1:{login.port}")
        settings = settings.model_copy(update={"hosts_file": hosts_file})
        app = create_app(settings)
        await _seed_demo_presets(settings)
        demo_password = await _seed_demo_admin(settings)
        for spec, sim in zip(specs, host_specs, strict=True):
            print(f"simulated host {spec.name}: {sim.gpu_count} x {sim.gpu_model} GPUs, ssh on 127.0.0.1:{spec.port}")
        server = uvicorn.Server(uvicorn.Config(app, **_server_options(settings)))
        print(
            f"\nlaunchdeck dashboard: {_url(settings)}\naccess token:         {access_token(settings)}"
            f"\ndemo admin:           {DEMO_ADMIN} / {demo_password}\n",
            flush=True,
        )
        # uvicorn re-raises the signal that stopped it once it is done; a no-op handler lets the
        # cluster be stopped after it instead of the process dying with its servers still running.
        for signum in (signal.SIGTERM, signal.SIGINT):
            signal.signal(signum, lambda *_: None)
        await server.serve()
    finally:
        await cluster.stop()
        if slurm:
            await slurm.stop()
    return 0


async def demo_hosts(settings: Settings, directory: Path | None, names: list[str] | None, port: int | None) -> int:
    """Runs the simulated hosts (all, or those named) until SIGTERM or Ctrl-C, for a dashboard
    started with `serve` against the hosts file written here. One process per host lets a host's
    SSH server be killed and started again alone, on the port the hosts file gives it."""
    from app.demo.cluster import SimCluster
    from app.demo.inventory import parse_host_specs

    use_format(settings.log_format)
    try:
        host_specs = parse_host_specs(settings.demo_hosts)
    except ValueError as exc:
        print(f"launchdeck: LAUNCHDECK_DEMO_HOSTS: {exc}", file=sys.stderr)
        return 2
    cluster = SimCluster(
        (directory or settings.data_dir / "demo").resolve(), host_specs, time_scale=settings.demo_time_scale
    )
    ports = cluster.recorded_ports()
    if names and port is not None:
        ports[names[0]] = port
    import asyncio

    stopping = asyncio.Event()
    loop = asyncio.get_running_loop()
    for signum in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(signum, stopping.set)
    started = await cluster.start(only=names, ports=ports)
    try:
        hosts_file = cluster.write_hosts_file(started)
        for spec, sim in zip(started, [s for s in host_specs if not names or s.name in names], strict=True):
            print(f"simulated host {spec.name}: {sim.gpu_count} x {sim.gpu_model} GPUs, ssh on 127.0.0.1:{spec.port}")
        print(f"known_hosts: {cluster.known_hosts_path}\nclient key:  {cluster.client_key_path}")
        # Last, so whoever waits for this line finds the hosts listening and the files written.
        print(f"hosts file:  {hosts_file}  (LAUNCHDECK_HOSTS_FILE for `launchdeck serve`)", flush=True)
        await stopping.wait()
    finally:
        await cluster.stop()
    return 0


async def _seed_demo_presets(settings: Settings) -> None:
    from app import db
    from app.demo.presets import seed_demo_presets

    engine = db.create_engine(settings.resolved_database_url())
    try:
        async with db.session_factory(engine)() as session:
            await seed_demo_presets(session)
    finally:
        await engine.dispose()


async def _seed_demo_admin(settings: Settings) -> str:
    """Makes the demo's admin account the first time, with a password kept in the data dir; returns it."""
    from app import credentials, db
    from app.accounts import users
    from app.states import Role

    password = credentials.load_or_create(settings.data_dir / "demo-password")
    engine = db.create_engine(settings.resolved_database_url())
    try:
        async with db.session_factory(engine)() as session:
            if DEMO_ADMIN not in {user.name for user in await users.list_users(session)}:
                await users.add_user(session, name=DEMO_ADMIN, password=password, role=Role.ADMIN)
    finally:
        await engine.dispose()
    return password


def _url(settings: Settings) -> str:
    host = settings.bind if settings.bind not in ("0.0.0.0", "::") else "127.0.0.1"
    return f"http://{host}:{settings.port}/"
