"""The simulated cluster: one SSH server per simulated host, keys and known_hosts to reach them."""

from __future__ import annotations

import asyncio
from pathlib import Path

from app.demo.hostlib import simgpu
from app.demo.inventory import DEFAULT_HOSTS, SimHostSpec, gpu_entries
from app.demo.model_catalogue import install_models
from app.demo.sshserver import SimHost
from app.ssh.hostkeys import generate_key_file
from app.ssh.hosts import HostSpec


class SimCluster:
    """Lives in `root`: client key, known_hosts, and a folder per host that survives restarts."""

    def __init__(
        self,
        root: Path,
        specs: tuple[SimHostSpec, ...] | list[SimHostSpec] = DEFAULT_HOSTS,
        *,
        time_scale: float = 1.0,
    ):
        self.root = root
        self.specs = list(specs)
        self.hosts = {
            spec.name: SimHost(spec.name, root / "hosts" / spec.name, time_scale=time_scale, nvml=spec.nvml)
            for spec in self.specs
        }

    @property
    def client_key_path(self) -> Path:
        return self.root / "client_ed25519_key"

    @property
    def known_hosts_path(self) -> Path:
        return self.root / "known_hosts"

    async def start(self) -> list[HostSpec]:
        """Starts every host on a free loopback port; returns how the dashboard reaches them."""
        self.root.mkdir(parents=True, exist_ok=True)
        self._ensure_client_key()
        client_key = Path(f"{self.client_key_path}.pub").read_text()
        for spec in self.specs:
            host = self.hosts[spec.name]
            host.prepare(authorized_key=client_key)
            install_models(host.home)
            _ensure_gpu_state(host, spec)
        await asyncio.gather(*(host.start() for host in self.hosts.values()))
        self.known_hosts_path.write_text(
            "".join(f"[127.0.0.1]:{host.port} {host.public_host_key()}\n" for host in self.hosts.values())
        )
        return [self.host_spec(spec) for spec in self.specs]

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

    async def stop(self) -> None:
        await asyncio.gather(*(host.stop() for host in self.hosts.values()))

    def _ensure_client_key(self) -> None:
        if not self.client_key_path.exists():
            generate_key_file(self.client_key_path, comment="launchdeck-demo")


def _ensure_gpu_state(host: SimHost, spec: SimHostSpec) -> None:
    """Keeps a host's state across restarts (bookings of still-running servers survive)."""
    wanted = gpu_entries(spec)
    if host.gpu_state_path.exists():
        try:
            if simgpu.read(str(host.gpu_state_path))["gpus"] == wanted:
                return
        except (ValueError, KeyError):
            pass
    simgpu.write_new(str(host.gpu_state_path), simgpu.new_state(wanted))
