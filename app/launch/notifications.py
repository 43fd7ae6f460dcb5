"""Telling people that an attempt became ready, failed or turned unhealthy, through incoming webhooks
(the dashboard's own, a setting, and its preset's, both told when both are set) and through Apprise
URLs (a setting: PagerDuty, email, Teams, Discord and the rest of Apprise's services).

A webhook's message is Slack's incoming-webhook JSON, `{"text": ...}`, which Mattermost reads as it
is; an Apprise service gets the same lines as a title and a plain-text body.

Each change to tell of is a `notification` row, written in the transaction that writes the status
(`queue`), so that no crash loses it. The controller that owns the attempt's host sends it (on
SQLite, the one process), each destination in a background task that reads what it says in a
session of its own, closed before it sends, with a short timeout and a few tries; Apprise, which
blocks, in a thread. Each destination done with it (told, or given up on) is recorded in the row
under the host's fence, so a controller that takes the host over tells only those not done yet, and
a webhook gets the same `Idempotency-Key` header on every try, from whichever controller: a receiver
that keeps the keys it has seen hears each change exactly once, across failovers. A destination
that is down or slow costs a log line, nothing else: the follower that saw the change never waits
on it. One destination hears at most a few messages a minute, so a sweep whose every point fails
does not page anyone fifty times.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import logging
import time
from collections import deque
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from functools import partial
from urllib.parse import urlsplit

import apprise
import httpx
from sqlalchemy import delete, select
from sqlalchemy.ext.asyncio import AsyncSession

from app.backoff import Backoff
from app.clock import utcnow
from app.config import Destinations, pinned, redacted_url
from app.db import Sessions
from app.db.history import load_attempt
from app.db.models import Attempt, Host, Notification
from app.diagnose.stored import StoredDiagnosis
from app.errors import InvalidInput
from app.leases import Fence, LeaseLost, Ownership, SoleOwner
from app.states import AttemptStatus

log = logging.getLogger(__name__)

NOTIFIED_STATUSES = frozenset({AttemptStatus.READY, AttemptStatus.FAILED, AttemptStatus.UNHEALTHY})
LOOK_EVERY = 1.0  # seconds between a sender's looks for changes written by other processes
STALE = timedelta(hours=1)  # a change older than this when first looked at is not sent: news that late misleads
KEEP = timedelta(days=7)  # sent rows are kept this long, for whoever looks into a message
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


def queue(session: AsyncSession, attempt_id: int, status: AttemptStatus) -> None:
    """Adds the change to tell people of to the transaction that writes it."""
    session.add(Notification(attempt_id=attempt_id, status=status))


@dataclass(frozen=True)
class Waiting:
    """A notification row not done yet, and the host whose owner sends it."""

    id: int
    attempt_id: int
    status: AttemptStatus
    at: datetime
    delivered: frozenset[str]
    host: str

    @property
    def key(self) -> str:
        """The same on every try of every destination, from any controller."""
        return f"launchdeck-notification-{self.id}"


class Notifier:
    """Owned by the app's lifespan; `status_changed` is the attempt service's hook, `start` a
    controller's: it sends the changes on the hosts it owns."""

    def __init__(
        self,
        sessions: Sessions,
        *,
        public_url: str,
        webhook_url: str | None = None,
        notify_urls: Sequence[str] = (),
        delivery: Delivery | None = None,
        destinations: Destinations | None = None,
        ownership: Ownership | None = None,
    ):
        self.sessions = sessions
        self.destinations = destinations or Destinations()
        self.public_url = public_url
        self.webhook_url = webhook_url
        # Apprise URLs (checked by the settings), each with how the log names it
        self.services = [(_service_label(place, url), url) for place, url in enumerate(notify_urls, 1)]
        self.delivery = delivery or Delivery()  # read at every use: tests shorten it on a running dashboard
        self.ownership = ownership or SoleOwner()
        self.rate_limit = RateLimit()
        self._wake = asyncio.Event()
        self._sending: set[int] = set()  # rows being sent here
        self._tasks: set[asyncio.Task[None]] = set()
        self._loop: asyncio.Task[None] | None = None

    def status_changed(self, attempt_id: int, status: AttemptStatus) -> None:
        """Returns at once: a change written here is sent without waiting for the next look."""
        if status in NOTIFIED_STATUSES:
            self._wake.set()

    def start(self) -> None:
        self._loop = asyncio.create_task(self._send_forever(), name="notifications")

    async def close(self) -> None:
        """Whatever is cut short stays in its row, for the next owner of the host."""
        tasks = [*self._tasks, *([self._loop] if self._loop else [])]
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)

    async def _send_forever(self) -> None:
        pruned = 0.0
        while True:
            try:
                await self.send_waiting()
                if time.monotonic() - pruned > 600:
                    pruned = time.monotonic()
                    async with self.sessions.write.begin() as session:
                        await session.execute(delete(Notification).where(Notification.done_at < utcnow() - KEEP))
            except Exception as exc:  # the database away: the changes wait in their rows
                log.warning("notifications: %s", exc)
            self._wake.clear()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._wake.wait(), LOOK_EVERY)

    async def send_waiting(self) -> None:
        """Starts sending each change not done yet whose attempt's host this process owns."""
        async with self.sessions.read() as session:
            rows = await session.execute(
                select(
                    Notification.id,
                    Notification.attempt_id,
                    Notification.status,
                    Notification.at,
                    Notification.delivered,
                    Host.name,
                )
                .join(Attempt, Attempt.id == Notification.attempt_id)
                .join(Host, Host.id == Attempt.host_id)
                .where(Notification.done_at.is_(None))
                .order_by(Notification.id)
                .limit(500)
            )
            waiting = [Waiting(r[0], r[1], r[2], r[3], frozenset(r[4]), r[5]) for r in rows]
        for row in waiting:
            if row.id in self._sending or not self.ownership.owns(row.host):
                continue
            try:
                fence = self.ownership.fence(row.host)
            except LeaseLost:
                continue
            self._sending.add(row.id)
            task = asyncio.create_task(self._send(row, fence), name=f"notify-{row.attempt_id}-{row.status}")
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)

    async def _send(self, row: Waiting, fence: Fence | None) -> None:
        try:
            if utcnow() - row.at > STALE:
                log.warning(
                    "attempt %d: nobody told it was %s: that was more than %d minutes ago",
                    row.attempt_id, row.status, STALE / timedelta(minutes=1),
                    extra={"attempt_id": row.attempt_id, "host": row.host},
                )  # fmt: skip
                await self._record(row, fence, done=True)
                return
            async with self.sessions.read() as session:
                attempt = await load_attempt(session, row.attempt_id)
                notice = Notice.of(attempt, row.status, public_url=self.public_url)
                preset_webhook = attempt.revision.preset.webhook_url
            webhooks = [
                url
                for url in dict.fromkeys((self.webhook_url, preset_webhook))
                if url and _key(url) not in row.delivered
            ]
            services = [(label, url) for label, url in self.services if _key(url) not in row.delivered]

            async def told(url: str, label: str, send: Callable[[], Awaitable[None]]) -> None:
                if self._within_limit(url, label, notice):
                    await send()
                await self._record(row, fence, _key(url))

            outcomes = await asyncio.gather(
                *(
                    told(url, f"webhook {redacted_url(url)}", partial(self._post, url, notice, row.key))
                    for url in webhooks
                ),
                *(told(url, label, partial(self._tell, label, url, notice)) for label, url in services),
                return_exceptions=True,  # each destination ends before the row may be looked at again
            )
            for outcome in outcomes:
                if isinstance(outcome, BaseException):
                    raise outcome
            await self._record(row, fence, done=True)
        except asyncio.CancelledError:
            raise
        except LeaseLost:  # the host's new owner tells those not done yet
            log.info(
                "attempt %d: its host changed hands while telling of %s; the new owner tells the rest",
                row.attempt_id, row.status, extra={"attempt_id": row.attempt_id, "host": row.host},
            )  # fmt: skip
        except Exception:  # a notification never takes anything down with it
            log.exception(
                "attempt %d: could not notify of %s", row.attempt_id, row.status, extra={"attempt_id": row.attempt_id}
            )
        finally:
            self._sending.discard(row.id)

    async def _record(self, row: Waiting, fence: Fence | None, key: str | None = None, *, done: bool = False) -> None:
        """Records a destination done with the change, or the change done, if the host is still this process's."""
        self._check_owned(row.host)
        async with self.sessions.write.begin() as session:
            if fence is not None:
                await fence.check(session)
            notification = await session.get(Notification, row.id, with_for_update=True)
            if notification is None:  # its attempt was deleted
                return
            if key is not None and key not in notification.delivered:
                notification.delivered = [*notification.delivered, key]
            if done:
                notification.done_at = utcnow()

    def _check_owned(self, host: str) -> None:
        """Raises LeaseLost unless the host is still this process's: asked before each try too, as a
        controller woken from a stall past its lease finds its post timed out meanwhile, and must
        not post again what the host's new owner tells."""
        if not self.ownership.owns(host):
            raise LeaseLost(f"{host}: no longer this process's")

    def _within_limit(self, url: str, label: str, notice: Notice) -> bool:
        if self.rate_limit.allows(url, self.delivery):
            return True
        log.warning(
            "attempt %d: %s not told it is %s: it was told %d times in the last %g s",
            notice.attempt_id, label, notice.status, self.delivery.most, self.delivery.per,
            extra={"attempt_id": notice.attempt_id, "host": notice.host},
        )  # fmt: skip
        return False

    async def _post(self, url: str, notice: Notice, key: str) -> None:
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
        message, headers = slack_message(notice), {**headers, "Idempotency-Key": key}
        delivery = self.delivery
        backoff = Backoff(delivery.backoff)
        async with httpx.AsyncClient(timeout=delivery.timeout, follow_redirects=False) as client:
            for tries in range(1, delivery.tries + 1):
                self._check_owned(notice.host)
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
            self._check_owned(notice.host)
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


def _key(url: str) -> str:
    """How a notification row names a destination done with it: never the URL, which may hold a secret."""
    return hashlib.sha256(url.encode()).hexdigest()[:16]


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
