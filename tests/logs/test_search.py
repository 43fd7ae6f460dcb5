from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from app.errors import InvalidInput
from app.logs.search import MAX_TEXT, ContextLine, Match, count_matches, first_line, grep_log, match_ranges
from tests.support.hosts import grep_children

LOG = b"""\
[2026-01-05 10:00:00] Launching: python -m sglang.launch_server --model-path Qwen/Qwen3.6-27B --mamba-scheduler-strategy extra_buffer --tp 2
[2026-01-05 10:00:01 TP0] server_args=ServerArgs(model_path='Qwen/Qwen3.6-27B', mamba_scheduler_strategy='no_buffer', tp_size=2, ...)
[2026-01-05 10:00:02 TP0] Load weight begin. avail mem=78.12 GB
[2026-01-05 10:00:02 TP1] Load weight begin. avail mem=78.10 GB
[2026-01-05 10:00:09 TP0] Load weight end. type=Qwen3ForCausalLM, dtype=torch.bfloat16, avail mem=64.20 GB
[2026-01-05 10:00:10 TP0] KV Cache is allocated. #tokens: 412345, K size: 15.73 GB, V size: 15.73 GB
[2026-01-05 10:00:12] INFO:     Uvicorn running on http://127.0.0.1:30000 (Press CTRL+C to quit)
[2026-01-05 10:00:13] The server is fired up and ready to roll!
[2026-01-05 10:01:00 TP0] Decode batch. #running-req: 4, #token: 1024, token usage: 0.01, gen throughput (token/s): 812.33
Traceback (most recent call last):
  File "/usr/lib/python3/dist-packages/sglang/srt/managers/scheduler.py", line 1234, in event_loop_normal
    result = self.run_batch(batch)
RuntimeError: CUDA error: an illegal memory access was encountered
"""  # noqa: E501


@pytest.fixture
def log(tmp_path: Path) -> Path:
    path = tmp_path / "server.log"
    path.write_bytes(LOG)
    return path


def assert_in_file(data: bytes, item: Match | ContextLine) -> None:
    """The line number, offset and text agree with the file's bytes."""
    assert data.count(b"\n", 0, item.offset) + 1 == item.line
    assert item.offset == 0 or data[item.offset - 1 : item.offset] == b"\n"
    assert data[item.offset : item.offset + len(item.text)] == item.text


async def test_fixed_string_and_regex(log: Path) -> None:
    fixed = await grep_log(log, "avail mem=78.1")
    assert [m.line for m in fixed.matches] == [3, 4]
    assert (fixed.total, fixed.more, fixed.capped) == (2, 0, False)
    assert fixed.matches[0].text == LOG.splitlines()[2]
    for match in fixed.matches:
        assert_in_file(LOG, match)

    assert (await grep_log(log, "TP[01]] Load")).total == 0  # fixed: brackets are literal
    regex = await grep_log(log, r"TP[01]\] Load weight (begin|end)", regex=True)
    assert [m.line for m in regex.matches] == [3, 4, 5]


async def test_ignore_case(log: Path) -> None:
    assert (await grep_log(log, "traceback")).total == 0
    result = await grep_log(log, "traceback (MOST recent", ignore_case=True)
    assert [m.line for m in result.matches] == [10]


async def test_context_lines_and_offsets(log: Path) -> None:
    result = await grep_log(log, "Load weight begin", context=2)
    first, second = result.matches
    # Line 4 is both after-context of line 3 and a match; lines 5-6 follow the second match.
    assert [c.line for c in first.before] == [1, 2]
    assert first.after == []
    assert second.before == []
    assert [c.line for c in second.after] == [5, 6]
    for item in [first, second, *first.before, *second.after]:
        assert_in_file(LOG, item)


async def test_context_between_and_across_groups(tmp_path: Path) -> None:
    lines = [b"hit 1", b"a", b"--", b"b", b"hit 5", b"c", b"d", b"e", b"f", b"g", b"h", b"hit 12", b"--"]
    data = b"\n".join(lines) + b"\n"
    path = tmp_path / "groups.log"
    path.write_bytes(data)
    result = await grep_log(path, "hit", context=3)
    one, five, twelve = result.matches
    # A line within `context` of the earlier match is its after-context, otherwise the later one's before-context.
    assert [(c.line, c.text) for c in one.after] == [(2, b"a"), (3, b"--"), (4, b"b")]
    assert five.before == []
    assert [c.line for c in five.after] == [6, 7, 8]
    assert [c.line for c in twelve.before] == [9, 10, 11]
    assert [(c.line, c.text) for c in twelve.after] == [(13, b"--")]
    for match in result.matches:
        for item in [match, *match.before, *match.after]:
            assert_in_file(data, item)


