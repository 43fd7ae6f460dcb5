"""Workloads: the named loads a benchmark sends, stored so that the figures of two attempts measured
with the same name are comparable. Two come with every dashboard; people add their own.

A workload is never edited once benchmarks used it: figures point at its settings as they ran (a
benchmark keeps a copy), and a changed load gets a new name.
"""

from __future__ import annotations

import math
import re
from dataclasses import asdict, dataclass

from sqlalchemy import select
from sqlalchemy.ext.asyncio import AsyncSession

from app import audit
from app.db.models import Workload
from app.errors import InvalidInput, NotFound
from app.presets.revisions import check_text

NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,63}")
DATASETS = ("random", "random-ids", "sharegpt")
MAX_PROMPTS = 100_000
MAX_TOKENS = 1_048_576
DEFAULT_WORKLOAD = "chat-short"


@dataclass
class WorkloadInput:
    """A workload as bench_serving's options see it; `request_rate` None sends every request at
    once (bench_serving's `inf`), `max_concurrency` None leaves it unbounded."""

    name: str
    num_prompts: int
    input_len: int
    output_len: int
    dataset: str = "random"
    range_ratio: float = 1.0
    request_rate: float | None = None
    max_concurrency: int | None = None
    description: str = ""

    def validate(self) -> None:
        self.name = self.name.strip()
        if not NAME.fullmatch(self.name):
            raise InvalidInput("name: use 1-64 letters, digits, '.', '_' or '-', starting with a letter or digit")
        check_text("description", self.description, 4096)
        if self.dataset not in DATASETS:
            raise InvalidInput(f"dataset: choose one of {', '.join(DATASETS)}")
        for field, value, top in (
            ("num_prompts", self.num_prompts, MAX_PROMPTS),
            ("input_len", self.input_len, MAX_TOKENS),
            ("output_len", self.output_len, MAX_TOKENS),
        ):
            if not 1 <= value <= top:
                raise InvalidInput(f"{field}: {value} is out of range (1-{top:,})")
        if not 0.0 < self.range_ratio <= 1.0 or math.isnan(self.range_ratio):
            raise InvalidInput(f"range_ratio: {self.range_ratio} is out of range (above 0, at most 1)")
        if self.request_rate is not None and not 0.0 < self.request_rate < math.inf:
            raise InvalidInput("request_rate: give requests per second above 0, or leave it out to send all at once")
        if self.max_concurrency is not None and not 1 <= self.max_concurrency <= MAX_PROMPTS:
            raise InvalidInput(f"max_concurrency: {self.max_concurrency} is out of range (1-{MAX_PROMPTS:,})")


# Small enough to finish in about a minute on one GPU, so a sweep can afford one per point.
BUILT_IN = (
    WorkloadInput(
        name="chat-short",
        description="Chat turns: 64 prompts of 256 tokens, 128 tokens out, 8 at a time.",
        num_prompts=64,
        input_len=256,
        output_len=128,
        max_concurrency=8,
    ),
    WorkloadInput(
        name="long-context",
        description="Long documents: 16 prompts of 8,192 tokens, 256 tokens out, 4 at a time.",
        num_prompts=16,
        input_len=8192,
        output_len=256,
        max_concurrency=4,
    ),
)


def settings_of(workload: Workload) -> dict[str, object]:
    """What a benchmark keeps of the workload it ran: every setting, by name."""
    fields = WorkloadInput.__dataclass_fields__
    return {"name": workload.name, **{key: getattr(workload, key) for key in fields if key not in ("name",)}}


async def ensure_built_in(session: AsyncSession) -> None:
    """Adds the built-in workloads that are missing (a person's workload of that name stays)."""
    existing = set((await session.scalars(select(Workload.name))).all())
    for workload in BUILT_IN:
        if workload.name not in existing:
            session.add(Workload(**asdict(workload), created_by="launchdeck"))


async def list_workloads(session: AsyncSession) -> list[Workload]:
    return list((await session.scalars(select(Workload).order_by(Workload.name))).all())


async def get_workload(session: AsyncSession, name: str) -> Workload:
    workload = await session.scalar(select(Workload).where(Workload.name == name))
    if workload is None:
        known = ", ".join((await session.scalars(select(Workload.name).order_by(Workload.name))).all())
        raise NotFound(f"no workload named {name!r} (known: {known or 'none'})")
    return workload


async def create_workload(session: AsyncSession, data: WorkloadInput, *, actor: str) -> Workload:
    """Saves a new workload; one unit of work, committed here."""
    data.validate()
    if await session.scalar(select(Workload.id).where(Workload.name == data.name)) is not None:
        raise InvalidInput(f"name: a workload named {data.name!r} exists; a changed load takes a new name")
    workload = Workload(**asdict(data), created_by=actor)
    session.add(workload)
    audit.record(session, actor=actor, action="workload-create", target=data.name, detail=asdict(data))
    await session.commit()
    return workload
