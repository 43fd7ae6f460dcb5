"""A site's GPU metrics for the GPU tests: simulated hosts that each run a dcgm-exporter, and Debian's
real Prometheus on loopback scraping them every second."""

from __future__ import annotations

import shutil
from collections.abc import AsyncIterator, Iterator

import pytest

from app.demo.cluster import SimCluster
from app.demo.inventory import SimHostSpec
from tests.support.dashboard import SIM_TIME_SCALE
from tests.support.prometheus import RealPrometheus, Site
from tests.support.strict import require

RTX_HOSTS = ("rtxpro-01", "rtxpro-02")


@pytest.fixture(scope="module")
async def site(tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[Site]:
    require(shutil.which("prometheus") is not None, "Debian's prometheus is not installed (make system-packages)")
    root = tmp_path_factory.mktemp("site")
    hosts = [SimHostSpec("b200-01", "b200", 2), *(SimHostSpec(name, "rtx-pro-6000", 2) for name in RTX_HOSTS)]
    cluster = SimCluster(root / "cluster", hosts, time_scale=SIM_TIME_SCALE, dcgm_exporters=True)
    specs = await cluster.start()
    scraped = [f"127.0.0.1:{cluster.exporters[name].port}" for name in ("b200-01", "rtxpro-01")]
    prometheus = RealPrometheus(root, scraped)
    try:
        prometheus.start()
        yield Site(cluster, specs, prometheus)
    finally:
        prometheus.stop()
        await cluster.stop()


@pytest.fixture
def prometheus_running(site: Site) -> Iterator[RealPrometheus]:
    """The site's Prometheus, started again if a test stopped it."""
    if site.prometheus.process is None:
        site.prometheus.start()
    yield site.prometheus
