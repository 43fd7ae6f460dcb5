"""GPU memory from a site's dcgm-exporter or Prometheus instead of the SSH probe: what /api/hosts and
the host pages show, where a host is missing or a source goes away, and the exporter's own format."""

from __future__ import annotations

import contextlib
import logging
import subprocess
import time
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import httpx
import pytest
from fastapi import FastAPI
from httpx import ASGITransport, AsyncClient
from prometheus_client.parser import text_string_to_metric_families
from pydantic import ValidationError

from app.config import GpuMetricsKind, GpuMetricsSource, Settings
from app.demo.dcgm import SimDcgmExporter
from app.demo.hostlib import simgpu
from app.gpu.exporters import Exported, GpuMetrics, HostIndex, parse_exposition, readings_of
from app.gpu.monitor import PROCESS_EVERY, GpuMonitor
from app.ssh import HostSpec
from app.web.app import create_app
from tests.support.dashboard import AUTH, make_settings
from tests.support.prometheus import AUTH as PROMETHEUS_AUTH
from tests.support.prometheus import PASSWORD, USER, RealPrometheus, Site
from tests.support.servers import free_port
from tests.support.waiting import until
from tests.support.web import log_in

Figures = dict[tuple[str, int], tuple[int, int, int]]  # (host, gpu) -> used, free, total MiB


@pytest.fixture
def holder() -> Iterator[subprocess.Popen[bytes]]:
    """A process that holds GPU memory booked under its pid until the test ends."""
    with subprocess.Popen(["sleep", "120"]) as process:
        yield process
        process.kill()


@contextlib.asynccontextmanager
async def started(folder: Path, specs: list[HostSpec], metrics_url: str) -> AsyncIterator[FastAPI]:
    app = create_app(make_settings(folder, specs, gpu_metrics_url=metrics_url))
    async with app.router.lifespan_context(app):
        yield app


@pytest.fixture
async def prometheus_app(tmp_path: Path, site: Site, prometheus_running: RealPrometheus) -> AsyncIterator[FastAPI]:
    """The dashboard reading the GPUs' memory from the site's Prometheus, the password in its URL."""
    url = f"prometheus:http://{USER}:{PASSWORD}@127.0.0.1:{prometheus_running.port}"
    async with started(tmp_path, site.specs, url) as app:
        yield app


@pytest.fixture
async def dcgm_app(tmp_path: Path, site: Site) -> AsyncIterator[FastAPI]:
    """The dashboard reading b200-01's dcgm-exporter at {host} (127.0.0.1 for both its hosts)."""
    port = site.cluster.exporters["b200-01"].port
    specs = [site.spec("b200-01"), site.spec("rtxpro-01")]
    async with started(tmp_path, specs, f"dcgm:http://{{host}}:{port}/metrics") as app:
        yield app


@contextlib.asynccontextmanager
async def logged_in(app: FastAPI) -> AsyncIterator[AsyncClient]:
    """A client of `app` with the API token and a browser login, for /api/hosts and the pages."""
    async with AsyncClient(transport=ASGITransport(app=app), base_url="http://testserver", headers=AUTH) as client:
        await log_in(client)
        yield client


@pytest.fixture
async def prometheus_client(prometheus_app: FastAPI) -> AsyncIterator[AsyncClient]:
    async with logged_in(prometheus_app) as client:
        yield client


@pytest.fixture
async def dcgm_client(dcgm_app: FastAPI) -> AsyncIterator[AsyncClient]:
    async with logged_in(dcgm_app) as client:
        yield client


async def api_figures(client: AsyncClient) -> Figures:
    return {
        (host["name"], gpu["index"]): (gpu["memory_used_mib"], gpu["memory_free_mib"], gpu["memory_total_mib"])
        for host in (await client.get("/api/hosts")).json()
        for gpu in host["gpus"]
    }


