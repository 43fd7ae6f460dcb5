"""Settings, read from the environment with the prefix LAUNCHDECK_."""

from __future__ import annotations

import asyncio
import ipaddress
import logging
import re
import socket
from collections.abc import Iterable
from dataclasses import dataclass
from enum import StrEnum
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit, urlunsplit

from pydantic import Field, SecretStr, field_validator
from pydantic_core import PydanticUseDefault
from pydantic_settings import BaseSettings, SettingsConfigDict

from app.errors import InvalidInput
from app.states import Role

MIN_TOKEN_LENGTH = 32
HEADER_NAME = re.compile(r"[A-Za-z0-9-]+")
LOOPBACK_NAMES = frozenset({"localhost", "127.0.0.1", "::1"})
EVERY_ADDRESS = ("0.0.0.0", "::", "")


def is_loopback(address: str) -> bool:
    """Whether only this machine can reach `address`; a name other than localhost may resolve anywhere."""
    if address == "localhost":
        return True
    try:
        return ipaddress.ip_address(address).is_loopback
    except ValueError:
        return False


def redacted_url(url: str) -> str:
    """A webhook's scheme and host, for logs and the audit: its path carries the token that lets anyone post."""
    parts = urlsplit(url)
    port = f":{parts.port}" if parts.port else ""
    return f"{parts.scheme}://{parts.hostname or ''}{port}/…"


Network = ipaddress.IPv4Network | ipaddress.IPv6Network


class GpuMetricsKind(StrEnum):
    DCGM = "dcgm"  # each host's dcgm-exporter, its /metrics
    PROMETHEUS = "prometheus"  # a Prometheus that scrapes them, its query API


HOST_PLACEHOLDER = "{host}"


@dataclass(frozen=True)
class GpuMetricsSource:
    """Where the GPUs' memory figures are read instead of from the SSH probe
    (LAUNCHDECK_GPU_METRICS_URL), and the label of its series that names each host."""

    kind: GpuMetricsKind
    url: str  # for dcgm, {host} stands for each host's address
    host_label: str = "Hostname"


def gpu_metrics_problem(value: str) -> str | None:
    """Why `value` names no GPU metrics source (None when it does); the URL stays out of the
    sentence, as it may hold a password."""
    kind, _, url = value.strip().partition(":")
    if kind not in list(GpuMetricsKind):
        return "begin it with dcgm: or prometheus:, e.g. prometheus:http://prometheus.example.com:9090"
    if kind == GpuMetricsKind.PROMETHEUS and HOST_PLACEHOLDER in url:
        return "a Prometheus answers for every host at one URL: {host} belongs in a dcgm: URL"
    if problem := http_url_problem(url.replace(HOST_PLACEHOLDER, "host")):
        return f"after {kind}:, {problem}"
    return None


@dataclass(frozen=True)
class Destinations:
    """Where webhooks may post: public addresses, and internal ones (loopback, private, link-local,
    unspecified, reserved) only where the team allowed them, by network or by host name. A name is
    checked by every address it resolves to, and the post goes to the address that was checked,
    so a name that resolves elsewhere the second time reaches nothing new."""

    networks: tuple[Network, ...] = ()
    names: frozenset[str] = frozenset()

    def address_problem(self, host: str, address: str) -> str | None:
        ip = ipaddress.ip_address(address.partition("%")[0])
        if isinstance(ip, ipaddress.IPv6Address) and ip.ipv4_mapped:
            ip = ip.ipv4_mapped
        if host.lower().rstrip(".") in self.names or any(ip in network for network in self.networks):
            return None
        if ip.is_global and not ip.is_multicast:
            return None
        return (
            f"{host} is {ip}, an internal address; webhooks go to public addresses unless "
            "LAUNCHDECK_WEBHOOK_ALLOWED names the address, its network or the host"
        )

    def literal_problem(self, url: str) -> str | None:
        """Why a URL whose host is an address, written any way a resolver reads one (127.1,
        0x7f000001, 2130706433), may not be posted to; None for a name, checked when it is posted."""
        host = urlsplit(url).hostname or ""
        address = address_literal(host)
        return self.address_problem(host, address) if address else None

    async def checked_address(self, url: str) -> str:
        """The address to post `url` to: every address its host resolves to is allowed (else
        InvalidInput says which is not), and the first is the one to connect to."""
        parts = urlsplit(url)
        host = parts.hostname or ""
        port = parts.port or (443 if parts.scheme == "https" else 80)
        try:
            found = await asyncio.get_running_loop().getaddrinfo(host, port, type=socket.SOCK_STREAM)
        except OSError as exc:
            raise InvalidInput(f"{host} does not resolve: {exc.strerror or exc}") from None
        addresses = list(dict.fromkeys(str(info[4][0]) for info in found))
        for address in addresses:
            if problem := self.address_problem(host, address):
                raise InvalidInput(problem)
        return addresses[0]

    @classmethod
    def of(cls, allowed: str | None) -> Destinations:
        networks, names = [], set()
        for item in (allowed or "").split(","):
            if not (item := item.strip().lower()):
                continue
            try:
                networks.append(ipaddress.ip_network(item, strict=False))
            except ValueError:
                names.add(item.rstrip("."))
        return cls(tuple(networks), frozenset(names))


