"""The PostgreSQL server the database tests use (LAUNCHDECK_TEST_POSTGRES, by default the local one),
and a private cluster of a test's own, for the tests that stop, kill and restart it."""

from __future__ import annotations

import contextlib
import os
import pwd
import shutil
import signal
import subprocess
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import psycopg

from tests.support.servers import free_port
from tests.support.strict import require

POSTGRES_ADMIN_URL = os.environ.get("LAUNCHDECK_TEST_POSTGRES", "postgresql://postgres@127.0.0.1:5432/postgres")
# The private clusters' encoding, whatever the locale the tests run in.
UTF8 = ("--encoding=UTF8", "--locale=C")


def postgres_available() -> bool:
    try:
        with psycopg.connect(POSTGRES_ADMIN_URL, connect_timeout=2):
            return True
    except psycopg.OperationalError:
        return False


def postgres_bin() -> Path | None:
    """The newest of Debian's PostgreSQL server binaries (/usr/lib/postgresql/VERSION/bin)."""
    found = [path.parent for path in Path("/usr/lib/postgresql").glob("*/bin/postgres") if path.parent.name == "bin"]
    return max(found, key=lambda path: int(path.parent.name) if path.parent.name.isdigit() else 0, default=None)


@dataclass
class PrivatePostgres:
    """A PostgreSQL cluster of one test's own on a loopback port (trust authentication), which the
    test may stop, crash and start again without touching the shared server the others use. The
    postmaster is this process's child, so that one killed is reaped here at once: a dead one left
    a zombie (where nothing reaps orphans) keeps its pid file's pid alive, and the next start
    refuses it."""

    bin: Path
    data: Path
    port: int
    user: str | None  # run as this user: PostgreSQL refuses to run as root
    process: subprocess.Popen[bytes] | None = None

    @property
    def admin_url(self) -> str:
        return f"postgresql://postgres@127.0.0.1:{self.port}/postgres"

    def _as_user(self) -> dict[str, Any]:
        return {"user": self.user} if self.user else {}

    def initdb(self) -> None:
        done = subprocess.run(
            [str(self.bin / "initdb"), "-D", str(self.data), "-U", "postgres", "--auth=trust", "--no-sync", *UTF8],
            capture_output=True,
            text=True,
            timeout=120,
            cwd="/",
            **self._as_user(),
        )
        assert done.returncode == 0, done.stdout + done.stderr
        settings = {
            "listen_addresses": "'127.0.0.1'",
            "port": str(self.port),
            "unix_socket_directories": "''",  # TCP only: a socket path may be too long for tmp_path
            "fsync": "off",
            "max_connections": "300",
        }
        with (self.data / "postgresql.conf").open("a") as conf:
            conf.writelines(f"{name} = {value}\n" for name, value in settings.items())

    def start(self) -> None:
        """Starts the server (after a crash: with recovery) and waits until it takes connections."""
        with (self.data.parent / "server.log").open("ab") as log:
            self.process = subprocess.Popen(
                [str(self.bin / "postgres"), "-D", str(self.data)],
                stdout=log,
                stderr=log,
                cwd="/",
                start_new_session=True,
                **self._as_user(),
            )
        deadline = time.monotonic() + 60
        while True:
            if self.process.poll() is not None:
                raise AssertionError(f"PostgreSQL exited ({self.process.returncode}):\n{self.log_tail()}")
            try:
                with psycopg.connect(self.admin_url, connect_timeout=1):
                    return
            except psycopg.OperationalError:
                if time.monotonic() > deadline:
                    raise AssertionError(f"PostgreSQL did not start within 60 s:\n{self.log_tail()}") from None
                time.sleep(0.05)

    def stop(self) -> None:
        """Fast shutdown (SIGINT, as `pg_ctl stop -m fast`): every session is ended, its client told
        so, and the server shuts down cleanly."""
        assert self.process is not None
        self.process.send_signal(signal.SIGINT)
        self.process.wait(60)

    def crash(self) -> None:
        """SIGKILL to every process of the server (its backends first, the postmaster frozen meanwhile
        so that none learns of its death and says goodbye), as when its container or machine dies: no
        session is told anything, and the next start recovers from the WAL."""
        assert self.process is not None
        self.process.send_signal(signal.SIGSTOP)  # frozen, it neither starts more nor tells its backends
        children = _children(self.process.pid)
        for pid in children:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        self.process.kill()
        self.process.wait(10)
        deadline = time.monotonic() + 10
        while any(_alive(pid) for pid in children) and time.monotonic() < deadline:
            time.sleep(0.02)

    def restart(self, *, crash: bool = False, down: float = 0.0) -> None:
        """Stopped (or crashed), left down for `down` seconds, and started again."""
        self.crash() if crash else self.stop()
        time.sleep(down)
        self.start()

    def close(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.send_signal(signal.SIGQUIT)  # immediate shutdown
            try:
                self.process.wait(15)
            except subprocess.TimeoutExpired:
                self.crash()

    def log_tail(self) -> str:
        path = self.data.parent / "server.log"
        return path.read_text(errors="replace")[-3000:] if path.exists() else ""


def _children(pid: int) -> list[int]:
    found = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        with contextlib.suppress(OSError, IndexError, ValueError):
            if int(stat.read_text().rpartition(")")[2].split()[1]) == pid:
                found.append(int(stat.parent.name))
    return found


def _alive(pid: int) -> bool:
    """Running (not a zombie): a zombie has let go of everything, the server's shared memory included."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()[0] != "Z"
    except OSError:
        return False


@contextlib.contextmanager
def private_postgres(root: Path) -> Iterator[PrivatePostgres]:
    """A fresh PostgreSQL cluster, started, on a free loopback port; stopped and removed afterwards.
    As root, it runs as the `postgres` user (initdb refuses root), in a folder of its own under the
    system's temporary directory, since a test's tmp_path is root's alone."""
    binaries = postgres_bin()
    require(binaries is not None, "PostgreSQL's server binaries are not installed (apt-get install postgresql)")
    assert binaries is not None
    user = None
    if os.getuid() == 0:
        try:
            owner = pwd.getpwnam("postgres")
        except KeyError:
            owner = None
        require(owner is not None, "running as root, and there is no `postgres` user to run a private PostgreSQL as")
        assert owner is not None
        user = owner.pw_name
        base = Path(tempfile.mkdtemp(prefix="launchdeck-postgres-"))
        os.chown(base, owner.pw_uid, owner.pw_gid)
    else:
        base = root / "postgres"
        base.mkdir(parents=True)
    server = PrivatePostgres(binaries, base / "data", free_port(), user)
    try:
        server.initdb()
        server.start()
        yield server
    finally:
        server.close()
        with contextlib.suppress(OSError):  # the server's log is worth keeping beside the test's own files
            shutil.copy(base / "server.log", root / "postgres-server.log")
        shutil.rmtree(base, ignore_errors=True)
