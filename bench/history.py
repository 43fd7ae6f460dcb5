"""A dashboard's history at scale, inserted in bulk: what `api_load` serves and what the query-plan
tests read (tests/db/test_list_plans.py), so both look at the same shape of data.

A team's year or two: finished attempts (a third failed, each with a diagnosis as big as a real
one; one in a hundred spread over two nodes, its parts right after it), failure signatures,
benchmarks, accounts and an audit trail with their logins. Deterministic for a given size.
"""

from __future__ import annotations

import json
import random
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import psycopg
from sqlalchemy import Connection, Table, create_engine, insert, select

from app import db
from app.db.models import Attempt, AuditEvent, Benchmark, Host, Preset, PresetRevision, Signature, User
from app.launch.attempts import RESUME_MIRRORS_DAYS
from app.launch.guards import configuration_key
from app.logs.store import LogStore

HOSTS = (("bench-01", 8), ("bench-02", 4))
RETIRED_HOSTS = 8
PRESETS, REVISIONS_PER_PRESET = 30, 3
PEOPLE = ("admin", "alice", "bob")
MODEL = "meta-llama/Llama-3.1-8B-Instruct"
BATCH = 10_000


@dataclass(frozen=True)
class Size:
    attempts: int = 100_000
    signatures: int = 1_000
    audit_events: int = 100_000


@dataclass(frozen=True)
class History:
    size: Size
    sample_ids: list[int]  # attempts spread from the newest to the oldest, for attempt pages
    last_id: int  # the newest attempt's id (parts included)
    signature_fingerprint: str  # a signature that struck often
    preset: str  # a preset with attempts


def seed(url: str, size: Size = Size()) -> History:
    """Bulk-inserts the history into a migrated, empty database at `url`."""
    rng = random.Random(13)
    now = datetime.now(UTC)
    engine = create_engine(db.sync_url(url))
    parents: list[int] = []
    try:
        with engine.begin() as connection:
            connection.execute(insert(Host), [{"name": name, "source": "file"} for name, _ in HOSTS])
            retired = [{"name": f"retired-{n:02}", "source": "file"} for n in range(RETIRED_HOSTS)]
            connection.execute(insert(Host), retired)
            host_ids = list(range(1, len(HOSTS) + RETIRED_HOSTS + 1))
            connection.execute(insert(Preset), [{"name": f"preset-{n:02}", "description": ""} for n in range(PRESETS)])
            revisions = [
                {"preset_id": p + 1, "number": r + 1, "model_path": MODEL, "args": ["--tp-size", "1"], "env": {}}
                for p in range(PRESETS)
                for r in range(REVISIONS_PER_PRESET)
            ]
            connection.execute(insert(PresetRevision), revisions)
            accounts = [{"name": name, "password_hash": "!", "role": "operator"} for name in PEOPLE[1:]]
            connection.execute(insert(User), accounts)
            connection.execute(insert(Signature), [_signature(n, now, rng) for n in range(size.signatures)])
            rows: list[dict[str, Any]] = []
            for n in range(size.attempts):
                parent = _attempt(len(rows) + 1, n, size, now, rng, host_ids)
                rows.append(parent)
                parents.append(parent["id"])
                if n % 100 == 50:  # the processes are the parts': a multi-node attempt has none of its own
                    parent.update(pid=None, pgid=None, pid_start_time=None)
                    for rank in range(2):
                        rows.append(_part(parent, rank, host_ids, len(rows) + 1))
            for start in range(0, len(rows), BATCH):
                _bulk_insert(connection, Attempt.__table__, rows[start : start + BATCH])
            benchmarks = [_benchmark(row) for row in rows if row["ready_at"] and row["id"] % 97 == 0]
            if benchmarks:
                _bulk_insert(connection, Benchmark.__table__, benchmarks)
            for start in range(0, size.audit_events, 2 * BATCH):
                events = [_audit(n, now, size) for n in range(start, min(size.audit_events, start + 2 * BATCH))]
                _bulk_insert(connection, AuditEvent.__table__, events)
        if engine.dialect.name == "postgresql":  # what autovacuum does after such a load
            with engine.connect() as connection:
                connection.execution_options(isolation_level="AUTOCOMMIT").exec_driver_sql("VACUUM ANALYZE")
    finally:
        engine.dispose()
    spread = (0, 1, 2, 7, 13, 101, 997, 5_003, 50_001, 99_990)
    samples = [parents[-1 - k] for k in spread if k < len(parents)]
    return History(size, samples, len(rows), f"{7:064x}", "preset-07")


