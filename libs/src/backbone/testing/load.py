"""A load driver for the whole product (``System``): card deposits driven from outside, the way the
broker's server would, through the product's HTTP APIs only.

One deposit = deposit intent (mt5-credit) -> payment (payment-state) -> wait AUTHORIZED (reading
``GET /payments/{id}``) -> capture -> wait for its credit to be ``done`` (reading mt5-credit's
``GET /deposit-intents/{ref}``). A read after the first one sends the last ``ETag`` with ``Prefer:
wait`` so that the server answers when the record changes (``backbone.changes``), as a broker's
client should; ``wait_s=0`` polls with a backoff instead. Every step's client-side time is
recorded on a ``Deposit`` (the history), so a benchmark or a fault drill can judge what happened afterwards.

Two ways of offering load, both with a bound on threads and on the whole run's duration:
``run_open_loop`` (a fixed offered rate, whatever the system does: a queue builds when it falls
behind) and ``run_closed_loop`` (at most ``concurrency`` deposits in flight: saturation).

Also the pure arithmetic the benchmark reports (percentiles, per-deposit ratios), kept here so a
unit test can check it without a stack.
"""

from __future__ import annotations

import http.client
import itertools
import json
import math
import threading
import time
from collections.abc import Callable, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlsplit

from backbone.testing.system import System
from backbone.testing.system_client import new_key
from backbone.testing.system_config import CREDIT_TOKEN, MERCHANT_TOKEN

POLL_INTERVAL_MIN_S = 0.05
POLL_INTERVAL_MAX_S = 0.2
CALL_ATTEMPTS_MAX = 12  # one request; an overloaded service answers 503 "retry with the same key"
CALL_BACKOFF_MAX_S = 1.0
RETRYABLE = frozenset({0, 429, 502, 503, 504})  # 0: no answer at all
STEP_TIMEOUT_S = 120.0  # one wait (authorized, credited): past it the deposit is recorded as failed


@dataclass
class Deposit:
    """One deposit's history, client-side times in epoch seconds (``time.time()``)."""

    index: int
    login: int
    amount_minor: int
    deposit_reference: str = ""
    payment_id: str = ""
    scheduled_at: float = 0.0  # when the load wanted it to start (open loop: the schedule)
    started_at: float = 0.0
    created_at: float = 0.0  # intent + payment both answered 201
    authorized_at: float = 0.0  # first poll that saw AUTHORIZED
    capture_sent_at: float = 0.0  # just before POST /capture
    credited_at: float = 0.0  # first poll that saw the credit done (observed, so <= one poll late)
    credit_id: int | None = None
    polls: int = 0  # status reads this deposit cost the services (they count in their CPU)
    retries: int = 0  # requests repeated after a 503/429/5xx gateway answer or no answer
    error: str = ""

    @property
    def ok(self) -> bool:
        return not self.error and self.credited_at > 0


class KeepAliveHttp:
    """The broker's HTTP client: one persistent connection per thread and origin, as a pooled client
    (requests' Session, aiohttp's connector) keeps them, so a request does not pay a TCP connect at
    the server. JSON in and out, like ``System.http``. A connection that fails or that the server
    closes is dropped; a failure is raised as ``OSError`` (no answer), so the caller repeats the
    request with the same Idempotency-Key."""

    def __init__(self, timeout_s: float = 15.0) -> None:
        self._timeout_s = timeout_s
        self._local = threading.local()

    def __call__(
        self, method: str, url: str, body: Any = None, *, token: str | None = None, key: str | None = None
    ) -> tuple[int, Any]:
        status, reply, _ = self.request(method, url, body, token=token, key=key)
        return status, reply

    def request(
        self,
        method: str,
        url: str,
        body: Any = None,
        *,
        token: str | None = None,
        key: str | None = None,
        headers: dict[str, str] | None = None,
    ) -> tuple[int, Any, http.client.HTTPMessage]:
        """As ``__call__``, with extra request headers, and the answer's headers too."""
        parts = urlsplit(url)
        origin = (parts.hostname or "127.0.0.1", parts.port or 80)
        conns: dict[tuple[str, int], http.client.HTTPConnection] = self._local.__dict__.setdefault(
            "conns", {}
        )
        conn = conns.pop(origin, None) or http.client.HTTPConnection(*origin, timeout=self._timeout_s)
        sent = {"Content-Type": "application/json", **(headers or {})}
        if token:
            sent["Authorization"] = f"Bearer {token}"
        if key:
            sent["Idempotency-Key"] = key
        path = parts.path + (f"?{parts.query}" if parts.query else "")
        try:
            conn.request(method, path, None if body is None else json.dumps(body).encode(), sent)
            response = conn.getresponse()
            raw = response.read()
        except (OSError, http.client.HTTPException) as error:
            conn.close()
            raise OSError(f"{method} {url}: no answer ({type(error).__name__})") from error
        if response.will_close:
            conn.close()
        else:
            conns[origin] = conn
        try:
            return response.status, json.loads(raw) if raw else None, response.msg
        except ValueError:
            return response.status, raw.decode(errors="replace"), response.msg


