"""launchdeck follows the SGLang version each host runs: preflight reads it from the preset's
Python on the host and lints the flags against it; the attempt records it; the preset page and
the API lint against the versions hosts last reported and rewrite a preset to a new revision."""

from __future__ import annotations

import html
import re
from typing import Any

from fastapi import FastAPI
from httpx import AsyncClient

from app.diagnose import flag_history
from tests.support.launching import FINAL, launch, wait_for
from tests.support.web import csrf_from, log_in

LLAMA = "meta-llama/Llama-3.1-8B-Instruct"
SGLANG_0_5_10 = "python3-sglang-0.5.10"  # the simulated hosts' interpreter with SGLang 0.5.10
OLD_FLAGS = ["--mamba-scheduler-strategy", "extra_buffer", "--cuda-graph-max-bs", "8", "--disable-cuda-graph"]


async def host_version(app: FastAPI, host: str, python: str) -> str:
    """What the host's own interpreter says, asked directly."""
    connection = app.state.runtime.ssh.get(host)
    answer = await connection.run([python, "-c", "import sglang; print(sglang.__version__)"])
    return str(answer.stdout.decode().strip())


def check(preflight: dict[str, Any], name: str) -> dict[str, Any]:
    return next(c for c in preflight["checks"] if c["name"] == name)


async def test_preflight_reports_the_hosts_sglang_version_and_the_attempt_records_it(
    api: AsyncClient, running_app: FastAPI
) -> None:
    version = await host_version(running_app, "rtxpro-01", "python3")
    preflight = (
        await api.post("/api/preflight", json={"preset": "llama31-8b", "host": "rtxpro-01", "gpus": [3]})
    ).json()
    assert preflight["sglang_version"] == version
    assert check(preflight, "sglang")["message"] == f"python3 on the host runs SGLang {version}"
    assert check(preflight, "flags") == {
        "name": "flags",
        "ok": True,
        "message": f"no flag that SGLang {version} renamed, deprecated or removed",
        "blocking": True,
        "detail": {"version": version, "findings": []},
    }
    assert check(preflight, "arguments")["message"].startswith(f"accepted by the host's SGLang {version}")

    attempt_id = await launch(api, "llama31-8b", "rtxpro-01", [3])
    attempt = await wait_for(api, attempt_id, FINAL)
    assert (attempt["status"], attempt["sglang_version"]) == ("ready", version)
    assert attempt["preflight"]["sglang_version"] == version
    await api.post(f"/api/attempts/{attempt_id}/stop")
    [report] = (await api.get("/api/presets/llama31-8b/flags")).json()
    assert (report["version"], report["hosts"], report["findings"]) == (version, ["rtxpro-01"], [])

    csrf = await log_in(api)
    page = (await api.get(f"/attempts/{attempt_id}")).text
    assert f'on rtxpro-01 (<span id="sglang-version">SGLang {version}</span>)' in page
    form = {"csrf_token": csrf, "preset": "llama31-8b", "host": "rtxpro-01", "gpus": ["2"]}
    checked = html.unescape((await api.post("/launch/preflight", data=form, headers={"HX-Request": "true"})).text)
    runs = re.escape(f"<td>sglang</td><td>✓ python3 on the host runs SGLang {version}<")
    assert re.search(rf'data-check="sglang">\s*{runs}', checked)


async def test_preflight_blocks_flags_the_newest_release_removed(api: AsyncClient, running_app: FastAPI) -> None:
    """Needs the versioned simulator: `python3` runs the newest release (0.5.23)."""
    preset = {"name": "old-flags", "model_path": LLAMA, "args": OLD_FLAGS}
    assert (await api.post("/api/presets", json=preset)).status_code == 201
    preflight = (await api.post("/api/preflight", json={"preset": "old-flags", "host": "b200-01", "gpus": [5]})).json()
    assert preflight["sglang_version"] == await host_version(running_app, "b200-01", "python3")
    assert flag_history.release(preflight["sglang_version"]) == (0, 5, 23)
    flags = check(preflight, "flags")
    assert (flags["ok"], flags["blocking"], preflight["blocked"]) == (False, True, True)
    found = {(f["flag"], f["change"], f["version"], f["blocking"]) for f in flags["detail"]["findings"]}
    assert found == {
        ("--mamba-scheduler-strategy", "removed", "0.5.20", True),
        ("--cuda-graph-max-bs", "removed", "0.5.20", True),
        ("--disable-cuda-graph", "deprecated", "0.5.14", False),
    }
    assert (
        "--mamba-scheduler-strategy: renamed to --mamba-radix-cache-strategy in 0.5.14, removed in 0.5.20"
        in (flags["message"])
    )


