"""`launchdeck presets export DIR` and `presets apply DIR|FILE` as a team's CI runs them, against a
dashboard on the simulated cluster with the demo presets: what they print, and what the dashboard
holds afterwards."""

from __future__ import annotations

import functools
import re
import tomllib
from pathlib import Path
from typing import Any

import yaml
from fastapi import FastAPI
from httpx import AsyncClient

from tests.support.cli import cli
from tests.support.dashboard import TOKEN
from tests.support.served import served

WEBHOOK = "https://hooks.example.com/services/T000/B000/secret-path"
UNUSUAL = {
    "name": "unusual",
    "model_path": '/models/Qwen3 "8B" ✓',
    "description": 'line one\nline two with "quotes", a \\ backslash\tand a tab\r\n',
    "launcher": "sglang serve",
    "python": "/opt/venv/bin/python3",
    "port": 31000,
    "args": [
        "--tp-size",
        "2",
        "--json-model-override-args",
        '{"rope_scaling": {"type": "yarn"}}',
        "--trust-remote-code",
    ],
    "env": {"ZED": "last", "NCCL_DEBUG": "INFO", "HF_HOME": "/data/hf cache"},
    "webhook_url": WEBHOOK,
}


async def presets_of(api: AsyncClient, *, archived: bool = False) -> dict[str, dict[str, Any]]:
    return {p["name"]: p for p in (await api.get("/api/presets", params={"archived": archived})).json()}


def outcomes(out: str) -> dict[str, str]:
    """Each preset's line of `apply`'s output (the diffs below a dry run's lines left out)."""
    return dict(line.split(": ", 1) for line in out.splitlines() if not line.startswith(("-", "+", "@", " ")))


async def test_export_then_apply_finds_every_preset_unchanged_and_exports_the_same_bytes_again(
    api: AsyncClient, running_app: FastAPI, tmp_path: Path
) -> None:
    assert (await api.post("/api/presets", json=UNUSUAL)).status_code == 201
    before = await presets_of(api)
    async with served(running_app) as url:
        launchdeck = functools.partial(cli, "presets", url=url, env={"LAUNCHDECK_TOKEN": TOKEN})
        code, out, err = await launchdeck("export", str(tmp_path / "presets"))
        assert code == 0, err
        assert (await launchdeck("export", str(tmp_path / "again")))[0] == 0
        with_webhooks = await launchdeck("export", "--webhooks", str(tmp_path / "hooks"))
        applied = await launchdeck("apply", str(tmp_path / "presets"))
        applied_with_webhooks = await launchdeck("apply", str(tmp_path / "hooks"))
    files = sorted((tmp_path / "presets").iterdir())
    assert [path.name for path in files] == [f"{name}.toml" for name in sorted(before)]
    assert f"{tmp_path / 'presets' / 'unusual.toml'}: revision 1\n" in out
    for path in files:
        assert path.read_bytes() == (tmp_path / "again" / path.name).read_bytes()
    exported = tomllib.loads((tmp_path / "presets" / "unusual.toml").read_text())
    assert exported == {key: value for key, value in UNUSUAL.items() if key not in ("name", "webhook_url")}
    assert list(exported) == ["description", "model_path", "launcher", "python", "port", "args", "env"]
    assert list(exported["env"]) == ["HF_HOME", "NCCL_DEBUG", "ZED"]  # sorted: the same preset, the same bytes
    assert with_webhooks[0] == 0
    assert tomllib.loads((tmp_path / "hooks" / "unusual.toml").read_text())["webhook_url"] == WEBHOOK
    assert 'webhook_url = ""\n' in (tmp_path / "hooks" / "llama31-8b.toml").read_text()  # none, said so
    assert "webhook_url" not in (tmp_path / "presets" / "unusual.toml").read_text()  # the dashboard's, kept
    assert applied == (0, "".join(f"{name}: unchanged\n" for name in sorted(before)), "")
    assert applied_with_webhooks == applied
    assert await presets_of(api) == before


async def test_yaml_files_round_trip_as_toml_ones_do_and_an_edit_makes_one_revision(
    api: AsyncClient, running_app: FastAPI, tmp_path: Path
) -> None:
    assert (await api.post("/api/presets", json=UNUSUAL)).status_code == 201
    before = await presets_of(api)
    folder = tmp_path / "presets"
    async with served(running_app) as url:
        launchdeck = functools.partial(cli, "presets", url=url, env={"LAUNCHDECK_TOKEN": TOKEN})
        assert (await launchdeck("export", "--format", "yaml", str(folder)))[0] == 0
        unchanged = await launchdeck("apply", str(folder))
        edited = folder / "unusual.yaml"
        edited.write_text(edited.read_text().replace("port: 31000", "port: 31001"))
        dry = await launchdeck("apply", "--dry-run", str(edited))
        applied = await launchdeck("apply", str(edited))
    assert sorted(path.name for path in folder.iterdir()) == [f"{name}.yaml" for name in sorted(before)]
    exported = yaml.safe_load((folder / "unusual.yaml").read_text())
    assert exported == {key: value for key, value in UNUSUAL.items() if key not in ("name", "webhook_url")} | {
        "port": 31001
    }
    assert unchanged == (0, "".join(f"{name}: unchanged\n" for name in sorted(before)), "")
    assert "-port: 31000\n+port: 31001\n" in dry[1] and dry[0] == 0
    assert applied[0] == 0 and outcomes(applied[1]) == {"unusual": "revised (r2)"}
    after = await presets_of(api)
    assert after["unusual"]["revision"]["port"] == 31001 and after["unusual"]["revision"]["number"] == 2


