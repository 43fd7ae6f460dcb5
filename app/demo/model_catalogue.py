"""The models installed on every simulated host, laid out as in a Hugging Face cache.

Each model gets its real `config.json` and `generation_config.json` (kept in `model_files/`)
and a `model.safetensors.index.json` whose weight map names the real tensors and whose
`total_size` is the real checkpoint's, so the simulated server and any tool on the host read
weight sizes the way they would on a real host. The shards themselves are not written.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

MODEL_FILES = Path(__file__).resolve().parent / "model_files"


ATTENTION = ("q_proj", "k_proj", "v_proj", "o_proj")
QK_NORMS = ("q_norm", "k_norm")
MLP = ("gate_proj", "up_proj", "down_proj")
NORMS = ("input_layernorm", "post_attention_layernorm")


def _names(prefix: str, parts: tuple[str, ...], suffix: str = ".weight") -> Iterator[str]:
    return (f"{prefix}.{part}{suffix}" for part in parts)


def _decoder_layer(prefix: str, attention: tuple[str, ...]) -> Iterator[str]:
    yield from _names(f"{prefix}.self_attn", attention)
    yield from _names(f"{prefix}.mlp", MLP)
    yield from _names(prefix, NORMS)


def _llama_tensors(layers: int) -> Iterator[str]:
    yield "model.embed_tokens.weight"
    for i in range(layers):
        yield from _decoder_layer(f"model.layers.{i}", ATTENTION)
    yield from ("model.norm.weight", "lm_head.weight")


def _qwen3_moe_tensors(layers: int, experts: int) -> Iterator[str]:
    yield "model.embed_tokens.weight"
    for i in range(layers):
        prefix = f"model.layers.{i}"
        yield from _names(f"{prefix}.self_attn", ATTENTION + QK_NORMS)
        yield f"{prefix}.mlp.gate.weight"
        for e in range(experts):
            yield from _names(f"{prefix}.mlp.experts.{e}", MLP)
        yield from _names(prefix, NORMS)
    yield from ("model.norm.weight", "lm_head.weight")


def _qwen3_5_tensors(layers: int, full_attention_interval: int, vision_depth: int) -> Iterator[str]:
    text = "model.language_model"
    yield f"{text}.embed_tokens.weight"
    for i in range(layers):
        prefix = f"{text}.layers.{i}"
        if (i + 1) % full_attention_interval:  # Gated DeltaNet (linear attention) layer
            yield from _names(f"{prefix}.linear_attn", ("in_proj_qkv", "in_proj_z", "in_proj_a", "in_proj_b"))
            yield from _names(f"{prefix}.linear_attn", ("conv1d.weight", "dt_bias", "A_log", "norm.weight"), "")
            yield f"{prefix}.linear_attn.out_proj.weight"
            yield from _names(f"{prefix}.mlp", MLP)
            yield from _names(prefix, NORMS)
        else:
            yield from _decoder_layer(prefix, ATTENTION + QK_NORMS)
    yield from (f"{text}.norm.weight", "lm_head.weight")
    yield from _names("mtp", ("fc", "norm", "pre_fc_norm_embedding", "pre_fc_norm_hidden"))
    yield from _decoder_layer("mtp.layers.0", ATTENTION + QK_NORMS)
    yield from ("model.visual.patch_embed.proj.weight", "model.visual.patch_embed.proj.bias")
    yield "model.visual.pos_embed.weight"
    for i in range(vision_depth):
        for part in ("norm1", "norm2", "attn.qkv", "attn.proj", "mlp.linear_fc1", "mlp.linear_fc2"):
            yield from _names(f"model.visual.blocks.{i}.{part}", ("weight", "bias"), "")
    for part in ("norm", "linear_fc1", "linear_fc2"):
        yield from _names(f"model.visual.merger.{part}", ("weight", "bias"), "")


@dataclass(frozen=True)
class CatalogueModel:
    repo_id: str
    total_size: int
    shards: int
    tensors: Callable[[], Iterator[str]]

    @property
    def revision(self) -> str:
        """A fixed snapshot hash, as the hub cache names snapshots by commit."""
        return hashlib.sha1(self.repo_id.encode()).hexdigest()

    @property
    def cache_folder(self) -> str:
        return "models--" + self.repo_id.replace("/", "--")

    def index(self) -> dict[str, object]:
        names = list(self.tensors())
        per_shard = -(-len(names) // self.shards)
        weight_map = {
            name: f"model-{n // per_shard + 1:05d}-of-{self.shards:05d}.safetensors" for n, name in enumerate(names)
        }
        return {"metadata": {"total_size": self.total_size}, "weight_map": weight_map}


CATALOGUE = (
    CatalogueModel("meta-llama/Llama-3.1-8B-Instruct", 16_060_522_496, 4, lambda: _llama_tensors(32)),
    CatalogueModel("Qwen/Qwen3.6-27B", 55_562_855_904, 15, lambda: _qwen3_5_tensors(64, 4, 27)),
    CatalogueModel("Qwen/Qwen3-235B-A22B-Instruct-2507", 470_187_269_120, 118, lambda: _qwen3_moe_tensors(94, 128)),
)


def install_models(home: Path) -> None:
    """Writes every catalogue model into `home`'s Hugging Face hub cache, once."""
    hub = home / ".cache" / "huggingface" / "hub"
    for model in CATALOGUE:
        folder = hub / model.cache_folder
        snapshot = folder / "snapshots" / model.revision
        index_path = snapshot / "model.safetensors.index.json"
        if index_path.exists():
            continue
        snapshot.mkdir(parents=True, exist_ok=True)
        source = MODEL_FILES / model.repo_id.replace("/", "--")
        for name in ("config.json", "generation_config.json"):
            (snapshot / name).write_bytes((source / name).read_bytes())
        (folder / "refs").mkdir(exist_ok=True)
        (folder / "refs" / "main").write_text(model.revision)
        index_path.write_text(json.dumps(model.index(), indent=2) + "\n")
