"""Relaunching an attempt: its choices again, or its preset fixed as the diagnosis suggests and
launched on the same host, GPUs and port, from the API and the pages."""

from __future__ import annotations

import html
import re

from fastapi import FastAPI
from httpx import AsyncClient
from hypothesis import given
from hypothesis import strategies as st
from sqlalchemy import select

from app.db.models import AuditEvent
from app.diagnose.hints import Evidence, SuggestedChange, explain, generic_change
from app.launch.relaunch import apply_change
from tests.support.dashboard import AUTH
from tests.support.launching import FINAL, REPLAY, launch, wait_for
from tests.support.web import csrf_from, log_in

MTP = ["--speculative-algorithm", "EAGLE", "--speculative-num-draft-tokens", "4"]


def test_a_change_sets_the_flag_where_it_stands_in_the_spelling_the_preset_uses() -> None:
    strategy = SuggestedChange("--mamba-scheduler-strategy", "extra_buffer")
    assert apply_change([*MTP, "--mamba-radix-cache-strategy", "auto", "--trust-remote-code"], strategy) == [
        *MTP, "--mamba-radix-cache-strategy", "extra_buffer", "--trust-remote-code",
    ]  # fmt: skip
    assert apply_change(["--mem-fraction-static=0.8", "--x"], SuggestedChange("--mem-fraction-static", "0.7")) == [
        "--mem-fraction-static", "0.7", "--x",
    ]  # fmt: skip
    assert apply_change(MTP, strategy) == [*MTP, "--mamba-scheduler-strategy", "extra_buffer"]
    dropped = apply_change(["--disable-radix-cache", "--mem-fraction-static", "0.9"], SuggestedChange(
        "--disable-radix-cache", remove=True))  # fmt: skip
    assert dropped == ["--mem-fraction-static", "0.9"]
    assert apply_change(["--enable-metrics"], SuggestedChange("--served-model-name", "a b")) == [
        "--enable-metrics", "--served-model-name", "a b",
    ]  # fmt: skip


WORDS = st.sampled_from(["--mem-fraction-static", "--tp-size", "--enable-metrics", "--disable-radix-cache", "0.8", "x"])


@given(args=st.lists(WORDS, max_size=8), value=st.sampled_from(["0.7", None]), remove=st.booleans())
def test_a_change_leaves_every_other_argument_as_it_was(args: list[str], value: str | None, remove: bool) -> None:
    change = SuggestedChange("--mem-fraction-static", value, remove)
    changed = apply_change(args, change)
    assert changed.count("--mem-fraction-static") == (0 if remove else 1)
    others = [arg for arg in changed if arg.startswith("--") and arg != "--mem-fraction-static"]
    assert others == [arg for arg in args if arg.startswith("--") and arg != "--mem-fraction-static"]
    assert apply_change(changed, change) == changed  # applying it twice changes nothing more


def test_hints_name_their_fix_as_a_typed_change() -> None:
    newest = ["python3", "-m", "sglang.launch_server", "--mamba-radix-cache-strategy", "no_buffer"]
    refused = explain("AssertionError: no_buffer does not support overlap schedule.", "arg-conflict", argv=newest)
    assert refused and refused.change == SuggestedChange("--mamba-radix-cache-strategy", "extra_buffer")
    pair = explain("ValueError: mamba extra_buffer is not compatible with --disable-radix-cache", "arg-conflict")
    assert pair and str(pair.change) == "drop --disable-radix-cache"
    # Out of memory at run time: the class's hint says first to lower the static fraction, by a step.
    ran = Evidence("torch.OutOfMemoryError: CUDA out of memory.", "oom", {"mem_fraction_static": 0.88}, [], "")
    assert generic_change("oom", "memory exhausted", ran) == SuggestedChange("--mem-fraction-static", "0.78")
    assert generic_change("oom", "kernel workspace too small", ran) is None  # its hint names another fix
    bottom = Evidence("torch.OutOfMemoryError", "oom", {"mem_fraction_static": 0.1}, [], "")
    assert generic_change("oom", "memory exhausted", bottom) is None


