"""The GPU probe's outputs: NVML JSON lines and nvidia-smi's csv in its real shapes."""

from __future__ import annotations

import json
from datetime import datetime, timedelta

import pytest
from sqlalchemy import func, insert, select
from sqlalchemy.ext.asyncio import AsyncSession

from app.clock import utcnow
from app.db.models import GpuSample, Host
from app.gpu.probe import GpuProcess, ProbeUnavailable, parse_nvml_line, parse_smi_block
from app.gpu.samples import prune_samples
from app.launch.owners import Owner, classify
from app.states import AttemptStatus

GIB = 1 << 30


def test_nvml_line_with_v2_memory_processes_and_a_lost_gpu() -> None:
    line = json.dumps({
        "t": 1796219990.5,
        "gpus": [
            {"index": 0, "uuid": "GPU-1", "name": "NVIDIA H200", "total": 141 * GIB, "used": 80 * GIB,
             "free": 60 * GIB, "reserved": GIB, "util": 97, "temp": 61, "power_mw": 612345,
             "processes": [{"pid": 41, "used": 79 * GIB, "cmd": "sglang::scheduler_TP0", "pgid": 40,
                            "cwd": "/home/u/.launchdeck/attempts/7-ab12cd34"}]},
            {"index": 1, "error": "GPU is lost"},
        ],
    })  # fmt: skip
    snapshot = parse_nvml_line(line)
    first, lost = snapshot.gpus
    assert (first.memory_total_mib, first.memory_used_mib, first.memory_free_mib) == (144384, 81920, 61440)
    assert first.memory_reserved_mib == 1024 and first.power_w == 612.345 and first.utilization_pct == 97
    assert lost.error == "GPU is lost" and lost.memory_total_mib is None
    assert snapshot.processes == [
        GpuProcess(0, 41, 80896, "sglang::scheduler_TP0", 40, "/home/u/.launchdeck/attempts/7-ab12cd34")
    ]


def test_nvml_error_report_means_the_probe_cannot_run_here() -> None:
    with pytest.raises(ProbeUnavailable, match="NVMLError_LibraryNotFound"):
        parse_nvml_line(
            json.dumps({"error": "NVMLError_LibraryNotFound: NVML Shared Library Not Found", "nvml": False})
        )


def test_nvidia_smi_csv_with_unreadable_fields_mig_and_a_gpu_off_the_bus() -> None:
    gpus = (
        "0, GPU-aaaa, NVIDIA B200, 183359, 90000, 92826, 100, 54, 880.12\n"
        "1, GPU-bbbb, NVIDIA A100-SXM4-80GB, 81920, 14000, 67387, [N/A], 40, [Not Supported]\n"
        "2, GPU-cccc, Some, GPU, With, Commas, 24576, [Unknown Error], [Unknown Error], 0, 35, 60.00\n"
        "Unable to determine the device handle for GPU0000:9A:00.0: GPU is lost.  Reboot the system to recover "
        "this GPU\n"
    )
    apps = (
        "GPU-aaaa, 1234, 89000\n"
        "MIG-3b1c7e80-0000-5555-9999-111111111111, 2345, 9728\n"
        "GPU-bbbb, 3456, [N/A]\n"
        "No running processes found\n"
    )
    snapshot = parse_smi_block(gpus, apps, 1.0)
    b200, a100, odd, lost = snapshot.gpus
    assert (b200.memory_used_mib, b200.power_w, b200.utilization_pct) == (90000, 880.12, 100)
    assert a100.utilization_pct is None and a100.power_w is None and a100.memory_free_mib == 67387
    assert odd.name == "Some, GPU, With, Commas" and odd.memory_used_mib is None and odd.memory_total_mib == 24576
    assert lost.error is not None and "GPU is lost" in lost.error
    assert [(p.gpu, p.pid, p.used_mib) for p in snapshot.processes] == [
        (0, 1234, 89000),
        (-1, 2345, 9728),
        (1, 3456, None),
    ]


def test_gpu_processes_are_told_apart_by_owner() -> None:
    owners = {100: Owner(7, AttemptStatus.READY), 200: Owner(8, AttemptStatus.FAILED, node_rank=1)}
    assert classify(GpuProcess(0, 101, 10, "x", 100), owners).owner == "attempt"
    stale = classify(GpuProcess(0, 201, 10, "sglang::scheduler_TP0", 200), owners)
    assert (stale.owner, stale.attempt_id, stale.attempt_status, stale.node_rank) == ("stale", 8, "failed", 1)
    untracked = GpuProcess(0, 301, 10, "x", 300, "/home/u/.launchdeck/attempts/3-deadbeef")
    assert classify(untracked, owners).owner == "untracked"
    assert classify(GpuProcess(0, 401, 10, "python train.py", 400, "/home/u/work"), owners).owner == "other"


def quarter(moment: datetime) -> datetime:
    return moment.replace(minute=moment.minute - moment.minute % 15, second=0, microsecond=0)


async def test_samples_are_thinned_after_a_day_and_dropped_after_a_week(db_session: AsyncSession) -> None:
    host = Host(name="h")
    db_session.add(host)
    await db_session.flush()
    now = utcnow().replace(minute=50, second=30, microsecond=0)
    day_old = [now - timedelta(hours=25, minutes=40) + timedelta(minutes=i) for i in range(40)]  # a minute apart
    for taken_at in (now - timedelta(minutes=5), *day_old, now - timedelta(days=8)):
        db_session.add(
            GpuSample(host_id=host.id, gpu_index=0, taken_at=taken_at, memory_total_mib=1, memory_used_mib=0)
        )
    await db_session.commit()
    boundary = await prune_samples(db_session, now, since=now - timedelta(days=30))
    times = sorted((await db_session.scalars(select(GpuSample.taken_at))).all())
    kept = times[:-1]
    assert times[-1] == now - timedelta(minutes=5)  # a day's samples are all kept; the 8-day-old one is gone
    assert len(kept) == len({quarter(t) for t in kept}) and {quarter(t) for t in kept} == {quarter(t) for t in day_old}
    assert len(kept) in (3, 4)
    assert boundary == quarter(now - timedelta(days=1))


async def test_a_simulated_week_of_samples_stays_within_its_bound(db_session: AsyncSession) -> None:
    """One sample per GPU a minute for 8 days, pruned every 10 simulated minutes as the monitor does:
    the table holds a day at one a minute and 6 more days at one a quarter hour, 2,016 rows a GPU."""
    gpus = 2
    host = Host(name="h")
    db_session.add(host)
    await db_session.flush()
    begin = utcnow().replace(hour=0, minute=0, second=5, microsecond=0) - timedelta(days=8)
    since = begin - timedelta(days=7)
    for minute in range(8 * 24 * 60):
        taken_at = begin + timedelta(minutes=minute)
        await db_session.execute(
            insert(GpuSample),
            [
                dict(host_id=host.id, gpu_index=g, taken_at=taken_at, memory_total_mib=1, memory_used_mib=0)
                for g in range(gpus)
            ],
        )
        if minute % 10 == 9:
            since = await prune_samples(db_session, taken_at, since=since)
    rows = await db_session.scalar(select(func.count()).select_from(GpuSample))
    assert 2016 * gpus <= rows <= (2016 + 25) * gpus  # up to 25 minutes past a day not thinned yet
