"""The replicas profile's compose file and haproxy configuration, read as compose and haproxy read
them; .ci/compose-check starts them for real."""

from __future__ import annotations

import re

import yaml

from app.web.api.health import router as health_router
from tests.support.paths import ROOT

WEBS = {"web-1", "web-2"}
CONTROLLERS = {"controller-1", "controller-2"}


def compose(name: str) -> dict:
    return yaml.safe_load((ROOT / name).read_text())


def haproxy() -> str:
    return (ROOT / "deploy" / "haproxy.cfg").read_text()


def seconds(duration: str) -> float:
    """haproxy's time format: milliseconds unless a unit follows."""
    found = re.fullmatch(r"(\d+)(ms|s|m|h|d)?", duration)
    assert found is not None, duration
    number, unit = found.groups()
    return int(number) * {None: 0.001, "ms": 0.001, "s": 1, "m": 60, "h": 3600, "d": 86400}[unit]


def test_two_web_replicas_and_two_controllers_start_after_the_migration() -> None:
    services = compose("docker-compose.replicas.yml")["services"]
    for name in WEBS | CONTROLLERS:
        role = "web" if name in WEBS else "controller"
        assert services[name]["command"] == ["launchdeck", "serve", "--role", role]
        assert services[name]["depends_on"] == {"migrate": {"condition": "service_completed_successfully"}}
    migrate = services["migrate"]
    assert "launchdeck db upgrade" in " ".join(migrate["command"])
    assert migrate["restart"] == "no"
    assert migrate["depends_on"] == {"postgres": {"condition": "service_healthy"}}
    assert "postgres" in compose("docker-compose.postgres.yml")["services"]


def test_the_balancer_alone_is_published_and_every_process_shares_the_data_volume() -> None:
    base = compose("docker-compose.yml")["services"]
    services = compose("docker-compose.replicas.yml")["services"]
    assert services["launchdeck"] == {"profiles": ["single"]}  # the single process, with its port, is off
    assert [name for name, service in services.items() if "ports" in service] == ["balancer"]
    assert len(services["balancer"]["ports"]) == 1
    assert services["balancer"]["depends_on"] == sorted(WEBS)
    for name in WEBS | CONTROLLERS | {"migrate"}:
        assert "launchdeck-data:/data" in services[name]["volumes"]
        assert services[name]["volumes"] == base["launchdeck"]["volumes"]
        assert services[name]["user"] == base["launchdeck"]["user"]


def test_the_replicas_pass_the_settings_docker_compose_yml_passes() -> None:
    base = compose("docker-compose.yml")["services"]["launchdeck"]["environment"]
    replica = compose("docker-compose.replicas.yml")["services"]["web-1"]["environment"]
    assert set(replica) == set(base)
    assert replica["LAUNCHDECK_DATABASE_URL"].startswith("postgresql+psycopg://")
    assert replica["LAUNCHDECK_DATABASE_URL"].endswith("@postgres/launchdeck")


def test_haproxy_checks_each_web_replica_on_its_readiness_and_keeps_event_streams_open() -> None:
    config = haproxy()
    servers = dict(re.findall(r"^ +server (\S+) (\S+)", config, re.M))
    assert servers == {name: f"{name}:8000" for name in WEBS}
    assert re.search(r"^ +bind :8000$", config, re.M)
    checked = re.search(r"^ +http-check send meth GET uri (\S+) ver HTTP/1.1 hdr Host localhost$", config, re.M)
    assert checked is not None and checked.group(1) in {route.path for route in health_router.routes}
    timeouts = dict(re.findall(r"^ +timeout (\S+) (\S+)", config, re.M))
    assert seconds(timeouts["client"]) >= 600 and seconds(timeouts["server"]) >= 600
    assert not re.search(r"^ *compression ", config, re.M)  # it would hold the events back
    mounted = compose("docker-compose.replicas.yml")["services"]["balancer"]["volumes"]
    assert mounted == ["./deploy/haproxy.cfg:/usr/local/etc/haproxy/haproxy.cfg:ro"]