@dataclass
class DepositDriver:
    """Drives deposits into a running ``System`` for ``logins`` (opened by ``open_accounts``)."""

    system: System
    logins: Sequence[int]
    amount_minor: int = 10_000
    card: str = "pm_card_visa"
    # status polls back off from 50 ms to this: a benchmark raises it so that its own reads cost the
    # APIs less (the latencies it reports come from the services' records, not from the polls)
    poll_interval_max_s: float = POLL_INTERVAL_MAX_S
    # persistent connections, as a broker's server keeps them; False: a new connection per request
    keep_alive: bool = True
    # a status read waits up to this long for a change (``If-None-Match`` + ``Prefer: wait``,
    # ``backbone.changes``) instead of the client polling; 0 (or keep_alive False): poll
    wait_s: float = 10.0
    history: list[Deposit] = field(default_factory=list)
    _counter: itertools.count[int] = field(default_factory=itertools.count)
    _lock: threading.Lock = field(default_factory=threading.Lock)
    _keep_alive_http: KeepAliveHttp = field(default_factory=KeepAliveHttp)

    def open_accounts(self) -> None:
        for login in self.logins:
            self.system.open_mt5_account(login, customer_of(login))

    def new_deposit(self, scheduled_at: float = 0.0) -> Deposit:
        with self._lock:
            index = next(self._counter)
            deposit = Deposit(index, self.logins[index % len(self.logins)], self.amount_minor + index % 100)
            deposit.scheduled_at = scheduled_at or time.time()
            self.history.append(deposit)
        return deposit

    def run(self, deposit: Deposit) -> Deposit:
        """The whole flow for one deposit; an error is recorded on it, never raised."""
        try:
            self._run(deposit)
        except Exception as error:  # the history keeps it; the caller judges
            deposit.error = f"{type(error).__name__}: {error}"[:500]
        return deposit

    def _run(self, d: Deposit) -> None:
        urls = self.system.urls
        d.started_at = time.time()
        intent = {"customer_id": customer_of(d.login), "mt5_login": d.login}
        money = {"amount_minor": d.amount_minor, "currency": "USD"}
        # a create's ETag is its record's first status read's: the first read waits for a change
        _, created, intent_tag = self._call(
            d, "POST", f"{urls.mt5_credit}/deposit-intents", CREDIT_TOKEN, {**intent, **money}
        )
        d.deposit_reference = str(created["deposit_reference"])
        body = {**money, "payment_method_token": self.card, "deposit_reference": d.deposit_reference}
        payments_url = f"{urls.payment_state}/payments"
        _, payment, payment_tag = self._call(d, "POST", payments_url, MERCHANT_TOKEN, body)
        d.payment_id = str(payment.get("payment", payment)["payment_id"])
        d.created_at = time.time()
        payment_url = f"{urls.payment_state}/payments/{d.payment_id}"
        d.authorized_at = self._poll(d, payment_url, MERCHANT_TOKEN, _authorized, payment_tag)
        d.capture_sent_at = time.time()
        self._call(d, "POST", f"{payment_url}/capture", MERCHANT_TOKEN, {})
        intent_url = f"{urls.mt5_credit}/deposit-intents/{d.deposit_reference}"
        d.credited_at = self._poll(
            d, intent_url, CREDIT_TOKEN, lambda reply: _credit_done(d, reply), intent_tag
        )

    def _call(
        self,
        d: Deposit,
        method: str,
        url: str,
        token: str,
        body: Any = None,
        headers: dict[str, str] | None = None,
    ) -> tuple[int, Any, str | None]:
        """One request as a client makes it: a write carries one Idempotency-Key on every attempt,
        so retrying an answer that never came (or a 503) can never do it twice. Answers the status
        (200, 201, 202, or 304 to a conditional read), the body and the ``ETag``."""
        key = new_key() if method == "POST" else None
        for attempt in range(CALL_ATTEMPTS_MAX):
            tag = None
            try:
                if self.keep_alive:
                    status, reply, answer = self._keep_alive_http.request(
                        method, url, body, token=token, key=key, headers=headers
                    )
                    tag = answer.get("ETag")
                else:
                    status, reply = self.system.http(method, url, body, token=token, key=key)
            except OSError:  # no answer (timeout, reset): the same key again
                status, reply = 0, None
            if status in (200, 201, 202, 304):
                return status, reply, tag
            if status not in RETRYABLE:
                raise AssertionError(f"{method} {url}: {status} {reply}")
            d.retries += 1
            time.sleep(min(CALL_BACKOFF_MAX_S, 0.1 * 2**attempt))
        raise TimeoutError(f"{method} {url}: no answer after {CALL_ATTEMPTS_MAX} attempts")

    def _poll(
        self, d: Deposit, url: str, token: str, reached: Callable[[Any], bool], tag: str | None = None
    ) -> float:
        """Read ``url`` until ``reached(body)``. With a tag (the create's, then the last answer's) and
        ``wait_s``, the server holds each read until the record changes (``backbone.changes``), so no
        sleep is needed between reads; without (an older server, ``wait_s`` 0), poll with a backoff."""
        deadline, interval = time.monotonic() + STEP_TIMEOUT_S, POLL_INTERVAL_MIN_S
        while time.monotonic() < deadline:
            d.polls += 1
            waiting = tag is not None and self.wait_s > 0
            headers = {"If-None-Match": str(tag), "Prefer": f"wait={self.wait_s:g}"} if waiting else None
            sent = time.monotonic()
            status, reply, tag_now = self._call(d, "GET", url, token, headers=headers)
            if status == 200 and reached(reply):
                return time.time()
            tag = tag_now or tag
            # a server that did not hold the read (no feed, stopping) answers 304 at once: back off
            held = waiting and (status == 200 or time.monotonic() - sent >= self.wait_s / 2)
            if not (held or (not waiting and tag is not None and self.wait_s > 0)):
                time.sleep(interval)
                interval = min(self.poll_interval_max_s, interval * 1.5)
        raise TimeoutError(f"deposit {d.index} not there after {STEP_TIMEOUT_S}s")


