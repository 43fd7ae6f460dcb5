"""The client commands as a person runs them, against a dashboard on the simulated cluster: how
they find it and its token, and what `hosts`, `presets`, `attempts`, `relaunch` and `stop` print."""

from __future__ import annotations

import functools
import json
import re
from pathlib import Path

from fastapi import FastAPI
from httpx import AsyncClient

from tests.support.cli import cli
from tests.support.dashboard import TOKEN
from tests.support.launching import FINAL, launch, wait_for
from tests.support.served import served
from tests.support.servers import free_port

# No client file of the developer's, nor a dashboard or token their shell names, reaches a test.
DEVELOPERS = ("LAUNCHDECK_URL", "LAUNCHDECK_TOKEN", "LAUNCHDECK_DATA_DIR", "LAUNCHDECK_BIND", "LAUNCHDECK_PORT")


def own_config(tmp_path: Path) -> dict[str, str]:
    return {"XDG_CONFIG_HOME": str(tmp_path / "config")}


async def test_launchdeck_url_names_the_dashboard_before_the_servers_variables_and_url_before_both(
    running_app: FastAPI, tmp_path: Path
) -> None:
    idle = free_port()
    env = own_config(tmp_path) | {"LAUNCHDECK_TOKEN": TOKEN, "LAUNCHDECK_PORT": str(idle)}
    launchdeck = functools.partial(cli, "presets", unset=DEVELOPERS, cwd=tmp_path)
    async with served(running_app) as url:
        assert await launchdeck(env=env | {"LAUNCHDECK_URL": url}) == (0, "no presets\n", "")
        assert await launchdeck(url=url, env=env | {"LAUNCHDECK_URL": f"http://127.0.0.1:{idle}"}) == (
            0, "no presets\n", "",
        )  # fmt: skip
        code, out, err = await launchdeck(env=env)  # the server's own variables: nothing listens there
        assert (code, out) == (1, "") and err.startswith(
            f"launchdeck: cannot reach the dashboard at http://127.0.0.1:{idle}: "
        )
        assert await launchdeck(env=env | {"LAUNCHDECK_URL": "127.0.0.1:8000"}) == (
            2, "", "launchdeck: LAUNCHDECK_URL: '127.0.0.1:8000' is not an http(s) URL, e.g. http://127.0.0.1:8000\n",
        )  # fmt: skip


async def test_the_token_comes_from_a_fixed_place_never_from_the_working_directory(
    running_app: FastAPI, tmp_path: Path
) -> None:
    """A `data/access-token` where the command runs is not read (it used to be, as the default data
    dir); the client file in $XDG_CONFIG_HOME is, from any directory, and so is the access token in
    a data dir named by an absolute LAUNCHDECK_DATA_DIR, as on the dashboard's own host."""
    checkout = tmp_path / "checkout"
    (checkout / "data").mkdir(parents=True)
    (checkout / "data" / "access-token").write_text(TOKEN)
    client_file = tmp_path / "config" / "launchdeck" / "client.toml"
    env = own_config(tmp_path)
    async with served(running_app) as url:
        launchdeck = functools.partial(cli, "presets", url=url, unset=DEVELOPERS, cwd=checkout)
        assert await launchdeck(env=env) == (
            2, "", f'launchdeck: no token: set LAUNCHDECK_TOKEN, or put `token = "..."` in {client_file}\n',
        )  # fmt: skip
        code, out, err = await launchdeck(env=env | {"LAUNCHDECK_DATA_DIR": "data"})
        assert (code, out) == (2, "") and err.endswith(" (LAUNCHDECK_DATA_DIR 'data' is relative, so it is not read)\n")
        assert await launchdeck(env=env | {"LAUNCHDECK_DATA_DIR": str(checkout / "data")}) == (0, "no presets\n", "")
        client_file.parent.mkdir(parents=True)
        client_file.write_text(f'token = "{TOKEN}"\n')
        client_file.chmod(0o600)
        for where in (checkout, client_file.parent, Path("/")):
            assert await launchdeck(env=env, cwd=where) == (0, "no presets\n", "")


async def test_hosts_lists_each_host_its_state_gpus_and_free_memory(running_app: FastAPI, tmp_path: Path) -> None:
    async with served(running_app) as url:
        launchdeck = functools.partial(cli, "hosts", url=url, env={"LAUNCHDECK_TOKEN": TOKEN})
        code, out, err = await launchdeck("--json")
        assert code == 0, err
        code, text, err = await launchdeck()
        assert code == 0, err
    hosts = {host["name"]: host for host in json.loads(out)}
    assert list(hosts) == ["b200-01", "rtxpro-01", "rtxpro-02"]
    rtx = hosts["rtxpro-01"]
    assert rtx["state"] == "online" and [gpu["index"] for gpu in rtx["gpus"]] == [0, 1, 2, 3]
    assert all(gpu["memory_free_mib"] > 90_000 for gpu in rtx["gpus"])
    header, *rows = text.splitlines()
    assert header.split() == ["HOST", "STATE", "GPUS", "FREE", "GiB", "NOTE"]
    assert [row.split()[:2] for row in rows] == [[name, "online"] for name in hosts]
    free = " ".join(f"{gpu['index']}:{gpu['memory_free_mib'] / 1024:.1f}" for gpu in rtx["gpus"])
    assert re.fullmatch(rf"rtxpro-01 +online +4 x NVIDIA RTX PRO 6000 Blackwell Server Edition +{free}", rows[1])
    assert rows[0].split()[2:5] == ["8", "x", "NVIDIA"] and "7:" in rows[0]