async def test_api_relaunch_applies_the_suggested_change_on_the_same_host_gpus_and_port(
    api: AsyncClient, running_app: FastAPI
) -> None:
    failed_id = await launch(api, "qwen36-27b-mtp-strategy-unset", "rtxpro-01", [1], override_reason=REPLAY)
    failed = await wait_for(api, failed_id, FINAL)
    assert failed["status"] == "failed"
    assert failed["diagnosis"]["change"] == {
        "flag": "--mamba-scheduler-strategy", "value": "extra_buffer", "remove": False,
    }  # fmt: skip

    relaunched = await api.post(f"/api/attempts/{failed_id}/relaunch", json={"apply_suggested": True})
    assert relaunched.status_code == 202, relaunched.text
    body = relaunched.json()
    assert (body["revision"], body["saved"]) == (2, True)
    fixed = await wait_for(api, body["id"], FINAL)
    assert fixed["status"] == "ready", fixed["error"]
    assert (fixed["host"], fixed["gpus"], fixed["port"]) == (failed["host"], failed["gpus"], failed["port"])
    assert fixed["argv"][-2:] == ["--mamba-scheduler-strategy", "extra_buffer"]
    async with running_app.state.runtime.sessions.read() as session:
        saved = await session.scalar(select(AuditEvent).where(AuditEvent.action == "preset-relaunch"))
    assert saved is not None
    assert (saved.target, saved.detail) == ("qwen36-27b-mtp-strategy-unset", {"revision": 2, "from_attempt": failed_id})

    # The same choices again: the revision the attempt ran, nothing saved.
    assert (await api.post(f"/api/attempts/{body['id']}/stop")).status_code == 202
    await wait_for(api, body["id"], {"stopped"})
    again = await api.post(f"/api/attempts/{body['id']}/relaunch", json={})
    assert again.status_code == 202, again.text
    assert (again.json()["revision"], again.json()["saved"]) == (2, False)
    assert (await wait_for(api, again.json()["id"], FINAL))["status"] == "ready"


async def test_api_relaunch_refuses_what_it_cannot_do_with_a_sentence(api: AsyncClient) -> None:
    ready_id = await launch(api, "llama31-8b", "b200-01", [0])
    await wait_for(api, ready_id, FINAL)
    nothing = await api.post(f"/api/attempts/{ready_id}/relaunch", json={"apply_suggested": True})
    assert nothing.status_code == 422 and "suggests no change" in nothing.json()["detail"]
    own = await api.post(f"/api/attempts/{ready_id}/relaunch", json={"changes": [{"flag": "--port", "value": "1"}]})
    assert own.status_code == 422 and "--port is set by the preset's port field" in own.json()["detail"]
    bad = await api.post(f"/api/attempts/{ready_id}/relaunch", json={"changes": [{"flag": "mem", "value": "1"}]})
    assert bad.status_code == 422 and "not an argument" in bad.json()["detail"]
    missing = await api.post("/api/attempts/999999/relaunch", json={})
    assert missing.status_code == 404 and missing.json()["detail"] == "no attempt 999999"
    api.headers.pop("Authorization")
    assert (await api.post(f"/api/attempts/{ready_id}/relaunch", json={})).status_code == 401
    api.headers.update(AUTH)


