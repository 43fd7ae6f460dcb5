"""GPU figures from a site's dcgm-exporter or Prometheus, where those already watch every GPU:
one query for the whole fleet (Prometheus), or one small HTTP read per host (dcgm-exporter),
instead of a probe's reading each second from each host over SSH.

Series are given to hosts by a label (dcgm-exporter's `Hostname`, or the one configured): a
Prometheus holds every host's, and an exporter URL that several hosts share (the same address
in the template) may too. An exporter URL of one host alone is that host's whatever its label
says: a node's own name need not be the one the hosts file gives it.

dcgm-exporter lists no processes, so who holds a GPU is still read over SSH (see monitor.py).
"""

from __future__ import annotations

import asyncio
import ipaddress
import logging
import math
import os
import time
from collections import defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field, replace
from urllib.parse import unquote, urlsplit, urlunsplit

import httpx
from prometheus_client.parser import text_string_to_metric_families

from app.backoff import Backoff
from app.config import HOST_PLACEHOLDER, GpuMetricsKind, GpuMetricsSource, redacted_url
from app.gpu.probe import GpuReading
from app.ssh import HostSpec

log = logging.getLogger(__name__)

FETCH_TIMEOUT = 3.0  # seconds for one read; a Prometheus that takes longer is reported as not answering
AT_ONCE = 32  # exporters read at once, at most
BACKOFF_MAX = 30.0

FB_USED, FB_FREE, FB_RESERVED, FB_TOTAL = (f"DCGM_FI_DEV_FB_{name}" for name in ("USED", "FREE", "RESERVED", "TOTAL"))
UTIL, TEMP, POWER = "DCGM_FI_DEV_GPU_UTIL", "DCGM_FI_DEV_GPU_TEMP", "DCGM_FI_DEV_POWER_USAGE"
WANTED = frozenset({FB_USED, FB_FREE, FB_RESERVED, FB_TOTAL, UTIL, TEMP, POWER})
# One series per metric, GPU (and MIG instance) and host, whatever else Prometheus keeps on them
# (job, instance, pod), so the answer stays small at thousands of GPUs.
PROMETHEUS_QUERY = (
    "max by (__name__, gpu, UUID, modelName, GPU_I_ID, {label}) "
    '({{__name__=~"DCGM_FI_DEV_(FB_USED|FB_FREE|FB_RESERVED|FB_TOTAL|GPU_UTIL|GPU_TEMP|POWER_USAGE)"}})'
)


@dataclass(frozen=True)
class Sample:
    name: str
    labels: dict[str, str]
    value: float


@dataclass(frozen=True)
class Exported:
    """One host's GPUs as an exporter gave them, and in words where from."""

    source: str
    gpus: list[GpuReading]


class Unreadable(Exception):
    """An exporter or Prometheus gave no figures; the message says why, without its URL."""


def parse_exposition(text: str) -> list[Sample]:
    """The GPU series of a /metrics page in Prometheus's text format (what dcgm-exporter serves).

    Only the lines of the wanted metrics reach the parser: an exporter serves a few dozen metrics
    per GPU, and these are a handful."""
    lines = [line for line in text.splitlines() if line.partition("{")[0].partition(" ")[0] in WANTED]
    try:
        return [
            Sample(sample.name, sample.labels, sample.value)
            for family in text_string_to_metric_families("\n".join(lines) + "\n")
            for sample in family.samples
        ]
    except ValueError as exc:
        raise Unreadable(f"sent metrics that do not parse ({exc})") from None


def parse_query_answer(answer: object) -> list[Sample]:
    """The series of a Prometheus instant query's JSON answer."""
    try:
        if isinstance(answer, dict) and answer["status"] == "success":
            return [
                Sample(item["metric"]["__name__"], item["metric"], float(item["value"][1]))
                for item in answer["data"]["result"]
            ]
    except (KeyError, TypeError, ValueError, IndexError):
        pass
    raise Unreadable("sent an answer that is no Prometheus query result")


def readings_of(samples: Iterable[Sample]) -> list[GpuReading]:
    """Each GPU's figures, by its `gpu` label. A GPU split into MIG instances reports each
    instance's memory: the GPU's is their sum."""
    values: dict[int, Figures] = defaultdict(lambda: defaultdict(dict))
    names: dict[int, tuple[str, str]] = {}
    for sample in samples:
        if not sample.labels.get("gpu", "").isdigit() or math.isnan(sample.value):
            continue
        index = int(sample.labels["gpu"])
        values[index][sample.name][sample.labels.get("GPU_I_ID", "")] = sample.value
        names.setdefault(index, (sample.labels.get("modelName", ""), sample.labels.get("UUID", "")))
    readings = []
    for index in sorted(values):
        figures = values[index]
        used, free, reserved = (_sum(figures, metric) for metric in (FB_USED, FB_FREE, FB_RESERVED))
        whole = _sum(figures, FB_TOTAL)  # not among dcgm-exporter's default counters
        if whole is None and used is not None and free is not None:
            # DCGM counts the driver's reservation apart from used, as NVML's v2 memory query does.
            whole = used + free + (reserved or 0)
        util, temp = _highest(figures, UTIL), _highest(figures, TEMP)
        readings.append(
            GpuReading(
                index=index,
                name=names[index][0],
                uuid=names[index][1],
                memory_total_mib=whole,
                memory_used_mib=used,
                memory_free_mib=free,
                memory_reserved_mib=reserved,
                utilization_pct=round(util) if util is not None else None,
                temperature_c=round(temp) if temp is not None else None,
                power_w=_highest(figures, POWER),
            )
        )
    return readings


