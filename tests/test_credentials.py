"""Secrets in the data dir: replicas starting together on one data dir read one secret."""

from __future__ import annotations

from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

from app import credentials


def test_processes_creating_the_secret_at_once_all_read_the_same_one(tmp_path: Path) -> None:
    path = tmp_path / "session-key"
    with ProcessPoolExecutor(8) as pool:
        values = set(pool.map(credentials.load_or_create, [path] * 32))
    assert values == {path.read_text().strip()}
    assert path.stat().st_mode & 0o777 == 0o600
    assert [p.name for p in tmp_path.iterdir()] == ["session-key"]  # no partial file left behind


def test_a_truncated_secret_is_replaced(tmp_path: Path) -> None:
    path = tmp_path / "access-token"
    path.write_text("short\n")
    value = credentials.load_or_create(path)
    assert len(value) >= credentials.MIN_LENGTH and path.read_text().strip() == value
    assert credentials.load_or_create(path) == value
