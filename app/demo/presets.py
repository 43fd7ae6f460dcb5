"""Presets that replay the seed story on the simulated cluster: a 27B hybrid model with MTP on a
96 GB GPU runs out of memory, then trips over the silent mamba scheduler override, then runs."""

from __future__ import annotations

from sqlalchemy import select
from sqlalchemy.ext.asyncio import AsyncSession

from app.db.models import Preset
from app.launch.presets import PresetInput, create_preset

MTP = [
    "--speculative-algorithm", "EAGLE",
    "--speculative-num-steps", "3",
    "--speculative-eagle-topk", "1",
    "--speculative-num-draft-tokens", "4",
]  # fmt: skip
QWEN = "Qwen/Qwen3.6-27B"

DEMO_PRESETS = (
    PresetInput(
        name="qwen36-27b-mtp-oom",
        description="Qwen3.6-27B with MTP and almost all memory static: CUDA graph capture runs out of memory "
        "on a 96 GB GPU (rtxpro-01).",
        model_path=QWEN,
        args=[*MTP, "--disable-radix-cache", "--mem-fraction-static", "0.99"],
    ),
    PresetInput(
        name="qwen36-27b-mtp-extra-buffer",
        description="Asks for the extra_buffer mamba strategy to keep the radix cache; SGLang switches it to "
        "no_buffer and refuses speculative decoding with the radix cache.",
        model_path=QWEN,
        args=[*MTP, "--mamba-scheduler-strategy", "extra_buffer", "--mem-fraction-static", "0.95"],
    ),
    PresetInput(
        name="qwen36-27b-mtp-fixed",
        description="Radix cache off and 5% of memory left for CUDA graphs: reaches ready on rtxpro-01.",
        model_path=QWEN,
        args=[*MTP, "--disable-radix-cache", "--mem-fraction-static", "0.95"],
    ),
    PresetInput(
        name="llama31-8b",
        description="Llama 3.1 8B with SGLang's defaults: reaches ready on either host.",
        model_path="meta-llama/Llama-3.1-8B-Instruct",
    ),
)


async def seed_demo_presets(session: AsyncSession) -> list[str]:
    """Creates the demo presets that do not exist yet; returns their names."""
    existing = set((await session.scalars(select(Preset.name))).all())
    created = []
    for preset in DEMO_PRESETS:
        if preset.name not in existing:
            await create_preset(session, PresetInput(**vars(preset)), actor="demo")
            created.append(preset.name)
    return created