async def test_flag_aware(log: Path) -> None:
    result = await grep_log(log, "mamba_scheduler")
    assert [m.line for m in result.matches] == [1, 2]
    assert [m.line for m in (await grep_log(log, "mamba-scheduler-strategy")).matches] == [1, 2]
    assert [m.line for m in (await grep_log(log, "mamba_scheduler", flag_aware=False)).matches] == [2]
    assert [m.line for m in (await grep_log(log, "--mamba-scheduler", flag_aware=False)).matches] == [1]


async def test_flag_aware_escapes_regex_metacharacters(tmp_path: Path) -> None:
    needle = r"--cuda-graph-bs=[1+2]*(3|4)?{5}.^$\x"
    path = tmp_path / "meta.log"
    path.write_bytes(b"a " + needle.replace("-", "_").encode() + b" z\n" + b"--cuda-graph-bs=1123345^$x\n")
    result = await grep_log(path, needle)
    assert [m.line for m in result.matches] == [1]


@pytest.mark.parametrize(
    "pattern",
    ["-v", "--help", "-e x", "'; rm -rf /tmp/x; '", "$(touch PWNED)", '"quoted"', "back\\slash", "a\x00b"],
)
@pytest.mark.parametrize("flag_aware", [True, False])
async def test_patterns_are_searched_literally(tmp_path: Path, pattern: str, flag_aware: bool) -> None:
    pattern = pattern.replace("PWNED", str(tmp_path / "pwned"))
    needle = pattern.encode()
    lines = [
        b"[2026-01-05 10:00:01 TP0] no such thing here",
        b"before " + needle + b" after",
        b"x",
        b"only a piece: " + needle[:-1],
        b"a\x00c and ab",
        needle,
    ]
    data = b"\n".join(lines) + b"\n"
    path = tmp_path / "inject.log"
    path.write_bytes(data)
    result = await grep_log(path, pattern, flag_aware=flag_aware)
    assert [m.line for m in result.matches] == [i + 1 for i, line in enumerate(lines) if needle in line]
    assert [m.text for m in result.matches] == [needle.join([b"before ", b" after"]), needle]
    assert (await count_matches([path], pattern, flag_aware=flag_aware)) == {path: 2}
    assert await first_line(path, pattern, flag_aware=flag_aware) == 2
    assert not (tmp_path / "pwned").exists()


async def test_invalid_input(log: Path) -> None:
    with pytest.raises(InvalidInput, match=r"Invalid regular expression: Unmatched \["):
        await grep_log(log, "TP[0", regex=True)
    with pytest.raises(InvalidInput, match=r"Invalid regular expression: Unmatched \("):
        await count_matches([log], "(a", regex=True)
    with pytest.raises(InvalidInput, match="one line"):
        await grep_log(log, "Traceback\nRuntimeError")
    with pytest.raises(InvalidInput, match="empty"):
        await grep_log(log, "")
    with pytest.raises(InvalidInput, match="between 0 and 20"):
        await grep_log(log, "x", context=21)
    with pytest.raises(InvalidInput, match="not valid Unicode"):
        await grep_log(log, "\ud800")
    with pytest.raises(FileNotFoundError):
        await grep_log(log.with_name("missing.log"), "x")
    assert grep_children() == []


async def test_zero_hits(log: Path) -> None:
    result = await grep_log(log, "out of memory")
    assert (result.matches, result.total, result.more, result.capped) == ([], 0, 0, False)
    assert result.searched_bytes == len(LOG)


