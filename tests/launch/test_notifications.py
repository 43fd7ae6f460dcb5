"""Webhook and Apprise notifications, delivered to a real HTTP server on loopback: what they say,
that a destination that is down or hangs is tried a few times, logged and given up, and delays
nothing, and that none hears more than its share."""

from __future__ import annotations

import asyncio
import json
import logging
import time
from collections.abc import AsyncIterator
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from fastapi import FastAPI
from httpx import ASGITransport, AsyncClient
from pydantic import ValidationError
from sqlalchemy import func, select

from app.clock import utcnow
from app.config import Destinations, Settings
from app.db.models import Notification
from app.demo.presets import seed_demo_presets
from app.errors import InvalidInput
from app.launch.notifications import (
    LOOK_EVERY,
    Delivery,
    Notice,
    RateLimit,
    apprise_message,
    queue,
    slack_message,
)
from app.launch.record import Pace
from app.leases import SoleOwner
from app.ssh import HostSpec
from app.states import AttemptStatus, Role
from app.web.app import create_app
from tests.support.accounts import person
from tests.support.dashboard import AUTH, make_settings
from tests.support.hosts import end_every_attempt
from tests.support.launching import REPLAY, launch, wait_for
from tests.support.waiting import until
from tests.support.web import log_in
from tests.support.webhooks import SECRET, Hook

# Apprise's email plugin, loaded with the others at its first URL, imports PGPy, which imports
# imghdr, deprecated in Python 3.11 and 3.12 (Apprise puts a stand-in in its place on 3.13).
PUBLIC_URL = "https://launchdeck.example"


def test_message_says_which_attempt_what_happened_and_where_to_look() -> None:
    notice = Notice(
        attempt_id=12, status=AttemptStatus.FAILED, preset="qwen-mtp", revision=3, host="b200-01", gpus=(0, 1),
        failure_class="arg-conflict", root_error="ValueError: <module> needs a & b" + "x" * 600,
        error="the server exited with 1", link=f"{PUBLIC_URL}/attempts/12",
    )  # fmt: skip
    message = slack_message(notice)
    assert list(message) == ["text"]
    first, root, error, link = message["text"].split("\n")
    assert first == "launchdeck: attempt #12 is failed · qwen-mtp r3 on b200-01 (GPUs 0,1)"
    assert root.startswith("root error (arg-conflict): ValueError: &lt;module&gt; needs a &amp; b") and root.endswith(
        " …"
    )
    assert len(root) < 600
    assert error == "the server exited with 1"
    assert link == f"<{PUBLIC_URL}/attempts/12|open attempt #12>"


@pytest.fixture
async def notifying_app(tmp_path: Path, sim_specs: list[HostSpec], hook: Hook) -> AsyncIterator[FastAPI]:
    settings = make_settings(
        tmp_path, sim_specs, webhook_url=hook.url("/ok"), public_url=PUBLIC_URL + "/", webhook_allowed="127.0.0.1"
    )
    app = create_app(settings)
    async with app.router.lifespan_context(app):
        runtime = app.state.runtime
        runtime.attempts.pace = Pace(loading=0.1, serving=0.3, health_timeout=10)
        runtime.notifier.delivery = Delivery(timeout=20, tries=3, backoff=0.05)
        async with runtime.sessions.write() as session:
            await seed_demo_presets(session)
        for host in runtime.ssh:
            await host.wait_online(10)
        yield app
        async with AsyncClient(transport=ASGITransport(app=app), base_url="http://t", headers=AUTH) as api:
            await end_every_attempt(api, runtime.ssh, runtime.ssh.get)


