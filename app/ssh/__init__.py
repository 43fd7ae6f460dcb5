"""SSH to the GPU hosts: one HostConnection per host, shared by every operation."""

from app.ssh.connection import HostConnection, HostState, HostStatus, RunResult, SSHOptions
from app.ssh.hosts import HostSpec, load_hosts_file, parse_hosts, render_hosts
from app.ssh.manager import SSHManager

__all__ = [
    "HostConnection",
    "HostSpec",
    "HostState",
    "HostStatus",
    "RunResult",
    "SSHManager",
    "SSHOptions",
    "load_hosts_file",
    "parse_hosts",
    "render_hosts",
]