def _bulk_insert(connection: Connection, table: Table, rows: list[dict[str, Any]]) -> None:
    """Rows whose JSON columns hold JSON text, straight to the driver (COPY on PostgreSQL):
    SQLAlchemy's per-row conversions would take most of the seeding time."""
    names = list(rows[0])
    if connection.dialect.name == "sqlite":
        values = [tuple(_sqlite_value(row[name]) for name in names) for row in rows]
        marks = ", ".join("?" for _ in names)
        connection.exec_driver_sql(f"INSERT INTO {table.name} ({', '.join(names)}) VALUES ({marks})", values)
        return
    driver = connection.connection.driver_connection
    assert isinstance(driver, psycopg.Connection)
    with driver.cursor() as cursor, cursor.copy(f"COPY {table.name} ({', '.join(names)}) FROM STDIN") as copy:
        for row in rows:
            copy.write_row(tuple(row[name] for name in names))
    if "id" in names:  # COPY with explicit ids leaves the sequence behind
        sequence = f"pg_get_serial_sequence('{table.name}', 'id')"
        driver.execute(f"SELECT setval({sequence}, (SELECT max(id) FROM {table.name}))")


def _sqlite_value(value: Any) -> Any:
    """Datetimes as SQLAlchemy stores them in SQLite: UTC, without a zone."""
    return value.astimezone(UTC).strftime("%Y-%m-%d %H:%M:%S.%f") if isinstance(value, datetime) else value


def _signature(n: int, now: datetime, rng: random.Random) -> dict[str, Any]:
    seen = now - timedelta(minutes=rng.randrange(1, 500_000))
    return {
        "fingerprint": f"{n:064x}", "failure_class": rng.choice(["oom", "nccl", "arg-conflict", "model-load"]),
        "exception_type": "torch.OutOfMemoryError", "message": f"CUDA out of memory. Tried to allocate {n} MiB",
        "frames": ["scheduler.py:run", "model_runner.py:init_memory_pool"], "first_seen": seen,
        "last_seen": seen + timedelta(minutes=n % 97), "count": 1 + n % 50,
    }  # fmt: skip


# What a finished attempt's row holds besides its columns: about 4 KiB of JSON, as real ones do.
DIAGNOSIS = json.dumps({
    "stage": "loading", "stage_percent": 60, "class": "CLASS", "root_error": "ROOT", "root_line": 1234,
    "fingerprint": "FINGERPRINT", "hint": "lower --mem-fraction-static or use more GPUs", "adjustments": [],
    "frames": ["scheduler.py:run_scheduler_process", "model_runner.py:init_memory_pool"] * 4,
    "error_type": "torch.OutOfMemoryError", "error_message": "CUDA out of memory",
    "memory": {"weights_gib": 15.0, "kv_cache_gib": 60.0, "available_gib": 10.5},
    "decode": [{"running_requests": 12.0, "token_usage": 0.05 + i / 1000, "gen_throughput": 1234.5 + i}
               for i in range(12)],
    "server_args": {f"argument_{i}": f"value-{i}" for i in range(40)},
})  # fmt: skip
PREFLIGHT = json.dumps({"checks": [{"name": f"check-{i}", "ok": True, "detail": "fine " * 10} for i in range(8)]})
GPU_SNAPSHOT = json.dumps({"gpus": [{"index": i, "memory_used_mib": 1000 * i} for i in range(8)]})
ARGV = json.dumps(["python3", "-m", "sglang.launch_server", "--model-path", MODEL, "--port", "30000"])
# One configuration per revision: the same model, another tensor-parallel size each.
CONFIGURATIONS = [
    configuration_key([*json.loads(ARGV), "--tp-size", str(1 + n)], {}) for n in range(PRESETS * REVISIONS_PER_PRESET)
]
ROOT_ERROR = json.dumps("torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB")


