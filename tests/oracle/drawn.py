"""Oracle cases drawn, not written: argument lists a property-based generator (hypothesis) draws from
the real releases' flag tables, resolved by real SGLang and by the simulator and compared field by
field, as the written table is (tests/oracle/compare.py).

Each case is one demo model on one demo GPU type (with the host's true GPU count) and an argument
list of up to four flags users pass at launch, drawn with realistic values (chunked prefill,
context length, KV-cache dtypes, quantization, page sizes, attention backends, tensor and data
parallelism, speculative algorithms in either case with their shapes and a draft model, CUDA graph
sizes, memory fractions at their extremes, the mamba cache knobs, parsers, metrics, an API key),
and up to two of any other flag either release knows, valued by its type and choices, so that a
flag one release lacks is refused by both sides alike.

    python -m tests.oracle.drawn [--cases N] [--seed S] [VERSION ...]

draws N cases (default 300) from seed S (default the CI sample's) and prints every disagreement;
`make oracle-soak` draws thousands from fresh seeds. CI runs the fixed sample
(tests/demo/test_sglang_oracle.py). Every disagreement found becomes a written case in
tests/oracle/cases.py once the simulator agrees.
"""

from __future__ import annotations

import argparse
import functools
import json
import random
import sys
from collections.abc import Callable
from typing import Any

from hypothesis import HealthCheck, Phase, given, seed, settings
from hypothesis import strategies as st

from tests.oracle.cases import GPUS, MODELS, SPEC_V2, OracleCase
from tests.oracle.compare import disagreements, real_outcomes_by_version, report, simulated_outcomes
from tests.oracle.environment import ORACLE_VERSIONS, oracle_environment
from tests.support.paths import HOSTLIB

TABLES = HOSTLIB / "sglang" / "srt" / "releases"
CI_SEED = 20261206
CI_CASES = 300
DRAFT_MODEL = str(MODELS["Llama-3.1-8B"])

Draw = st.SearchStrategy[list[str]]


def flag(name: str, values: st.SearchStrategy[Any] | None = None) -> Draw:
    """`name` alone (a switch), or with one of `values`."""
    if values is None:
        return st.just([name])
    return values.map(lambda value: [name, str(value)])


def speculation() -> Draw:
    algorithm = st.sampled_from(["EAGLE", "EAGLE3", "NEXTN", "STANDALONE", "NGRAM", "eagle", "nextn"])
    steps = st.sampled_from([1, 2, 3, 5])
    topk = st.sampled_from([1, 1, 2, 4])
    draft_tokens = st.sampled_from([2, 4, 8, 16])

    @st.composite
    def drawn(draw: Callable[[Any], Any]) -> list[str]:
        name = draw(algorithm)
        args = ["--speculative-algorithm", name]
        if draw(st.booleans()):
            args += ["--speculative-num-steps", str(draw(steps)), "--speculative-eagle-topk", str(draw(topk))]
            args += ["--speculative-num-draft-tokens", str(draw(draft_tokens))]
        if name.upper() in ("STANDALONE", "EAGLE3") or (draw(st.booleans()) and name.upper() != "NGRAM"):
            args += ["--speculative-draft-model-path", DRAFT_MODEL]
        return args

    return drawn()


# What users pass at launch, with the values they pass.
LAUNCH_FLAGS: tuple[Draw, ...] = (
    flag("--chunked-prefill-size", st.sampled_from([-1, 512, 2048, 4096, 8192, 16384, 1000])),
    flag("--context-length", st.sampled_from([4096, 32768, 131072, 262144, 1048576])),
    flag("--kv-cache-dtype", st.sampled_from(["auto", "fp8_e4m3", "fp8_e5m2", "bf16", "fp4_e2m1", "nvfp4"])),
    flag("--quantization", st.sampled_from(["fp8", "awq", "gptq", "modelopt_fp4", "w8a8_fp8", "mxfp4"])),
    flag("--page-size", st.sampled_from([1, 16, 32, 64, 128])),
    flag(
        "--attention-backend",
        st.sampled_from(["flashinfer", "triton", "torch_native", "flex_attention", "fa3", "fa4", "trtllm_mha"]),
    ),
    flag("--tp-size", st.sampled_from([1, 2, 4, 8])),
    flag("--dp-size", st.sampled_from([1, 2, 4])),
    flag("--enable-dp-attention"),
    flag("--enable-mixed-chunk"),
    speculation(),
    flag("--cuda-graph-max-bs", st.sampled_from([8, 32, 160, 512])),
    flag("--cuda-graph-max-bs-decode", st.sampled_from([8, 32, 160, 512])),
    flag("--disable-cuda-graph"),
    flag("--mem-fraction-static", st.sampled_from([0.3, 0.5, 0.85, 0.95, 0.99])),
    flag("--max-running-requests", st.sampled_from([1, 16, 64, 256])),
    flag("--max-total-tokens", st.sampled_from([8192, 100000, 1000000])),
    flag("--mamba-scheduler-strategy", st.sampled_from(["auto", "no_buffer", "extra_buffer"])),
    flag("--mamba-radix-cache-strategy", st.sampled_from(["auto", "no_buffer", "extra_buffer"])),
    flag("--mamba-ssm-dtype", st.sampled_from(["float32", "bfloat16"])),
    flag("--max-mamba-cache-size", st.sampled_from([16, 256])),
    flag("--disable-radix-cache"),
    flag("--disable-overlap-schedule"),
    flag("--ep-size", st.sampled_from([1, 2, 8])),
    flag("--moe-runner-backend", st.sampled_from(["auto", "triton", "flashinfer_trtllm", "flashinfer_cutlass"])),
    flag("--tool-call-parser", st.sampled_from(["qwen25", "qwen3_coder", "llama3", "hermes"])),
    flag("--reasoning-parser", st.sampled_from(["qwen3", "deepseek-r1"])),
    flag("--enable-metrics"),
    flag("--api-key", st.just("sk-drawn-case")),
    flag("--trust-remote-code"),
)