async def prometheus_figures(prometheus: RealPrometheus) -> Figures:
    """Each GPU's memory as Prometheus holds it, asked of its own API."""
    values: dict[tuple[str, int], dict[str, float]] = {}
    async with httpx.AsyncClient(auth=PROMETHEUS_AUTH) as client:
        answer = await client.get(f"{prometheus.url}/api/v1/query", params={"query": '{__name__=~"DCGM_FI_DEV_FB_.*"}'})
    for series in answer.json()["data"]["result"]:
        labels = series["metric"]
        values.setdefault((labels["Hostname"], int(labels["gpu"])), {})[labels["__name__"]] = float(series["value"][1])
    return {key: _memory(figures) for key, figures in values.items()}


async def exporter_figures(exporter: SimDcgmExporter) -> Figures:
    """Each GPU's memory as the exporter serves it, read with prometheus_client's parser."""
    async with httpx.AsyncClient() as client:
        text = (await client.get(exporter.url)).text
    values: dict[tuple[str, int], dict[str, float]] = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            values.setdefault((sample.labels["Hostname"], int(sample.labels["gpu"])), {})[sample.name] = sample.value
    return {key: _memory(figures) for key, figures in values.items()}


def _memory(figures: dict[str, float]) -> tuple[int, int, int]:
    used, free = int(figures["DCGM_FI_DEV_FB_USED"]), int(figures["DCGM_FI_DEV_FB_FREE"])
    return used, free, used + free + int(figures["DCGM_FI_DEV_FB_RESERVED"])


def book(site: Site, host: str, gpu: int, mib: int, pid: int) -> None:
    simgpu.book([gpu], mib, pid=pid, name="python3", path=str(site.cluster.hosts[host].gpu_state_path))


async def test_api_hosts_shows_the_memory_prometheus_holds_and_the_host_page_says_where_from(
    prometheus_app: FastAPI, prometheus_client: AsyncClient, site: Site, holder: subprocess.Popen[bytes]
) -> None:
    client = prometheus_client
    await until(lambda: prometheus_app.state.runtime.gpus.hosts["rtxpro-01"].source.startswith("Prometheus"),
                what="the first figures from Prometheus")  # fmt: skip
    booked_at = time.monotonic()
    book(site, "rtxpro-01", 1, 23_456, holder.pid)

    async def shown() -> Figures | None:
        figures = await api_figures(client)
        return figures if figures[("rtxpro-01", 1)][0] == 23_456 else None

    figures = await until(shown, what="/api/hosts to show the booking")
    latency = time.monotonic() - booked_at
    print(f"booked in the simulated GPU state -> /api/hosts through Prometheus: {latency:.2f} s")
    held = await prometheus_figures(site.prometheus)
    async with httpx.AsyncClient() as anonymous:  # the dashboard got in with the password from its URL
        assert (await anonymous.get(f"{site.prometheus.url}/api/v1/query", params={"query": "up"})).status_code == 401
    scraped = {key: value for key, value in figures.items() if key[0] != "rtxpro-02"}
    assert scraped == held and len(held) == 4
    assert held[("rtxpro-01", 1)] == (23_456, 97887 - 533 - 23_456, 97887)
    assert latency < 10  # the exporter's collection (1 s), the scrape (1 s) and launchdeck's read (2 s)

    page = await until(lambda: _page_with(client, "/hosts/rtxpro-01", f'data-pid="{holder.pid}"'),
                       what="the booking's process on the host page, read over SSH")  # fmt: skip
    assert (
        f"GPU readings from Prometheus at http://127.0.0.1:{site.prometheus.port}/… (memory) "
        f"and nvml over SSH every {PROCESS_EVERY:g} s (processes)."
    ) in page
    assert PASSWORD not in page


async def _page_with(client: AsyncClient, path: str, text: str) -> str | None:
    page = (await client.get(path)).text
    return page if text in page else None