def _attempt(row_id: int, n: int, size: Size, now: datetime, rng: random.Random, host_ids: list[int]) -> dict[str, Any]:
    created = now - timedelta(seconds=(size.attempts - n) * 300)
    failed = n % 3 == 0
    signature = n % size.signatures
    stages = [{"stage": s, "at": (created + timedelta(seconds=i)).isoformat()} for i, s in enumerate(
        ("pending", "uploading", "starting", "loading", "failed" if failed else "ready"))]  # fmt: skip
    diagnosis = (
        DIAGNOSIS.replace('"CLASS"', '"oom"').replace('"ROOT"', ROOT_ERROR).replace("FINGERPRINT", f"{signature:064x}")
        if failed
        else DIAGNOSIS.replace('"CLASS"', '"healthy"').replace('"ROOT"', "null").replace('"FINGERPRINT"', "null")
    )
    revision = n % (PRESETS * REVISIONS_PER_PRESET)
    return {
        "id": row_id, "host_id": host_ids[n % len(host_ids)], "preset_revision_id": 1 + revision,
        "preset_id": 1 + revision // REVISIONS_PER_PRESET, "gpus": f"[{n % 8}]",
        "argv": ARGV, "env": json.dumps({"CUDA_VISIBLE_DEVICES": str(n % 8)}), "script": "",
        "configuration": CONFIGURATIONS[revision],
        "script_sha256": "0" * 64, "remote_dir": f".launchdeck/attempts/{row_id}", "port": 30000,
        "pid": 1000 + n % 60_000, "pgid": 1000 + n % 60_000, "pid_start_time": 5_000_000 + n,
        "status": "failed" if failed else rng.choice(["stopped", "lost"]),
        "stage": "failed" if failed else "stopped", "stages": json.dumps(stages), "preflight": PREFLIGHT,
        "override_reason": "", "stop_requested_at": None, "error": "exited with status 1" if failed else "",
        "exit_code": 1 if failed else 0, "log_size": 100_000 + n,
        "signature_id": 1 + signature if failed else None,
        "sglang_version": ("0.5.10", "0.5.23")[n * 2 // size.attempts],  # hosts upgraded half-way
        "effective_args": '{"tp_size": 1}', "diagnosis": diagnosis, "gpu_snapshot": GPU_SNAPSHOT,
        "launched_by": rng.choice(PEOPLE), "created_at": created,
        "started_at": created + timedelta(seconds=2), "ready_at": None if failed else created + timedelta(seconds=40),
        "ended_at": created + timedelta(seconds=200), "part_of_id": None, "node_rank": None,
    }  # fmt: skip


def _part(parent: dict[str, Any], rank: int, host_ids: list[int], row_id: int) -> dict[str, Any]:
    host = host_ids[(host_ids.index(parent["host_id"]) + rank) % len(host_ids)]
    process = {"pid": 2000 + row_id % 60_000, "pgid": 2000 + row_id % 60_000, "pid_start_time": 6_000_000 + row_id}
    return parent | process | {"id": row_id, "host_id": host, "part_of_id": parent["id"], "node_rank": rank,
                     "remote_dir": f".launchdeck/attempts/{row_id}", "signature_id": None}  # fmt: skip


def _benchmark(attempt: dict[str, Any]) -> dict[str, Any]:
    figures = {"output_throughput": 1000.0 + attempt["id"] % 500, "median_ttft_ms": 90.0, "accept_length": 2.5}
    return {
        "attempt_id": attempt["id"], "preset_id": attempt["preset_id"], "workload_id": None,
        "workload": json.dumps({"name": "chat-short"}),
        "status": "done", "argv": "[]", "figures": json.dumps(figures), "error": "",
        "started_by": attempt["launched_by"], "created_at": attempt["ended_at"], "ended_at": attempt["ended_at"],
    }  # fmt: skip


def _audit(n: int, now: datetime, size: Size) -> dict[str, Any]:
    return {
        "at": now - timedelta(seconds=(size.audit_events - n) * 300), "actor": PEOPLE[n % 3],
        "action": ("launch", "stop", "login", "preset-save", "stop")[n % 5],
        "target": f"attempt {1 + n % size.attempts}",
        "detail": json.dumps({"gpus": [n % 8]}), "remote_addr": "127.0.0.1",
    }  # fmt: skip


def settle_logs(url: str, logs: Path) -> None:
    """Records the logs of the seeded attempts that a start would resume as mirrored to their end,
    as a dashboard that followed them has them. Unsettled, a start resumes the mirrors of a week of
    ended attempts, the recovery after a lost data dir, not the steady state whose pages are timed."""
    since = datetime.now(UTC) - timedelta(days=RESUME_MIRRORS_DAYS)
    engine = create_engine(db.sync_url(url))
    try:
        with engine.connect() as connection:
            recent = connection.scalars(select(Attempt.id).where(Attempt.ended_at >= since)).all()
    finally:
        engine.dispose()
    store = LogStore(logs)
    for attempt_id in recent:
        store.get(attempt_id).finish(host_size=0, host_sha256=None, mirror_sha256=None)
        store.forget(attempt_id)