Figures = dict[str, dict[str, float]]  # metric -> MIG instance ("" for a whole GPU) -> value


def _sum(figures: Figures, metric: str) -> int | None:
    return round(sum(figures[metric].values())) if metric in figures else None


def _highest(figures: Figures, metric: str) -> float | None:
    return max(figures[metric].values()) if metric in figures else None


def _label_key(value: str) -> str:
    """A label's host, as compared: without case, a trailing dot, or the port of an `instance`."""
    value = value.strip().lower().rstrip(".")
    if value.startswith("["):
        return value[1:].partition("]")[0]
    if value.count(":") == 1:
        return value.partition(":")[0]
    return value


def _is_address(value: str) -> bool:
    try:
        ipaddress.ip_address(value)
    except ValueError:
        return False
    return True


class HostIndex:
    """Which host a label value names: the host of that name, else of that address (when only
    one host has it), else of that name's first part (b200-01.example.com is b200-01)."""

    def __init__(self, specs: Iterable[HostSpec]):
        self.by_name: dict[str, str] = {}
        by_address: dict[str, set[str]] = defaultdict(set)
        for spec in specs:
            self.by_name[spec.name.lower()] = spec.name
            if spec.address:
                by_address[_label_key(spec.address)].add(spec.name)
        self.by_address = {address: next(iter(names)) for address, names in by_address.items() if len(names) == 1}

    def host_of(self, value: str) -> str | None:
        key = _label_key(value)
        if found := self.by_name.get(key) or self.by_address.get(key):
            return found
        return None if _is_address(key) else self.by_name.get(key.partition(".")[0])


@dataclass
class _Endpoint:
    """One URL read: when it may be tried again after a failure, and why it failed."""

    shown: str  # in words, its URL without path or credentials
    backoff: Backoff = field(default_factory=lambda: Backoff(1.0, BACKOFF_MAX))
    retry_at: float = 0.0
    problem: str = ""

    def failed(self, why: str) -> None:
        if self.problem != (problem := f"{self.shown} {why}"):
            log.warning("%s; the SSH probe's memory figures are shown meanwhile", problem)
        self.problem = problem
        self.retry_at = time.monotonic() + self.backoff.next()

    def succeeded(self) -> None:
        if self.problem:
            log.info("%s answers again", self.shown)
        self.problem, self.retry_at = "", 0.0
        self.backoff.reset()