def address_literal(host: str) -> str | None:
    """The address a URL's host names as an address, in any of the forms the system's resolver
    accepts (dotted, short, hex, octal, decimal, IPv6); None for a name."""
    try:
        return str(ipaddress.ip_address(host))
    except ValueError:
        pass
    try:
        return socket.inet_ntoa(socket.inet_aton(host))
    except OSError:
        return None


def pinned(url: str, address: str) -> tuple[str, dict[str, str], dict[str, str]]:
    """`url` with its host replaced by `address`, the Host header and the TLS server name to send
    with it, so the connection goes where the check said while TLS still checks the name."""
    parts = urlsplit(url)
    host = parts.hostname or ""
    netloc = f"[{address}]" if ":" in address else address
    if parts.port:
        netloc += f":{parts.port}"
    return urlunsplit(parts._replace(netloc=netloc)), {"Host": parts.netloc.rpartition("@")[2]}, {"sni_hostname": host}


def http_url_problem(url: str) -> str | None:
    """Why `url` cannot be posted to (None when it can): webhooks are http(s) URLs with a host."""
    try:
        parts = urlsplit(url)
        parts.port  # noqa: B018 (read for its check: a port out of range raises)
    except ValueError as exc:
        return str(exc)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        return "give an http:// or https:// URL"
    if any(c.isspace() for c in url):
        return "a URL has no spaces"
    return None


def notify_urls_of(listed: str) -> list[str]:
    """Apprise URLs read as Apprise reads a list: split at commas and spaces, a query's commas kept."""
    from apprise.utils.parse import parse_urls  # slow to import: only where the setting is used

    return list(parse_urls(listed))  # type: ignore[no-untyped-call]


def _networks(listed: str | None) -> tuple[Network, ...]:
    """A comma-separated list of addresses or networks (checked by `addresses_are_networks`)."""
    return tuple(ipaddress.ip_network(item.strip(), strict=False) for item in listed.split(",")) if listed else ()


def address_in(address: str, networks: Iterable[Network]) -> bool:
    """Whether the peer at `address` is in one of `networks` (a malformed address is not): a
    proxy that may name people, a scraper that may read /metrics."""
    try:
        peer = ipaddress.ip_address(address)
    except ValueError:
        return False
    if isinstance(peer, ipaddress.IPv6Address) and peer.ipv4_mapped:
        peer = peer.ipv4_mapped
    return any(peer in network for network in networks)