@functools.cache
def table_actions() -> tuple[dict[str, Any], ...]:
    """Every flag either release knows, once per spelling."""
    seen: dict[str, dict[str, Any]] = {}
    for version in ORACLE_VERSIONS:
        for action in json.loads((TABLES / f"{version}.json").read_text())["actions"]:
            seen.setdefault(action["options"][0], action)
    return tuple(seen.values())


NUMBERS = {"int": [0, 1, 2, 8, 64, 4096], "float": [0.0, 0.5, 0.9, 2.0], "human_readable_int": ["1k", "64", "2Mi"]}


def any_flag(action: dict[str, Any]) -> Draw | None:
    """A flag from the tables with a value its type and choices allow; None where a value cannot be
    drawn blind (free text, JSON, paths)."""
    option = action["options"][0]
    if action["nargs"] == 0:
        if action["kind"] == "BooleanOptionalAction":
            return st.sampled_from([[option], [f"--no-{option[2:]}"]])
        return st.just([option])
    if action["choices"]:
        return flag(option, st.sampled_from(action["choices"]))
    if action["type"] in NUMBERS and action["nargs"] in (None, "?"):
        return flag(option, st.sampled_from(NUMBERS[action["type"]]))
    return None


def any_flags() -> Draw:
    drawable = [strategy for action in table_actions() if (strategy := any_flag(action)) is not None]
    return st.one_of(drawable)


def case_strategy() -> st.SearchStrategy[OracleCase]:
    @st.composite
    def drawn(draw: Callable[[Any], Any]) -> OracleCase:
        model = draw(st.sampled_from(sorted(MODELS)))
        gpu = draw(st.sampled_from(sorted(GPUS)))
        args: list[str] = []
        for strategy in draw(st.lists(st.sampled_from(LAUNCH_FLAGS), max_size=4, unique_by=id)):
            args += draw(strategy)
        for _ in range(draw(st.integers(0, 2))):
            args += draw(any_flags())
        env = SPEC_V2 if draw(st.integers(0, 4)) == 0 else {}
        name = f"drawn: {' '.join(args) or '(defaults)'}{' · spec v2' if env else ''} · {model} · {gpu}"
        return OracleCase(name, ["--model-path", str(MODELS[model]), *args], GPUS[gpu], env)

    return drawn()


def draw_cases(count: int = CI_CASES, seed_value: int = CI_SEED) -> list[OracleCase]:
    """About `count` distinct cases, the same ones for the same seed (and hypothesis release):
    hypothesis drives the draws, the cases are resolved together afterwards, as importing real
    SGLang costs seconds per process."""
    drawn: dict[str, OracleCase] = {}

    quiet = list(HealthCheck)

    @settings(max_examples=count, phases=[Phase.generate], database=None, deadline=None, suppress_health_check=quiet)
    @seed(seed_value)
    @given(case_strategy())
    def collect(case: OracleCase) -> None:
        drawn.setdefault(case.name, case)  # a repeated draw is kept once

    collect()
    return list(drawn.values())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("versions", nargs="*", default=list(ORACLE_VERSIONS), metavar="VERSION")
    parser.add_argument("--cases", type=int, default=CI_CASES)
    parser.add_argument("--seed", type=int, default=None, help="default: the CI sample's; 'random' draws anew")
    parser.add_argument("--fresh", action="store_true", help="a seed never used before")
    options = parser.parse_args()
    chosen_seed = random.randrange(1 << 30) if options.fresh else (options.seed or CI_SEED)
    cases = draw_cases(options.cases, chosen_seed)
    print(f"{len(cases)} cases drawn from seed {chosen_seed}")
    real = real_outcomes_by_version(oracle_environment(), options.versions, cases)
    failed = False
    for version in options.versions:
        found = disagreements(real[version], simulated_outcomes(version, cases))
        failed |= bool(found)
        print(report(version, len(cases), found) if found else f"sglang {version}: all {len(cases)} cases agree")
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
