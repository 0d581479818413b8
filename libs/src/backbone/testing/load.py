"""A load driver for the whole product (``System``): card deposits driven from outside, the way the
broker's server would, through the product's HTTP APIs only.

One deposit = deposit intent (mt5-credit) -> payment (payment-state) -> wait AUTHORIZED (polling
``GET /payments/{id}``) -> capture -> wait for its credit to be ``done`` (polling mt5-credit's
``GET /deposit-intents/{ref}``). Every step's client-side time is recorded on a ``Deposit`` (the
history), so a benchmark or a fault drill can judge what happened afterwards.

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

from backbone.testing.system import CREDIT_TOKEN, MERCHANT_TOKEN, System, new_key

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
        parts = urlsplit(url)
        origin = (parts.hostname or "127.0.0.1", parts.port or 80)
        conns: dict[tuple[str, int], http.client.HTTPConnection] = self._local.__dict__.setdefault(
            "conns", {}
        )
        conn = conns.pop(origin, None) or http.client.HTTPConnection(*origin, timeout=self._timeout_s)
        headers = {"Content-Type": "application/json"}
        if token:
            headers["Authorization"] = f"Bearer {token}"
        if key:
            headers["Idempotency-Key"] = key
        path = parts.path + (f"?{parts.query}" if parts.query else "")
        try:
            conn.request(method, path, None if body is None else json.dumps(body).encode(), headers)
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
            return response.status, json.loads(raw) if raw else None
        except ValueError:
            return response.status, raw.decode(errors="replace")


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
        created = self._call(
            d, "POST", f"{urls.mt5_credit}/deposit-intents", CREDIT_TOKEN, {**intent, **money}
        )
        d.deposit_reference = str(created["deposit_reference"])
        body = {**money, "payment_method_token": self.card, "deposit_reference": d.deposit_reference}
        payment = self._call(d, "POST", f"{urls.payment_state}/payments", MERCHANT_TOKEN, body)
        d.payment_id = str(payment.get("payment", payment)["payment_id"])
        d.created_at = time.time()
        d.authorized_at = self._poll(d, lambda: self._authorized(d))
        d.capture_sent_at = time.time()
        self._call(d, "POST", f"{urls.payment_state}/payments/{d.payment_id}/capture", MERCHANT_TOKEN, {})
        d.credited_at = self._poll(d, lambda: self._credit_done(d))

    def _call(self, d: Deposit, method: str, url: str, token: str, body: Any = None) -> Any:
        """One request as a client makes it: a write carries one Idempotency-Key on every attempt,
        so retrying an answer that never came (or a 503) can never do it twice."""
        key = new_key() if method == "POST" else None
        for attempt in range(CALL_ATTEMPTS_MAX):
            try:
                send = self._keep_alive_http if self.keep_alive else self.system.http
                status, reply = send(method, url, body, token=token, key=key)
            except OSError:  # no answer (timeout, reset): the same key again
                status, reply = 0, None
            if status in (200, 201, 202):
                return reply
            if status not in RETRYABLE:
                raise AssertionError(f"{method} {url}: {status} {reply}")
            d.retries += 1
            time.sleep(min(CALL_BACKOFF_MAX_S, 0.1 * 2**attempt))
        raise TimeoutError(f"{method} {url}: no answer after {CALL_ATTEMPTS_MAX} attempts")

    def _authorized(self, d: Deposit) -> bool:
        reply = self._call(
            d, "GET", f"{self.system.urls.payment_state}/payments/{d.payment_id}", MERCHANT_TOKEN
        )
        return _status(dict(reply.get("payment", reply)), "AUTHORIZED")

    def _credit_done(self, d: Deposit) -> bool:
        url = f"{self.system.urls.mt5_credit}/deposit-intents/{d.deposit_reference}"
        credits = list(self._call(d, "GET", url, CREDIT_TOKEN)["credits"])
        if any(c["status"] == "failed" for c in credits):
            raise AssertionError(f"credit failed: {credits}")
        done = [c for c in credits if c["status"] == "done"]
        if done:
            d.credit_id = int(done[0]["credit_id"])
        return bool(done)

    def _poll(self, d: Deposit, reached: Callable[[], bool]) -> float:
        deadline, interval = time.monotonic() + STEP_TIMEOUT_S, POLL_INTERVAL_MIN_S
        while time.monotonic() < deadline:
            d.polls += 1
            if reached():
                return time.time()
            time.sleep(interval)
            interval = min(self.poll_interval_max_s, interval * 1.5)
        raise TimeoutError(f"deposit {d.index} not there after {STEP_TIMEOUT_S}s")


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