async def test_an_edited_file_makes_one_revision_and_a_dry_run_shows_its_diff_first(
    api: AsyncClient, running_app: FastAPI, tmp_path: Path
) -> None:
    folder = tmp_path / "presets"
    async with served(running_app) as url:
        launchdeck = functools.partial(cli, "presets", url=url, env={"LAUNCHDECK_TOKEN": TOKEN})
        assert (await launchdeck("export", str(folder)))[0] == 0
        edited = folder / "qwen36-27b-mtp-oom.toml"
        edited.write_text(edited.read_text().replace('"4"', '"2"') + '\n[env]\nNCCL_DEBUG = "INFO"\n')
        described = folder / "llama31-8b.toml"
        described.write_text(
            re.sub("^description = .*$", 'description = "the small one"', described.read_text(), flags=re.M)
        )
        dry = await launchdeck("apply", "--dry-run", str(folder))
        after_dry_run = await presets_of(api)
        code, out, err = await launchdeck("apply", str(folder))
        assert code == 0, err
        again = await launchdeck("apply", str(folder))
    code, text, err = dry
    assert code == 0, err
    assert outcomes(text)["qwen36-27b-mtp-oom"] == "would be revised (r2)"
    assert outcomes(text)["llama31-8b"] == "would be updated (description)"
    diff = text.split("qwen36-27b-mtp-oom: would be revised (r2)\n", 1)[1].split("\nqwen36-27b-mtp-strategy-unset")[0]
    assert diff.splitlines()[:2] == ["--- dashboard: qwen36-27b-mtp-oom (r1)", f"+++ {edited}"]
    assert [line for line in diff.splitlines()[2:] if line[0] in "+-"] == [
        '-    "4",', '+    "2",', "+", "+[env]", '+NCCL_DEBUG = "INFO"',
    ]  # fmt: skip
    assert {name: preset["revisions"] for name, preset in after_dry_run.items()} == dict.fromkeys(after_dry_run, 1)
    assert after_dry_run["llama31-8b"]["description"] != "the small one"
    assert outcomes(out) == dict.fromkeys(after_dry_run, "unchanged") | {
        "qwen36-27b-mtp-oom": "revised (r2)", "llama31-8b": "updated (description)",
    }  # fmt: skip
    presets = await presets_of(api)
    revised = presets["qwen36-27b-mtp-oom"]
    assert (revised["revisions"], revised["revision"]["number"]) == (2, 2)
    assert revised["revision"]["args"][revised["revision"]["args"].index("--speculative-num-draft-tokens") + 1] == "2"
    assert revised["revision"]["env"] == {"NCCL_DEBUG": "INFO"}
    assert (presets["llama31-8b"]["revisions"], presets["llama31-8b"]["description"]) == (1, "the small one")
    assert [name for name, preset in presets.items() if preset["revisions"] != 1] == ["qwen36-27b-mtp-oom"]
    assert again == (0, "".join(f"{name}: unchanged\n" for name in sorted(presets)), "")


async def test_a_new_file_creates_its_preset_with_the_defaults_and_an_archived_one_comes_back(
    api: AsyncClient, running_app: FastAPI, tmp_path: Path
) -> None:
    new = tmp_path / "new-model.toml"
    new.write_text('model_path = "  org/New-Model  "\nargs = ["--tp-size", "2"]\n')
    archived = tmp_path / "llama31-8b.toml"
    assert (await api.post("/api/presets/llama31-8b/archive")).status_code == 200
    async with served(running_app) as url:
        launchdeck = functools.partial(cli, "presets", "apply", url=url, env={"LAUNCHDECK_TOKEN": TOKEN})
        dry = await launchdeck("--dry-run", str(new))
        created = await launchdeck(str(new))
        again = await launchdeck(str(new))
        archived.write_text('model_path = "meta-llama/Llama-3.1-8B-Instruct"\nport = 30001\n')
        restored = await launchdeck(str(archived))
    assert dry[0] == 0 and dry[1].splitlines()[:3] == ["new-model: would be created", "--- /dev/null", f"+++ {new}"]
    assert '+model_path = "org/New-Model"' in dry[1].splitlines()  # trimmed, as the dashboard keeps it
    assert (created, again) == ((0, "new-model: created\n", ""), (0, "new-model: unchanged\n", ""))
    preset = (await api.get("/api/presets/new-model")).json()
    assert preset["revision"] | {"command": None, "created_at": None} == {
        "number": 1, "model_path": "org/New-Model", "launcher": "python -m sglang.launch_server",
        "python": "python3", "port": 30000, "args": ["--tp-size", "2"], "env": {}, "command": None,
        "created_at": None, "created_by": "service token",
    }  # fmt: skip
    assert (preset["description"], preset["webhook_url"]) == ("", "")
    assert restored == (0, "llama31-8b: restored, revised (r2)\n", "")
    llama = (await api.get("/api/presets/llama31-8b")).json()
    assert (llama["archived"], llama["revision"]["port"]) == (False, 30001)