async def test_webhooks_hear_ready_failed_and_unhealthy_and_a_dead_one_delays_nothing(
    notifying_app: FastAPI, hook: Hook, caplog: pytest.LogCaptureFixture
) -> None:
    """The dashboard's webhook hears of every attempt, a preset's of its own. One preset's webhook
    is down (503): tried 3 times, then logged without its secret path. The other's hangs: its first
    message is still unanswered while the attempt goes on to unhealthy and the team hears of it."""
    runtime = notifying_app.state.runtime
    async with AsyncClient(transport=ASGITransport(app=notifying_app), base_url="http://t", headers=AUTH) as api:
        for preset, path in (("llama31-8b", "/hang"), ("qwen36-27b-mtp-strategy-unset", "/down")):
            body = (await api.get(f"/api/presets/{preset}")).json()
            update = {**body["revision"], "description": body["description"], "webhook_url": hook.url(path)}
            answer = await api.put(f"/api/presets/{preset}", json=update)
            assert answer.status_code == 200 and answer.json()["webhook_url"] == hook.url(path), answer.text
        refused = await api.put("/api/presets/llama31-8b", json={**update, "webhook_url": "hooks.example/x"})
        assert refused.status_code == 422 and "webhook_url: give an http:// or https:// URL" in refused.text

        with caplog.at_level(logging.WARNING, logger="app.launch.notifications"):
            served = await launch(api, "llama31-8b", "rtxpro-01", [0])
            failing = await launch(api, "qwen36-27b-mtp-strategy-unset", "rtxpro-01", [1], override_reason=REPLAY)
            ready = await wait_for(api, served, {"ready"})
            failed = await wait_for(api, failing, {"failed"})
            host = runtime.ssh.get("rtxpro-01")
            await host.run(["touch", f"{ready['remote_dir']}/sim-fault"])  # the simulator's zombie switch
            await wait_for(api, served, {"unhealthy"})
            for _ in range(50):
                if len(hook.posts("/ok")) == 3 and len(_logged(caplog)) == 1:
                    break
                await asyncio.sleep(0.1)
            # Both messages to the hanging webhook are out and unanswered, neither waiting for the other.
            assert len(hook.posts("/hang")) == 2
            hook.release.set()
            for _ in range(50):
                if not any(task.get_name().startswith("notify-") for task in asyncio.all_tasks()):
                    break
                await asyncio.sleep(0.1)

    team = [post["text"] for post in hook.posts("/ok")]
    assert len(team) == 3, team
    ready_text = next(text for text in team if f"#{served} is ready" in text)
    assert ready_text == (
        f"launchdeck: attempt #{served} is ready · llama31-8b r1 on rtxpro-01 (GPUs 0)\n"
        f"<{PUBLIC_URL}/attempts/{served}|open attempt #{served}>"
    )
    failure = next(text for text in team if f"#{failing} is failed" in text)
    assert "root error (arg-conflict): ValueError: Speculative decoding for" in failure
    assert failure.endswith(
        f"\nthe server exited with {failed['exit_code']}\n<{PUBLIC_URL}/attempts/{failing}|open attempt #{failing}>"
    )
    unhealthy = next(text for text in team if f"#{served} is unhealthy" in text)
    assert "\nhealth check failed\n" in unhealthy
    assert hook.posts("/down") == [{"text": failure}] * 3
    # One key a change, the same on each try and to each webhook: the team's three changes, three keys.
    [down_key] = set(hook.keys_of("/down"))
    assert down_key in hook.keys_of("/ok") and len(set(hook.keys_of("/ok"))) == 3
    assert [post["text"] for post in hook.posts("/hang")] == [ready_text, unhealthy]  # answered once released
    logged = _logged(caplog)
    webhook = f"http://127.0.0.1:{hook.port}/…"
    assert logged == [f"attempt {failing}: webhook {webhook} was not told it is failed after 3 tries (HTTP 503)"]
    assert SECRET not in caplog.text


