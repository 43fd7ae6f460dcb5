"""`launchdeck demo --slurm` where Slurm cannot run."""

from __future__ import annotations

from pathlib import Path

from tests.support.cli import run_cli


def test_the_slurm_demo_without_slurm_says_so_and_starts_nothing(tmp_path: Path) -> None:
    for args, env in ((["--slurm"], {}), ([], {"LAUNCHDECK_DEMO_SLURM": "1"})):
        result = run_cli(
            "demo",
            *args,
            timeout=60,
            env={"LAUNCHDECK_DATA_DIR": str(tmp_path), "PATH": str(tmp_path / "no-programs"), **env},
        )

        assert result.returncode == 2
        assert result.stderr.startswith("launchdeck: a local Slurm cluster needs Debian's slurm-wlm and munge packages")
        assert result.stderr.rstrip().endswith("(apt-get install slurm-wlm munge).")
        assert result.stderr.count("\n") == 1
        assert not (tmp_path / "demo").exists()


def test_slurm_goes_with_the_whole_demo_only(tmp_path: Path) -> None:
    result = run_cli("demo", "--hosts-only", "--slurm", env={"LAUNCHDECK_DATA_DIR": str(tmp_path)}, timeout=60)

    assert result.returncode == 2
    assert "demo: --slurm goes without --hosts-only" in result.stderr