async def test_edit_and_relaunch_from_the_root_error_card_takes_three_clicks(api: AsyncClient) -> None:
    failed_id = await launch(api, "qwen36-27b-mtp-strategy-unset", "rtxpro-01", [2], override_reason=REPLAY)
    failed = await wait_for(api, failed_id, FINAL)
    api.headers.pop("Authorization")
    await log_in(api)

    # 1: the button on the root-error card, naming the change.
    page = (await api.get(f"/attempts/{failed_id}")).text
    card = page[page.index('id="root-error"') :]
    assert f'href="/attempts/{failed_id}/edit" id="edit-relaunch"' in card
    assert "with <code>--mamba-scheduler-strategy extra_buffer</code>, on rtxpro-01, GPUs 2" in card

    # The editor, prefilled from the attempt's revision with the change applied and shown.
    editor = (await api.get(f"/attempts/{failed_id}/edit")).text
    assert re.search(r'name="mamba_scheduler_strategy">.*?<option selected>extra_buffer</option>', editor, re.S)
    assert 'value="0.95"' in editor  # the revision's own --mem-fraction-static
    assert re.search(r'data-change="--mamba-scheduler-strategy">.*?\(unset\).*?extra_buffer', editor, re.S)
    assert f"on <b>rtxpro-01</b>, GPUs <b>2</b>, port <b>{failed['port']}</b>" in editor
    assert 'id="confirm-relaunch"' not in editor  # nothing launches before the confirmation

    # 2: save and relaunch, as the form posts it: the confirmation, nothing saved yet.
    fields = dict(re.findall(r'<input (?:type="hidden" )?name="([^"]+)" value="([^"]*)"', editor))
    fields |= {"mamba_scheduler_strategy": "extra_buffer", "speculative_algorithm": "EAGLE"}
    review = await api.post(f"/attempts/{failed_id}/edit", data=fields)
    assert review.status_code == 200 and 'id="confirm-relaunch"' in review.text
    confirm = review.text[review.text.index('id="confirm-relaunch"') :]
    carried = dict(re.findall(r'<input type="hidden" name="([^"]+)" value="([^"]*)"', confirm.split("</form>")[0]))
    assert carried["confirmed"] == "1" and carried["mamba_scheduler_strategy"] == "extra_buffer"

    # 3: the confirmation launches the new revision on the same host, GPUs and port.
    without_csrf = await api.post(f"/attempts/{failed_id}/edit", data=carried | {"csrf_token": ""})
    assert without_csrf.status_code == 403
    done = await api.post(f"/attempts/{failed_id}/edit", data=carried)
    assert done.status_code == 303, done.text
    new_id = int(done.headers["location"].rsplit("/", 1)[1])
    api.headers["x-csrf-token"] = csrf_from(review.text)
    fixed = await wait_for(api, new_id, FINAL)
    assert fixed["status"] == "ready" and fixed["revision"] == 2
    assert (fixed["host"], fixed["gpus"], fixed["port"]) == ("rtxpro-01", [2], failed["port"])
    # Compare offers the same for the side that failed.
    compared = (await api.get("/compare", params={"a": failed_id, "b": new_id})).text
    assert f'href="/attempts/{failed_id}/edit" data-edit-relaunch' in compared
    assert f'href="/attempts/{new_id}/edit"' not in compared


async def test_relaunch_confirms_once_and_the_launch_form_remembers_the_last_choices(api: AsyncClient) -> None:
    first_id = await launch(api, "llama31-8b", "b200-01", [3, 4])
    first = await wait_for(api, first_id, FINAL)
    await api.post(f"/api/attempts/{first_id}/stop")
    await wait_for(api, first_id, {"stopped"})
    api.headers.pop("Authorization")
    csrf = await log_in(api)

    page = (await api.get(f"/attempts/{first_id}")).text
    assert f'href="/attempts/{first_id}/relaunch" id="relaunch-link"' in page
    confirm = (await api.get(f"/attempts/{first_id}/relaunch")).text
    assert f"r1\n    on <b>b200-01</b>, GPUs <b>3,4</b>, port <b>{first['port']}</b>" in confirm
    assert 'id="failed-before"' not in confirm
    done = await api.post(f"/attempts/{first_id}/relaunch", data={"csrf_token": csrf})
    assert done.status_code == 303
    second_id = int(done.headers["location"].rsplit("/", 1)[1])
    api.headers["x-csrf-token"] = csrf
    second = await wait_for(api, second_id, FINAL)
    assert (second["host"], second["gpus"], second["port"], second["revision"]) == ("b200-01", [3, 4], first["port"], 1)

    # The launch form offers the user's last choices for the preset, unless the query names others.
    form = (await api.get("/launch", params={"preset": "llama31-8b"})).text
    assert "<option selected>b200-01</option>" in form and f'name="port" value="{first["port"]}"' in form
    assert re.search(r'value="3" checked>', form) and re.search(r'value="4" checked>', form)
    assert not re.search(r'value="0" checked>', form)
    chosen = (await api.get("/launch?preset=llama31-8b&host=rtxpro-01&gpus=1&port=31000")).text
    assert "<option selected>rtxpro-01</option>" in chosen and 'name="port" value="31000"' in chosen
    assert re.search(r'value="1" checked>', chosen)


