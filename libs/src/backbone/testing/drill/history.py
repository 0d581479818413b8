"""What a drill did and what it was told: every client request with its outcome, every fault.

A request's outcome is ``ok`` (a 2xx answer), ``failed`` (a definite refusal: a 4xx that is not
"try again") or ``unknown`` (no definite answer before the client gave up: timeouts, refused
connections, 5xx, 409 in progress, 429). A client retries with the same Idempotency-Key, so one
logical request is one entry however many attempts it took; ``attempts`` says how many. An act
without a key (an operator's click, a bank's return) is retried only after reading that it did not
take effect yet (``confirm``), as a person would reload the page first; a read that shows it did
makes it ``ok`` (``confirmed``).
"""

from __future__ import annotations

import json
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass, field, fields
from typing import Any, Final, Literal

Outcome = Literal["ok", "failed", "unknown"]
# answers that are not definite: the client asks again with the same key
RETRYABLE: Final = frozenset({408, 409, 425, 429, 500, 502, 503, 504})


@dataclass
class Request:
    op: str  # intent | payment | capture | refund | dispute | ...
    subject: str  # what it is about (a deposit's number, a payment id)
    method: str
    url: str
    key: str | None
    started: float
    body: Any = None
    token: str | None = field(default=None, repr=False)
    ended: float = 0.0
    outcome: Outcome = "unknown"
    status: int = 0
    attempts: int = 0
    answer: Any = None
    last_error: str = ""
    # whether the act took effect, read from the system (acts without an Idempotency-Key)
    confirm: Callable[[], bool] | None = field(default=None, repr=False)
    confirmed: bool = False  # ok because ``confirm`` read it done, not because of an answer


@dataclass
class FaultEntry:
    at: float  # seconds since the drill's start
    kind: str
    target: str
    detail: dict[str, Any] = field(default_factory=dict)
    ended: float | None = None


class History:
    """Thread-safe log of requests and faults, relative to the drill's start."""

    def __init__(self) -> None:
        self.t0 = time.monotonic()
        self._lock = threading.Lock()
        self.requests: list[Request] = []
        self.faults: list[FaultEntry] = []
        self.notes: list[str] = []

    def now(self) -> float:
        return round(time.monotonic() - self.t0, 3)

    def restart_clock(self) -> None:
        """Times count from now (the traffic's start, after the system came up)."""
        self.t0 = time.monotonic()

    def fault(self, kind: str, target: str, detail: dict[str, Any]) -> FaultEntry:
        entry = FaultEntry(self.now(), kind, target, dict(detail))
        with self._lock:
            self.faults.append(entry)
        return entry

    def note(self, text: str) -> None:
        with self._lock:
            self.notes.append(f"{self.now():8.2f}s {text}")

    def add(self, request: Request) -> None:
        with self._lock:
            self.requests.append(request)

    def unknown(self) -> Iterator[Request]:
        with self._lock:
            pending = [r for r in self.requests if r.outcome == "unknown"]
        yield from pending

    def dump(self) -> str:
        """The whole history as JSON (printed when a drill fails)."""
        with self._lock:
            body = {
                "faults": [asdict(f) for f in self.faults],
                "requests": [_public(r) for r in self.requests],
                "notes": list(self.notes),
            }
        return json.dumps(body, indent=1, default=str)

    def summary(self) -> dict[str, Any]:
        with self._lock:
            by_op: dict[str, dict[str, int]] = {}
            for r in self.requests:
                by_op.setdefault(r.op, {"ok": 0, "failed": 0, "unknown": 0})[r.outcome] += 1
            kinds: dict[str, int] = {}
            for f in self.faults:
                kinds[f.kind] = kinds.get(f.kind, 0) + 1
        return {"requests": by_op, "faults": kinds}


class Client:
    """A broker's server: JSON over HTTP, retrying a request with its key until a definite answer."""

    def __init__(self, history: History, timeout_s: float = 10.0) -> None:
        self.history, self.timeout_s = history, timeout_s

    def call(
        self,
        op: str,
        subject: str,
        method: str,
        url: str,
        body: Any = None,
        *,
        token: str | None = None,
        key: str | None = None,
        deadline_s: float = 60.0,
        ok: frozenset[int] = frozenset({200, 201, 202}),
        confirm: Callable[[], bool] | None = None,
    ) -> Request:
        request = Request(op, subject, method, url, key, self.history.now(), body, token, confirm=confirm)
        self.history.add(request)
        self.retry(request, deadline_s=deadline_s, ok=ok)
        return request

    def retry(
        self,
        request: Request,
        *,
        deadline_s: float = 60.0,
        ok: frozenset[int] = frozenset({200, 201, 202}),
    ) -> Request:
        """Ask (again) until a definite answer or ``deadline_s`` passes; the entry is updated in place."""
        deadline = time.monotonic() + deadline_s
        pause = 0.2
        while True:
            request.attempts += 1
            status, answer, error = self.send(
                request.method, request.url, request.body, request.token, request.key
            )
            request.status, request.answer, request.last_error = status, answer, error
            if status in ok:
                request.outcome = "ok"
                break
            if request.confirm is not None and _confirmed(request.confirm):
                request.outcome, request.confirmed = "ok", True
                break
            if status and status not in RETRYABLE:
                request.outcome = "failed"
                break
            if time.monotonic() + pause > deadline:
                request.outcome = "unknown"
                break
            time.sleep(pause)
            pause = min(pause * 1.5, 2.0)
        request.ended = self.history.now()
        return request

    def send(
        self, method: str, url: str, body: Any, token: str | None, key: str | None
    ) -> tuple[int, Any, str]:
        """One attempt: (status or 0, parsed body, error text)."""
        data = None if body is None else json.dumps(body).encode()
        req = urllib.request.Request(url, data=data, method=method)  # noqa: S310 - our own URLs
        req.add_header("Content-Type", "application/json")
        if token:
            req.add_header("Authorization", f"Bearer {token}")
        if key:
            req.add_header("Idempotency-Key", key)
        try:
            with urllib.request.urlopen(req, timeout=self.timeout_s) as response:  # noqa: S310 - our own URLs
                raw = response.read()
                return response.status, _parse(raw), ""
        except urllib.error.HTTPError as error:
            return error.code, _parse(error.read()), ""
        except (OSError, ValueError) as error:  # refused, reset, timed out, half an answer
            return 0, None, f"{type(error).__name__}: {error}"

    def get(self, url: str, token: str | None) -> tuple[int, Any]:
        """A read that is not history (polling): (status or 0, body)."""
        status, body, _ = self.send("GET", url, None, token, None)
        return status, body


def _confirmed(confirm: Callable[[], bool]) -> bool:
    try:
        return confirm()
    except Exception:  # the read failed: not known to be done
        return False


def _public(request: Request) -> dict[str, Any]:
    """The entry as JSON can show it (no token; ``confirm`` is code: asdict would deep-copy what
    it closes over)."""
    return {f.name: getattr(request, f.name) for f in fields(request) if f.name not in ("token", "confirm")}


def _parse(raw: bytes) -> Any:
    if not raw:
        return None
    try:
        return json.loads(raw)
    except ValueError:
        return raw.decode(errors="replace")[:500]
