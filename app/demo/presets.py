"""Presets that replay the demo story on the simulated cluster, release by release: a 27B hybrid model
with MTP on a 96 GB GPU (rtxpro-01) under SGLang 0.5.10 (`python3-sglang-0.5.10`) and the newest
release (`python3`), and a 235B MoE model too large for one RTX PRO host that serves on two. Each
description says what really happens and why, as the real release's rules decide it.
"""

from __future__ import annotations

from sqlalchemy import select
from sqlalchemy.ext.asyncio import AsyncSession

from app.db.models import Preset
from app.presets.revisions import PresetInput, create_preset

MTP = [
    "--speculative-algorithm", "EAGLE",
    "--speculative-num-steps", "3",
    "--speculative-eagle-topk", "1",
    "--speculative-num-draft-tokens", "4",
]  # fmt: skip
QWEN = "Qwen/Qwen3.6-27B"
MOE = "Qwen/Qwen3-235B-A22B-Instruct-2507"

SGLANG_0_5_10 = "python3-sglang-0.5.10"

DEMO_PRESETS = (
    PresetInput(
        name="qwen36-27b-mtp-oom",
        description="SGLang 0.5.10 keeps the requested extra_buffer, but its own memory fraction for MTP on "
        "96 GB (0.759) leaves 20 GB beside the 51.75 GB of weights, and verifying 4 draft tokens for 48 running "
        "requests keeps 27.5 GB of mamba states (147 MiB each): the memory pool cannot be built, and SGLang asks "
        "for a larger --mem-fraction-static.",
        model_path=QWEN,
        args=[*MTP, "--mamba-scheduler-strategy", "extra_buffer"],
        python=SGLANG_0_5_10,
    ),
    PresetInput(
        name="qwen36-27b-mtp-strategy-unset",
        description="No mamba strategy requested: SGLang 0.5.10 turns auto into no_buffer, which refuses "
        "speculative decoding with the radix cache (ValueError). The requested arguments never named "
        "the strategy; ask for --mamba-scheduler-strategy extra_buffer.",
        model_path=QWEN,
        args=[*MTP, "--mem-fraction-static", "0.95"],
        python=SGLANG_0_5_10,
    ),
    PresetInput(
        name="qwen36-27b-mtp-no-radix",
        description="extra_buffer with --disable-radix-cache: SGLang 0.5.10 refuses the pair (ValueError), "
        "since the extra buffer exists to keep the radix cache.",
        model_path=QWEN,
        args=[
            *MTP,
            "--mamba-scheduler-strategy",
            "extra_buffer",
            "--disable-radix-cache",
            "--mem-fraction-static",
            "0.95",
        ],
        python=SGLANG_0_5_10,
    ),
    PresetInput(
        name="qwen36-27b-mtp-fixed",
        description="SGLang 0.5.10 with extra_buffer and 95% of memory static: the draft states fit, the "
        "radix cache stays on, and the server reaches ready on rtxpro-01 (8 running requests: each takes "
        "four mamba cache slots).",
        model_path=QWEN,
        args=[*MTP, "--mamba-scheduler-strategy", "extra_buffer", "--mem-fraction-static", "0.95"],
        python=SGLANG_0_5_10,
    ),
    PresetInput(
        name="qwen36-27b-mtp-newest",
        description="The same intent on the newest SGLang, whose flag is --mamba-radix-cache-strategy "
        "(--mamba-scheduler-strategy was removed in 0.5.20): reaches ready on rtxpro-01, and serves its "
        "figures (--enable-metrics) to the attempt page's serving panel.",
        model_path=QWEN,
        args=[
            *MTP,
            "--mamba-radix-cache-strategy",
            "extra_buffer",
            "--mem-fraction-static",
            "0.95",
            "--enable-metrics",
        ],
    ),
    PresetInput(
        name="qwen3-235b-one-host",
        description="Qwen3-235B-A22B (470 GB of bf16 weights) on one RTX PRO host: tensor parallel over its "
        "4 GPUs puts 117.5 GB of weights on each 96 GB GPU, so loading the weights runs out of GPU memory "
        "(torch.OutOfMemoryError). It needs two hosts: see qwen3-235b-two-nodes.",
        model_path=MOE,
        args=["--tp-size", "4"],
    ),
    PresetInput(
        name="qwen3-235b-two-nodes",
        description="Qwen3-235B-A22B on two RTX PRO hosts (rtxpro-01 and rtxpro-02): --tp-size is the total "
        "across nodes, so each node runs 4 of the 8 ranks with 58.8 GB of weights per GPU, and serves. Each "
        "node's command adds its --node-rank and the --dist-init-addr of node 0, where the ranks meet; only "
        "node 0 serves the API.",
        model_path=MOE,
        args=["--tp-size", "8", "--nnodes", "2"],
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