async def test_memory_pools_that_do_not_fit_suggest_the_largest_fraction_and_the_server_is_of_use(
    api: AsyncClient,
) -> None:
    """The story's OOM: the fix aims at what the server can hold, not one step up. 0.86 starts but runs
    one request at a time in 17,961 KV tokens; 0.95, the largest that leaves 5% of the 94.54 GB for CUDA
    graphs and activations, serves 8 at once in 87,263 tokens, and no warning says it is too small."""
    oom_id = await launch(api, "qwen36-27b-mtp-oom", "rtxpro-01", [0])
    oom = await wait_for(api, oom_id, FINAL)
    found = oom["diagnosis"]
    assert found["class"] == "oom" and round(found["server_args"]["mem_fraction_static"], 3) == 0.759
    assert found["change"] == {"flag": "--mem-fraction-static", "value": "0.95", "remove": False}
    relaunched = await api.post(f"/api/attempts/{oom_id}/relaunch", json={"apply_suggested": True})
    again = await wait_for(api, relaunched.json()["id"], FINAL)
    assert again["argv"][-2:] == ["--mem-fraction-static", "0.95"]
    assert again["status"] == "ready", again["error"]
    memory = again["diagnosis"]["memory"]
    assert (memory["max_running_requests"], memory["max_total_num_tokens"]) == (8, 87263)

    api.headers.pop("Authorization")
    await log_in(api)
    failed = html.unescape((await api.get(f"/attempts/{oom_id}")).text)
    assert "Fix: raise --mem-fraction-static to 0.95, the largest that leaves 4.73 GB for CUDA graphs" in failed
    assert '<a href="/sweeps/new?preset=qwen36-27b-mtp-oom&mode=bisect&host=rtxpro-01&gpus=0">Bisect' in failed
    served = (await api.get(f"/attempts/{again['id']}")).text
    assert "no error in the log" in served and 'id="capacity"' not in served


async def test_relaunching_a_failed_configuration_is_confirmed_by_its_page_and_asked_for_by_the_api(
    api: AsyncClient,
) -> None:
    oom_id = await launch(api, "qwen36-27b-mtp-oom", "rtxpro-01", [1])
    assert (await wait_for(api, oom_id, FINAL))["status"] == "failed"
    refused = await api.post(f"/api/attempts/{oom_id}/relaunch")
    assert refused.status_code == 409 and "this configuration failed once" in refused.json()["detail"]
    assert refused.json()["failed_before"]["last_attempt"] == oom_id
    confirmed = await api.post(f"/api/attempts/{oom_id}/relaunch", json={"confirm_failed_before": True})
    assert confirmed.status_code == 202
    await wait_for(api, confirmed.json()["id"], FINAL)

    api.headers.pop("Authorization")
    csrf = await log_in(api)
    page = (await api.get(f"/attempts/{oom_id}/relaunch")).text
    assert 'id="failed-before"' in page and 'name="confirm_failed_before" value="1"' in page
    done = await api.post(f"/attempts/{oom_id}/relaunch", data={"csrf_token": csrf, "confirm_failed_before": "1"})
    assert done.status_code == 303  # the page's warning was the confirmation
    unconfirmed = await api.post(f"/attempts/{oom_id}/relaunch", data={"csrf_token": csrf})
    assert unconfirmed.status_code == 409 and re.search(r"this configuration failed \d times", unconfirmed.text)
    assert 'name="confirm_failed_before" value="1" required' in unconfirmed.text  # asked for, nothing launched


async def test_a_refused_relaunch_with_changes_saves_nothing(api: AsyncClient) -> None:
    """The edit is saved only once its launch is let through: while the attempt still serves on its
    port, preflight refuses the relaunch, and the preset keeps its revisions and audit trail."""
    ready_id = await launch(api, "llama31-8b", "b200-01", [5])
    assert (await wait_for(api, ready_id, FINAL))["status"] == "ready"
    revisions = len((await api.get("/api/presets/llama31-8b/revisions")).json())
    change = {"changes": [{"flag": "--max-running-requests", "value": "4"}]}
    refused = await api.post(f"/api/attempts/{ready_id}/relaunch", json=change)
    assert refused.status_code == 422 and "is not free on the host" in refused.json()["detail"]
    assert len((await api.get("/api/presets/llama31-8b/revisions")).json()) == revisions
    assert not [e for e in (await api.get("/api/audit")).json() if e["action"] == "preset-relaunch"]
