"""The simulated cluster: one SSH server per simulated host, keys and known_hosts to reach them.

Several processes may share one cluster folder, each running some of its hosts (so that a test
can kill one host's SSH server and start it again): the client key is made once under a lock,
and the hosts file and known_hosts are merged under it, never overwritten with one process's
hosts. A host started again without a port takes the one the hosts file gives it, so a
dashboard reading that file finds it where it was.
"""

from __future__ import annotations

import asyncio
import contextlib
import fcntl
import os
from collections.abc import Collection, Iterator, Mapping
from pathlib import Path

from app.demo.dcgm import SimDcgmExporter
from app.demo.hostlib import simgpu
from app.demo.inventory import DEFAULT_HOSTS, SimHostSpec, gpu_entries
from app.demo.model_catalogue import install_models
from app.demo.sshserver import SimHost
from app.errors import InvalidInput
from app.ssh.hostkeys import generate_key_file
from app.ssh.hosts import HostSpec, load_hosts_file, render_hosts


class SimCluster:
    """Lives in `root`: client key, known_hosts, and a folder per host that survives restarts."""

    def __init__(
        self,
        root: Path,
        specs: tuple[SimHostSpec, ...] | list[SimHostSpec] = DEFAULT_HOSTS,
        *,
        time_scale: float = 1.0,
        dcgm_exporters: bool = False,
    ):
        self.root = root
        self.specs = list(specs)
        self.hosts = {
            spec.name: SimHost(
                spec.name, root / "hosts" / spec.name, time_scale=time_scale, nvml=spec.nvml, python=spec.python
            )
            for spec in self.specs
        }
        # Each host's dcgm-exporter, where asked: a site's GPU metrics (LAUNCHDECK_GPU_METRICS_URL).
        self.exporters = {name: SimDcgmExporter(host) for name, host in self.hosts.items()} if dcgm_exporters else {}
        self._started: list[SimHost] = []

    @property
    def client_key_path(self) -> Path:
        return self.root / "client_ed25519_key"

    @property
    def known_hosts_path(self) -> Path:
        return self.root / "known_hosts"

    @property
    def hosts_file(self) -> Path:
        return self.root / "hosts.toml"

    async def start(
        self, only: Collection[str] | None = None, ports: Mapping[str, int] | None = None
    ) -> list[HostSpec]:
        """Starts every host (or those named in `only`), each on its port in `ports` or a free
        loopback port; records them in known_hosts; returns how the dashboard reaches them."""
        chosen = [spec for spec in self.specs if only is None or spec.name in only]
        unknown = set(only or ()) - {spec.name for spec in self.specs}
        if unknown:
            raise InvalidInput(f"no simulated host {', '.join(sorted(unknown))}; the cluster has {self._names()}")
        self.root.mkdir(parents=True, exist_ok=True)
        with self._locked():
            if not self.client_key_path.exists():
                generate_key_file(self.client_key_path, comment="launchdeck-demo")
        client_key = Path(f"{self.client_key_path}.pub").read_text()
        for spec in chosen:
            host = self.hosts[spec.name]
            host.prepare(authorized_key=client_key)
            install_models(host.home)
            ensure_gpu_state(host, spec)
        hosts = [self.hosts[spec.name] for spec in chosen]
        results = await asyncio.gather(
            *(host.start(port=(ports or {}).get(host.name, 0)) for host in hosts), return_exceptions=True
        )
        self._started = [host for host, result in zip(hosts, results, strict=True) if result is None]
        for host, result in zip(hosts, results, strict=True):
            if isinstance(result, OSError):
                await self.stop()
                reason = os.strerror(result.errno) if result.errno else str(result)
                raise InvalidInput(f"simulated host {host.name}: cannot listen on 127.0.0.1: {reason}") from None
            if isinstance(result, BaseException):
                await self.stop()
                raise result
        self._record_known_hosts(hosts)
        try:
            await asyncio.gather(*(self.exporters[host.name].start() for host in hosts if host.name in self.exporters))
        except OSError:
            await self.stop()
            raise
        return [self.host_spec(spec) for spec in chosen]

    def host_spec(self, spec: SimHostSpec) -> HostSpec:
        host = self.hosts[spec.name]
        return HostSpec(
            name=spec.name,
            address="127.0.0.1",
            port=host.port,
            labels=tuple(spec.labels),
            identity_files=(str(self.client_key_path),),
            known_hosts=str(self.known_hosts_path),
        )

    def recorded_ports(self) -> dict[str, int]:
        """The ports the cluster's hosts file gives its hosts (none before it is first written)."""
        if not self.hosts_file.exists():
            return {}
        return {spec.name: spec.port for spec in load_hosts_file(self.hosts_file) if spec.port}

    def write_hosts_file(self, started: list[HostSpec]) -> Path:
        """Adds the started hosts to the hosts file, keeping the entries of hosts other processes
        run; the file lists hosts in the cluster's order."""
        with self._locked():
            entries = {spec.name: spec for spec in load_hosts_file(self.hosts_file)} if self.hosts_file.exists() else {}
            entries.update((spec.name, spec) for spec in started)
            order = [spec.name for spec in self.specs]
            listed = sorted(entries.values(), key=lambda s: order.index(s.name) if s.name in order else len(order))
            _replace(self.hosts_file, render_hosts(listed))
        return self.hosts_file

    async def stop(self) -> None:
        """Stops the hosts this process started (and what runs on them), not the others."""
        started, self._started = self._started, []
        await asyncio.gather(*(self.exporters[host.name].stop() for host in started if host.name in self.exporters))
        await asyncio.gather(*(host.stop() for host in started))

    def _record_known_hosts(self, hosts: list[SimHost]) -> None:
        """One line per host: a host's old line (another port) and lines for its port go."""
        with self._locked():
            lines = self.known_hosts_path.read_text().splitlines() if self.known_hosts_path.exists() else []
            for host in hosts:
                key = host.public_host_key()
                address = f"[127.0.0.1]:{host.port}"
                lines = [line for line in lines if not line.endswith(f" {key}") and not line.startswith(f"{address} ")]
                lines.append(f"{address} {key}")
            _replace(self.known_hosts_path, "".join(f"{line}\n" for line in lines))

    @contextlib.contextmanager
    def _locked(self) -> Iterator[None]:
        with open(self.root / ".lock", "a") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            yield

    def _names(self) -> str:
        return ", ".join(spec.name for spec in self.specs)


def _replace(path: Path, text: str) -> None:
    """Readers (a dashboard starting) see the old file or the new one, never half of one."""
    partial = path.with_name(f"{path.name}.partial")
    partial.write_text(text)
    partial.replace(path)


def ensure_gpu_state(host: SimHost, spec: SimHostSpec) -> None:
    """Keeps a host's state across restarts (bookings of still-running servers survive)."""
    wanted = gpu_entries(spec)
    if host.gpu_state_path.exists():
        try:
            if simgpu.read(str(host.gpu_state_path))["gpus"] == wanted:
                return
        except (ValueError, KeyError):
            pass
    simgpu.write_new(str(host.gpu_state_path), simgpu.new_state(wanted))