async def test_a_host_prometheus_has_no_series_of_shows_the_probes_memory_and_says_why(
    prometheus_app: FastAPI, prometheus_client: AsyncClient, site: Site
) -> None:
    client = prometheus_client
    status = prometheus_app.state.runtime.gpus.hosts["rtxpro-02"]
    why = (
        f"Prometheus at http://127.0.0.1:{site.prometheus.port}/… has no GPU series whose Hostname label names "
        "rtxpro-02; memory from the SSH probe"
    )
    await until(lambda: status.message == why and status.snapshot, what="rtxpro-02 to say why")
    assert status.state == "degraded" and status.source == "nvml"
    assert [total for (host, _), (_, _, total) in (await api_figures(client)).items() if host == "rtxpro-02"] == [
        97887,
        97887,
    ]
    assert why in (await client.get("/hosts")).text


async def test_dcgm_exporter_figures_go_to_the_host_its_labels_name(
    dcgm_app: FastAPI, dcgm_client: AsyncClient, site: Site
) -> None:
    client = dcgm_client
    hosts = dcgm_app.state.runtime.gpus.hosts
    exporter = site.cluster.exporters["b200-01"]
    shown = f"dcgm-exporter at http://127.0.0.1:{exporter.port}/…"
    await until(lambda: hosts["b200-01"].source.startswith(shown), what="b200-01's figures from its exporter")
    served = await exporter_figures(exporter)
    figures = await api_figures(client)
    assert {key: value for key, value in figures.items() if key[0] == "b200-01"} == served
    assert served[("b200-01", 0)][2] == 183359
    # rtxpro-01's URL is the same ({host} is 127.0.0.1 for both), and the exporter there is b200-01's.
    why = f"{shown} has no GPU series whose Hostname label names rtxpro-01; memory from the SSH probe"
    await until(lambda: hosts["rtxpro-01"].message == why, what="rtxpro-01 to say why")
    assert why in (await client.get("/hosts/rtxpro-01")).text


async def test_an_exporter_that_stops_answering_is_said_and_read_again_when_back(
    dcgm_app: FastAPI, dcgm_client: AsyncClient, site: Site, caplog: pytest.LogCaptureFixture
) -> None:
    client = dcgm_client
    status = dcgm_app.state.runtime.gpus.hosts["b200-01"]
    exporter = site.cluster.exporters["b200-01"]
    shown = f"dcgm-exporter at http://127.0.0.1:{exporter.port}/…"
    await until(lambda: status.source.startswith(shown), what="b200-01's figures from its exporter")
    await exporter.stop()
    try:
        why = f"{shown} is unreachable (Connection refused); memory from the SSH probe"
        await until(lambda: status.message == why, what="b200-01 to say its exporter is gone")
        assert status.state == "degraded" and status.source == "nvml"
        assert [used for (host, _), (used, _, _) in (await api_figures(client)).items() if host == "b200-01"] == [0, 0]
        assert why in (await client.get("/hosts/b200-01")).text
    finally:
        await exporter.start(port=exporter.port)
    await until(lambda: status.source.startswith(shown), what="its figures from the exporter again", timeout=40)
    assert status.state == "ok" and status.message == ""
    assert [r.getMessage() for r in caplog.records if "unreachable" in r.getMessage()] == [
        f"{shown} is unreachable (Connection refused); the SSH probe's memory figures are shown meanwhile"
    ]


async def test_prometheus_going_away_is_said_with_its_url_shown_without_the_password(
    prometheus_app: FastAPI, prometheus_client: AsyncClient, site: Site, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO)
    caplog.set_level(logging.INFO, logger="httpx")  # a CLI run in this worker may have quietened it
    client = prometheus_client
    monitor: GpuMonitor = prometheus_app.state.runtime.gpus
    await until(lambda: monitor.hosts["b200-01"].source.startswith("Prometheus"), what="figures from Prometheus")
    asked = f"HTTP Request: GET http://127.0.0.1:{site.prometheus.port}/api/v1/query?query="
    await until(lambda: asked in caplog.text, what="httpx to log a query")  # its password sent apart, not logged
    site.prometheus.stop()
    why = f"Prometheus at http://127.0.0.1:{site.prometheus.port}/… is unreachable (Connection refused)"
    for name in ("b200-01", "rtxpro-01", "rtxpro-02"):
        await until(lambda name=name: monitor.hosts[name].message == f"{why}; memory from the SSH probe",
                    what=f"{name} to say Prometheus is gone")  # fmt: skip
    page = (await client.get("/hosts")).text
    assert f"{why}; memory from the SSH probe" in page and PASSWORD not in page
    assert PASSWORD not in caplog.text and why in caplog.text


