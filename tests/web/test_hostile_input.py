"""Input no person would send, each answered with a sentence and nothing written: text that is not
Unicode, TOML nested past reason, offsets past any file, GPU numbers no host has, NUL bytes."""

from __future__ import annotations

import asyncio
import json
import re
from pathlib import Path

import pytest
from fastapi import FastAPI
from httpx import AsyncClient

from app.diagnose.rules import parse_rules
from app.errors import InvalidInput
from app.perf.runner import Benchmarks
from app.states import Role
from app.web.api.hosts import HostPublic
from tests.support.accounts import person
from tests.support.dashboard import AUTH
from tests.support.served import served

AUTH_LINE = "".join(f"{name}: {value}" for name, value in AUTH.items())
RULE = {"match": "Not enough memory", "class": "oom", "title": "KV pool"}


async def test_a_lone_surrogate_is_refused_with_a_sentence_and_nothing_is_written(api: AsyncClient) -> None:
    body = '{"match": "x", "class": "oom", "title": "\\ud800"}'
    answer = await api.post("/api/rules", content=body, headers={"Content-Type": "application/json"})
    assert answer.status_code == 422, answer.text
    assert answer.json()["detail"] == "the request holds text that is not Unicode (a lone surrogate code point)"
    assert (await api.get("/api/rules")).json() == []


def test_toml_nested_past_reason_is_refused_with_a_sentence() -> None:
    with pytest.raises(InvalidInput, match="not valid TOML for a rules file: its arrays or tables nest too deep"):
        parse_rules("a = " + "[" * 100_000 + "]" * 100_000)


def test_a_benchmark_output_read_from_past_its_end_is_empty(tmp_path: Path) -> None:
    benchmarks = Benchmarks(None, None, tmp_path, timeout=1, memory_mib=1)  # type: ignore[arg-type]
    benchmarks.output_path(1).write_bytes(b"Serving Benchmark Result\n")
    assert benchmarks.read_output(1, 2**63 - 1) == b""
    assert benchmarks.read_output(1, 8) == b"Benchmark Result\n"


@pytest.mark.parametrize(
    ("change", "sentence"),
    [
        ({"gpus": [-1]}, "gpus: give distinct GPU indices from 0 to 63"),
        ({"gpus": [1000]}, "gpus: give distinct GPU indices from 0 to 63"),
        ({"name": "a\0b"}, "name: contains a NUL byte"),
        ({"points": [{"--max-running-requests\0": "8"}]}, "contains a NUL byte"),
        ({"points": [{"--max-running-requests": "8\0"}]}, "contains a NUL byte"),
    ],
)
async def test_a_sweep_with_impossible_gpus_or_nul_bytes_is_refused(
    api: AsyncClient, change: dict[str, object], sentence: str
) -> None:
    body = {"preset": "llama31-8b", "host": "rtxpro-01", "gpus": [0], "points": [{"--max-running-requests": "8"}]}
    answer = await api.post("/api/sweeps", json=body | change)
    assert answer.status_code == 422 and sentence in answer.json()["detail"], answer.text
    assert (await api.get("/api/sweeps")).json() == []


async def test_a_rule_with_a_nul_byte_is_refused(api: AsyncClient) -> None:
    answer = await api.post("/api/rules", json=RULE | {"title": "KV\0pool"})
    assert answer.status_code == 422 and answer.json()["detail"] == "rule: title contains a NUL byte"


async def test_whoever_imports_a_rules_file_is_the_author_of_its_rules(api: AsyncClient, running_app: FastAPI) -> None:
    text = '[[rule]]\nmatch = "x"\nclass = "oom"\ntitle = "t"\nauthor = "the-boss"\n'
    async with await person(running_app, "ivy", Role.OPERATOR, None) as ivy:
        answer = await ivy.post("/api/rules/import", content=text, headers={"Content-Type": "application/toml"})
        assert answer.status_code in (200, 201), answer.text
    assert [rule["author"] for rule in (await api.get("/api/rules")).json()] == ["ivy"]


async def test_an_unexpected_error_answers_500_and_keeps_the_connection(
    running_app: FastAPI, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A bug answers with a sentence and the connection stays open for the next request (uvicorn
    closed it when the error was raised again after the answer): three requests, one connection."""

    def broken(*_: object) -> None:
        raise RuntimeError("a bug")

    monkeypatch.setattr(HostPublic, "from_overview", broken)
    async with served(running_app) as url:
        reader, writer = await asyncio.open_connection(*url.removeprefix("http://").split(":"))
        try:
            for _ in range(3):
                writer.write(f"GET /api/hosts HTTP/1.1\r\nHost: testserver\r\n{AUTH_LINE}\r\n\r\n".encode())
                head = (await reader.readuntil(b"\r\n\r\n")).decode()
                length = int(re.search(r"(?i)content-length: (\d+)", head)[1])
                body = await reader.readexactly(length)
                assert head.startswith("HTTP/1.1 500") and "connection: close" not in head.lower()
                assert json.loads(body) == {"detail": "internal error; the server log has the details"}
        finally:
            writer.close()