async def test_a_change_waits_in_its_row_until_a_sender_runs_and_one_an_hour_old_is_not_sent(
    notifying_app: FastAPI, hook: Hook, caplog: pytest.LogCaptureFixture
) -> None:
    """As if the dashboard died between writing a status and telling of it: the change waits in its
    row and is told once a sender runs again; one that waited more than an hour is logged instead."""
    runtime = notifying_app.state.runtime

    def told() -> list[str]:
        return [post["text"].split(" · ")[0] for post in hook.posts("/ok")]

    async with AsyncClient(transport=ASGITransport(app=notifying_app), base_url="http://t", headers=AUTH) as api:
        served = await launch(api, "llama31-8b", "rtxpro-01", [0])
        await wait_for(api, served, {"ready"})
        await _notified(notifying_app)
        await runtime.notifier.close()
        async with runtime.sessions.write.begin() as session:
            queue(session, served, AttemptStatus.UNHEALTHY)
            session.add(Notification(attempt_id=served, status=AttemptStatus.FAILED, at=utcnow() - timedelta(hours=2)))
        await asyncio.sleep(2 * LOOK_EVERY)
        assert [post["text"].split(" · ")[0] for post in hook.posts("/ok")] == [
            f"launchdeck: attempt #{served} is ready"
        ]
        with caplog.at_level(logging.WARNING, logger="app.launch.notifications"):
            runtime.notifier.start()
            await _notified(notifying_app)
    assert told() == [f"launchdeck: attempt #{served} is ready", f"launchdeck: attempt #{served} is unhealthy"]
    assert _logged(caplog) == [f"attempt {served}: nobody told it was failed: that was more than 60 minutes ago"]


class Lapsing(SoleOwner):
    """Owns every host until told its lease lapsed."""

    owned = True

    def owns(self, host: str) -> bool:
        return self.owned


async def test_a_post_that_timed_out_is_not_tried_again_once_the_host_is_no_longer_this_process_s(
    notifying_app: FastAPI, hook: Hook
) -> None:
    """As a controller woken from a stall past its lease finds its post timed out: the host's new
    owner tells the change (under the same key), so this one must not post it again."""
    runtime = notifying_app.state.runtime
    runtime.notifier.ownership = lapsing = Lapsing()
    runtime.notifier.webhook_url = hook.url("/hang")
    runtime.notifier.delivery = Delivery(timeout=0.5, tries=3, backoff=0.05)
    async with AsyncClient(transport=ASGITransport(app=notifying_app), base_url="http://t", headers=AUTH) as api:
        served = await launch(api, "llama31-8b", "rtxpro-01", [0])
        await wait_for(api, served, {"ready"})
        await until(lambda: hook.posts("/hang"), "the change posted once")
        lapsing.owned = False
        await asyncio.sleep(2)  # past the post's timeout and the waits before two more tries
        assert len(hook.posts("/hang")) == 1
        async with runtime.sessions.read() as session:
            waiting = await session.scalar(select(func.count()).where(Notification.done_at.is_(None)))
        assert waiting == 1  # the host's new owner's to tell
        hook.release.set()


async def test_preset_editor_keeps_a_webhook_and_the_audit_names_only_its_host(app_client: AsyncClient) -> None:
    csrf = await log_in(app_client)
    body = {"name": "p", "model_path": "meta-llama/Llama-3.1-8B-Instruct"}
    assert (await app_client.post("/api/presets", json=body, headers=AUTH)).status_code == 201
    url = f"https://hooks.example/services/{SECRET}"
    form = {"csrf_token": csrf, "model_path": body["model_path"], "port": "30000", "webhook_url": url}
    refused = await app_client.post("/presets/p", data={**form, "webhook_url": "ftp://hooks.example/x"})
    assert refused.status_code == 422 and "webhook_url: give an http:// or https:// URL" in refused.text
    saved = await app_client.post("/presets/p", data=form)
    assert saved.status_code == 303 and saved.headers["location"] == "/presets/p?saved=unchanged"
    assert f'name="webhook_url" type="url" value="{url}"' in (await app_client.get("/presets/p")).text
    events = (await app_client.get("/api/audit", headers=AUTH)).json()
    assert [(e["action"], e["detail"]) for e in events if e["action"] == "preset-webhook"] == [
        ("preset-webhook", {"webhook": "https://hooks.example/…"})
    ]
    assert SECRET not in json.dumps(events)


INTERNAL_LITERALS = (
    "http://127.0.0.1/h",
    "http://127.1/h",
    "http://0x7f000001/h",
    "http://2130706433/h",
    "http://0177.0.0.1/h",
    "http://[::1]/h",
    "http://[::ffff:127.0.0.1]/h",
    "http://169.254.169.254/latest/meta-data",
    "http://10.0.0.1/h",
    "http://192.168.1.1/h",
    "http://0.0.0.0/h",
    "http://[::]/h",
)


