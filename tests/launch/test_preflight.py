"""Preflight's sentences as a person reads them."""

from __future__ import annotations

from app.gpu.nvidia_smi import GpuMemory
from app.launch.preflight import _memory_check

GIB = 1 << 30


def test_the_memory_check_prints_the_fraction_sglang_chose_as_a_person_would() -> None:
    """SGLang computes its own fraction when none is asked for; the sentence rounds it."""
    gpu = GpuMemory(0, "NVIDIA RTX PRO 6000 Blackwell Server Edition", 97_887, 0, 97_887)
    check = _memory_check({"weight_bytes": 16 * GIB}, 0.7592325781249999, 1, [gpu])
    assert check.ok and "mem-fraction-static 0.759 of 95.6 GiB" in check.message, check.message
