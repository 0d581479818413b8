"""The gateway's one manager session, shared by threads, one call at a time.

Invariants kept here:
- calls are serialized by one lock: two requests are never in flight on one session (answers cannot
  cross on our side);
- the lock wait is bounded; a caller that gives up has sent nothing and never sends later (the call
  runs on the caller's own thread, there is no queue);
- a failed or server-closed session is dropped, never reused; the next call (or the keeper) opens a
  new connection and authenticates it: a new generation;
- no call is ever retried here. Reads may be repeated by their caller; a balance call never is.

A keeper thread authenticates eagerly, re-authenticates after a loss (with capped backoff) and pings
``/api/test/access`` when the session has been idle for ``ping_interval_ms`` (reference §6.1: 20 s;
the server drops a connection silent for 180 s). It skips a tick while a call holds the lock.
"""

from __future__ import annotations

import threading
import time
from typing import Final

from backbone.backoff import exponential_ms
from backbone.logs import get_logger
from backbone.mt5 import metrics
from backbone.mt5.auth import password_hash
from backbone.mt5.protocol import Answer
from backbone.mt5.settings import Mt5GatewaySettings
from backbone.mt5.transport import Credentials, Endpoint, Session, TransportFailure

RETCODE_NOT_PERMITTED: Final = 8
KEEPER_TICK_MAX_S: Final = 1.0
BACKOFF_INITIAL_MS: Final = 200
CLOSE_JOIN_S: Final = 5.0
log = get_logger(__name__)


class ManagerConnection:
    def __init__(self, settings: Mt5GatewaySettings, name: str) -> None:
        self._s, self._name = settings, name
        self._endpoint = Endpoint.from_url(settings.url, settings.tls_ca_file)
        self._creds = Credentials(
            settings.manager_login, password_hash(settings.manager_password.reveal()), settings.agent
        )
        self._lock = threading.Lock()
        self._session: Session | None = None
        self._generation = 0
        self._failures = 0
        self._next_connect_s = 0.0
        self._stop = threading.Event()  # set by close(): no new session after it
        self._keeper: threading.Thread | None = None

    @property
    def generation(self) -> int:
        """How many sessions have been opened (a re-authentication makes it grow)."""
        return self._generation

    def start(self) -> None:
        if self._keeper is None:
            self._keeper = threading.Thread(target=self._keep, name=f"{self._name}-keeper", daemon=True)
            self._keeper.start()

    def close(self) -> None:
        self._stop.set()
        if self._keeper is not None:
            self._keeper.join(CLOSE_JOIN_S)
        if self._lock.acquire(timeout=self._s.lock_timeout_ms / 1000):
            try:
                if self._session is not None and self._session.usable:
                    self._session.call("quit", {})  # polite; the answer does not matter
                self._drop("closed")
            finally:
                self._lock.release()

    def call(self, endpoint: str, params: dict[str, str | int]) -> Answer | TransportFailure:
        """One exchange on the session (opened first if needed). Never retried."""
        started = time.perf_counter()
        if not self._lock.acquire(timeout=self._s.lock_timeout_ms / 1000):
            result: Answer | TransportFailure = TransportFailure("gateway_busy", sent=False)
        else:
            try:
                result = self._call_locked(endpoint, params)
            finally:
                self._lock.release()
        outcome = (
            result.reason
            if isinstance(result, TransportFailure)
            else ("ok" if result.retcode == 0 else "retcode")
        )
        metrics.CALL_SECONDS.labels(self._name, endpoint, outcome).observe(time.perf_counter() - started)
        return result

    def _call_locked(self, endpoint: str, params: dict[str, str | int]) -> Answer | TransportFailure:
        if self._stop.is_set():
            return TransportFailure("gateway_closed", sent=False)
        session = self._ensure_session()
        if isinstance(session, TransportFailure):
            return session
        result = session.call(endpoint, params)
        if isinstance(result, TransportFailure):
            self._drop(result.reason)
        elif result.retcode == RETCODE_NOT_PERMITTED:
            self._drop("not_permitted")  # perhaps no longer authenticated: the next call starts afresh
        elif not session.usable:
            self._drop("server_closed")
        return result

    def _ensure_session(self) -> Session | TransportFailure:
        if self._session is not None and self._session.usable:
            return self._session
        if self._session is not None:
            self._drop("peer_closed")
        opened = Session.open(
            self._endpoint,
            self._creds,
            self._generation + 1,
            self._s.connect_timeout_ms / 1000,
            self._s.call_timeout_ms / 1000,
        )
        if isinstance(opened, TransportFailure):
            self._failures += 1
            delay_ms = exponential_ms(
                self._failures + 1,
                base_ms=BACKOFF_INITIAL_MS,
                cap_ms=max(BACKOFF_INITIAL_MS, self._s.reconnect_backoff_max_ms),
            )
            delay_s = delay_ms / 1000
            self._next_connect_s = time.monotonic() + delay_s
            log.warning(
                "mt5.session_open_failed", gateway=self._name, reason=opened.reason, retcode=opened.retcode
            )
            return opened
        self._failures, self._session, self._generation = 0, opened, opened.generation
        metrics.SESSIONS_OPENED.labels(self._name).inc()
        log.info("mt5.session_opened", gateway=self._name, generation=opened.generation)
        return opened

    def _drop(self, reason: str) -> None:
        if self._session is None:
            return
        generation = self._session.generation
        self._session.close()
        self._session = None
        if reason != "closed":
            metrics.SESSIONS_LOST.labels(self._name, reason).inc()
        log.info("mt5.session_closed", gateway=self._name, generation=generation, reason=reason)

    def _keep(self) -> None:
        tick_s = min(self._s.ping_interval_ms / 4000, KEEPER_TICK_MAX_S)
        while not self._stop.wait(tick_s):
            if not self._lock.acquire(blocking=False):
                continue  # a call is running: traffic keeps the session alive
            try:
                self._keep_locked()
            except Exception:
                log.exception("mt5.keeper_failed", gateway=self._name)
            finally:
                self._lock.release()

    def _keep_locked(self) -> None:
        session = self._session
        if session is None or not session.usable:
            if time.monotonic() >= self._next_connect_s:
                self._ensure_session()
            return
        if session.idle_s() * 1000 >= self._s.ping_interval_ms:
            result = session.call("test/access", {})
            if isinstance(result, TransportFailure) or result.retcode != 0:
                self._drop("ping_failed")
