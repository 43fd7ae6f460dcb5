"""The preset file format on its own: what export renders reads back as the same preset, and a bad
file is refused with a sentence naming the file and the key."""

from __future__ import annotations

import tomllib
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from app.errors import InvalidInput
from app.presets.files import DEFAULTS, KEYS, preset_paths, read_preset_file, render_preset
from app.presets.revisions import LAUNCHERS
from tests.support.paths import ROOT

# Any text a preset may hold: every character but a lone surrogate and NUL, controls and \r included.
text = st.text(st.characters(exclude_categories=("Cs",), exclude_characters="\0"), max_size=30)
trimmed = text.map(str.strip).filter(bool)
words = text.filter(lambda word: not word.startswith("--"))  # no flag: the dashboard checks those
presets = st.fixed_dictionaries(
    {
        "description": text,
        "model_path": trimmed,
        "launcher": st.sampled_from(LAUNCHERS),
        "python": st.from_regex(r"[a-z0-9/._-]{1,20}", fullmatch=True),
        "port": st.integers(1, 65535),
        "args": st.lists(words, max_size=4),
        "env": st.dictionaries(st.from_regex(r"[A-Z_][A-Z0-9_]{0,10}", fullmatch=True), text, max_size=3).filter(
            lambda env: "CUDA_VISIBLE_DEVICES" not in env
        ),
    },
    optional={
        "webhook_url": st.just("") | st.from_regex(r"https://[a-z]{1,8}\.example/[A-Za-z0-9/]{0,20}", fullmatch=True)
    },
)


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(fields=presets)
def test_a_rendered_preset_reads_back_as_the_same_preset(fields: dict[str, Any], tmp_path: Path) -> None:
    path = tmp_path / "p-1.toml"
    path.write_text(render_preset(fields), encoding="utf-8")
    read = read_preset_file(path)
    assert (read.name, read.fields) == ("p-1", fields)
    assert render_preset(read.fields) == path.read_text()


def test_a_file_lists_its_keys_in_one_order_and_leaves_out_empty_ones() -> None:
    fields = DEFAULTS | {"model_path": "m", "env": {"B": "2", "A": "1"}, "description": ""}
    del fields["webhook_url"]
    assert render_preset(fields) == (
        'model_path = "m"\nlauncher = "python -m sglang.launch_server"\npython = "python3"\nport = 30000\n\n'
        '[env]\nA = "1"\nB = "2"\n'
    )
    assert 'port = 30000\nwebhook_url = ""\n' in render_preset(fields | {"webhook_url": ""})  # none, said so
    assert list(tomllib.loads(render_preset(fields | {"description": "d", "args": ["x"], "webhook_url": ""}))) == list(
        KEYS
    )


def test_a_left_out_key_takes_the_default_but_a_left_out_webhook_stays_unsaid(tmp_path: Path) -> None:
    path = tmp_path / "small.toml"
    path.write_text('model_path = "m"\n')
    assert read_preset_file(path).fields == {key: value for key, value in DEFAULTS.items() if key != "webhook_url"} | {
        "model_path": "m"
    }


@pytest.mark.parametrize(
    ("name", "content", "says"),
    [
        ("p.toml", "model_path = 'm'\nport = '8000'\n", "port: must be a whole number, not a string"),
        ("p.toml", "model_path = 'm'\nport = true\n", "port: must be a whole number, not true or false"),
        ("p.toml", "model_path = 'm'\nargs = '--tp-size 2'\n", "args: must be a list, not a string"),
        ("p.toml", "model_path = 'm'\nargs = ['--tp-size', 2]\n", "args: argument 2 must be a string, not a whole"),
        ("p.toml", "model_path = 'm'\n[env]\nA = 1\n", "env.A: must be a string, not a whole number (quote it)"),
        ("p.toml", "model_path = 'm'\nenv = ['A=1']\n", "env: must be a table, not a list"),
        ("p.toml", "model_path = 'm'\nwebhook = 'x'\n", "webhook: unknown key(s); a preset file holds description,"),
        ("p.toml", "name = 'p'\nmodel_path = 'm'\n", "name: is the file's name, not a key"),
        ("p.toml", "description = 'no model'\n", "model_path: is required"),
        ("p.toml", "model_path = 'm'\nport = 70000\n", "port: 70000 is out of range (1-65535)"),
        ("p.toml", "model_path = 'm'\nargs = ['--port', '1']\n", "args: --port is set by the preset's port field"),
        ("p.toml", "model_path = 'm'\nmodel_path = 'n'\n", "is not TOML: Cannot overwrite a value"),
        ("p.toml", "model_path = 'm'\nstarted = 2026-01-01\n", "started: unknown key(s)"),
        ("bad name.toml", "model_path = 'm'\n", "a preset file is named after its preset, NAME.toml"),
    ],
)
def test_a_bad_file_is_refused_with_a_sentence_naming_it_and_the_key(
    name: str, content: str, says: str, tmp_path: Path
) -> None:
    path = tmp_path / name
    path.write_text(content)
    with pytest.raises(InvalidInput) as refused:
        read_preset_file(path)
    assert str(refused.value).startswith(f"{path}: ") and says in str(refused.value)


def test_a_folder_gives_its_toml_and_yaml_files_by_name_and_refuses_one_preset_twice(tmp_path: Path) -> None:
    for name in ("b.toml", "a.toml", "c.yml", "README.md"):
        (tmp_path / name).write_text("")
    assert preset_paths(tmp_path) == [tmp_path / "a.toml", tmp_path / "b.toml", tmp_path / "c.yml"]
    assert preset_paths(tmp_path / "b.toml") == [tmp_path / "b.toml"]
    (tmp_path / "a.yaml").write_text("")
    with pytest.raises(InvalidInput, match=r"one preset, two files: a\.toml and a\.yaml"):
        preset_paths(tmp_path)
    (tmp_path / "empty").mkdir()
    with pytest.raises(InvalidInput, match="holds no preset files"):
        preset_paths(tmp_path / "empty")
    with pytest.raises(InvalidInput, match="no such file or directory"):
        preset_paths(tmp_path / "missing")


def test_the_documented_example_is_a_preset_file_and_every_key_has_its_row() -> None:
    doc = (ROOT / "docs" / "presets-as-files.md").read_text()
    example = doc.split("```toml\n", 1)[1].split("```\n", 1)[0]
    fields = DEFAULTS | tomllib.loads(example)
    del fields["webhook_url"]
    assert render_preset(fields) == example  # as export writes it, byte for byte
    assert [key for key in KEYS if f"\n| `{key}` | " not in doc] == []