async def test_presets_lists_them_and_shows_one_with_its_command(api: AsyncClient, running_app: FastAPI) -> None:
    async with served(running_app) as url:
        launchdeck = functools.partial(cli, "presets", url=url, env={"LAUNCHDECK_TOKEN": TOKEN})
        listed = [
            await launchdeck(),
            await launchdeck("list"),
            await launchdeck("--json"),
            await launchdeck("list", "--json"),
        ]
        shown = await launchdeck("show", "llama31-8b")
        shown_json = await launchdeck("--json", "show", "llama31-8b")  # an option before the action holds
        missing = await launchdeck("show", "nope")
    names = [preset["name"] for preset in (await api.get("/api/presets")).json()]
    assert listed[0] == listed[1] and listed[2] == listed[3] and {code for code, _, _ in listed} == {0}
    header, *rows = listed[0][1].splitlines()
    assert header.split() == ["PRESET", "REVISION", "MODEL", "CHANGED", "DESCRIPTION"]
    assert [row.split()[:3] for row in rows if row.startswith("llama31-8b ")] == [
        ["llama31-8b", "1", "meta-llama/Llama-3.1-8B-Instruct"]
    ]
    assert [row.split()[0] for row in rows] == names
    assert [preset["name"] for preset in json.loads(listed[2][1])] == names
    code, text, _ = shown
    assert code == 0 and "model:       meta-llama/Llama-3.1-8B-Instruct\n" in text
    assert re.search(
        r"^command: +python3 -m sglang\.launch_server --model-path meta-llama/Llama-3\.1-8B-Instruct", text, re.M
    )
    assert json.loads(shown_json[1]) == (await api.get("/api/presets/llama31-8b")).json()
    assert missing == (1, "", "launchdeck: 404: no preset named 'nope'\n")


async def test_attempts_show_the_failure_relaunch_changes_it_and_stop_ends_it(
    api: AsyncClient, running_app: FastAPI
) -> None:
    oom_id = await launch(api, "qwen36-27b-mtp-oom", "rtxpro-01", [0])
    oom = await wait_for(api, oom_id, FINAL)
    root = oom["diagnosis"]["root_error"]
    assert oom["status"] == "failed" and root.startswith("RuntimeError: Not enough memory.")
    async with served(running_app) as url:
        launchdeck = functools.partial(cli, url=url, env={"LAUNCHDECK_TOKEN": TOKEN})
        code, text, err = await launchdeck("attempts")
        assert code == 0, err
        header, row = text.splitlines()
        assert header.split()[:5] == ["ID", "PRESET", "HOST", "GPUS", "STATUS"]
        assert header.split()[5:] == ["STAGE", "CREATED", "CLASS", "ROOT", "ERROR"]
        assert row.split()[:5] == [str(oom_id), "qwen36-27b-mtp-oom", "rtxpro-01", "0", "failed"]
        shown = root if len(root) <= 100 else root[:99] + "…"
        assert re.search(rf"  oom +{re.escape(shown)}$", row), row
        code, out, _ = await launchdeck("attempts", "--json")
        (listed,) = json.loads(out)
        assert (listed["id"], listed["failure_class"], listed["root_error"]) == (oom_id, "oom", root)

        code, out, err = await launchdeck("relaunch", str(oom_id))  # the same choices failed before
        assert (code, out) == (3, "") and err.startswith("launchdeck: ") and "confirm to launch it again" in err
        code, out, err = await launchdeck("relaunch", str(oom_id), "--set", "mem-fraction-static=0.95")
        assert code == 0, out + err
        fixed_id = oom_id + 1
        lines = out.splitlines()
        assert (
            lines[0]
            == f"attempt {fixed_id} (relaunch of {oom_id}, revision 2, saved for it): {url}/attempts/{fixed_id}"
        )
        assert lines[-1].startswith("ready after ")
        fixed = (await api.get(f"/api/attempts/{fixed_id}")).json()
        assert (fixed["host"], fixed["gpus"], fixed["argv"][-2:]) == (
            "rtxpro-01",
            [0],
            ["--mem-fraction-static", "0.95"],
        )

        assert await launchdeck("stop", str(fixed_id)) == (0, f"attempt {fixed_id}: stopped\n", "")
        code, out, _ = await launchdeck("attempts", "--status", "stopped", "--json")
        assert [(a["id"], a["failure_class"], a["root_error"]) for a in json.loads(out)] == [(fixed_id, None, None)]
        assert await launchdeck("stop", "999") == (1, "", "launchdeck: 404: no attempt 999\n")
        code, out, err = await launchdeck("relaunch", str(oom_id), "--set", "=0.9")
        assert (code, out) == (2, "") and err.endswith(
            "launchdeck: error: relaunch: --set '=0.9': give FLAG=VALUE (or FLAG for a switch), "
            "e.g. mem-fraction-static\n"
        )
