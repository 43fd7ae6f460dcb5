"""Debian's haproxy on loopback in front of web processes, round robin, each checked at /readyz:
what the replica tests and the api_load benchmark put in front of their web processes (the
deployed configuration is deploy/haproxy.cfg)."""

from __future__ import annotations

import subprocess
from pathlib import Path

HAPROXY = Path("/usr/sbin/haproxy")
CONFIG = """\
global
    maxconn 4000
defaults
    mode http
    timeout connect 2s
    timeout client 1h
    timeout server 1h
    timeout tunnel 1h
    retries 2
    option redispatch
frontend dashboard
    bind 127.0.0.1:{port}
    default_backend web
backend web
    balance roundrobin
    option httpchk GET /readyz
    http-check expect status 200
    default-server {checks}
{servers}
"""


def start_haproxy(
    directory: Path, port: int, backends: list[int], *, output: Path, checks: str
) -> subprocess.Popen[bytes]:
    """haproxy on `port` in front of the web processes on `backends`, its configuration written to
    `directory` and what it prints to `output`; `checks` is how often a backend is checked and how
    many answers mark it down or up."""
    servers = "\n".join(f"    server web{n} 127.0.0.1:{backend} check" for n, backend in enumerate(backends, 1))
    config = directory / "haproxy.cfg"
    config.write_text(CONFIG.format(port=port, servers=servers, checks=checks))
    with output.open("wb") as out:
        return subprocess.Popen([str(HAPROXY), "-db", "-f", str(config)], stdout=out, stderr=subprocess.STDOUT)
