"""Logging in and out, and the session every request carries. The cookie is 32 random bytes; the
store keeps only its SHA-256, so a read of the sessions table opens no session. Each session has
its own CSRF token, which every form sends back. A refused login is audited, and answers the same
whether the name exists or not."""

from __future__ import annotations

import hashlib
import secrets
from dataclasses import dataclass

from ops_console.application.ports import ConsoleStore, Session
from ops_console.domain.operators import password_matches

ANONYMOUS = "(anonymous)"
FAILURES_MAX = 5  # refused logins of one name within FAILURE_WINDOW_S lock that name until they age out
FAILURE_WINDOW_S = 15 * 60


class Locked(Exception):
    """Too many refused logins for this name lately: even the right password waits."""


@dataclass(frozen=True, slots=True)
class LoggedIn:
    cookie: str
    session: Session


def cookie_hash(cookie: str) -> bytes:
    return hashlib.sha256(cookie.encode()).digest()


async def login(store: ConsoleStore, username: str, password: str, ttl_s: int) -> LoggedIn | None:
    """A session for the right password, None for a wrong one (audited); ``Locked`` after
    FAILURES_MAX refusals of the name within FAILURE_WINDOW_S, the right password included."""
    target = f"operator:{username[:40]}"
    if await store.refused_logins(target, FAILURE_WINDOW_S) >= FAILURES_MAX:
        await store.audit(ANONYMOUS, "login", target, "locked: too many refused logins", "refused", {})
        raise Locked
    matched = password_matches(await store.password_hash(username), password)  # same time either way
    operator = await store.operator(username) if matched else None  # None too when disabled
    if operator is None:
        await store.audit(ANONYMOUS, "login", target, "wrong name or password", "refused", {})
        return None
    cookie, csrf = secrets.token_urlsafe(32), secrets.token_urlsafe(32)
    await store.open_session(cookie_hash(cookie), operator.username, csrf, ttl_s)
    await store.audit(operator.username, "login", f"operator:{operator.username}", "", "ok", {})
    session = await store.session(cookie_hash(cookie))
    assert session is not None
    return LoggedIn(cookie, session)


async def current(store: ConsoleStore, cookie: str | None) -> Session | None:
    """The session of this cookie, if it is open, unexpired and its operator not disabled."""
    if not cookie or len(cookie) > 100:
        return None
    return await store.session(cookie_hash(cookie))


async def logout(store: ConsoleStore, cookie: str, username: str) -> None:
    await store.close_session(cookie_hash(cookie))
    await store.audit(username, "logout", f"operator:{username}", "", "ok", {})


def csrf_matches(session: Session, sent: str | None) -> bool:
    return sent is not None and secrets.compare_digest(session.csrf_token.encode(), sent.encode())