@pytest.mark.parametrize("url", INTERNAL_LITERALS)
def test_a_webhook_written_as_an_internal_address_is_refused_however_it_is_written(url: str) -> None:
    problem = Destinations().literal_problem(url)
    assert problem is not None and "an internal address; webhooks go to public addresses unless" in problem


def test_public_addresses_names_and_what_the_team_allows_pass_the_literal_check() -> None:
    assert Destinations().literal_problem("http://93.184.215.14/h") is None
    assert Destinations().literal_problem("https://hooks.slack.com/services/x") is None  # checked when posted
    allowed = Destinations.of("10.0.0.0/8, chat.internal")
    assert allowed.literal_problem("http://10.1.2.3/h") is None
    assert allowed.literal_problem("http://127.0.0.1/h") is not None


async def test_a_name_is_checked_by_every_address_it_resolves_to() -> None:
    with pytest.raises(InvalidInput, match=r"localhost is 127\.0\.0\.1, an internal address|localhost is ::1"):
        await Destinations().checked_address("http://localhost:8000/h")
    assert await Destinations.of("localhost").checked_address("http://localhost:8000/h") in ("127.0.0.1", "::1")
    assert await Destinations.of("127.0.0.0/8, ::1").checked_address("http://localhost:8000/h") in ("127.0.0.1", "::1")


async def test_an_operator_cannot_save_an_internal_webhook_and_a_viewer_sees_only_its_host(
    api: AsyncClient, running_app: FastAPI
) -> None:
    body = (await api.get("/api/presets/llama31-8b")).json()
    update = {**body["revision"], "description": body["description"]}
    for url in ("http://169.254.169.254/latest", "http://2130706433/x", "http://[::1]:8000/attempts/1/stop"):
        refused = await api.put("/api/presets/llama31-8b", json={**update, "webhook_url": url})
        assert refused.status_code == 422 and "an internal address" in refused.json()["detail"], refused.text
    url = f"https://hooks.example/services/{SECRET}"
    assert (await api.put("/api/presets/llama31-8b", json={**update, "webhook_url": url})).status_code == 200
    assert (await api.get("/api/presets/llama31-8b")).json()["webhook_url"] == url  # the access token: an admin
    async with await person(running_app, "vic", Role.VIEWER, None) as viewer:
        seen = await viewer.get("/api/presets")
    shown = {preset["name"]: preset["webhook_url"] for preset in seen.json()}
    assert shown["llama31-8b"] == "https://hooks.example/…" and SECRET not in seen.text


async def test_a_webhook_whose_name_resolves_inside_is_never_posted_to(
    tmp_path: Path, sim_specs: list[HostSpec], hook: Hook, caplog: pytest.LogCaptureFixture
) -> None:
    """The team's webhook names localhost, which LAUNCHDECK_WEBHOOK_ALLOWED does not list: a failure
    is not posted there, and the log says why, without the URL's secret."""
    url = f"http://localhost:{hook.port}/ok/{SECRET}"
    app = create_app(make_settings(tmp_path, sim_specs, webhook_url=url))
    async with app.router.lifespan_context(app):
        runtime = app.state.runtime
        runtime.attempts.pace = Pace(loading=0.1, serving=0.3, health_timeout=10)
        async with runtime.sessions.write() as session:
            await seed_demo_presets(session)
        async with AsyncClient(transport=ASGITransport(app=app), base_url="http://t", headers=AUTH) as api:
            with caplog.at_level(logging.WARNING, logger="app.launch.notifications"):
                failing = await launch(api, "qwen36-27b-mtp-strategy-unset", "rtxpro-01", [1], override_reason=REPLAY)
                await wait_for(api, failing, {"failed"})
                for _ in range(50):
                    if _logged(caplog):
                        break
                    await asyncio.sleep(0.1)
            await end_every_attempt(api, runtime.ssh, runtime.ssh.get)
    assert hook.received == []
    assert _logged(caplog) == [
        f"attempt {failing}: webhook http://localhost:{hook.port}/… refused: localhost is 127.0.0.1, an internal "
        "address; webhooks go to public addresses unless LAUNCHDECK_WEBHOOK_ALLOWED names the address, its network "
        "or the host"
    ]


