"""Reading what a host's process table says of a server launchdeck did not start: the listener
script run as another account, and the command line read as a preset revision, secrets withheld."""

from __future__ import annotations

import os
import shutil
import socket
import subprocess

import pytest
from hypothesis import given
from hypothesis import strategies as st

from app.db.models import PresetRevision
from app.errors import InvalidInput, NotFound
from app.launch import remote
from app.launch.process_table import WITHHELD, kept_env, listener_of, server_command, withheld_argv
from app.presets.revisions import LAUNCHERS, command_argv
from tests.support.strict import require

# Argument words as people write them: options, values, paths, JSON; never the two fields' own options.
WORDS = st.text(st.characters(blacklist_categories=["Cs"], blacklist_characters="\0"), min_size=1, max_size=12)
ARGS = st.lists(WORDS.filter(lambda w: w.partition("=")[0] not in ("--model-path", "--model", "--port")), max_size=8)


def test_a_port_held_by_a_process_another_account_cannot_read_is_refused_as_unreadable() -> None:
    """The listeners script run as `nobody` on this machine, where the port is held by this (root)
    process: the socket shows in /proc/net/tcp, its process does not."""
    require(os.geteuid() == 0 and shutil.which("setpriv") is not None, "needs root and setpriv to be another user")
    with socket.socket() as held:
        held.bind(("127.0.0.1", 0))
        held.listen()
        port = held.getsockname()[1]
        nobody = ["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups"]
        run = subprocess.run(
            [*nobody, "sh", "-c", remote.LISTENERS, "sh", str(port)],
            capture_output=True,
            text=True,
            timeout=20,
            check=True,
        )
    with pytest.raises(InvalidInput) as refused:
        listener_of(run.stdout, port=port, host="here")
    assert str(refused.value) == (
        f"port {port} on here is held by a process of uid 0, which launchdeck's account there (uid 65534) may not "
        "read: only a server that account can see in the process table can be adopted"
    )
    with pytest.raises(NotFound):
        listener_of("me=0\n", port=port, host="here")


def test_the_command_line_is_read_as_a_preset_revision_and_secrets_are_withheld() -> None:
    command = server_command(["/venv/bin/python3", "/venv/bin/sglang", "serve", "--model", "org/m", "--port=31000",
                              "--tp-size", "2", "--api-key", "s3cret", "--admin-api-key=t0p"])  # fmt: skip
    assert command is not None
    assert (command.launcher, command.python, command.model_path) == ("sglang serve", "/venv/bin/python3", "org/m")
    assert command.args == ["--tp-size", "2", "--api-key", "s3cret", "--admin-api-key=t0p"]
    argv, withheld = withheld_argv(
        ["python3", "-m", "sglang.launch_server", "--api-key", "s3cret", "--admin-api-key=t0p"]
    )
    assert argv == ["python3", "-m", "sglang.launch_server", "--api-key", "<withheld>", "--admin-api-key=<withheld>"]
    assert withheld == ["--api-key", "--admin-api-key"]
    assert server_command(["python3", "-m", "http.server"]) is None
    env = {"HF_TOKEN": "x", "HF_HOME": "/h", "TOKENIZERS_PARALLELISM": "false", "HF_ENDPOINT": "https://u:p@hub",
           "NCCL_DEBUG": "INFO", "PATH": "/bin", "SGLANG_API_KEY": "k", "OMP_NUM_THREADS": "4"}  # fmt: skip
    assert kept_env(env) == (
        {"HF_HOME": "/h", "NCCL_DEBUG": "INFO", "OMP_NUM_THREADS": "4", "TOKENIZERS_PARALLELISM": "false"},
        ["HF_ENDPOINT", "HF_TOKEN", "SGLANG_API_KEY"],
    )


@given(
    model_path=WORDS.filter(lambda w: not w.startswith("--")),
    port=st.integers(1, 65535),
    args=ARGS,
    launcher=st.sampled_from(LAUNCHERS),
    python=st.sampled_from(["python3", "/opt/venv/bin/python3"]),
)
def test_a_launched_command_line_reads_back_as_the_revision_it_came_from(
    model_path: str, port: int, args: list[str], launcher: str, python: str
) -> None:
    revision = PresetRevision(model_path=model_path, port=port, args=args, launcher=launcher, python=python)
    argv = command_argv(revision)
    if launcher == "sglang serve":  # run as a script, the kernel puts its interpreter first
        argv = [python, *argv]
    command = server_command(argv)
    assert command is not None
    assert (command.launcher, command.python, command.model_path, command.args) == (launcher, python, model_path, args)


SECRET_OPTIONS = ["--api-key", "--admin-api-key", "--ssl-keyfile-password"]
VALUES = WORDS.filter(lambda w: not w.startswith("-"))


@given(st.lists(st.one_of(VALUES, st.sampled_from([*SECRET_OPTIONS, "--tp-size", "--ssl-keyfile"]))))
def test_no_value_of_an_option_named_like_a_secret_is_kept(argv: list[str]) -> None:
    kept, withheld = withheld_argv(argv)
    secret = [i for i in range(1, len(argv)) if argv[i - 1] in SECRET_OPTIONS and not argv[i].startswith("-")]
    assert kept == [WITHHELD if i in secret else word for i, word in enumerate(argv)]
    assert withheld == [argv[i - 1] for i in secret]


@given(st.dictionaries(st.sampled_from(["HF_TOKEN", "HF_HOME", "SGLANG_API_KEY", "NCCL_DEBUG", "PATH", "HOME"]), WORDS))
def test_no_variable_named_like_a_secret_is_kept(environ: dict[str, str]) -> None:
    kept, withheld = kept_env(environ)
    assert set(kept) <= {"HF_HOME", "NCCL_DEBUG"} and set(withheld) <= {"HF_TOKEN", "SGLANG_API_KEY", "HF_HOME"}
    assert set(kept) | set(withheld) == set(environ) - {"PATH", "HOME"}