async def test_prune_archives_the_presets_without_a_file_and_nothing_else_does(
    api: AsyncClient, running_app: FastAPI, tmp_path: Path
) -> None:
    folder = tmp_path / "presets"
    async with served(running_app) as url:
        launchdeck = functools.partial(cli, "presets", url=url, env={"LAUNCHDECK_TOKEN": TOKEN})
        assert (await launchdeck("export", str(folder)))[0] == 0
        (folder / "llama31-8b.toml").unlink()
        (folder / "qwen3-235b-one-host.toml").unlink()
        without_prune = await launchdeck("apply", str(folder))
        still_active = set(await presets_of(api))
        dry = await launchdeck("apply", "--prune", "--dry-run", str(folder))
        after_dry_run = set(await presets_of(api))
        code, out, err = await launchdeck("apply", "--prune", str(folder))
        on_a_file = await launchdeck("apply", "--prune", str(folder / "qwen36-27b-mtp-oom.toml"))
    pruned = {"llama31-8b", "qwen3-235b-one-host"}
    assert without_prune[0] == 0 and not pruned & set(outcomes(without_prune[1]))
    assert pruned <= still_active == after_dry_run
    assert dry[0] == 0 and {name: outcomes(dry[1])[name] for name in pruned} == dict.fromkeys(
        pruned, "would be archived (no file)"
    )
    assert code == 0, err
    assert {name: outcomes(out)[name] for name in pruned} == dict.fromkeys(pruned, "archived (no file)")
    assert set(await presets_of(api)) == after_dry_run - pruned
    assert set(await presets_of(api, archived=True)) == pruned
    assert on_a_file == (
        2, "", "launchdeck: --prune needs a directory: it archives the presets that have no file in it\n",
    )  # fmt: skip


async def test_a_bad_file_exits_2_naming_file_and_key_and_nothing_is_applied(
    api: AsyncClient, running_app: FastAPI, tmp_path: Path
) -> None:
    folder = tmp_path / "presets"
    before = await presets_of(api)
    async with served(running_app) as url:
        launchdeck = functools.partial(cli, "presets", url=url, env={"LAUNCHDECK_TOKEN": TOKEN})
        assert (await launchdeck("export", str(folder)))[0] == 0
        (folder / "a-new-one.toml").write_text('model_path = "org/model"\n')  # good, and first: still not created
        edited = folder / "llama31-8b.toml"
        edited.write_text(edited.read_text().replace("port = 30000", "port = 30001"))
        (folder / "qwen3-235b-one-host.toml").write_text('model_path = "m"\nargs = ["--tp-size", 8]\n')
        (folder / "qwen36-27b-mtp-oom.toml").write_text('model_path = "m"\nmodel = "typo"\n')
        code, out, err = await launchdeck("apply", "--prune", str(folder))
        (folder / "zz.yaml").write_text("model_path: m\nport: yes\n")  # YAML 1.1's yes is true, not a port
        yaml = await launchdeck("apply", "--prune", str(folder))
    assert (code, out) == (2, "")
    assert err.splitlines() == [
        f"launchdeck: {folder / 'qwen3-235b-one-host.toml'}: args: argument 2 must be a string, not a whole number "
        "(quote it)",
        f"launchdeck: {folder / 'qwen36-27b-mtp-oom.toml'}: model: unknown key(s); a preset file holds description, "
        "model_path, launcher, python, port, webhook_url, args, env",
    ]
    assert (
        yaml[:2] == (2, "")
        and f"launchdeck: {folder / 'zz.yaml'}: port: must be a whole number, not true or false\n" in yaml[2]
    )
    assert await presets_of(api) == before and await presets_of(api, archived=True) == {}


async def test_a_refusal_by_the_dashboard_exits_1_with_its_sentence(
    api: AsyncClient, running_app: FastAPI, tmp_path: Path
) -> None:
    """A webhook written as a loopback address passes the file's checks; only the dashboard knows
    which destinations its team allows."""
    hooked = tmp_path / "hooked.toml"
    hooked.write_text('model_path = "m"\nwebhook_url = "http://127.0.0.1:9/hook"\n')
    async with served(running_app) as url:
        code, out, err = await cli("presets", "apply", str(hooked), url=url, env={"LAUNCHDECK_TOKEN": TOKEN})
    assert (code, out) == (1, "")
    assert err.startswith("launchdeck: preset 'hooked': 422: webhook_url: ") and err.count("\n") == 1
    assert "hooked" not in await presets_of(api)
