"""The team knowledge base in the browser: teach launchdeck from an attempt's root error, see the
rule decide that past attempt (in the background) and a later one (live), with the built-in answer
beside it; edit and delete the rule from /rules; every form needs the session's CSRF token; a
hint is text, never HTML."""

from __future__ import annotations

import asyncio
import html
from typing import Any

from fastapi import FastAPI
from httpx import AsyncClient

from tests.support.launching import FINAL, launch, wait_for
from tests.support.web import log_in

HINT = 'Raise the KV pool <script>alert("x")</script> — see https://docs.example/kv?a=1&b=2.'


async def wait_for_rule(api: AsyncClient, attempt_id: int, present: bool) -> dict[str, Any]:
    for _ in range(300):
        attempt: dict[str, Any] = (await api.get(f"/api/attempts/{attempt_id}")).json()
        if ("rule" in attempt["diagnosis"]) == present:
            return attempt
        await asyncio.sleep(0.1)
    raise AssertionError(f"attempt {attempt_id}: rule {'never came' if present else 'stayed'}: {attempt}")


async def test_teach_a_rule_on_a_failure_and_see_past_and_later_attempts_take_it(
    api: AsyncClient, running_app: FastAPI
) -> None:
    past_id = await launch(api, "qwen36-27b-mtp-oom", "rtxpro-01", [0])
    past = await wait_for(api, past_id, FINAL)
    assert past["status"] == "failed" and past["diagnosis"]["root_error"]
    built_in = past["diagnosis"]["class"]
    csrf = await log_in(api)

    page = (await api.get(f"/attempts/{past_id}")).text
    assert 'id="teach"' in page and 'action="/rules"' in page
    assert f'name="attempt" value="{past_id}"' in page
    # pre-filled with what stays the same from run to run: no sizes, no numbers
    suggested = "RuntimeError: Not enough memory. Please try to increase --mem-fraction-static. Current value: "
    suggested += "mem_fraction_static"
    assert f'name="match" value="{html.escape(suggested)}"' in page
    fingerprint = past["diagnosis"]["fingerprint"]
    group = (await api.get(f"/errors/{fingerprint}")).text
    assert 'id="teach"' in group and f'name="merge" value="{fingerprint}"' in group
    form = {
        "class": "arg-conflict",
        "title": "MTP needs a bigger static fraction",
        "hint": HINT,
        "match": past["diagnosis"]["root_error"],
        "scope": "root",
        "flag_aware": "on",
        "merge": "",
        "next": f"/attempts/{past_id}",
        "attempt": str(past_id),  # decided before the answer, the others in the background
    }
    refused = await api.post("/rules", data=form, headers={"Authorization": ""})
    assert refused.status_code == 403  # no CSRF token
    saved = await api.post("/rules", data={**form, "csrf_token": csrf})
    assert saved.status_code == 303 and saved.headers["location"] == f"/attempts/{past_id}"

    decided = (await api.get(f"/api/attempts/{past_id}")).json()  # at once: decided before the redirect
    assert decided["diagnosis"].get("rule") is not None
    assert decided["diagnosis"]["class"] == "arg-conflict"
    assert decided["diagnosis"]["built_in"]["class"] == built_in
    page = (await api.get(f"/attempts/{past_id}")).text
    assert "team rule by admin" in page and "MTP needs a bigger static fraction" in page
    assert f'id="built-in-class">{built_in}<' in page
    assert "<script>alert" not in page and "&lt;script&gt;alert(&#34;x&#34;)&lt;/script&gt;" in page
    assert '<a href="https://docs.example/kv?a=1&amp;b=2" rel="noopener noreferrer">' in page

    group = (await api.get(f"/errors/{decided['diagnosis']['fingerprint']}")).text
    assert 'class="failure-class">arg-conflict</span>' in group and "team rule by admin" in group
    signatures = (await api.get("/api/signatures", params={"failure_class": "arg-conflict"})).json()
    assert [s["fingerprint"] for s in signatures] == [decided["diagnosis"]["fingerprint"]]

    later_id = await launch(api, "qwen36-27b-mtp-oom", "rtxpro-01", [1], confirm_failed_before=True)
    later = await wait_for(api, later_id, FINAL)
    assert later["diagnosis"]["class"] == "arg-conflict"  # decided as it was written
    assert later["diagnosis"]["rule"]["author"] == "admin"

    rules_page = (await api.get("/rules")).text
    rule_id = decided["diagnosis"]["rule"]["id"]
    assert f'href="/rules/{rule_id}"' in rules_page and "<script>alert" not in rules_page
    edit = {**form, "class": "oom", "title": "KV pool too small", "csrf_token": csrf}
    assert (await api.post(f"/rules/{rule_id}", data=edit)).status_code == 303
    for _ in range(300):
        if (await api.get(f"/api/attempts/{past_id}")).json()["diagnosis"]["class"] == "oom":
            break
        await asyncio.sleep(0.1)
    assert (await api.get(f"/api/attempts/{past_id}")).json()["diagnosis"]["rule"]["title"] == "KV pool too small"

    assert (await api.post(f"/rules/{rule_id}/delete", data={"csrf_token": csrf})).status_code == 303
    back = await wait_for_rule(api, past_id, present=False)
    assert back["diagnosis"]["class"] == built_in and "built_in" not in back["diagnosis"]
    audit = (await api.get("/audit")).text
    assert "rule-create" in audit and "rule-update" in audit and "rule-delete" in audit


async def test_a_rule_the_form_cannot_save_says_why_and_keeps_what_was_typed(
    api: AsyncClient, running_app: FastAPI
) -> None:
    csrf = await log_in(api)
    form = {"class": "oom", "title": "T", "match": "(", "regex": "on", "csrf_token": csrf, "hint": "<b>kept</b>"}
    response = await api.post("/rules", data=form)
    assert response.status_code == 422
    assert "match is not a valid regular expression" in response.text
    assert "&lt;b&gt;kept&lt;/b&gt;</textarea>" in response.text
    assert "No team rules yet" in (await api.get("/rules")).text


async def test_a_rule_on_any_line_decides_a_new_attempt_once_its_log_has_ended(
    api: AsyncClient, running_app: FastAPI
) -> None:
    rule = {"match": "Not enough memory", "scope": "any", "class": "timeout", "title": "Seen anywhere"}
    assert (await api.post("/api/rules", json=rule)).status_code == 201
    attempt_id = await launch(api, "qwen36-27b-mtp-oom", "rtxpro-01", [2])
    await wait_for(api, attempt_id, FINAL)
    decided = await wait_for_rule(api, attempt_id, present=True)
    assert decided["diagnosis"]["class"] == "timeout" and decided["diagnosis"]["rule"]["scope"] == "any"
    assert decided["diagnosis"]["rule"]["line"] >= 1
