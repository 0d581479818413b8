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


@dataclass(frozen=True, slots=True)
class LoggedIn:
    cookie: str
    session: Session


def cookie_hash(cookie: str) -> bytes:
    return hashlib.sha256(cookie.encode()).digest()


async def login(store: ConsoleStore, username: str, password: str, ttl_s: int) -> LoggedIn | None:
    matched = password_matches(await store.password_hash(username), password)  # same time either way
    operator = await store.operator(username) if matched else None  # None too when disabled
    if operator is None:
        await store.audit(ANONYMOUS, "login", f"operator:{username[:40]}", "", "refused", {})
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
