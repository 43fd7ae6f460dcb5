"""Debian's real Prometheus on a loopback port, and a site of simulated GPU hosts that each run a
dcgm-exporter, for the tests of reading GPU memory from a site's metrics."""

from __future__ import annotations

import subprocess
from dataclasses import dataclass, field
from pathlib import Path

import httpx

from app.demo.cluster import SimCluster
from app.ssh import HostSpec
from tests.support.servers import free_port
from tests.support.waiting import wait_until

SCRAPE_INTERVAL = "1s"
# Its API asks for a password, as a site's may: bcrypt of PASSWORD (cost 4, made with Python's crypt).
USER, PASSWORD = "launchdeck", "s3cret-in-the-url"
PASSWORD_BCRYPT = "$2b$04$eRHEd9zUi5kFxgGbHzb5YeRW25DjML/5y3XVMKVZSzVJqsxYqUzm2"
AUTH = httpx.BasicAuth(USER, PASSWORD)


@dataclass
class RealPrometheus:
    """Debian's prometheus on a loopback port, its data under `root`, scraping `targets`; its API
    answers USER with PASSWORD only."""

    root: Path
    targets: list[str]
    port: int = field(default_factory=free_port)
    process: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self) -> None:
        config = self.root / "prometheus.yml"
        config.write_text(
            f"global:\n  scrape_interval: {SCRAPE_INTERVAL}\n  scrape_timeout: {SCRAPE_INTERVAL}\n"
            "scrape_configs:\n  - job_name: dcgm\n    static_configs:\n"
            f"      - targets: [{', '.join(repr(target) for target in self.targets)}]\n"
        )
        web = self.root / "web.yml"
        web.write_text(f"basic_auth_users:\n  {USER}: {PASSWORD_BCRYPT}\n")
        with (self.root / "prometheus.log").open("ab") as log:
            self.process = subprocess.Popen(
                ["prometheus", f"--config.file={config}", f"--storage.tsdb.path={self.root / 'data'}",
                 f"--web.listen-address=127.0.0.1:{self.port}", f"--web.config.file={web}"],
                stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=log,
            )  # fmt: skip
        wait_until(self._ready, 30, "Prometheus to be ready")

    def stop(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.terminate()
            self.process.wait(10)
        self.process = None

    def _ready(self) -> bool:
        assert self.process is not None
        if self.process.poll() is not None:
            raise AssertionError(f"prometheus exited: {(self.root / 'prometheus.log').read_text()[-2000:]}")
        try:
            return httpx.get(f"{self.url}/-/ready", auth=AUTH, timeout=1).status_code == 200
        except httpx.HTTPError:
            return False


@dataclass
class Site:
    """Three simulated hosts that each run dcgm-exporter, and a Prometheus that scrapes the first
    two (rtxpro-02 is a node its scrape config forgot)."""

    cluster: SimCluster
    specs: list[HostSpec]
    prometheus: RealPrometheus

    def spec(self, name: str) -> HostSpec:
        return next(spec for spec in self.specs if spec.name == name)