def test_an_apprise_service_gets_the_same_lines_as_a_title_and_a_plain_body() -> None:
    notice = Notice(
        attempt_id=12, status=AttemptStatus.FAILED, preset="qwen-mtp", revision=3, host="b200-01", gpus=(0, 1),
        failure_class="arg-conflict", root_error="ValueError: <module> needs a & b" + "x" * 600,
        error="the server exited with 1", link=f"{PUBLIC_URL}/attempts/12",
    )  # fmt: skip
    title, body = apprise_message(notice)
    assert title == "launchdeck: attempt #12 is failed"
    where, root, error, link = body.split("\n")
    assert where == "qwen-mtp r3 on b200-01 (GPUs 0,1)"
    assert root.startswith("root error (arg-conflict): ValueError: <module> needs a & b") and root.endswith(" …")
    assert len(root) < 600
    assert (error, link) == ("the server exited with 1", f"{PUBLIC_URL}/attempts/12")


def test_apprise_urls_are_read_as_apprise_reads_them_and_a_wrong_one_is_named_without_its_secret(
    caplog: pytest.LogCaptureFixture,
) -> None:
    given = f"json://127.0.0.1:9/ok/{SECRET}, mailtos://me:pw@mail.example?to=a@x.example,b@x.example  form://h/x"
    assert Settings(_env_file=None, notify_urls=given).resolved_notify_urls() == [  # type: ignore[call-arg]
        f"json://127.0.0.1:9/ok/{SECRET}",
        "mailtos://me:pw@mail.example?to=a@x.example,b@x.example",
        "form://h/x",
    ]
    secret = "hush-hush"  # one that Apprise's own masking of secrets in its log lets through
    with caplog.at_level(logging.DEBUG), pytest.raises(ValidationError) as refused:
        # A Discord URL names a webhook's id and token; this one, a single part, is no URL at all.
        Settings(_env_file=None, notify_urls=f"json://127.0.0.1/ok discord://{secret}")  # type: ignore[call-arg]
    assert "URL 2 (discord://…) is no URL Apprise can send to" in str(refused.value)
    assert secret not in str(refused.value) and secret not in caplog.text


def test_a_destination_hears_at_most_its_share_in_any_window() -> None:
    limit, delivery = RateLimit(), Delivery(most=2, per=0.3)
    assert [limit.allows("a", delivery) for _ in range(3)] == [True, True, False]
    assert limit.allows("b", delivery)  # each destination has its own share
    time.sleep(0.35)
    assert [limit.allows("a", delivery) for _ in range(3)] == [True, True, False]


@pytest.fixture
async def apprise_app(tmp_path: Path, sim_specs: list[HostSpec], hook: Hook) -> AsyncIterator[FastAPI]:
    """The team hears through its webhook and three Apprise URLs (json://, which posts to the hook):
    one answers, one is down, one names the cloud's metadata address, which webhooks may not reach."""
    urls = (
        f"json://127.0.0.1:{hook.port}/ok/{SECRET}, json://127.0.0.1:{hook.port}/down/{SECRET} "
        f"json://169.254.169.254/latest/{SECRET}"
    )
    settings = make_settings(
        tmp_path, sim_specs, webhook_url=hook.url("/hook"), notify_urls=urls, public_url=PUBLIC_URL,
        webhook_allowed="127.0.0.1",
    )  # fmt: skip
    app = create_app(settings)
    async with app.router.lifespan_context(app):
        runtime = app.state.runtime
        runtime.attempts.pace = Pace(loading=0.1, serving=0.3, health_timeout=10)
        runtime.notifier.delivery = Delivery(timeout=5, tries=3, backoff=0.2, most=2)
        async with runtime.sessions.write() as session:
            await seed_demo_presets(session)
        yield app
        async with AsyncClient(transport=ASGITransport(app=app), base_url="http://t", headers=AUTH) as api:
            await end_every_attempt(api, runtime.ssh, runtime.ssh.get)