async def test_an_exporter_that_failed_is_not_asked_again_before_its_backoff(site: Site) -> None:
    """GpuMetrics alone, against a real exporter: one that failed is left alone a while (no hot
    loop), and a URL that only one host has is that host's, whatever name the exporter gives it."""
    port = free_port()
    metrics = GpuMetrics(GpuMetricsSource(GpuMetricsKind.DCGM, f"http://{{host}}:{port}/metrics"))
    node = HostSpec("gpu-node-7", address="127.0.0.1")
    first = await metrics.read([node])
    assert first == {"gpu-node-7": f"dcgm-exporter at http://127.0.0.1:{port}/… is unreachable (Connection refused)"}
    exporter = SimDcgmExporter(site.cluster.hosts["rtxpro-02"])
    await exporter.start(port=port)
    try:
        assert await metrics.read([node]) == first  # answering now, but not asked before its backoff
        found = await until(lambda: _exported(metrics, node), what="the exporter read again", timeout=10)
        assert [(gpu.index, gpu.name, gpu.memory_total_mib) for gpu in found.gpus] == [
            (0, "NVIDIA RTX PRO 6000 Blackwell Server Edition", 97887),
            (1, "NVIDIA RTX PRO 6000 Blackwell Server Edition", 97887),
        ]
    finally:
        await exporter.stop()
        await metrics.close()


async def _exported(metrics: GpuMetrics, spec: HostSpec) -> Exported | None:
    found = (await metrics.read([spec]))[spec.name]
    return found if isinstance(found, Exported) else None


# dcgm-exporter's labels on a whole GPU, and on a GPU split into two MIG instances.
WHOLE = (
    'gpu="0",UUID="GPU-5b4e",pci_bus_id="00000000:00:07.0",device="nvidia0",modelName="NVIDIA H100 80GB HBM3",'
    'Hostname="node-a",DCGM_FI_DRIVER_VERSION="580.95.05"'
)
MIG = 'gpu="1",UUID="GPU-77aa",device="nvidia1",modelName="NVIDIA H100 80GB HBM3",GPU_I_PROFILE="3g.40gb"'
EXPOSITION = f"""\
# HELP DCGM_FI_DEV_FB_FREE Framebuffer memory free (in MiB).
# TYPE DCGM_FI_DEV_FB_FREE gauge
DCGM_FI_DEV_FB_FREE{{{WHOLE}}} 45459
DCGM_FI_DEV_FB_FREE{{{MIG},GPU_I_ID="1",Hostname="node-a"}} 30000
DCGM_FI_DEV_FB_FREE{{{MIG},GPU_I_ID="2",Hostname="node-a"}} 40000
# HELP DCGM_FI_DEV_FB_USED Framebuffer memory used (in MiB).
# TYPE DCGM_FI_DEV_FB_USED gauge
DCGM_FI_DEV_FB_USED{{{WHOLE}}} 35000
DCGM_FI_DEV_FB_USED{{{MIG},GPU_I_ID="1",Hostname="node-a"}} 10
DCGM_FI_DEV_FB_USED{{{MIG},GPU_I_ID="2",Hostname="node-a"}} 0
# HELP DCGM_FI_DEV_FB_RESERVED Framebuffer memory reserved (in MiB).
# TYPE DCGM_FI_DEV_FB_RESERVED gauge
DCGM_FI_DEV_FB_RESERVED{{{WHOLE}}} 608
# HELP DCGM_FI_DEV_FB_USED_PERCENT Percentage used of Frame Buffer.
# TYPE DCGM_FI_DEV_FB_USED_PERCENT gauge
DCGM_FI_DEV_FB_USED_PERCENT{{{WHOLE}}} 0.43
# TYPE DCGM_FI_DEV_POWER_USAGE gauge
DCGM_FI_DEV_POWER_USAGE{{{WHOLE}}} 312.5
DCGM_FI_DEV_POWER_USAGE{{{MIG},GPU_I_ID="1",Hostname="node-a"}} NaN
# TYPE DCGM_FI_DEV_GPU_UTIL gauge
DCGM_FI_DEV_GPU_UTIL{{{WHOLE}}} 87
# TYPE DCGM_FI_DEV_SM_CLOCK gauge
DCGM_FI_DEV_SM_CLOCK{{{WHOLE}}} 1980
"""