async def test_preflight_on_sglang_0_5_10_refuses_the_new_name_and_accepts_the_old(api: AsyncClient) -> None:
    """Needs the versioned simulator: `python3-sglang-0.5.10` runs SGLang 0.5.10."""
    for name, strategy in (("new-name", "--mamba-radix-cache-strategy"), ("old-name", "--mamba-scheduler-strategy")):
        preset = {"name": name, "model_path": LLAMA, "python": SGLANG_0_5_10, "args": [strategy, "extra_buffer"]}
        assert (await api.post("/api/presets", json=preset)).status_code == 201
    new = (await api.post("/api/preflight", json={"preset": "new-name", "host": "b200-01", "gpus": [4]})).json()
    assert new["sglang_version"].startswith("0.5.10")
    assert check(new, "sglang")["message"] == f"{SGLANG_0_5_10} on the host runs SGLang {new['sglang_version']}"
    [finding] = check(new, "flags")["detail"]["findings"]
    assert (finding["flag"], finding["change"], finding["blocking"]) == ("--mamba-radix-cache-strategy", "new", True)
    assert finding["replacement"] == ["--mamba-scheduler-strategy", "extra_buffer"]
    old = (await api.post("/api/preflight", json={"preset": "old-name", "host": "b200-01", "gpus": [4]})).json()
    assert check(old, "flags")["ok"] and not check(old, "flags")["detail"]["findings"]


async def test_the_api_rewrites_a_preset_to_a_new_audited_revision(api: AsyncClient) -> None:
    preset = {"name": "to-rewrite", "model_path": LLAMA, "args": [*OLD_FLAGS, "--tp-size", "1"]}
    assert (await api.post("/api/presets", json=preset)).status_code == 201
    [report] = (await api.get("/api/presets/to-rewrite/flags")).json()  # no attempt yet: the newest release
    assert (report["version"], report["hosts"]) == (flag_history.newest_version(), [])
    assert [(f["flag"], f["blocking"]) for f in report["findings"]] == [
        ("--mamba-scheduler-strategy", True),
        ("--cuda-graph-max-bs", True),
        ("--disable-cuda-graph", False),
    ]
    rewritten = [
        "--mamba-radix-cache-strategy", "extra_buffer", "--cuda-graph-max-bs-decode", "8",
        "--cuda-graph-backend-decode", "disabled", "--cuda-graph-backend-prefill", "disabled", "--tp-size", "1",
    ]  # fmt: skip
    assert report["rewritten_args"] == rewritten

    answer = await api.post("/api/presets/to-rewrite/rewrite", json={"version": "0.5.23"})
    assert answer.status_code == 200, answer.text
    assert (answer.json()["revisions"], answer.json()["revision"]["args"]) == (2, rewritten)
    assert answer.json()["revision"]["created_by"] == "service token"
    [event] = [e for e in (await api.get("/api/audit")).json() if e["action"] == "preset-rewrite"]
    assert (event["actor"], event["target"]) == ("service token", "to-rewrite")
    assert event["detail"] == {
        "revision": 2,
        "version": "0.5.23",
        "flags": ["--cuda-graph-max-bs", "--disable-cuda-graph", "--mamba-scheduler-strategy"],
    }

    again = await api.post("/api/presets/to-rewrite/rewrite", json={"version": "0.5.23"})
    assert again.status_code == 422
    assert again.json() == {"detail": "version: revision 2 has no flag to rewrite for SGLang 0.5.23"}
    bad = await api.post("/api/presets/to-rewrite/rewrite", json={"version": "latest; rm -rf /"})
    assert bad.status_code == 422 and bad.json()["detail"].startswith("version: 'latest; rm -rf /' is not an SGLang")
    back = await api.post("/api/presets/to-rewrite/rewrite", json={"version": "0.5.10"})
    assert back.json()["revision"]["args"][:2] == ["--mamba-scheduler-strategy", "extra_buffer"]


