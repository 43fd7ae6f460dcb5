"""The team's rules through /api/rules and `launchdeck rules export|import`: the same checks and
sentences as the pages, author from the caller, a file imported whole or not at all."""

from __future__ import annotations

import functools
from pathlib import Path

from fastapi import FastAPI
from httpx import AsyncClient

from app.diagnose.rules import parse_rules
from tests.support.cli import cli
from tests.support.dashboard import TOKEN
from tests.support.served import served

RULES = """[[rule]]
match = "Address already in use"
class = "port-in-use"
title = "Another server holds the port"
hint = "Pick another --port; see https://docs.example/ports"
author = "dee"

[[rule]]
match = "the_flag"
scope = "any"
class = "arg-override"
title = "The flag is ignored"
"""


async def test_rules_are_made_read_edited_and_deleted_through_the_api(api: AsyncClient) -> None:
    made = await api.post(
        "/api/rules", json={"match": "Not enough memory", "class": "oom", "title": "KV", "author": "x"}
    )
    assert made.status_code == 201, made.text
    rule = made.json()
    assert (rule["class"], rule["author"], rule["scope"], rule["flag_aware"]) == ("oom", "service token", "root", True)
    assert (await api.get(f"/api/rules/{rule['id']}")).json() == rule
    changed = await api.put(f"/api/rules/{rule['id']}", json={"match": "x", "class": "nccl", "title": "T"})
    assert changed.status_code == 200 and changed.json()["class"] == "nccl"
    refused = await api.post("/api/rules", json={"match": "x", "class": "oom"})
    assert refused.status_code == 422 and "title is required" in refused.text
    refused = await api.post("/api/rules", json={"match": "x", "class": "oom", "title": "t", "colour": "red"})
    assert refused.status_code == 422 and "unknown key 'colour'" in refused.text
    assert [r["id"] for r in (await api.get("/api/rules")).json()] == [rule["id"]]
    assert (await api.delete(f"/api/rules/{rule['id']}")).status_code == 204
    assert (await api.get(f"/api/rules/{rule['id']}")).status_code == 404
    assert (await api.get("/api/rules", headers={"Authorization": ""})).status_code == 401


async def test_cli_imports_a_rules_file_whole_and_exports_it_back(
    api: AsyncClient, running_app: FastAPI, tmp_path: Path
) -> None:
    (tmp_path / "team.toml").write_text(RULES)
    (tmp_path / "bad.toml").write_text(RULES + '\n[[rule]]\nmatch = "x"\nclass = "memory"\ntitle = "t"\n')
    async with served(running_app) as url:
        launchdeck = functools.partial(cli, "rules", url=url, env={"LAUNCHDECK_TOKEN": TOKEN}, merge=True)
        code, out, _ = await launchdeck("import", str(tmp_path / "bad.toml"))
        assert code == 2
        assert out.startswith(f"launchdeck: rules file {tmp_path / 'bad.toml'}: rule 3: class 'memory' is not one of")
        assert out.endswith("; nothing was imported\n") and out.count("\n") == 1, out
        code, out, _ = await launchdeck("import", str(tmp_path / "missing.toml"))
        assert code == 2 and "cannot read it" in out and "nothing was imported" in out
        assert (await api.get("/api/rules")).json() == []

        code, out, _ = await launchdeck("import", str(tmp_path / "team.toml"))
        assert code == 0 and out.startswith(f"2 rules imported from {tmp_path / 'team.toml'}"), out
        rules = (await api.get("/api/rules")).json()
        assert [(r["author"], r["title"]) for r in rules] == [
            ("service token", "Another server holds the port"), ("service token", "The flag is ignored")
        ]  # fmt: skip

        code, out, _ = await launchdeck("export", str(tmp_path / "out.toml"))
        assert code == 0 and out.strip() == f"2 rules written to {tmp_path / 'out.toml'}"
        exported = parse_rules((tmp_path / "out.toml").read_text())
        assert [(r.author, r.title, r.scope) for r in exported] == [
            ("service token", "Another server holds the port", "root"), ("service token", "The flag is ignored", "any")
        ]  # fmt: skip
        code, printed, _ = await launchdeck("export")
        assert code == 0 and parse_rules(printed) == exported

    bad_body = await api.post(
        "/api/rules/import", content=b'[[rule]]\nmatch = "x"\n', headers={"Content-Type": "application/toml"}
    )
    assert bad_body.status_code == 422 and "rule 1: class is required" in bad_body.text
    assert len((await api.get("/api/rules")).json()) == 2
