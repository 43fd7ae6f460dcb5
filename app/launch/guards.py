"""What stops a launch before any attempt is recorded: a host the person may not use, a
configuration that already failed (unless the launch confirms it knows) and a blocking preflight
check (unless overridden with a reason).

"The same configuration" is the same preset revision, or the same command line and environment:
the argv an attempt ran less its port, and its environment less CUDA_VISIBLE_DEVICES (each launch
may take another port and other GPUs). Only failures filed under a signature
count, those whose log showed an error: a server stopped from outside, or one that never started,
says nothing of the arguments.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from sqlalchemy import func, select
from sqlalchemy.ext.asyncio import AsyncSession

from app.accounts.users import BUILT_IN_ADMIN, SERVICE_TOKEN
from app.db.models import Attempt, PresetRevision, Signature, User
from app.errors import AccessRefused, FailedBefore, HostNotAllowed, PreflightBlocked
from app.launch.preflight import Preflight
from app.states import AttemptStatus, Role

TITLE_LENGTH = 160


@dataclass(frozen=True)
class LaunchPermission:
    """Which hosts `person` may launch and preflight on: those with one of `labels`; None, every
    host. The web layer builds it from the caller; the domain only checks it."""

    person: str
    labels: tuple[str, ...] | None = None

    def check(self, host: str, host_labels: Sequence[str]) -> None:
        """Refuses a host without one of the labels, before anything runs on it."""
        if self.labels is None or set(self.labels) & set(host_labels):
            return
        has = f"has labels {', '.join(host_labels)}" if host_labels else "has no labels"
        raise HostNotAllowed(
            f"{self.person} may launch only on hosts labelled {' or '.join(self.labels)}; {host} {has}"
        )


async def launch_permission(session: AsyncSession, person: str) -> LaunchPermission:
    """The one rule for every action that runs or stops something on a host: launch, relaunch,
    preflight, stop (an attempt, a process, a benchmark, a sweep), benchmark, and a sweep and each
    of its points. The access token's holders and admins act everywhere; an enabled operator on the
    hosts their labels allow; anyone else is refused (AccessRefused says why). A request asks once;
    long-running work asks again before each step, so it ends once its creator loses the right.
    Editing presets and teaching rules run nothing on a host: the role alone decides them."""
    if person in (SERVICE_TOKEN, BUILT_IN_ADMIN):
        return LaunchPermission(person)
    user = await session.scalar(select(User).where(User.name == person))
    if user is None or user.disabled_at is not None:
        raise AccessRefused(f"{person}'s account is disabled, so nothing more is launched in their name")
    if not user.role.allows(Role.OPERATOR):
        raise AccessRefused(f"{person} no longer has the operator role, so nothing more is launched in their name")
    if user.role.allows(Role.ADMIN) or not user.host_labels:
        return LaunchPermission(person)
    return LaunchPermission(person, tuple(user.host_labels))


def configuration(argv: Sequence[str], env: Mapping[str, str]) -> tuple[list[str], dict[str, str]]:
    """What makes two launches the same, whichever port and GPUs each took."""
    return without_port(argv), {key: value for key, value in env.items() if key != "CUDA_VISIBLE_DEVICES"}


def configuration_key(argv: Sequence[str], env: Mapping[str, str]) -> str:
    """The configuration as a digest kept on each attempt (`Attempt.configuration`), so the
    attempts of one configuration are found by an index. Migration 0013 computed it for the
    attempts made before it with the same rule."""
    kept_argv, kept_env = configuration(argv, env)
    text = json.dumps([kept_argv, kept_env], sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(text.encode()).hexdigest()


def without_port(argv: Sequence[str]) -> list[str]:
    """The command line as a configuration: `--port N` (or `--port=N`) left out."""
    kept: list[str] = []
    skip = False
    for arg in argv:
        if skip:
            skip = False
        elif arg == "--port":
            skip = True
        elif not arg.startswith("--port="):
            kept.append(arg)
    return kept


@dataclass(frozen=True)
class PastFailures:
    count: int
    last_attempt: int
    last_at: datetime
    title: str  # the last failure's signature: "Type: message"
    fingerprint: str

    def sentence(self) -> str:
        times = "once" if self.count == 1 else f"{self.count} times"
        return f"this configuration failed {times}, last on {self.last_at:%Y-%m-%d %H:%M} UTC with {self.title}"

    def as_dict(self) -> dict[str, Any]:
        return {
            "count": self.count,
            "last_attempt": self.last_attempt,
            "last_at": self.last_at.isoformat(),
            "title": self.title,
            "fingerprint": self.fingerprint,
            "attempt_url": f"/attempts/{self.last_attempt}",
            "signature_url": f"/errors/{self.fingerprint}",
        }


async def past_failures(
    session: AsyncSession, revision: PresetRevision, argv: Sequence[str], env: Mapping[str, str]
) -> PastFailures | None:
    """Earlier attempts of this revision, or of the same configuration, that failed with an error:
    each side counted from its own index (joined by OR, the planner may walk every failure), then
    the newest read by its id."""
    failed = select(func.count(), func.max(Attempt.id)).where(
        Attempt.status == AttemptStatus.FAILED, Attempt.signature_id.is_not(None)
    )
    of_revision = (await session.execute(failed.where(Attempt.preset_revision_id == revision.id))).one()
    of_configuration = (
        await session.execute(
            failed.where(
                Attempt.configuration == configuration_key(argv, env), Attempt.preset_revision_id != revision.id
            )
        )
    ).one()
    count = of_revision[0] + of_configuration[0]
    newest = max(of_revision[1] or 0, of_configuration[1] or 0)
    if not count:
        return None
    last = (
        await session.execute(
            select(Attempt.id, Attempt.ended_at, Attempt.created_at, Attempt.error, Signature)
            .join(Signature, Attempt.signature_id == Signature.id)
            .where(Attempt.id == newest)
        )
    ).one()
    signature = last.Signature
    title = f"{signature.exception_type}: {signature.message}" if signature.exception_type else signature.message
    title = title or last.error
    if len(title) > TITLE_LENGTH:
        title = title[: TITLE_LENGTH - 1] + "…"
    return PastFailures(count, last.id, last.ended_at or last.created_at, title, signature.fingerprint)


def refuse_failed_before(past: PastFailures) -> FailedBefore:
    return FailedBefore(
        f"{past.sentence()}; confirm to launch it again",
        {"guard": "failed_before", "failed_before": past.as_dict()},
    )


def refuse_blocked(preflight: Preflight) -> PreflightBlocked:
    failed = [check for check in preflight.checks if not check.ok and check.blocking]
    named = "; ".join(f"{check.name}: {check.message}" for check in failed)
    details: dict[str, Any] = {"guard": "preflight", "preflight": preflight.as_dict()}
    suggested = next((c.detail["suggested_port"] for c in failed if "suggested_port" in c.detail), None)
    if suggested is not None:
        details["suggested_port"] = suggested
    message = f"preflight failed ({named}); nothing was launched: fix it, or override with a reason"
    return PreflightBlocked(message, details, preflight)