async def test_the_preset_page_shows_the_lint_and_rewrites_with_its_csrf_token(app_client: AsyncClient) -> None:
    csrf = await log_in(app_client)
    form = {"csrf_token": csrf, "name": "page-rewrite", "model_path": LLAMA, "cuda_graph_max_bs": "16"}
    assert (await app_client.post("/presets", data=form)).status_code == 303
    page = html.unescape((await app_client.get("/presets/page-rewrite")).text)
    newest = flag_history.newest_version()
    assert f"Against SGLang {newest}" in page and "no host has reported a version for <code>python3</code> yet" in page
    assert re.search(
        r'<li class="fail" data-flag="--cuda-graph-max-bs">✗ --cuda-graph-max-bs: renamed to '
        r"--cuda-graph-max-bs-decode in 0\.5\.14, removed in 0\.5\.20",
        page,
    )
    assert "--cuda-graph-max-bs-decode 16</pre>" in page

    refused = await app_client.post("/presets/page-rewrite/rewrite", data={"version": newest})
    assert refused.status_code == 403
    done = await app_client.post("/presets/page-rewrite/rewrite", data={"version": newest, "csrf_token": csrf})
    assert (done.status_code, done.headers["location"]) == (303, "/presets/page-rewrite?saved=2")
    page = html.unescape((await app_client.get(done.headers["location"])).text)
    assert "Saved as revision 2." in page and "--port 30000 --cuda-graph-max-bs-decode 16" in page
    assert f"Against SGLang {newest}" in page and "no flag it renamed, deprecated or removed." in page
    assert csrf_from(page) == csrf
    audit = (await app_client.get("/audit")).text
    assert re.search(r"<td>admin</a></td><td>preset-rewrite</td>|>admin</a></td><td>preset-rewrite</td>", audit)
    nothing = await app_client.post("/presets/page-rewrite/rewrite", data={"version": newest, "csrf_token": csrf})
    assert nothing.status_code == 422 and "rewrite: version: revision 2 has no flag to rewrite" in nothing.text


async def test_preflight_refuses_what_sglang_checks_only_as_the_engine_starts(api: AsyncClient) -> None:
    """SGLang's check_server_args() and its model config run after the arguments parse: a chunk
    that is no whole number of the B200's 64-token pages, a GPU id step of 0, and a context longer
    than the model's pass argparse but end the launch. Preflight runs
    the same checks with the host's SGLang (here the simulated releases, which the oracle holds to
    the real ones) and blocks with SGLang's sentence."""
    refused = {
        "chunk-not-pages": (
            ["--chunked-prefill-size", "1000"],
            "AssertionError: chunked_prefill_size must be divisible",
        ),
        "gpu-step-zero": (["--gpu-id-step", "0"], "AssertionError: gpu_id_step must be positive"),
        "context-too-long": (
            ["--context-length", "1048576"],
            "ValueError: Warning: User-specified context_length (1048576) is greater than the derived",
        ),
    }
    for name, (args, said) in refused.items():
        for python in ("python3", SGLANG_0_5_10):
            preset = {"name": f"{name}-{python}", "model_path": LLAMA, "python": python, "args": args}
            assert (await api.post("/api/presets", json=preset)).status_code == 201
            asked = {"preset": preset["name"], "host": "b200-01", "gpus": [6]}
            preflight = (await api.post("/api/preflight", json=asked)).json()
            arguments = check(preflight, "arguments")
            assert arguments["message"].startswith(f"SGLang will refuse these arguments: {said}"), (python, arguments)
            assert arguments["blocking"] and preflight["blocked"]
