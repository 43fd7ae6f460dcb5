"""Lists that grow (attempts, audit, failure causes) come in bounded pages, each pointing at the next."""

from __future__ import annotations

import re
from datetime import timedelta
from typing import Any

from fastapi import FastAPI
from httpx import AsyncClient

from app.clock import utcnow
from app.db.models import Attempt, AuditEvent, Host, Preset, PresetRevision, Signature
from tests.support.dashboard import AUTH
from tests.support.web import log_in

ATTEMPTS, SIGNATURES, EVENTS = 130, 120, 230
# As big as a long-running attempt's diagnosis with its decode chart: a list must not carry it.
BIG_DIAGNOSIS = {"class": "oom", "decode": [{"gen_throughput": 1000.0 + i, "token_usage": 0.5} for i in range(480)]}


async def seed(app: FastAPI) -> dict[str, Any]:
    """Finished attempts (every third failed, under one of the causes), causes and audit events."""
    now = utcnow()
    async with app.state.runtime.sessions.write() as session:
        hosts = [Host(name=f"paging-{n}") for n in range(2)]
        revision = PresetRevision(preset=Preset(name="paging"), number=1, model_path="m")
        signatures = [
            Signature(fingerprint=f"{n:064x}", failure_class="oom", last_seen=now - timedelta(minutes=n), count=1)
            for n in range(SIGNATURES)
        ]
        session.add_all([*hosts, revision, *signatures])
        await session.flush()
        for n in range(ATTEMPTS):
            failed = n % 3 == 0
            signature = signatures[n % SIGNATURES] if failed else None
            diagnosis = BIG_DIAGNOSIS | {"fingerprint": signature.fingerprint} if signature else BIG_DIAGNOSIS
            session.add(
                Attempt(
                    host_id=hosts[n % 2].id,
                    preset_revision_id=revision.id,
                    status="failed" if failed else "stopped",
                    diagnosis=diagnosis,
                    signature_id=signature.id if signature else None,
                )
            )
        session.add_all(AuditEvent(actor=("ann", "bob")[n % 2], action="launch", target=f"t{n}") for n in range(EVENTS))
        await session.commit()
    return {"hosts": [host.name for host in hosts]}


async def walk(client: AsyncClient, url: str, params: dict[str, Any]) -> list[list[Any]]:
    """Every page of an API list, following its Link rel="next" headers."""
    pages = []
    response = await client.get(url, params=params, headers=AUTH)
    while True:
        assert response.status_code == 200, response.text
        pages.append(response.json())
        if "next" not in response.links:
            return pages
        response = await client.get(response.links["next"]["url"], headers=AUTH)


def ids_on(html: str) -> list[int]:
    return [int(found) for found in re.findall(r'<tr data-attempt="(\d+)"', html)]


async def test_attempt_api_pages_cover_every_attempt_once_newest_first(
    running_app: FastAPI, app_client: AsyncClient
) -> None:
    await seed(running_app)
    pages = await walk(app_client, "/api/attempts", {"limit": 40})
    assert [len(page) for page in pages] == [40, 40, 40, 10]
    ids = [attempt["id"] for page in pages for attempt in page]
    assert ids == sorted(ids, reverse=True) and len(set(ids)) == ATTEMPTS

    pages = await walk(app_client, "/api/attempts", {"status": "failed", "limit": 10})
    failed = [attempt["id"] for page in pages for attempt in page]
    assert failed == [attempt_id for attempt_id in ids if attempt_id % 3 == 1]  # ids start at 1: n = id - 1