def test_exposition_gives_each_gpus_memory_with_mig_instances_summed() -> None:
    samples = parse_exposition(EXPOSITION)
    assert {sample.name for sample in samples} == {
        "DCGM_FI_DEV_FB_FREE", "DCGM_FI_DEV_FB_USED", "DCGM_FI_DEV_FB_RESERVED", "DCGM_FI_DEV_POWER_USAGE",
        "DCGM_FI_DEV_GPU_UTIL",
    }  # fmt: skip
    whole, split = readings_of(samples)
    assert (whole.index, whole.name, whole.uuid) == (0, "NVIDIA H100 80GB HBM3", "GPU-5b4e")
    assert (whole.memory_used_mib, whole.memory_free_mib, whole.memory_reserved_mib) == (35000, 45459, 608)
    assert whole.memory_total_mib == 35000 + 45459 + 608  # DCGM reports the reservation apart from used
    assert (whole.utilization_pct, whole.power_w) == (87, 312.5)
    assert (split.memory_used_mib, split.memory_free_mib, split.memory_total_mib) == (10, 70000, 70010)
    assert split.power_w is None and split.utilization_pct is None  # NaN is no reading


def test_a_label_names_a_host_by_name_unique_address_or_first_name_part() -> None:
    index = HostIndex([
        HostSpec("b200-01", address="10.0.0.5"), HostSpec("rtxpro-01", address="127.0.0.1"),
        HostSpec("rtxpro-02", address="127.0.0.1"), HostSpec("gpu.lab.example", address="10.0.0.9"),
    ])  # fmt: skip
    assert index.host_of("b200-01") == index.host_of("B200-01.cluster.local.") == "b200-01"
    assert index.host_of("10.0.0.5:9400") == index.host_of("10.0.0.5") == "b200-01"  # an `instance` label
    assert index.host_of("127.0.0.1:9400") is None  # two hosts have that address
    assert index.host_of("gpu.lab.example") == index.host_of("[10.0.0.9]:9400") == "gpu.lab.example"
    assert index.host_of("10.0.0.7") is None and index.host_of("") is None


def test_a_metrics_url_that_is_neither_kind_is_refused_without_showing_it() -> None:
    with pytest.raises(ValidationError) as refused:
        Settings(_env_file=None, gpu_metrics_url=f"http://me:{PASSWORD}@prometheus:9090")  # type: ignore[call-arg]
    assert "begin it with dcgm: or prometheus:" in str(refused.value) and PASSWORD not in str(refused.value)
    with pytest.raises(ValidationError) as templated:
        Settings(_env_file=None, gpu_metrics_url="prometheus:http://{host}:9090")  # type: ignore[call-arg]
    assert "{host} belongs in a dcgm: URL" in str(templated.value)
    source = Settings(_env_file=None, gpu_metrics_url="dcgm:http://{host}:9400/metrics").resolved_gpu_metrics()  # type: ignore[call-arg]
    assert source == GpuMetricsSource(GpuMetricsKind.DCGM, "http://{host}:9400/metrics", "Hostname")
