"""Presets: validation, revisions, diffs, the editor's form, and the launch script's quoting."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from httpx import AsyncClient
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from app.db.models import PresetRevision
from app.launch.remote import render_script
from app.presets import revisions
from tests.support.dashboard import TOKEN

AUTH = {"Authorization": f"Bearer {TOKEN}"}
LLAMA = "meta-llama/Llama-3.1-8B-Instruct"


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"model_path": "  "}, "model_path: a model path or Hugging Face repo id is required"),
        ({"port": 70000}, "port: 70000 is out of range (1-65535)"),
        ({"args": ["--tp-size", "two"]}, "tp_size: 'two' is not a whole number"),
        ({"args": ["--mem-fraction-static", "1.5"]}, "mem_fraction_static: 1.5 must be between 0 and 1"),
        ({"args": ["--tp-size", "2", "--tensor-parallel-size=4"]}, "args: --tp-size is given twice"),
        ({"args": ["--enable-foo", "--enable-foo"]}, "args: --enable-foo is given twice"),
        ({"args": ["--port", "1"]}, "args: --port is set by the preset's port field"),
        ({"args": ["--mamba-scheduler-strategy", "extra"]}, "mamba_scheduler_strategy: 'extra' is not one of"),
        ({"args": ["--speculative-num-steps"]}, "speculative_num_steps: --speculative-num-steps needs a value"),
        ({"env": {"CUDA_VISIBLE_DEVICES": "0"}}, "env: CUDA_VISIBLE_DEVICES is set from the GPUs chosen at launch"),
        ({"env": {"1BAD": "x"}}, "env: '1BAD' is not a valid variable name"),
        ({"name": "has space"}, "name: use 1-128 letters"),
        ({"launcher": "vllm serve"}, "launcher: choose"),
        ({"webhook_url": "hooks.example/services/x"}, "webhook_url: give an http:// or https:// URL"),
    ],
)
async def test_bad_presets_are_refused_with_the_field_named(
    app_client: AsyncClient, change: dict[str, object], message: str
) -> None:
    body = {"name": "p", "model_path": LLAMA, **change}
    response = await app_client.post("/api/presets", json=body, headers=AUTH)
    assert response.status_code == 422
    assert response.json()["detail"].startswith(message)
    assert (await app_client.get("/api/presets", headers=AUTH)).json() == []


async def test_every_save_is_a_revision_and_revisions_diff(app_client: AsyncClient) -> None:
    body = {"name": "qwen", "model_path": "Qwen/Qwen3.6-27B", "args": ["--tp-size", "1"], "env": {"A": "1"}}
    created = await app_client.post("/api/presets", json=body, headers=AUTH)
    assert created.status_code == 201 and created.json()["revision"]["number"] == 1
    duplicate = await app_client.post("/api/presets", json=body, headers=AUTH)
    assert duplicate.status_code == 422 and "exists already" in duplicate.json()["detail"]

    changed = {"model_path": "Qwen/Qwen3.6-27B", "args": ["--tp-size", "2", "--disable-radix-cache"], "env": {}}
    updated = (await app_client.put("/api/presets/qwen", json=changed, headers=AUTH)).json()
    assert updated["revision"]["number"] == 2 and updated["revisions"] == 2
    unchanged = (await app_client.put("/api/presets/qwen", json=changed, headers=AUTH)).json()
    assert unchanged["revisions"] == 2
    assert updated["revision"]["command"] == [
        "python3", "-m", "sglang.launch_server", "--model-path", "Qwen/Qwen3.6-27B", "--port", "30000",
        "--tp-size", "2", "--disable-radix-cache",
    ]  # fmt: skip
    diff = (await app_client.get("/api/presets/qwen/diff", params={"a": 1, "b": 2}, headers=AUTH)).json()
    assert diff == [
        {"field": "env A", "before": "1", "after": "(unset)"},
        {"field": "--disable-radix-cache", "before": "(unset)", "after": "on"},
        {"field": "--tp-size", "before": "1", "after": "2"},
    ]
    first = (await app_client.get("/api/presets/qwen/revisions", headers=AUTH)).json()[0]
    assert first["args"] == ["--tp-size", "1"] and first["env"] == {"A": "1"}

    clone = await app_client.post("/api/presets/qwen/clone", json={"name": "qwen-copy"}, headers=AUTH)
    assert clone.status_code == 201 and clone.json()["revision"]["args"] == ["--tp-size", "2", "--disable-radix-cache"]
    assert (await app_client.post("/api/presets/qwen/archive", headers=AUTH)).json()["archived"] is True
    assert [p["name"] for p in (await app_client.get("/api/presets", headers=AUTH)).json()] == ["qwen-copy"]
    archived = (await app_client.get("/api/presets", params={"archived": True}, headers=AUTH)).json()
    assert [p["name"] for p in archived] == ["qwen"]
    actions = [e["action"] for e in (await app_client.get("/api/audit", headers=AUTH)).json()]
    assert actions[:5] == ["preset-archive", "preset-clone", "preset-create", "preset-edit", "preset-create"]


def test_sglang_serve_runs_next_to_the_presets_python() -> None:
    revision = PresetRevision(
        model_path=LLAMA, launcher="sglang serve", python="/opt/venv/bin/python", port=31000, args=["--tp", "2"]
    )
    assert revisions.command_argv(revision) == [
        "/opt/venv/bin/sglang", "serve", "--model-path", LLAMA, "--port", "31000", "--tp", "2",
    ]  # fmt: skip


def test_editor_fields_and_extra_arguments_round_trip() -> None:
    fields = {"tp_size": "2", "mem_fraction_static": "0.9", "disable_radix_cache": "on", "speculative_algorithm": ""}
    args = revisions.args_from_form(fields, "--log-requests --served-model-name 'my model'")
    assert args == [
        "--tp-size", "2", "--mem-fraction-static", "0.9", "--disable-radix-cache",
        "--log-requests", "--served-model-name", "my model",
    ]  # fmt: skip
    assert revisions.form_from_args(args) == (
        {"tp_size": "2", "mem_fraction_static": "0.9", "disable_radix_cache": "on"},
        "--log-requests --served-model-name 'my model'",
    )
    with pytest.raises(revisions.InvalidInput, match="extra_args: No closing quotation"):
        revisions.args_from_form({}, "--served-model-name 'unclosed")


def test_editor_fields_keep_the_spelling_the_revision_used() -> None:
    """A field filled by an alias or by a later release's name for its flag is saved with that
    name: saving from the editor never renames a flag under the host's SGLang."""
    args = ["--tensor-parallel-size", "2", "--cuda-graph-max-bs", "8", "--mamba-radix-cache-strategy", "extra_buffer"]
    fields, extra = revisions.form_from_args(args)
    assert (fields["tp_size"], fields["mamba_scheduler_strategy"], fields["cuda_graph_max_bs"], extra) == (
        "2", "extra_buffer", "8", ""
    )  # fmt: skip
    assert revisions.args_from_form(fields, extra) == args
    assert revisions.args_from_form({"tp_size": "2"}, "") == ["--tp-size", "2"]  # a new field: the flag's own name
    with pytest.raises(revisions.InvalidInput, match=r"tp_size\.flag: '--rm' is not a name of --tp-size"):
        revisions.args_from_form({"tp_size": "2", "tp_size.flag": "--rm"}, "")


FAKE_SERVER = "import json, os, sys; print(json.dumps([sys.argv[1:], os.environ.get('VALUE')]))"


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(value=st.text(st.characters(blacklist_categories=("Cs",), blacklist_characters="\0"), max_size=40))
def test_launch_script_passes_any_value_through_sh_literally(tmp_path: Path, value: str) -> None:
    argv = [sys.executable, "-c", FAKE_SERVER, "--served-model-name", value, f"--x={value}"]
    script = render_script(attempt_id=1, directory=str(tmp_path), argv=argv, env={"VALUE": value})
    (tmp_path / "launch.sh").write_text(script)
    (tmp_path / "server.log").unlink(missing_ok=True)  # the script appends; each example starts afresh
    subprocess.run(["sh", str(tmp_path / "launch.sh")], check=True, timeout=30)
    printed = json.loads((tmp_path / "server.log").read_text())
    assert printed == [["--served-model-name", value, f"--x={value}"], value]
    assert (tmp_path / "exit_code").read_text() == "0\n"
    assert (tmp_path / "pid").read_text().split()[0].isdigit()