def _authorized(reply: Any) -> bool:
    return _status(dict(reply.get("payment", reply)), "AUTHORIZED")


def _credit_done(d: Deposit, reply: Any) -> bool:
    credits = list(reply["credits"])
    if any(c["status"] == "failed" for c in credits):
        raise AssertionError(f"credit failed: {credits}")
    done = [c for c in credits if c["status"] == "done"]
    if done:
        d.credit_id = int(done[0]["credit_id"])
    return bool(done)


def _status(payment: dict[str, object], wanted: str) -> bool:
    status = payment["status"]
    if status in ("FAILED", "CANCELED"):
        raise AssertionError(f"payment {status}")
    return status == wanted


def customer_of(login: int) -> str:
    return f"cust-{login}"


def run_open_loop(driver: DepositDriver, count: int, rate_per_s: float, threads: int = 128) -> list[Deposit]:
    """Offer ``count`` deposits at ``rate_per_s`` (deposit i starts at start + i / rate, or as soon as
    a thread is free: with too few threads the offered rate is not met and the result shows it)."""
    assert count > 0 and rate_per_s > 0 and threads > 0
    started = time.time()
    futures: list[Future[Deposit]] = []
    with ThreadPoolExecutor(max_workers=threads, thread_name_prefix="deposit") as pool:
        for i in range(count):
            due = started + i / rate_per_s
            delay = due - time.time()
            if delay > 0:
                time.sleep(delay)
            futures.append(pool.submit(driver.run, driver.new_deposit(due)))
    return [f.result() for f in futures]


def run_closed_loop(driver: DepositDriver, count: int, concurrency: int) -> list[Deposit]:
    """``count`` deposits, at most ``concurrency`` in flight: as fast as the system takes them."""
    assert count > 0 and concurrency > 0
    with ThreadPoolExecutor(max_workers=concurrency, thread_name_prefix="deposit") as pool:
        futures = [pool.submit(lambda: driver.run(driver.new_deposit())) for _ in range(count)]
    return [f.result() for f in futures]


# --- the arithmetic a benchmark reports ----------------------------------------------------------


def percentile(values: Sequence[float], q: float) -> float:
    """Nearest-rank percentile (q in [0, 1]) of a non-empty sample: an observed value, never an
    interpolation, so p99 of 100 values is the 99th smallest."""
    assert values, "percentile of nothing"
    assert 0.0 <= q <= 1.0, q
    ordered = sorted(values)
    rank = max(1, math.ceil(round(q * len(ordered), 9)))  # round: 0.07 * 100 is 7.000000000000001
    return ordered[min(len(ordered), rank) - 1]


def per_deposit(total: float, deposits: int, scale: float = 1.0) -> float:
    """``total`` spread over ``deposits`` (times ``scale``, e.g. 1000 for seconds -> ms)."""
    assert deposits > 0, "no deposits to spread over"
    return total * scale / deposits


def rate_per_s(count: int, first_s: float, last_s: float) -> float:
    """``count`` events between ``first_s`` and ``last_s`` (a span of zero length is a bug)."""
    assert last_s > first_s, (first_s, last_s)
    return count / (last_s - first_s)


def cpu_deltas_ms(before: dict[str, float], after: dict[str, float]) -> dict[str, float]:
    """CPU ms spent per process group between two samples in seconds; a group that appeared only
    after (a process started late) counts from zero, one that vanished counts nothing."""
    return {name: max(0.0, (after[name] - before.get(name, 0.0)) * 1000) for name in after}