async def test_default_attempt_page_is_bounded_and_leaves_the_heavy_fields_to_the_attempt(
    running_app: FastAPI, app_client: AsyncClient
) -> None:
    await seed(running_app)
    response = await app_client.get("/api/attempts", headers=AUTH)
    page = response.json()
    assert len(page) == 50 and "next" in response.links
    assert len(response.content) < 32 * 1024, f"the default page is {len(response.content)} bytes"
    newest_failed = next(attempt for attempt in page if attempt["status"] == "failed")
    assert newest_failed["failure_class"] == "oom" and newest_failed["fingerprint"]
    assert {"diagnosis", "preflight", "gpu_snapshot", "drift", "stages", "env"}.isdisjoint(newest_failed)
    one = (await app_client.get(f"/api/attempts/{newest_failed['id']}", headers=AUTH)).json()
    assert len(one["diagnosis"]["decode"]) == 480


async def test_audit_api_pages_cover_every_event_once_and_keep_the_actor_filter(
    running_app: FastAPI, app_client: AsyncClient
) -> None:
    await seed(running_app)
    pages = await walk(app_client, "/api/audit", {"actor": "bob", "limit": 50})
    targets = [event["target"] for page in pages for event in page]
    assert targets == [f"t{n}" for n in reversed(range(EVENTS)) if n % 2]
    assert [len(page) for page in pages] == [50, 50, 15]


async def test_failure_causes_page_by_last_seen_without_overlap_or_gap(
    running_app: FastAPI, app_client: AsyncClient
) -> None:
    await seed(running_app)
    pages = await walk(app_client, "/api/signatures", {"limit": 50})
    assert [len(page) for page in pages] == [50, 50, 20]
    fingerprints = [cause["fingerprint"] for page in pages for cause in page]
    assert fingerprints == [f"{n:064x}" for n in range(SIGNATURES)]  # the most recently seen first
    assert pages[0][0]["hosts"] == ["paging-0"] and pages[0][0]["presets"] == ["paging"]

    members = await walk(app_client, f"/api/signatures/{0:064x}/attempts", {"limit": 1})
    assert members == [[121], [1]]  # the attempts of n = 0 and n = 120, newest first


async def test_attempts_page_links_older_pages_that_follow_on(running_app: FastAPI, app_client: AsyncClient) -> None:
    await seed(running_app)
    await log_in(app_client)
    seen: list[int] = []
    url = "/attempts?status=&host=&preset="
    while url:
        html = (await app_client.get(url)).text
        shown = ids_on(html)
        assert 0 < len(shown) <= 25
        seen += shown
        older = re.search(r'<a href="(/attempts\?[^"]*before=\d+)">Older attempts', html)
        url = older.group(1).replace("&amp;", "&") if older else ""
    assert seen == sorted(seen, reverse=True) and len(set(seen)) == ATTEMPTS
    first = (await app_client.get("/attempts")).text
    assert 'class="failure-class">oom</a>' in first

    by_host = (await app_client.get("/attempts", params={"host": "paging-1"})).text
    assert "host=paging-1" in re.search(r'href="([^"]*)">Older attempts', by_host).group(1)  # type: ignore[union-attr]


async def test_errors_and_audit_pages_link_their_older_entries(running_app: FastAPI, app_client: AsyncClient) -> None:
    await seed(running_app)
    await log_in(app_client)
    errors = (await app_client.get("/errors")).text
    shown = re.findall(r'<tr data-fingerprint="([0-9a-f]{64})"', errors)
    assert shown == [f"{n:064x}" for n in range(50)]
    older = re.search(r'href="(/errors\?[^"]*)">Older causes', errors)
    assert older, "no link to older causes"
    following = (await app_client.get(older.group(1).replace("&amp;", "&"))).text
    assert re.findall(r'<tr data-fingerprint="([0-9a-f]{64})"', following)[0] == f"{50:064x}"

    audit = (await app_client.get("/audit", params={"actor": "ann"})).text
    assert audit.count('<td><a href="/audit?actor=ann">ann</a></td>') == 100
    older = re.search(r'href="(/audit\?actor=ann&(?:amp;)?before=\d+)">Older events', audit)
    assert older, "no link to older events"
    rest = (await app_client.get(older.group(1).replace("&amp;", "&"))).text
    assert rest.count('<a href="/audit?actor=ann">ann</a>') == EVENTS // 2 - 100 and "Older events" not in rest