class GpuMetrics:
    """Reads every host's GPU figures from the configured source; each URL that fails is tried
    again with backoff, its hosts told why meanwhile."""

    def __init__(self, source: GpuMetricsSource):
        url, auth = _credentials_apart(source.url)
        self.source = replace(source, url=url)
        # A password goes in the Authorization header, not in URLs that httpx logs.
        self.client = httpx.AsyncClient(timeout=FETCH_TIMEOUT, follow_redirects=False, auth=auth)
        self._at_once = asyncio.Semaphore(AT_ONCE)  # a read's time counts from its turn, not its queueing
        self._endpoints: dict[str, _Endpoint] = {}

    @property
    def description(self) -> str:
        """The source in words, for the log and the pages: never its URL whole."""
        if self.source.kind == GpuMetricsKind.PROMETHEUS:
            return f"Prometheus at {redacted_url(self.source.url)}"
        return f"dcgm-exporter at {redacted_url(self.source.url)}"

    async def close(self) -> None:
        await self.client.aclose()

    async def read(self, specs: Sequence[HostSpec]) -> dict[str, Exported | str]:
        """Each host's GPUs, or a sentence saying why the source has none of them."""
        if self.source.kind == GpuMetricsKind.PROMETHEUS:
            return await self._read_prometheus(specs)
        return await self._read_exporters(specs)

    async def _read_prometheus(self, specs: Sequence[HostSpec]) -> dict[str, Exported | str]:
        url = self.source.url.rstrip("/") + "/api/v1/query"
        endpoint = self._endpoint(url, self.description)
        if time.monotonic() >= endpoint.retry_at:
            query = PROMETHEUS_QUERY.format(label=self.source.host_label)
            try:
                samples = parse_query_answer(_json(await self._get(url, params={"query": query})))
            except Unreadable as exc:
                endpoint.failed(str(exc))
            else:
                endpoint.succeeded()
                return self._by_label(samples, specs, endpoint.shown)
        return {spec.name: endpoint.problem for spec in specs}

    async def _read_exporters(self, specs: Sequence[HostSpec]) -> dict[str, Exported | str]:
        sharing: dict[str, list[HostSpec]] = defaultdict(list)
        for spec in specs:
            sharing[self._exporter_url(spec)].append(spec)
        found: dict[str, Exported | str] = {}
        for answer in await asyncio.gather(*(self._read_exporter(url, hosts) for url, hosts in sharing.items())):
            found.update(answer)
        return found

    async def _read_exporter(self, url: str, specs: list[HostSpec]) -> dict[str, Exported | str]:
        endpoint = self._endpoint(url, f"dcgm-exporter at {redacted_url(url)}")
        if time.monotonic() >= endpoint.retry_at:
            try:
                samples = parse_exposition((await self._get(url)).text)
            except Unreadable as exc:
                endpoint.failed(str(exc))
            else:
                endpoint.succeeded()
                if len(specs) > 1:
                    return self._by_label(samples, specs, endpoint.shown)
                return {specs[0].name: self._exported(samples, specs[0], endpoint.shown)}
        return {spec.name: endpoint.problem for spec in specs}

    def _by_label(self, samples: list[Sample], specs: Sequence[HostSpec], shown: str) -> dict[str, Exported | str]:
        index = HostIndex(specs)
        mine: dict[str, list[Sample]] = defaultdict(list)
        for sample in samples:
            if (host := index.host_of(sample.labels.get(self.source.host_label, ""))) is not None:
                mine[host].append(sample)
        return {spec.name: self._exported(mine[spec.name], spec, shown) for spec in specs}

    def _exported(self, samples: list[Sample], spec: HostSpec, shown: str) -> Exported | str:
        if not samples:
            return f"{shown} has no GPU series whose {self.source.host_label} label names {spec.name}"
        gpus = readings_of(samples)
        if not gpus or any(gpu.memory_used_mib is None or gpu.memory_free_mib is None for gpu in gpus):
            return f"{shown} gives {spec.name}'s GPUs without {FB_USED} and {FB_FREE}"
        return Exported(shown, gpus)

    def _exporter_url(self, spec: HostSpec) -> str:
        address = spec.address or spec.name
        return self.source.url.replace(HOST_PLACEHOLDER, f"[{address}]" if ":" in address else address)

    def _endpoint(self, url: str, shown: str) -> _Endpoint:
        return self._endpoints.setdefault(url, _Endpoint(shown))

    async def _get(self, url: str, **options: object) -> httpx.Response:
        try:
            async with self._at_once, asyncio.timeout(FETCH_TIMEOUT):
                response = await self.client.get(url, **options)  # type: ignore[arg-type]
        except (httpx.TimeoutException, TimeoutError):
            raise Unreadable(f"gave no answer within {FETCH_TIMEOUT:g} s") from None
        except httpx.InvalidURL:
            raise Unreadable("is no URL that can be read (see LAUNCHDECK_GPU_METRICS_URL)") from None
        except httpx.HTTPError as exc:
            raise Unreadable(f"is unreachable ({_reason(exc, url)})") from None
        if response.status_code != 200:
            detail = _json(response, quiet=True)
            said = f": {detail['error']}" if isinstance(detail, dict) and "error" in detail else ""
            raise Unreadable(f"answered {response.status_code} {response.reason_phrase}{said}")
        return response


def _credentials_apart(url: str) -> tuple[str, httpx.BasicAuth | None]:
    """`url` without its user and password, and those as basic auth."""
    parts = urlsplit(url)
    if parts.username is None:
        return url, None
    netloc = parts.netloc.rpartition("@")[2]
    auth = httpx.BasicAuth(unquote(parts.username), unquote(parts.password or ""))
    return urlunsplit(parts._replace(netloc=netloc)), auth


def _json(response: httpx.Response, *, quiet: bool = False) -> object:
    try:
        return response.json()
    except ValueError:
        if quiet:
            return None
        raise Unreadable("sent an answer that is not JSON") from None


def _reason(exc: httpx.HTTPError, url: str) -> str:
    """The error in a few words: the system's, where a system call failed underneath (httpx says
    only that every attempt failed), and never the URL, which may hold a password."""
    cause: BaseException | None = exc
    while cause is not None:
        if isinstance(cause, OSError) and isinstance(cause.errno, int) and cause.errno > 0:
            return os.strerror(cause.errno)
        if isinstance(cause, OSError) and cause.strerror:
            return cause.strerror
        cause = cause.__cause__ or cause.__context__
    return str(exc).replace(url, "the URL") or type(exc).__name__
