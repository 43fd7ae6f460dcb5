"""A webhook is told of each change once across a failover: the controller that owns the attempt's
host posts, and is killed (or frozen past its lease) before the webhook answers; the controller that
takes the host over posts again under the same Idempotency-Key, and no one posts a third time. A
receiver that keeps the keys it has seen hears of the change once."""

from __future__ import annotations

import asyncio
import signal
from pathlib import Path

import httpx
import psycopg
import pytest

from tests.e2e.test_replicas import launch_through_web, owner_and_other, replicas_running, taken_over, until
from tests.support.faults import AUTH, HostProcess
from tests.support.webhooks import Hook

pytestmark = [pytest.mark.postgres, pytest.mark.faults]


def waiting_notifications(database: str) -> int:
    with psycopg.connect(database) as connection:
        row = connection.execute("select count(*) from notification where done_at is null").fetchone()
    return int(row[0]) if row else 0


@pytest.mark.parametrize("fault", ["killed", "frozen"])
async def test_a_change_told_while_its_controller_dies_is_told_again_under_the_same_key_and_only_again(
    tmp_path: Path, database: str, cluster: dict[str, HostProcess], hook: Hook, fault: str
) -> None:
    # One public URL, as behind a load balancer: each message links to the same page.
    told = {
        "webhook_url": hook.url("/hang"),
        "webhook_allowed": "127.0.0.1",
        "public_url": "https://launchdeck.example",
    }
    async with (
        replicas_running(tmp_path, database, **told) as (controllers, web),
        httpx.AsyncClient(base_url=web.url, headers=AUTH, timeout=30) as api,
    ):
        attempt_id = await launch_through_web(api)

        async def posted(count: int) -> bool:
            return len(hook.posts("/hang")) >= count

        await until(lambda: posted(1), 30, "the owner did not post that the attempt is ready")
        owner, survivor = owner_and_other(database, controllers, "fa-b200")
        if fault == "killed":
            owner.kill()
        else:
            owner.send(signal.SIGSTOP)
        await taken_over(database, "fa-b200", survivor)
        await until(lambda: posted(2), 30, f"the new owner did not post again: {hook.posts('/hang')}")
        hook.release.set()  # both posts are answered now, the first to a dead or a frozen controller
        if fault == "frozen":
            owner.send(signal.SIGCONT)

            async def let_go() -> bool:
                return "given up ['fa-b200']" in owner.tail(400)

            await until(let_go, 30, f"the woken controller did not let go:\n{owner.tail()}")

        async def done() -> bool:
            return waiting_notifications(database) == 0

        await until(done, 30, "the change is still waiting to be told")
        await asyncio.sleep(2)  # time enough for a wrong third post
        assert hook.keys_of("/hang") == ["launchdeck-notification-1"] * 2
        first, second = hook.posts("/hang")
        assert first == second and first["text"].startswith(f"launchdeck: attempt #{attempt_id} is ready ·")