async def _failed_attempt(app: FastAPI) -> dict[str, Any]:
    async with AsyncClient(transport=ASGITransport(app=app), base_url="http://t", headers=AUTH) as api:
        failing = await launch(api, "qwen36-27b-mtp-strategy-unset", "rtxpro-01", [1], override_reason=REPLAY)
        return await wait_for(api, failing, {"failed"})


async def _notified(app: FastAPI) -> None:
    """Until every change written is done with: each destination told or given up on."""
    for _ in range(100):
        async with app.state.runtime.sessions.read() as session:
            if not await session.scalar(select(func.count()).where(Notification.done_at.is_(None))):
                return
        await asyncio.sleep(0.1)
    raise AssertionError("notifications still going out after 10 s")


def _logged(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [record.getMessage() for record in caplog.records if record.name == "app.launch.notifications"]


async def test_apprise_services_hear_what_the_webhook_hears_and_one_that_is_down_is_tried_with_backoff(
    apprise_app: FastAPI, hook: Hook, caplog: pytest.LogCaptureFixture
) -> None:
    with caplog.at_level(logging.WARNING):
        failed = await _failed_attempt(apprise_app)
        await _notified(apprise_app)
    failing = failed["id"]

    [told] = hook.posts("/ok")
    assert (told["title"], told["type"]) == (f"launchdeck: attempt #{failing} is failed", "failure")
    where, root, error, link = told["message"].split("\n")
    assert where == "qwen36-27b-mtp-strategy-unset r1 on rtxpro-01 (GPUs 1)"
    assert root.startswith("root error (arg-conflict): ValueError: Speculative decoding for")
    assert (error, link) == (f"the server exited with {failed['exit_code']}", f"{PUBLIC_URL}/attempts/{failing}")
    [webhook] = hook.posts("/hook")  # the Slack-compatible webhook is told as before
    assert webhook["text"].startswith(f"launchdeck: attempt #{failing} is failed · qwen36-27b")

    assert hook.posts("/down") == [told] * 3
    assert all(gap >= 0.2 for gap in hook.gaps("/down")), hook.gaps("/down")  # the backoff's shortest wait
    down = f"json://127.0.0.1:{hook.port}/…"
    assert _logged(caplog) == [
        f"attempt {failing}: notify URL 3 (json://169.254.169.254/…) refused: 169.254.169.254 is 169.254.169.254, "
        "an internal address; webhooks go to public addresses unless LAUNCHDECK_WEBHOOK_ALLOWED names the address, "
        "its network or the host",
        f"attempt {failing}: notify URL 2 ({down}) was not told it is failed after 3 tries (not sent; Apprise's log "
        "says why)",
    ]
    assert SECRET not in caplog.text


async def test_no_destination_hears_more_than_its_share_webhook_or_apprise(
    apprise_app: FastAPI, hook: Hook, caplog: pytest.LogCaptureFixture
) -> None:
    """Two messages a minute each (the fixture's limit): the failure, then one of three repeats."""
    with caplog.at_level(logging.WARNING):
        failing = (await _failed_attempt(apprise_app))["id"]
        runtime = apprise_app.state.runtime
        async with runtime.sessions.write.begin() as session:
            for _ in range(3):
                queue(session, failing, AttemptStatus.FAILED)
        runtime.notifier.status_changed(failing, AttemptStatus.FAILED)
        await _notified(apprise_app)

    assert len(hook.posts("/ok")) == 2 and len(hook.posts("/hook")) == 2
    assert len(hook.posts("/down")) == 2 * 3  # two messages, each tried three times
    dropped = [line for line in _logged(caplog) if "was told 2 times in the last 60 s" in line]
    shares = {line.split(" not told ")[0].split(": ", 1)[1] for line in dropped}
    assert len(dropped) == 2 * 4 and shares == {
        f"webhook http://127.0.0.1:{hook.port}/…",
        f"notify URL 1 (json://127.0.0.1:{hook.port}/…)",
        f"notify URL 2 (json://127.0.0.1:{hook.port}/…)",
        "notify URL 3 (json://169.254.169.254/…)",
    }
    assert SECRET not in caplog.text