class Settings(BaseSettings):
    # Inputs stay out of error messages: the token and the webhook URL are secrets.
    model_config = SettingsConfigDict(env_prefix="LAUNCHDECK_", extra="ignore", hide_input_in_errors=True)

    data_dir: Path = Field(Path("data"), description="Where the database, logs, keys and tokens live.")
    database_url: str | None = Field(
        None,
        description="SQLAlchemy URL; default a SQLite file in the data dir. "
        "PostgreSQL: postgresql+psycopg://user@host/db.",
    )
    bind: str = Field("127.0.0.1", description="Address the dashboard listens on.")
    port: int = Field(8000, ge=1, le=65535, description="Port the dashboard listens on.")
    log_format: str = Field(
        "text",
        pattern="^(text|json)$",
        description="How the dashboard logs: `text`, or `json`, one object per line with the request id, attempt "
        "id and host as fields where known (uvicorn's access log too).",
    )
    token: SecretStr | None = Field(
        None,
        description="API token accepted as given (at least 32 characters); default one generated into "
        "<data_dir>/access-token.",
    )
    hosts_file: Path | None = Field(
        None, description="TOML file of GPU hosts; default <data_dir>/hosts.toml when it exists."
    )
    admin_password_file: Path | None = Field(
        None,
        description="File holding the first admin's password (a compose secret): read when the dashboard starts "
        "with no accounts, to create LAUNCHDECK_ADMIN_NAME as an admin; ignored once any account exists.",
    )
    admin_name: str = Field("owner", description="Name of the first admin that LAUNCHDECK_ADMIN_PASSWORD_FILE creates.")
    known_hosts: Path = Field(
        Path("~/.ssh/known_hosts"), description="known_hosts file that host keys are checked against."
    )
    ssh_config: Path = Field(Path("~/.ssh/config"), description="OpenSSH client config whose aliases hosts may use.")
    ssh_keepalive_interval: float = Field(
        5.0, gt=0, description="Seconds between SSH keepalives; a host silent for 3 intervals is offline."
    )
    ssh_connect_timeout: float = Field(10.0, gt=0, description="Seconds allowed for one SSH connection attempt.")
    stop_grace_seconds: float = Field(
        15.0, ge=0, description="Seconds a stopped server gets after SIGTERM before its process group is killed."
    )
    hang_seconds: float = Field(
        600.0,
        gt=0,
        description="Seconds a launch that is still loading may go without a new log line, its process alive, "
        "before it is reported hung (failure class timeout).",
    )
    lease_seconds: float = Field(
        9.0,
        ge=1,
        description="With several controllers on PostgreSQL: how long a controller's lease on a host lasts "
        "unrenewed; a dead controller's hosts are taken within this and a third of it.",
    )
    controller_pins: str | None = Field(
        None,
        description="Host labels this controller is pinned to (comma-separated, e.g. site-a): it owns only hosts "
        "with one of them. Empty: any host.",
    )
    slurm_poll_seconds: float = Field(
        5.0,
        ge=1,
        description="Seconds between two looks at a Slurm cluster's queue: one squeue, for every job launchdeck "
        "follows there; its partitions (sinfo) and the pending jobs' places are read every 12 looks.",
    )
    grep_timeout_seconds: float = Field(
        10.0, gt=0, description="Seconds one log search may run before grep is stopped and its hits so far shown."
    )
    grep_memory_mib: int = Field(
        512, ge=64, description="Address space one grep may use, in MiB; a pattern that needs more is refused."
    )
    grep_max_running: int = Field(4, ge=1, description="Greps that may run at once; further searches wait.")
    bench_timeout_seconds: float = Field(
        3600.0, gt=0, description="Seconds one serving benchmark may run on its host before it is stopped."
    )
    bench_memory_mib: int = Field(
        4096, ge=256, description="Address space a serving benchmark's process may use on its host, in MiB."
    )
    grep_wait_seconds: float = Field(
        2.0, ge=0, description="Seconds a search waits for a turn when the most greps run, before a 503."
    )
    disk_reserve_mb: int = Field(
        64,
        ge=0,
        description="Free MB under which every page warns that the data dir is (nearly) full.",
    )
    cookie_secure: bool = Field(True, description="Send the session cookie only over HTTPS (and to localhost).")
    session_days: int = Field(14, ge=1, description="Days a browser login lasts at most, however busy.")
    session_idle_hours: float = Field(
        12.0, gt=0, description="Hours a browser login lasts unused; logging in again is needed after that."
    )
    max_body_bytes: int = Field(
        1 << 20,
        ge=1024,
        description="Largest request body accepted, in bytes; a larger one is refused with 413 before it is read.",
    )
    allowed_hosts: str | None = Field(
        None,
        description="Comma-separated names (or addresses) the dashboard answers to in the Host header, besides "
        "localhost; `*` for any. Checked when given, and always when bound beyond loopback, where the default is "
        "the bind address, the machine's name and the public URL's host.",
    )
    public_docs: bool = Field(False, description="Serve /api/docs and the OpenAPI schema without a login.")
    metrics_token: SecretStr | None = Field(
        None,
        description="Bearer token a Prometheus scraper sends for /metrics (at least 32 characters); its own, "
        "apart from people's API tokens.",
    )
    metrics_allowed: str | None = Field(
        None,
        description="Comma-separated addresses or networks that may read /metrics without a token (e.g. the "
        "Prometheus server's); with neither this nor LAUNCHDECK_METRICS_TOKEN, /metrics answers 403.",
    )
    public_url: str | None = Field(
        None,
        description="The dashboard's address as people open it, for the links in notifications; "
        "default http://<bind>:<port> (the machine's name when bound to every address).",
    )
    webhook_url: SecretStr | None = Field(
        None,
        description="Slack or Mattermost incoming webhook told when any attempt becomes ready, fails or turns "
        "unhealthy; a preset's own webhook is told as well.",
    )
    webhook_allowed: str | None = Field(
        None,
        description="Comma-separated networks, addresses or host names that webhooks may reach although they are "
        "internal (loopback, private, link-local), e.g. 10.0.0.0/8,chat.internal; none by default.",
    )
    notify_urls: SecretStr | None = Field(
        None,
        description="Apprise URLs (comma- or space-separated) told what the webhooks are told: PagerDuty, email, "
        "Teams, Discord or any other service Apprise sends to; json://, xml:// and form:// ones go where "
        "webhooks may.",
    )
    auth_proxy_header: str | None = Field(
        None,
        description="Single sign-on: the request header in which a trusted proxy (e.g. oauth2-proxy) names the "
        "person, e.g. X-Forwarded-User; believed only from LAUNCHDECK_AUTH_PROXY_ADDRESSES. Off when unset.",
    )
    auth_proxy_addresses: str | None = Field(
        None,
        description="Comma-separated addresses or networks (CIDR) of the proxies in front: believed when they name "
        "a person in LAUNCHDECK_AUTH_PROXY_HEADER (required with it), and for the client's address in their "
        "X-Forwarded-For, which is ignored from anyone else.",
    )
    auth_proxy_default_role: Role = Field(
        Role.VIEWER, description="Role of an account made for a person the proxy names for the first time."
    )
    gpu_metrics_url: SecretStr | None = Field(
        None,
        description="Read the GPUs' memory from a site's dcgm-exporter or Prometheus instead of the SSH probe: "
        "`prometheus:URL` (a Prometheus that scrapes dcgm-exporter) or `dcgm:URL` (each host's exporter, `{host}` "
        "standing for the host's address, e.g. dcgm:http://{host}:9400/metrics). The SSH probe still reads the GPU "
        "processes, every 5 s.",
    )
    gpu_metrics_host_label: str = Field(
        "Hostname",
        pattern=r"^[A-Za-z_][A-Za-z0-9_]*$",
        description="The label of the exporter's series that names their host, matched against each host's name "
        "or address (dcgm-exporter's own is Hostname; `instance` when Prometheus's target address tells).",
    )
    demo_time_scale: float = Field(
        1.0,
        gt=0,
        description="Pace of the demo's simulated SGLang servers: 1 is about real time, 0.1 ten times faster.",
    )
    demo_hosts: str = Field(
        "b200-01:b200:8,rtxpro-01:rtx-pro-6000:4,rtxpro-02:rtx-pro-6000:4",
        description="Simulated hosts for `launchdeck demo`, as NAME:MODEL:COUNT,... (models: b200, rtx-pro-6000).",
    )
    demo_slurm: bool = Field(
        False,
        description="`launchdeck demo` also runs a local Slurm cluster of two simulated nodes (4 RTX PRO 6000s "
        "each) behind a login node, as `launchdeck demo --slurm` does; needs Debian's slurm-wlm and munge, and root.",
    )

    @field_validator("*", mode="before")
    @classmethod
    def blank_means_unset(cls, value: Any) -> Any:
        """A variable set blank keeps the default: docker compose passes an unset `${X:-}` as "", and
        the compose file passes every setting through that way."""
        if isinstance(value, str) and not value.strip():
            raise PydanticUseDefault()
        return value

    @field_validator("token", "metrics_token")
    @classmethod
    def token_is_long(cls, value: SecretStr | None) -> SecretStr | None:
        if value is not None and len(value.get_secret_value()) < MIN_TOKEN_LENGTH:
            raise ValueError(
                f"an access token needs at least {MIN_TOKEN_LENGTH} characters, so that it cannot be guessed "
                f"(this one has {len(value.get_secret_value())}); make one with "
                "`python3 -c 'import secrets; print(secrets.token_urlsafe(32))'`, or leave it unset for a generated one"
            )
        return value

    @field_validator("webhook_url")
    @classmethod
    def webhook_is_http(cls, value: SecretStr | None) -> SecretStr | None:
        if value is not None and (problem := http_url_problem(value.get_secret_value())):
            raise ValueError(problem)  # the URL itself stays out of the message: its path is the secret
        return value

    @field_validator("notify_urls")
    @classmethod
    def notify_urls_are_apprise(cls, value: SecretStr | None) -> SecretStr | None:
        """Each is a URL Apprise sends to; a wrong one is named by its place and scheme only, and
        Apprise's own complaint, which may quote it whole, is kept out of the log."""
        if value is None:
            return value
        import apprise  # slow to import: only where the setting is used

        quiet = logging.getLogger("apprise")
        was, quiet.disabled = quiet.disabled, True
        try:
            for place, url in enumerate(notify_urls_of(value.get_secret_value()), 1):
                if apprise.Apprise.instantiate(url) is None:
                    shown = f"{url.partition('://')[0]}://…" if "://" in url else "without a scheme"
                    raise ValueError(f"URL {place} ({shown}) is no URL Apprise can send to")
        finally:
            quiet.disabled = was
        return value

    @field_validator("gpu_metrics_url")
    @classmethod
    def gpu_metrics_is_a_source(cls, value: SecretStr | None) -> SecretStr | None:
        if value is not None and (problem := gpu_metrics_problem(value.get_secret_value())):
            raise ValueError(problem)
        return value

    @field_validator("auth_proxy_header")
    @classmethod
    def header_is_a_name(cls, value: str | None) -> str | None:
        if value is not None and not HEADER_NAME.fullmatch(value.strip()):
            raise ValueError(f"{value!r} is no HTTP header name; give one like X-Forwarded-User")
        return value.strip() if value is not None else None

    @field_validator("auth_proxy_addresses", "metrics_allowed")
    @classmethod
    def addresses_are_networks(cls, value: str | None) -> str | None:
        if value is not None:
            for item in value.split(","):
                try:
                    ipaddress.ip_network(item.strip(), strict=False)
                except ValueError:
                    raise ValueError(f"{item.strip()!r} is no IP address or network (such as 10.0.0.0/24)") from None
        return value

    def resolved_proxy_networks(self) -> tuple[Network, ...]:
        """The proxies believed when they name a person; none unless the header is set too."""
        return self.resolved_forwarding_proxies() if self.auth_proxy_header else ()

    def resolved_forwarding_proxies(self) -> tuple[Network, ...]:
        """The proxies whose X-Forwarded-For gives the client's address."""
        return _networks(self.auth_proxy_addresses)

    def resolved_metrics_networks(self) -> tuple[Network, ...]:
        """The scrapers that read /metrics without a token."""
        return _networks(self.metrics_allowed)

    def webhook_destinations(self) -> Destinations:
        return Destinations.of(self.webhook_allowed)

    def resolved_controller_pins(self) -> frozenset[str]:
        return frozenset(label.strip() for label in (self.controller_pins or "").split(",") if label.strip())

    def resolved_notify_urls(self) -> list[str]:
        return notify_urls_of(self.notify_urls.get_secret_value()) if self.notify_urls else []

    def resolved_gpu_metrics(self) -> GpuMetricsSource | None:
        if self.gpu_metrics_url is None:
            return None
        kind, _, url = self.gpu_metrics_url.get_secret_value().strip().partition(":")
        return GpuMetricsSource(GpuMetricsKind(kind), url, self.gpu_metrics_host_label)

    def resolved_database_url(self) -> str:
        return self.database_url or f"sqlite:///{(self.data_dir / 'launchdeck.db').resolve()}"

    def resolved_public_url(self) -> str:
        if self.public_url:
            return self.public_url.rstrip("/")
        host = socket.gethostname() if self.bind in ("0.0.0.0", "::", "") else self.bind
        return f"http://{f'[{host}]' if ':' in host else host}:{self.port}"

    def resolved_hosts_file(self) -> Path | None:
        if self.hosts_file is not None:
            return self.hosts_file.expanduser()
        default = self.data_dir / "hosts.toml"
        return default if default.exists() else None

    def resolved_allowed_hosts(self) -> frozenset[str] | None:
        """The names a request's Host header may give; None where any will do: bound to loopback
        with no setting (only this machine reaches it), or the setting is `*`."""
        if self.allowed_hosts is not None:
            given = {name.strip().lower().rstrip(".") for name in self.allowed_hosts.split(",") if name.strip()}
            return None if "*" in given else frozenset(given | LOOPBACK_NAMES)
        if is_loopback(self.bind):
            return None
        names = set(LOOPBACK_NAMES) | {socket.gethostname().lower()}
        if self.bind not in EVERY_ADDRESS:
            names.add(self.bind.lower())
        if self.public_url and (host := urlsplit(self.public_url).hostname):
            names.add(host.lower())
        return frozenset(names)

    def exposure_problem(self) -> str | None:
        """Why the dashboard must not listen where it is told to (None when it may). A sign-on
        header needs the proxies it is believed from. Beyond
        loopback the session cookie must travel over HTTPS only, so TLS is terminated in front.
        The access token is the credential: a configured one has been checked for its length,
        and a generated one is long."""
        if self.auth_proxy_header and not self.auth_proxy_addresses:
            return (
                f"refusing to start with LAUNCHDECK_AUTH_PROXY_HEADER={self.auth_proxy_header} but no "
                "LAUNCHDECK_AUTH_PROXY_ADDRESSES: anyone could name themselves in that header; set it to the "
                "address of the proxy in front (e.g. 127.0.0.1), or unset the header"
            )
        if self.auth_proxy_header and self.resolved_allowed_hosts() is None:
            return (
                f"refusing to start with LAUNCHDECK_AUTH_PROXY_HEADER={self.auth_proxy_header} but no "
                "LAUNCHDECK_ALLOWED_HOSTS (or `*`): a page of any site whose name resolves to this machine could "
                "then act as the person the proxy names; set it to the names people open the dashboard by, "
                "e.g. launchdeck.example.com"
            )
        if is_loopback(self.bind) or self.cookie_secure:
            return None
        return (
            f"refusing to listen on {self.bind}, beyond this machine, with LAUNCHDECK_COOKIE_SECURE off: the "
            "session cookie would travel in the clear; terminate TLS in front of the dashboard and leave "
            "LAUNCHDECK_COOKIE_SECURE on, or set LAUNCHDECK_BIND=127.0.0.1"
        )

    def accounts_problem(self, *, accounts: int) -> str | None:
        """Why the dashboard must not listen with `accounts` enabled accounts (None when it may):
        beyond loopback people log in as themselves, by password or through the sign-on proxy,
        so that the audit trail names them; the shared access token is for scripts and the demo."""
        if is_loopback(self.bind) or self.auth_proxy_header or accounts:
            return None
        return (
            f"refusing to listen on {self.bind}, beyond this machine, with no accounts: everyone would log in "
            "with the one access token; add one with `launchdeck users add NAME --role admin` or "
            "LAUNCHDECK_ADMIN_PASSWORD_FILE, or set LAUNCHDECK_AUTH_PROXY_HEADER for single sign-on behind a proxy, "
            "or set LAUNCHDECK_BIND=127.0.0.1"
        )
