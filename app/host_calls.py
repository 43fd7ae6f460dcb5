"""Work on a host asked by a process that does not own it, done by the controller that does.

Only the owner of a host talks to it (app.leases): a web process, or a controller asked about
another's host, writes the work as a row of host_call (a kind and its JSON payload) and waits for
the answer in that row. The owner claims each row under the host's fence, in the transaction
that marks it claimed, so that a call is carried out by the host's owner only, never by one whose
lease has moved on; it writes the answer, or the error as its class and sentence, which the asker
raises again. A call not claimed by its deadline is left: whoever asked has stopped waiting, and
said so.

A claimer that dies or loses the host before answering would leave its calls unanswered (a stop
among them, kept claimable so that it is still sent), so the host's new owner takes them over, as
fenced as a first claim. It carries out again only the kinds that are safe twice (AGAIN); of any
other, whether it happened is unknown, and the asker is told so rather than have it done twice.
The first answer written is the one kept.

Where this process owns the host (always, on SQLite), `on_host` runs the work here, with the same
JSON in and out, so that both paths are one.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable
from datetime import timedelta
from typing import Any

from sqlalchemy import ColumnElement, Row, delete, exists, func, insert, or_, select, update
from sqlalchemy.ext.asyncio import AsyncSession

from app.db import Sessions
from app.db.models import HostCall, HostLease
from app.errors import HostError, HostUnavailable, LaunchdeckError, LaunchRefused
from app.leases import Fence, LeaseLost, Ownership, SoleOwner

log = logging.getLogger(__name__)

Handler = Callable[[dict[str, Any]], Awaitable[dict[str, Any]]]

LOOK_EVERY = 0.2  # seconds between a controller's looks for calls on its hosts
ANSWER_EVERY = 0.1  # seconds between an asker's looks for the answer
# Seconds between a controller's looks for calls to take over: a lease takes seconds to move
# (app.leases), and no index serves this look, which reads every call of the last day (KEEP).
TAKE_OVER_EVERY = 1.0
NO_OWNER = "no controller owns it now: start one (`launchdeck serve --role controller`), or check its pins"
KEEP = timedelta(days=1)  # answered calls are kept this long, for whoever looks into one

# The kinds a host's new owner carries out again when their claimer died or lost the host before
# answering (app.launch.attempts and app.perf.runner register them): twice does no harm.
AGAIN = frozenset(
    {
        "preflight",  # reads the host (the GPUs, SGLang's parser, a port bound and let go): writes nothing
        # Reads the attempt's process from its row again and signals what is left of it: an adopted
        # server's pid while its start time matches, a Slurm job while not ended, a launched one's
        # group by its id (as a first stop does), which takes no signal once it has ended.
        "signal",
        "stop-process",  # reads the pid's directory and group again; refuses one launchdeck did not start
        "benchmark-stop",  # cancels the run this process holds, if any (a new owner holds none): nothing on the host
    }
)
OUTCOME_UNKNOWN = (
    "the controller carrying out this {kind} stopped before answering (it died or lost the host), so "
    "whether it happened is unknown: look at the host's page before asking again"
)


def error_as_json(exc: LaunchdeckError) -> dict[str, Any]:
    return {"type": type(exc).__name__, "message": str(exc), "host": getattr(exc, "host", None)}


def _error_classes(base: type[LaunchdeckError]) -> dict[str, type[LaunchdeckError]]:
    found = {base.__name__: base}
    for sub in base.__subclasses__():
        found |= _error_classes(sub)
    return found


def error_from_json(data: dict[str, Any]) -> LaunchdeckError:
    """The error the owner raised, as the same class with the same sentence."""
    cls = _error_classes(LaunchdeckError).get(data["type"], LaunchdeckError)
    exc = cls.__new__(cls)
    Exception.__init__(exc, data["message"])
    if data.get("host") is not None:
        exc.host = data["host"]  # type: ignore[attr-defined]
    if isinstance(exc, LaunchRefused):  # what its HTTP answer reads besides the sentence
        exc.details, exc.preflight = {}, None
    return exc


class HostCalls:
    """Owned by the lifespan. `here` says whether this process does the work for a host itself:
    a controller for the hosts it owns; a web process for none."""

    def __init__(self, sessions: Sessions, ownership: Ownership | None = None, *, controller: bool = True):
        self.sessions = sessions
        self.ownership = ownership or SoleOwner()
        self.controller = controller
        self.handlers: dict[str, Handler] = {}
        self._task: asyncio.Task[None] | None = None
        self._running: set[asyncio.Task[None]] = set()

    def handle(self, kind: str, handler: Handler) -> None:
        self.handlers[kind] = handler

    def here(self, host: str) -> bool:
        return self.controller and self.ownership.owns(host)

    async def on_host(
        self, host: str, kind: str, payload: dict[str, Any], *, wait: float, keep: float | None = None
    ) -> dict[str, Any]:
        """The work done for `host`, here or by its owner; `wait` seconds at most for the owner's
        answer, the call claimable for `keep` seconds (default `wait`): a stop outlives its asker."""
        if self.here(host):
            return await self.handlers[kind](payload)
        return await self.ask(host, kind, payload, wait=wait, keep=keep or wait)

    async def ask(self, host: str, kind: str, payload: dict[str, Any], *, wait: float, keep: float) -> dict[str, Any]:
        async with self.sessions.write.begin() as session:
            owned = await session.scalar(
                select(HostLease.owner).where(HostLease.host == host, HostLease.expires_at > func.now())
            )
            if not owned:
                raise HostUnavailable(host, NO_OWNER)
            expiry = timedelta(seconds=keep)
            call_id = await session.scalar(
                insert(HostCall)
                .values(host=host, kind=kind, payload=payload, asked_at=func.now(), deadline=func.now() + expiry)
                .returning(HostCall.id)
            )
        until = time.monotonic() + wait
        while time.monotonic() < until:
            await asyncio.sleep(ANSWER_EVERY)
            async with self.sessions.read() as session:
                found = (
                    await session.execute(
                        select(HostCall.answered_at, HostCall.answer, HostCall.error).where(HostCall.id == call_id)
                    )
                ).one()
            if found.answered_at is not None:
                if found.error is not None:
                    raise error_from_json(found.error)
                return found.answer or {}
        later = f"; it is still carried out if its controller takes it within {keep - wait:g} s" if keep > wait else ""
        raise HostUnavailable(host, f"its controller did not answer within {wait:g} s{later}")

    def start(self) -> None:
        """A controller's side: claims and carries out the calls on the hosts it owns."""
        self._task = asyncio.create_task(self._serve_forever(), name="host-calls")

    async def close(self) -> None:
        tasks = [*self._running, *([self._task] if self._task else [])]
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)

    async def _serve_forever(self) -> None:
        pruned = looked_back = 0.0
        while True:
            try:
                take_over = time.monotonic() - looked_back > TAKE_OVER_EVERY
                if take_over:
                    looked_back = time.monotonic()
                await self.serve(take_over=take_over)
                if time.monotonic() - pruned > 600:
                    pruned = time.monotonic()
                    async with self.sessions.write.begin() as session:
                        await session.execute(delete(HostCall).where(HostCall.asked_at < func.now() - KEEP))
            except Exception as exc:  # the database away: the calls wait in their rows
                log.warning("host calls: %s", exc)
            await asyncio.sleep(LOOK_EVERY)

    async def serve(self, *, take_over: bool = True) -> None:
        """Claims each waiting call on a host this controller owns, and carries it out in the
        background; with `take_over`, each unanswered one too whose claimer holds the host no more."""
        waiting: ColumnElement[bool] = HostCall.claimed_by.is_(None)
        if take_over:
            held = exists().where(
                HostLease.host == HostCall.host,
                HostLease.owner == HostCall.claimed_by,
                HostLease.expires_at > func.now(),
            )
            waiting = or_(waiting, HostCall.answered_at.is_(None) & ~held)
        async with self.sessions.read() as session:
            found = (
                await session.execute(
                    select(HostCall.id, HostCall.host, HostCall.claimed_by).where(
                        waiting, HostCall.deadline > func.now()
                    )
                )
            ).all()
        for call_id, host, claimer in found:
            if not self.here(host):
                continue
            try:
                fence = self.ownership.fence(host)
                if claimer is not None and (fence is None or claimer == fence.owner):
                    continue  # a sole owner has no lease to lose; and this controller's own claim runs here
                async with self.sessions.write.begin() as session:
                    if fence is not None:
                        await fence.check(session)
                    claimed = await self._claim(session, call_id, host, claimer, fence)
            except LeaseLost:
                continue
            if claimed is not None:
                task = asyncio.create_task(self._carry_out(call_id, claimed.kind, claimed.payload))
                self._running.add(task)
                task.add_done_callback(self._running.discard)

    async def _claim(
        self, session: AsyncSession, call_id: int, host: str, claimer: str | None, fence: Fence | None
    ) -> Row[tuple[str, dict[str, Any]]] | None:
        """The call's kind and payload, claimed to carry out here; None where another claimed or
        answered it since the look, or where it is taken over of a kind not safe twice: answered here."""
        claimed = (
            await session.execute(
                update(HostCall)
                .where(
                    HostCall.id == call_id,
                    HostCall.claimed_by.is_not_distinct_from(claimer),
                    HostCall.answered_at.is_(None),  # its claimer may answer yet
                )
                .values(claimed_by=fence.owner if fence else "this process")
                .returning(HostCall.kind, HostCall.payload)
            )
        ).first()
        if claimed is None or claimer is None:
            return claimed
        log.warning(
            "host call %s (%s) on %s taken over from %s, which holds it no more", call_id, claimed.kind, host, claimer
        )
        if claimed.kind in AGAIN:
            return claimed
        error = error_as_json(HostError(host, OUTCOME_UNKNOWN.format(kind=claimed.kind)))
        await session.execute(
            update(HostCall).where(HostCall.id == call_id).values(answered_at=func.now(), error=error)
        )
        return None

    async def _carry_out(self, call_id: int, kind: str, payload: dict[str, Any]) -> None:
        answer: dict[str, Any] | None = None
        error: dict[str, Any] | None = None
        try:
            handler = self.handlers.get(kind)
            if handler is None:
                raise LaunchdeckError(f"this controller does not know the call {kind!r}: is it an older version?")
            answer = await handler(payload)
        except LaunchdeckError as exc:
            error = error_as_json(exc)
        except Exception as exc:
            log.exception("host call %s (%s)", call_id, kind)
            error = {"type": "LaunchdeckError", "message": f"the controller failed: {type(exc).__name__}: {exc}"}
        async with self.sessions.write.begin() as session:
            await session.execute(  # the first answer stays: a controller that lost the call may yet write one
                update(HostCall)
                .where(HostCall.id == call_id, HostCall.answered_at.is_(None))
                .values(answered_at=func.now(), answer=answer, error=error)
            )
