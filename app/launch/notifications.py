"""Telling people that an attempt became ready, failed or turned unhealthy, through incoming webhooks:
the dashboard's own (a setting) and its preset's, both told when both are set.

The message is Slack's incoming-webhook JSON, `{"text": ...}`, which Mattermost reads as it is.
Each message is delivered by a background task that reads what it says in a session of its own,
closed before it posts, and posts with a short timeout and a few tries. A webhook that is down or
slow costs a log line, nothing else: the follower that saw the change never waits on it.
"""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass

import httpx

from app.backoff import Backoff
from app.config import Destinations, pinned, redacted_url
from app.db import Sessions
from app.db.history import load_attempt
from app.db.models import Attempt
from app.diagnose.stored import StoredDiagnosis
from app.errors import InvalidInput
from app.states import AttemptStatus

log = logging.getLogger(__name__)

NOTIFIED_STATUSES = frozenset({AttemptStatus.READY, AttemptStatus.FAILED, AttemptStatus.UNHEALTHY})
MAX_ROOT_ERROR = 500  # characters of the root error a message quotes; the link leads to the rest


@dataclass(frozen=True)
class Notice:
    """What one message says about one attempt's new status."""

    attempt_id: int
    status: AttemptStatus
    preset: str
    revision: int
    host: str
    gpus: tuple[int, ...]
    failure_class: str
    root_error: str
    error: str
    link: str

    @classmethod
    def of(cls, attempt: Attempt, status: AttemptStatus, *, public_url: str) -> Notice:
        diagnosis = StoredDiagnosis.from_json(attempt.diagnosis)
        return cls(
            attempt_id=attempt.id,
            status=status,
            preset=attempt.revision.preset.name,
            revision=attempt.revision.number,
            host=attempt.host.name,
            gpus=tuple(attempt.gpus),
            failure_class=diagnosis.failure_class if diagnosis.root_error else "",
            root_error=(diagnosis.root_error or "").strip(),
            error=attempt.error,
            link=f"{public_url}/attempts/{attempt.id}",
        )


def slack_message(notice: Notice) -> dict[str, str]:
    """The incoming-webhook payload: a few plain lines, the link in Slack's <url|label> form
    (which Mattermost turns into its own link). &, < and > are escaped as Slack asks; Mattermost's
    Markdown reads the same entities back."""
    gpus = ",".join(map(str, notice.gpus))
    lines = [
        f"launchdeck: attempt #{notice.attempt_id} is {notice.status} · "
        f"{notice.preset} r{notice.revision} on {notice.host} (GPUs {gpus})"
    ]
    if notice.status != AttemptStatus.READY:
        if notice.root_error:
            root = notice.root_error
            if len(root) > MAX_ROOT_ERROR:
                root = root[:MAX_ROOT_ERROR] + " …"
            lines.append(f"root error ({notice.failure_class}): {root}")
        if notice.error:
            lines.append(notice.error)
    text = "\n".join(_escaped(line) for line in lines)
    return {"text": f"{text}\n<{notice.link}|open attempt #{notice.attempt_id}>"}


def _escaped(text: str) -> str:
    return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


@dataclass(frozen=True)
class Delivery:
    """How hard a message is pushed: a short timeout, a few tries, waits that grow (app.backoff)."""

    timeout: float = 5.0
    tries: int = 3
    backoff: float = 1.0  # the shortest wait between tries


class Notifier:
    """Owned by the app's lifespan; `status_changed` is the attempt service's hook."""

    def __init__(
        self,
        sessions: Sessions,
        *,
        public_url: str,
        webhook_url: str | None = None,
        delivery: Delivery | None = None,
        destinations: Destinations | None = None,
    ):
        self.sessions = sessions
        self.destinations = destinations or Destinations()
        self.public_url = public_url
        self.webhook_url = webhook_url
        self.delivery = delivery or Delivery()  # read at every use: tests shorten it on a running dashboard
        self._tasks: set[asyncio.Task[None]] = set()

    def status_changed(self, attempt_id: int, status: AttemptStatus) -> None:
        """Returns at once: the message goes out in the background."""
        if status not in NOTIFIED_STATUSES:
            return
        task = asyncio.create_task(self._notify(attempt_id, status), name=f"notify-{attempt_id}-{status}")
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def close(self) -> None:
        tasks = list(self._tasks)
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)

    async def _notify(self, attempt_id: int, status: AttemptStatus) -> None:
        try:
            async with self.sessions.read() as session:
                attempt = await load_attempt(session, attempt_id)
                notice = Notice.of(attempt, status, public_url=self.public_url)
                urls = [url for url in dict.fromkeys((self.webhook_url, attempt.revision.preset.webhook_url)) if url]
            if not urls:
                return
            message = slack_message(notice)
            async with httpx.AsyncClient(timeout=self.delivery.timeout, follow_redirects=False) as client:
                await asyncio.gather(*(self._post(client, url, message, notice) for url in urls))
        except asyncio.CancelledError:
            raise
        except Exception:  # a notification never takes anything down with it
            log.exception("attempt %d: could not notify of %s", attempt_id, status, extra={"attempt_id": attempt_id})

    async def _post(self, client: httpx.AsyncClient, url: str, message: dict[str, str], notice: Notice) -> None:
        """Tries again after a network error, a 429 or a 5xx; another 4xx is final (the webhook
        refuses the message, or is gone)."""
        try:
            address = await self.destinations.checked_address(url)
        except InvalidInput as exc:  # an internal address: never posted to, nor tried again
            log.warning(
                "attempt %d: webhook %s refused: %s",
                notice.attempt_id,
                redacted_url(url),
                exc,
                extra={"attempt_id": notice.attempt_id, "host": notice.host},
            )
            return
        target, headers, extensions = pinned(url, address)
        delivery = self.delivery
        backoff = Backoff(delivery.backoff)
        for tries in range(1, delivery.tries + 1):
            try:
                response = await client.post(target, json=message, headers=headers, extensions=extensions)
            except httpx.HTTPError as exc:
                problem = type(exc).__name__  # its text may quote the URL
            else:
                if response.is_success:
                    return
                problem = f"HTTP {response.status_code}"
                if response.status_code < 500 and response.status_code != 429:
                    break
            if tries < delivery.tries:
                await asyncio.sleep(backoff.next())
        log.warning(
            "attempt %d: webhook %s was not told it is %s after %d tries (%s)",
            notice.attempt_id, redacted_url(url), notice.status, tries, problem,
            extra={"attempt_id": notice.attempt_id, "host": notice.host},
        )  # fmt: skip
