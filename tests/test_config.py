"""Settings and the command line."""

from __future__ import annotations

import re
import socket
import stat
import subprocess
import time
from pathlib import Path

from app.config import Settings
from app.demo.inventory import parse_host_specs
from tests.support.cli import cli_argv, cli_env, run_cli
from tests.support.paths import ROOT
from tests.support.servers import free_port


def test_every_setting_is_documented_in_the_configuration_page() -> None:
    reference = (ROOT / "docs" / "configuration.md").read_text()
    missing = [name for name in Settings.model_fields if f"`LAUNCHDECK_{name.upper()}`" not in reference]
    assert missing == []


def test_defaults_keep_everything_local() -> None:
    settings = Settings(_env_file=None)
    assert settings.bind == "127.0.0.1"
    assert settings.port == 8000
    assert settings.cookie_secure is True
    assert settings.resolved_database_url().startswith("sqlite:///")
    assert settings.resolved_database_url().endswith("/data/launchdeck.db")


def test_db_upgrade_migrates_and_says_so(tmp_path: Path) -> None:
    result = run_cli("db", "upgrade", env={"LAUNCHDECK_DATA_DIR": str(tmp_path)}, timeout=60)
    assert result.returncode == 0, result.stderr
    assert "is up to date" in result.stdout
    assert (tmp_path / "launchdeck.db").exists()


def test_bad_setting_exits_2_with_a_sentence(tmp_path: Path) -> None:
    result = run_cli(
        "db", "upgrade", env={"LAUNCHDECK_DATA_DIR": str(tmp_path), "LAUNCHDECK_PORT": "99999"}, timeout=60
    )
    assert result.returncode == 2
    assert "LAUNCHDECK_PORT" in result.stderr and "65535" in result.stderr


def test_unreachable_database_exits_1_with_a_sentence(tmp_path: Path) -> None:
    result = run_cli(
        "db", "upgrade", env={"LAUNCHDECK_DATABASE_URL": "postgresql+psycopg://nobody@127.0.0.1:1/none"}, timeout=60
    )
    assert result.returncode == 1
    assert "cannot reach the database" in result.stderr
    assert "Traceback" not in result.stderr


def test_empty_token_variable_means_a_generated_token(monkeypatch) -> None:  # type: ignore[no-untyped-def]
    monkeypatch.setenv("LAUNCHDECK_TOKEN", "")
    monkeypatch.setenv("LAUNCHDECK_DATABASE_URL", " ")
    settings = Settings()
    assert settings.token is None
    assert settings.database_url is None


def test_demo_with_bad_simulated_hosts_exits_2_with_a_sentence(tmp_path: Path) -> None:
    result = run_cli(
        "demo", env={"LAUNCHDECK_DATA_DIR": str(tmp_path), "LAUNCHDECK_DEMO_HOSTS": "big-01:h100:8"}, timeout=60
    )
    assert result.returncode == 2
    assert "unknown GPU model 'h100'; choose from b200, rtx-pro-6000" in result.stderr


def test_demo_hosts_scale_to_a_large_cluster() -> None:
    specs = parse_host_specs(",".join(f"b200-{n:02}:b200:8" for n in range(64)))
    assert len(specs) == 64 and {spec.gpu_count for spec in specs} == {8}


def test_busy_port_exits_1_with_a_sentence_and_starts_nothing(tmp_path: Path) -> None:
    with socket.create_server(("127.0.0.1", 0)) as busy:
        port = busy.getsockname()[1]
        result = run_cli(
            "demo",
            env={"LAUNCHDECK_DATA_DIR": str(tmp_path), "LAUNCHDECK_PORT": str(port), "LAUNCHDECK_TOKEN": ""},
            timeout=60,
        )
    assert result.returncode == 1
    assert f"cannot listen on 127.0.0.1:{port}: Address already in use; set LAUNCHDECK_PORT" in result.stderr
    assert not (tmp_path / "demo").exists()


def test_what_serve_writes_is_for_its_user_only(tmp_path: Path) -> None:
    """The data dir 0700; the database, the keys and the token 0600, whatever the caller's umask."""
    data = tmp_path / "data"
    env = cli_env({"LAUNCHDECK_DATA_DIR": str(data), "LAUNCHDECK_PORT": str(free_port())})
    with subprocess.Popen(
        cli_argv("serve"), env=env, cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE
    ) as server:
        try:
            for _ in range(600):
                if (data / "access-token").exists() and (data / "launchdeck.db").exists():
                    break
                time.sleep(0.1)
        finally:
            server.terminate()
            server.wait(timeout=30)
    modes = {
        path.name: stat.S_IMODE(path.stat().st_mode)
        for path in [data, *data.iterdir()]
        if path.is_file() or path == data
    }
    assert modes[data.name] == 0o700
    assert {name: mode for name, mode in modes.items() if name != data.name and mode != 0o600} == {}
    assert {"launchdeck.db", "access-token", "session-key"} <= set(modes)


def test_the_compose_file_passes_every_setting_a_deployment_needs_through() -> None:
    """The image fixes where data lives and what it binds; the compose file points at its mounts and
    passes each other setting (the simulator's aside) from the shell or an .env file."""
    compose = (Path(__file__).resolve().parents[1] / "docker-compose.yml").read_text()
    passed = set(re.findall(r"^ +(LAUNCHDECK_[A-Z_]+):", compose, re.M))
    image = {"LAUNCHDECK_DATA_DIR", "LAUNCHDECK_BIND"}
    wanted = {f"LAUNCHDECK_{name.upper()}" for name in Settings.model_fields if not name.startswith("demo_")}
    assert passed == wanted - image