async def test_capping(tmp_path: Path) -> None:
    path = tmp_path / "decode.log"
    path.write_bytes(
        b"".join(
            b"[2026-01-05 10:%02d:%02d TP0] Decode batch. #running-req: %d\n" % (i // 60 % 60, i % 60, i)
            for i in range(1000)
        )
    )
    result = await grep_log(path, "Decode batch", limit=5, context=1)
    assert (result.total, result.more, result.capped) == (1000, 995, True)
    assert [m.line for m in result.matches] == [1, 2, 3, 4, 5]
    assert grep_children() == []


async def test_pages_after_a_line_reach_every_hit(tmp_path: Path) -> None:
    path = tmp_path / "decode.log"
    path.write_bytes(b"".join(b"batch %d%s\n" % (i, b" hit" if i % 3 == 0 else b"") for i in range(1, 1001)))
    seen, after = [], 0
    while True:
        page = await grep_log(path, "hit", limit=100, after=after, context=1)
        assert page.total == 333 and page.skipped == len(seen)
        seen += [m.line for m in page.matches]
        assert all(c.line > after for m in page.matches for c in m.before)
        if not page.more:
            break
        after = page.matches[-1].line
    assert seen == list(range(3, 1001, 3))
    last = await grep_log(path, "hit", limit=100, after=seen[-1])
    assert (last.matches, last.skipped, last.total, last.more) == ([], 333, 333, 0)
    assert grep_children() == []


async def test_match_ranges_are_what_grep_matched() -> None:
    texts = [b"--mamba-scheduler-strategy no_buffer", b"no match here", b"MAMBA_scheduler and mamba_scheduler"]
    ranges = await match_ranges(texts, "mamba_scheduler", ignore_case=True)
    assert ranges == [[(2, 17)], [], [(0, 15), (20, 35)]]
    assert await match_ranges(texts, "b[a-z]+", regex=True) == [[(5, 7), (30, 36)], [], [(23, 25)]]
    assert await match_ranges([b"a\rb <x>"], "<x>") == [[(4, 7)]]
    assert await match_ranges([], "x") == []


async def test_long_line_is_truncated(tmp_path: Path) -> None:
    long_line = b"[2026-01-05 10:00:01 TP0] server_args=ServerArgs(" + b"x" * (1 << 20) + b")"
    data = b"first line\n" + long_line + b"\nlast line needle\n"
    path = tmp_path / "long.log"
    path.write_bytes(data)
    result = await grep_log(path, "server_args=", context=1)
    (match,) = result.matches
    assert (match.line, match.offset, match.truncated) == (2, 11, True)
    assert match.text == long_line[:MAX_TEXT]
    assert [(c.line, c.text, c.truncated) for c in match.after] == [(3, b"last line needle", False)]
    assert (await grep_log(path, "needle", context=1)).matches[0].before[0].truncated


async def test_invalid_utf8_is_returned_as_bytes(tmp_path: Path) -> None:
    data = b"ok\n[2026-01-05 10:00:01 TP0] tokenizer output \xff\xfe\xc3( ERROR\nok\n"
    path = tmp_path / "bytes.log"
    path.write_bytes(data)
    result = await grep_log(path, "error", ignore_case=True)
    assert result.matches[0].text == data.splitlines()[1]
    assert (await grep_log(path, "output .* ERROR", regex=True)).total == 1


async def test_count_matches(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    attempts = [tmp_path / f"attempt-{i}" / "server.log" for i in range(3)]
    for path, body in zip(attempts[:2], [LOG, LOG.replace(b"mamba", b"other")], strict=True):
        path.parent.mkdir()
        path.write_bytes(body)
    assert await count_matches(attempts, "mamba-scheduler") == {attempts[0]: 2, attempts[1]: 0}
    assert await count_matches(attempts, "mamba-scheduler", flag_aware=False) == {attempts[0]: 1, attempts[1]: 0}
    assert await count_matches([*attempts[2:], tmp_path], "x") == {}  # missing files and directories are skipped
    # Odd names are ours too: one that looks like an option, one with ": " in it.
    monkeypatch.chdir(tmp_path)
    odd = [Path("-v.log"), Path("a: b:1.log")]
    for path in odd:
        path.write_bytes(LOG)
    assert await count_matches(odd, "TP1]") == dict.fromkeys(odd, 1)


async def test_first_line(log: Path) -> None:
    assert await first_line(log, "Traceback (most recent call last):") == 10
    assert await first_line(log, r"^RuntimeError: CUDA", regex=True) == 13
    assert await first_line(log, "Segmentation fault") is None


@pytest.mark.parametrize(
    ("pattern", "regex"),
    [
        ("Decode batch", False),  # grep writes a match per line, faster than they are read
        (r"^(.+)(.+)\2\1$", True),  # grep backtracks through every line and writes nothing
    ],
)
async def test_cancel_leaves_no_grep(tmp_path: Path, pattern: str, regex: bool) -> None:
    path = tmp_path / "big.log"
    line = b"[2026-01-05 10:01:00 TP0] Decode batch. #running-req: 4, #token: 1024, token usage: 0.01\n"
    path.write_bytes(line * (50_000_000 // len(line)))
    task = asyncio.create_task(grep_log(path, pattern, regex=regex, limit=10**9))
    for _ in range(2000):
        if grep_children():
            break
        await asyncio.sleep(0.001)
    assert grep_children(), "grep did not start"
    await asyncio.sleep(0.05)
    assert not task.done()
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        async with asyncio.timeout(5):  # the cancelled search must end at once, not when grep would have
            await task
    assert grep_children() == []
