"""Telling people that an attempt became ready, failed or turned unhealthy, through incoming webhooks
(the dashboard's own, a setting, and its preset's, both told when both are set) and through Apprise
URLs (a setting: PagerDuty, email, Teams, Discord and the rest of Apprise's services).

A webhook's message is Slack's incoming-webhook JSON, `{"text": ...}`, which Mattermost reads as it
is; an Apprise service gets the same lines as a title and a plain-text body. Each message is
delivered by a background task that reads what it says in a session of its own, closed before it
sends, and sends with a short timeout and a few tries; Apprise, which blocks, in a thread. A
destination that is down or slow costs a log line, nothing else: the follower that saw the change
never waits on it. One destination hears at most a few messages a minute, so a sweep whose every
point fails does not page anyone fifty times.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass
from urllib.parse import urlsplit

import apprise
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
# Apprise's services that post over HTTP to the host their URL names, as a webhook does: they go
# where webhooks may. The others talk to their own service's API, whose host the URL does not choose
# (in some, such as pagerduty://, the URL's "host" is a key), so only their scheme is ever logged.
HTTP_SCHEMES = {"json": "http", "jsons": "https", "xml": "http", "xmls": "https", "form": "http", "forms": "https"}
APPRISE_TYPES = {
    AttemptStatus.READY: apprise.NotifyType.SUCCESS,
    AttemptStatus.FAILED: apprise.NotifyType.FAILURE,
    AttemptStatus.UNHEALTHY: apprise.NotifyType.WARNING,
}


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


def _lines(notice: Notice) -> tuple[str, str, list[str]]:
    """What every message says, unescaped: what happened, where, and what went wrong."""
    gpus = ",".join(map(str, notice.gpus))
    details = []
    if notice.status != AttemptStatus.READY:
        if notice.root_error:
            root = notice.root_error
            if len(root) > MAX_ROOT_ERROR:
                root = root[:MAX_ROOT_ERROR] + " …"
            details.append(f"root error ({notice.failure_class}): {root}")
        if notice.error:
            details.append(notice.error)
    where = f"{notice.preset} r{notice.revision} on {notice.host} (GPUs {gpus})"
    return f"launchdeck: attempt #{notice.attempt_id} is {notice.status}", where, details


def slack_message(notice: Notice) -> dict[str, str]:
    """The incoming-webhook payload: a few plain lines, the link in Slack's <url|label> form
    (which Mattermost turns into its own link). &, < and > are escaped as Slack asks; Mattermost's
    Markdown reads the same entities back."""
    title, where, details = _lines(notice)
    text = "\n".join(_escaped(line) for line in (f"{title} · {where}", *details))
    return {"text": f"{text}\n<{notice.link}|open attempt #{notice.attempt_id}>"}


def apprise_message(notice: Notice) -> tuple[str, str]:
    """The title and plain-text body an Apprise service gets; Apprise escapes them for its
    service (HTML for email, Markdown for Discord) itself."""
    title, where, details = _lines(notice)
    return title, "\n".join((where, *details, notice.link))


def _escaped(text: str) -> str:
    return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


@dataclass(frozen=True)
class Delivery:
    """How hard a message is pushed (a short timeout, a few tries, waits that grow: app.backoff),
    and how many one destination hears."""

    timeout: float = 5.0
    tries: int = 3
    backoff: float = 1.0  # the shortest wait between tries
    most: int = 20  # messages one destination hears in any `per` seconds; more are dropped, with a log line
    per: float = 60.0


class RateLimit:
    """When each destination was last sent messages, to hold it to `Delivery.most` per `per` seconds."""

    def __init__(self) -> None:
        self._sent: dict[str, deque[float]] = {}

    def allows(self, destination: str, delivery: Delivery) -> bool:
        """Whether one more message may go to `destination` now; counts it if so. Synchronous, so
        messages racing to one destination cannot both take its last place."""
        now = time.monotonic()
        sent = self._sent.setdefault(destination, deque())
        while sent and now - sent[0] >= delivery.per:
            sent.popleft()
        if len(sent) >= delivery.most:
            return False
        sent.append(now)
        return True


class Notifier:
    """Owned by the app's lifespan; `status_changed` is the attempt service's hook."""

    def __init__(
        self,
        sessions: Sessions,
        *,
        public_url: str,
        webhook_url: str | None = None,
        notify_urls: Sequence[str] = (),
        delivery: Delivery | None = None,
        destinations: Destinations | None = None,
    ):
        self.sessions = sessions
        self.destinations = destinations or Destinations()
        self.public_url = public_url
        self.webhook_url = webhook_url
        # Apprise URLs (checked by the settings), each with how the log names it
        self.services = [(_service_label(place, url), url) for place, url in enumerate(notify_urls, 1)]
        self.delivery = delivery or Delivery()  # read at every use: tests shorten it on a running dashboard
        self.rate_limit = RateLimit()
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
                preset_webhook = attempt.revision.preset.webhook_url
            webhooks = [
                url
                for url in dict.fromkeys((self.webhook_url, preset_webhook))
                if url and self._within_limit(url, f"webhook {redacted_url(url)}", notice)
            ]
            services = [(label, url) for label, url in self.services if self._within_limit(url, label, notice)]
            await asyncio.gather(
                self._post_webhooks(webhooks, notice), *(self._tell(label, url, notice) for label, url in services)
            )
        except asyncio.CancelledError:
            raise
        except Exception:  # a notification never takes anything down with it
            log.exception("attempt %d: could not notify of %s", attempt_id, status, extra={"attempt_id": attempt_id})

    def _within_limit(self, url: str, label: str, notice: Notice) -> bool:
        if self.rate_limit.allows(url, self.delivery):
            return True
        log.warning(
            "attempt %d: %s not told it is %s: it was told %d times in the last %g s",
            notice.attempt_id, label, notice.status, self.delivery.most, self.delivery.per,
            extra={"attempt_id": notice.attempt_id, "host": notice.host},
        )  # fmt: skip
        return False

    async def _post_webhooks(self, urls: list[str], notice: Notice) -> None:
        if not urls:
            return
        message = slack_message(notice)
        async with httpx.AsyncClient(timeout=self.delivery.timeout, follow_redirects=False) as client:
            await asyncio.gather(*(self._post(client, url, message, notice) for url in urls))

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

    async def _tell(self, label: str, url: str, notice: Notice) -> None:
        """Sends through Apprise in a thread, each try waited on for twice the timeout (its connect,
        then its read). Apprise says only whether a send worked, so every failure is tried again."""
        # In the thread too: Apprise's first URL loads its 190 plugins, a tenth of a second.
        service = await asyncio.to_thread(_service, url, self.delivery.timeout)
        if service is None:  # the settings checked every URL
            log.warning(
                "attempt %d: %s is no Apprise URL", notice.attempt_id, label,
                extra={"attempt_id": notice.attempt_id, "host": notice.host},
            )  # fmt: skip
            return
        if scheme := HTTP_SCHEMES.get(service.schema):
            try:  # checked each time it is sent, as a webhook is; not pinned: TLS would check the address
                await self.destinations.checked_address(f"{scheme}://{service.host}")
            except InvalidInput as exc:
                log.warning(
                    "attempt %d: %s refused: %s", notice.attempt_id, label, exc,
                    extra={"attempt_id": notice.attempt_id, "host": notice.host},
                )  # fmt: skip
                return
        title, body = apprise_message(notice)
        delivery = self.delivery
        backoff = Backoff(delivery.backoff)
        for tries in range(1, delivery.tries + 1):
            try:
                async with asyncio.timeout(2 * delivery.timeout):
                    sent = await asyncio.to_thread(
                        service.notify,
                        title=title,
                        body=body,
                        body_format=apprise.NotifyFormat.TEXT,
                        notify_type=APPRISE_TYPES[notice.status],
                    )
            except TimeoutError:
                problem = f"no answer in {2 * delivery.timeout:g} s"
            except Exception as exc:  # a service's own error; its text may quote the URL
                problem = type(exc).__name__
            else:
                if sent:
                    return
                problem = "not sent; Apprise's log says why"
            if tries < delivery.tries:
                await asyncio.sleep(backoff.next())
        log.warning(
            "attempt %d: %s was not told it is %s after %d tries (%s)",
            notice.attempt_id, label, notice.status, tries, problem,
            extra={"attempt_id": notice.attempt_id, "host": notice.host},
        )  # fmt: skip


def _service(url: str, timeout: float) -> apprise.NotifyBase | None:
    """A fresh Apprise service for one message: its tries are spaced by app.backoff, not by
    Apprise's own sleep between sends, and each waits `timeout` to connect and to read."""
    service = apprise.Apprise.instantiate(url)
    if service is None:
        return None
    service.request_rate_per_sec = 0
    service.socket_connect_timeout = service.socket_read_timeout = timeout
    if service.schema in HTTP_SCHEMES:
        service.redirects = False  # a webhook's rule: a redirect could lead where it may not go
    return service


def _service_label(place: int, url: str) -> str:
    """How the log names an Apprise URL: its place in the setting and its scheme, and its host where
    that is the server it reaches; the rest may be a key."""
    scheme = urlsplit(url).scheme.lower()
    return f"notify URL {place} ({redacted_url(url) if scheme in HTTP_SCHEMES else f'{scheme}://…'})"
