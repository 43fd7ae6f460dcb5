"""Multi-node attempts: the merged log of the parts' logs, the diagnosis through its node tags, and
launches over two simulated RTX PRO hosts through the API, over real SSH."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from app.diagnose.analyze import diagnose
from app.launch import nodes
from app.logs.merge import MergePart, node_tag
from app.logs.mirror import Mirrors
from app.logs.store import LogStore
from tests.support import until

CORPUS = Path(__file__).parent / "diagnose_corpus"


def merged_parts() -> list[MergePart]:
    return [MergePart(11, node_tag(0, "rtxpro-01")), MergePart(12, node_tag(1, "rtxpro-02"))]


async def test_the_merged_log_takes_whole_lines_tagged_in_the_order_they_arrive(tmp_path: Path) -> None:
    mirrors = Mirrors(LogStore(tmp_path))
    node0, node1 = mirrors.store.get(11), mirrors.store.get(12)
    merger = mirrors.merge(10, merged_parts())
    merged = mirrors.store.get(10)
    node0.append(b"[10:00:00] first of node 0\n")
    await until(lambda: merged.total_lines == 1, "the merger follows the parts")
    node0.append(b"[10:00:01] half of a li")
    node1.append(b"[10:00:02] first of node 1\n")
    node0.append(b"ne, ended later\n")
    node1.append(b"last line without a newline")
    await until(lambda: merged.total_lines == 3, "three whole lines merged")
    assert merged.read(0, merged.size).decode().splitlines() == [
        "[node0 rtxpro-01] [10:00:00] first of node 0",
        "[node1 rtxpro-02] [10:00:02] first of node 1",
        "[node0 rtxpro-01] [10:00:01] half of a line, ended later",
    ]
    for part in (node0, node1):
        part.finish(host_size=part.size, host_sha256=None, mirror_sha256=None)
    await asyncio.wait_for(merger.done.wait(), 5)
    assert merged.meta.complete and merged.meta.verification and merged.meta.verification["merged"] == 2
    assert merged.read(0, merged.size).endswith(b"[node1 rtxpro-02] last line without a newline\n")
    await mirrors.close()


async def test_a_restart_resumes_the_merge_without_repeating_or_losing_a_line(tmp_path: Path) -> None:
    """Whatever moment the dashboard stops at, the next one resumes each part after the lines the
    merged log holds of it."""
    store = LogStore(tmp_path)
    mirrors = Mirrors(store)
    mirrors.merge(10, merged_parts())
    for i in range(50):
        store.get(11 + i % 2).append(f"line {i} of node {i % 2}\n".encode())
    merged = store.get(10)
    await until(lambda: merged.total_lines == 50, "the first 50 lines merged")
    await mirrors.close()
    # The dashboard is away: the parts' mirrors (resumed before the merge) bring more.
    for i in range(50, 80):
        store.get(11 + i % 2).append(f"line {i} of node {i % 2}\n".encode())
    store = LogStore(tmp_path)  # a new dashboard reads everything from disk again
    mirrors = Mirrors(store)
    mirrors.merge(10, merged_parts())
    merged = store.get(10)
    await until(lambda: merged.total_lines == 80, "all 80 lines merged")
    lines = merged.read(0, merged.size).decode().splitlines()
    assert sorted(int(line.split()[3]) for line in lines) == list(range(80))
    assert all(line.startswith(f"[node{int(line.split()[3]) % 2} ") for line in lines)
    await mirrors.close()


@pytest.mark.parametrize("path", sorted(CORPUS.rglob("*.log")), ids=lambda path: path.name)
def test_a_node_tag_changes_nothing_in_the_diagnosis(path: Path) -> None:
    """The merged log's node tag is a wrapper prefix like a launcher's: a log whose every line
    carries one is diagnosed as the log itself, its root error on the same line."""
    text = path.read_text(errors="replace")
    tagged = "".join(node_tag(1, "rtxpro-02") + line for line in text.splitlines(keepends=True))
    plain, wrapped = diagnose(text), diagnose(tagged)
    assert (wrapped.failure_class, wrapped.fingerprint, wrapped.stage, wrapped.root_line) == (
        plain.failure_class,
        plain.fingerprint,
        plain.stage,
        plain.root_line,
    )


def test_each_node_runs_the_presets_command_with_its_rank_and_node_0s_address() -> None:
    argv = ["python3", "-m", "sglang.launch_server", "--tp", "8", "--nnodes=2", "--node-rank", "5"]
    assert nodes.nnodes_of(argv) == 2
    assert nodes.node_argv(argv, nnodes=2, node_rank=1, dist_init_addr="10.0.0.1:20000") == [
        "python3", "-m", "sglang.launch_server", "--tp", "8",
        "--nnodes", "2", "--node-rank", "1", "--dist-init-addr", "10.0.0.1:20000",
    ]  # fmt: skip
    assert nodes.nnodes_of(["--tp", "4"]) == 1
