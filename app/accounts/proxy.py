"""Single sign-on behind a proxy: a trusted proxy (oauth2-proxy, say) has logged the person in and
names them in a request header; launchdeck believes that header only from the proxies' own
addresses, and makes an account the first time it sees a name.

Such an account has no password (nothing a password matches), so its person comes in through the
proxy only; disabling it, or changing its role, works as for any account. Names are taken
lower-cased and must fit the users table's rules: an email address is refused rather than cut to
its local part, which could let ann@one.example sign in as ann@two.example's account."""

from __future__ import annotations

import logging

from sqlalchemy import select
from sqlalchemy.exc import IntegrityError

from app import audit
from app.accounts.limits import MAX_KEYS
from app.accounts.logins import Login
from app.accounts.users import BUILT_IN_ADMIN, NAME
from app.db import Sessions
from app.db.models import User
from app.errors import AccessRefused
from app.states import Role

log = logging.getLogger(__name__)


class IgnoredHeaders:
    """Sign-on headers from anyone but a proxy: someone trying to name themselves, never believed.
    Counted per address, and logged at the first from each, so a flood of them writes one line."""

    def __init__(self) -> None:
        self.counts: dict[str, int] = {}

    def note(self, header: str, address: str) -> None:
        seen = self.counts.get(address, 0)
        if seen or len(self.counts) < MAX_KEYS:
            self.counts[address] = seen + 1
        if not seen:
            log.warning(
                "ignored the %s header from %s, which is not in LAUNCHDECK_AUTH_PROXY_ADDRESSES "
                "(more from it are counted, not logged)",
                header,
                address,
            )


async def proxy_login(sessions: Sessions, named: str, *, default_role: Role, remote_addr: str) -> Login:
    """The person the proxy names, their account made with `default_role` the first time; raises
    AccessRefused with a sentence for a name that cannot be an account, or a disabled account."""
    name = named.strip().lower()
    if not NAME.fullmatch(name) or name == BUILT_IN_ADMIN:
        raise AccessRefused(
            f"the sign-on proxy names you {named[:80]!r}, which cannot be a launchdeck user name (1-64 lower-case "
            f"letters, digits, '.', '_' or '-', and not {BUILT_IN_ADMIN!r}); ask an admin to have the proxy send a "
            "plain user name"
        )
    async with sessions.read() as session:
        user = await session.scalar(select(User).where(User.name == name))
    if user is None:
        user = await _add_proxy_user(sessions, name, default_role, remote_addr)
    if user.disabled_at is not None:
        raise AccessRefused(f"the account {name!r} is disabled; ask an admin to enable it")
    return Login(name=user.name, role=Role(user.role), user_id=user.id)


async def _add_proxy_user(sessions: Sessions, name: str, role: Role, remote_addr: str) -> User:
    """One short unit of work that awaits only the database. Two first requests at once both get
    the account: on SQLite the second waits for the write lock and then finds it; elsewhere the
    unique name refuses the second insert, and the account is read again."""
    try:
        async with sessions.write() as session:
            user = await session.scalar(select(User).where(User.name == name))
            if user is not None:
                return user
            user = User(name=name, password_hash="", role=role)  # no password matches an empty hash
            session.add(user)
            audit.record(
                session,
                actor=name,
                action="user-created",
                target=name,
                remote_addr=remote_addr,
                detail={"by": "proxy", "role": str(role)},
            )
            await session.commit()
            log.info("made the account %s (%s) for the sign-on proxy's first request from them", name, role)
            return user
    except IntegrityError:
        async with sessions.read() as session:
            found = await session.scalar(select(User).where(User.name == name))
        if found is None:
            raise
        return found
