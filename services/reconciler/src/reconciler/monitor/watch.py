"""The streaming monitor's join, as pure functions: feed it events and a clock, ask what is due.

Per payment (the Kafka key of every topic it reads) a ``PaymentWatch`` waits for what should follow:

- a captured deposit (``PaymentCaptured`` with a deposit_reference) waits for an ``Mt5Credited`` of
  the payment: ``captured_not_credited``, subject ``capture:<operation_id>``;
- an ``Mt5Credited`` waits for a ``JournalPosted`` with reference ``mt5-credit:<credit_id>``:
  ``credited_not_booked``, subject ``mt5-credit:<credit_id>``. A withdrawal's give-back credit
  (``credit_reason`` 'withdrawal_return', ADR 0008) waits for its journal the same way, but it is no
  deposit's credit: it never meets a ``captured_not_credited``, whatever payment it is keyed by.

An expectation is due ``after_ms`` after the monitor first saw its event (its own clock, so a monitor
catching up on a backlog raises nothing for deposits that were credited in time). Its life:
waiting → met before due (forgotten, nothing said) | due (``raised``) → met (``cleared``, forgotten).
The three topics are read independently, so the later event can be seen first: the watch remembers
that the payment was credited and which credits were booked, and a later capture or credit is then
met at once.

Alerts carry an ``event_id`` derived from (alert, subject_key, state): the same alert published twice
(a crash between publishing and recording it, a replay) is one event to every idempotent consumer.
What is due is only computed here; the caller publishes it and then records it with ``published``.

A watch with nothing left to say is kept ``retain_ms`` after its last event (a late duplicate then
finds the payment credited), then forgotten. A raised alert that nothing clears is forgotten the same
way, without a ``cleared``: the daily run has made a case of it by then.

Records (``to_record``/``from_record``) are JSON-ready dicts: the state store keeps them, and
``needs_look`` tells from a record alone whether the watch wants attention at a time.
"""

from __future__ import annotations

import uuid
from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Any, Final, Literal

CAPTURED_NOT_CREDITED: Final = "captured_not_credited"
CREDITED_NOT_BOOKED: Final = "credited_not_booked"
ALERTS: Final = (CAPTURED_NOT_CREDITED, CREDITED_NOT_BOOKED)
RAISED: Final = "raised"
CLEARED: Final = "cleared"
STATES: Final = (RAISED, CLEARED)
RECORD_VERSION: Final = 1
# uuid5 namespace of alert event ids; changing it would give every alert a new identity.
_ALERT_IDS: Final = uuid.UUID("6b0f3c1e-2a4d-5e8f-9c71-3d52a4b6e019")
_CREDIT_REFERENCE: Final = "mt5-credit:"

Kind = Literal["captured", "credited", "given_back", "booked"]


@dataclass(frozen=True, slots=True)
class Thresholds:
    """How long an expectation may wait before it is raised, and how long a quiet watch is kept."""

    credit_after_ms: int
    journal_after_ms: int
    retain_ms: int

    def after_ms(self, alert: str) -> int:
        return self.credit_after_ms if alert == CAPTURED_NOT_CREDITED else self.journal_after_ms


@dataclass(frozen=True, slots=True)
class Observation:
    """What the monitor takes from one event: a capture, a credit or a booking of a credit."""

    kind: Kind
    payment_id: str
    subject_key: str  # capture:<operation_id> | mt5-credit:<credit_id> (also the journal's reference)
    occurred_at_ms: int
    deposit_reference: str | None = None
    amount_minor: int = 0
    currency: str = ""


def observation_of(
    event_type: str, payment_id: str, occurred_at_ms: int, body: Mapping[str, Any]
) -> Observation | None:
    """The observation in a decoded event, or None when the monitor has no use for it (a capture
    that pays no deposit, a journal of anything but an MT5 credit, every other event type)."""
    if event_type == "PaymentCaptured":
        if body.get("deposit_reference") is None:
            return None
        return Observation(
            "captured",
            payment_id,
            f"capture:{body['operation_id']}",
            occurred_at_ms,
            body["deposit_reference"],
            int(body["amount_minor"]),
            str(body["currency"]),
        )
    if event_type == "Mt5Credited":
        return Observation(
            "given_back" if body.get("credit_reason") == "withdrawal_return" else "credited",
            payment_id,
            f"{_CREDIT_REFERENCE}{body['credit_id']}",
            occurred_at_ms,
            body["deposit_reference"],
            int(body["amount_minor"]),
            str(body["currency"]),
        )
    if event_type == "JournalPosted" and str(body.get("reference", "")).startswith(_CREDIT_REFERENCE):
        return Observation("booked", payment_id, str(body["reference"]), occurred_at_ms)
    return None


@dataclass(frozen=True, slots=True)
class Expectation:
    """One event the watch is waiting for."""

    alert: str
    subject_key: str
    deposit_reference: str | None
    amount_minor: int
    currency: str
    observed_at_ms: int
    occurred_at_ms: int
    after_ms: int
    raised: bool = False  # a 'raised' alert was published
    met_at_ms: int | None = None  # the awaited event arrived after 'raised'; 'cleared' is due

    @property
    def due_at_ms(self) -> int:
        return self.observed_at_ms + self.after_ms


@dataclass(frozen=True, slots=True)
class Alert:
    """A MonitorAlert to publish (the event body is ``body()``, the Kafka key ``payment_id``)."""

    alert: str
    state: str
    payment_id: str
    subject_key: str
    deposit_reference: str | None
    amount_minor: int
    currency: str
    observed_at_ms: int
    subject_occurred_at_ms: int
    overdue_ms: int
    after_ms: int

    @property
    def event_id(self) -> str:
        """Stable identity: the same alert about the same subject is always the same event."""
        return str(uuid.uuid5(_ALERT_IDS, f"{self.alert}|{self.subject_key}|{self.state}"))

    def body(self) -> dict[str, Any]:
        return {
            "alert": self.alert,
            "state": self.state,
            "subject_key": self.subject_key,
            "deposit_reference": self.deposit_reference,
            "amount_minor": self.amount_minor,
            "currency": self.currency,
            "observed_at_ms": self.observed_at_ms,
            "subject_occurred_at_ms": self.subject_occurred_at_ms,
            "overdue_ms": self.overdue_ms,
            "after_ms": self.after_ms,
        }


def _alert(payment_id: str, e: Expectation, state: str, until_ms: int) -> Alert:
    return Alert(
        e.alert,
        state,
        payment_id,
        e.subject_key,
        e.deposit_reference,
        e.amount_minor,
        e.currency,
        e.observed_at_ms,
        e.occurred_at_ms,
        max(0, until_ms - e.observed_at_ms),
        e.after_ms,
    )


@dataclass(frozen=True, slots=True)
class PaymentWatch:
    """What one payment still owes the monitor, and what it has already shown."""

    payment_id: str
    expectations: tuple[Expectation, ...] = ()
    credited: bool = False  # an Mt5Credited of the payment was seen
    booked: frozenset[str] = frozenset()  # 'mt5-credit:<id>' references of journals seen
    last_seen_ms: int = 0

    def observe(self, obs: Observation, now_ms: int, thresholds: Thresholds) -> PaymentWatch:
        """The watch after ``obs`` was seen at ``now_ms``. Seeing an event again changes nothing."""
        watch = replace(self, last_seen_ms=max(self.last_seen_ms, now_ms))
        if obs.kind == "captured":
            if watch.credited:
                return watch
            return watch._expect(obs, CAPTURED_NOT_CREDITED, now_ms, thresholds)
        if obs.kind in ("credited", "given_back"):
            if obs.kind == "credited":
                watch = replace(watch._meet(CAPTURED_NOT_CREDITED, None, now_ms), credited=True)
            if obs.subject_key in watch.booked:
                return watch
            return watch._expect(obs, CREDITED_NOT_BOOKED, now_ms, thresholds)
        watch = replace(watch, booked=watch.booked | {obs.subject_key})
        return watch._meet(CREDITED_NOT_BOOKED, obs.subject_key, now_ms)

    def _expect(self, obs: Observation, alert: str, now_ms: int, thresholds: Thresholds) -> PaymentWatch:
        if any(e.alert == alert and e.subject_key == obs.subject_key for e in self.expectations):
            return self
        expectation = Expectation(
            alert,
            obs.subject_key,
            obs.deposit_reference,
            obs.amount_minor,
            obs.currency,
            now_ms,
            obs.occurred_at_ms,
            thresholds.after_ms(alert),
        )
        return replace(self, expectations=(*self.expectations, expectation))

    def _meet(self, alert: str, subject_key: str | None, now_ms: int) -> PaymentWatch:
        """The awaited event arrived: a waiting expectation is forgotten, a raised one awaits 'cleared'."""
        kept: list[Expectation] = []
        for e in self.expectations:
            if e.alert != alert or (subject_key is not None and e.subject_key != subject_key):
                kept.append(e)
            elif e.raised:
                kept.append(e if e.met_at_ms is not None else replace(e, met_at_ms=now_ms))
        return replace(self, expectations=tuple(kept))

    def due(self, now_ms: int) -> list[Alert]:
        """The alerts to publish at ``now_ms``: each overdue expectation not yet raised, and each
        raised one whose event has arrived since."""
        alerts = []
        for e in self.expectations:
            if e.met_at_ms is not None:
                alerts.append(_alert(self.payment_id, e, CLEARED, e.met_at_ms))
            elif not e.raised and now_ms >= e.due_at_ms:
                alerts.append(_alert(self.payment_id, e, RAISED, now_ms))
        return alerts

    def published(self, alert: Alert) -> PaymentWatch:
        """The watch once ``alert`` is on the topic ('raised' recorded, a 'cleared' one forgotten).
        Idempotent, and harmless for an alert about a subject the watch no longer has."""
        kept: list[Expectation] = []
        for e in self.expectations:
            if e.alert != alert.alert or e.subject_key != alert.subject_key:
                kept.append(e)
            elif alert.state == RAISED:
                kept.append(replace(e, raised=True))
            elif e.met_at_ms is None:  # 'cleared' of a subject raised again since: cannot happen
                kept.append(e)
        return replace(self, expectations=tuple(kept))

    def raised(self) -> list[str]:
        """The alert kinds currently raised and not cleared (one entry per subject)."""
        return [e.alert for e in self.expectations if e.raised and e.met_at_ms is None]

    def next_action_ms(self) -> int | None:
        """When ``due`` next has something to say (0: now), or None until another event arrives."""
        times = [
            0 if e.met_at_ms is not None else e.due_at_ms
            for e in self.expectations
            if not (e.raised and e.met_at_ms is None)  # raised, still missing: waits for an event
        ]
        return min(times) if times else None

    def forgettable(self, now_ms: int, retain_ms: int) -> bool:
        """Nothing more to say, and no event for ``retain_ms``: the watch can be dropped."""
        return now_ms - self.last_seen_ms >= retain_ms and not self.due(now_ms)

    def to_record(self) -> dict[str, Any]:
        """A JSON-ready dict; ``next_ms``, ``raised`` and ``last_seen_ms`` are readable without
        ``from_record`` (``needs_look``, the gauges)."""
        return {
            "v": RECORD_VERSION,
            "payment_id": self.payment_id,
            "credited": self.credited,
            "booked": sorted(self.booked),
            "last_seen_ms": self.last_seen_ms,
            "next_ms": self.next_action_ms(),
            "raised": self.raised(),
            "expectations": [
                {
                    "alert": e.alert,
                    "subject_key": e.subject_key,
                    "deposit_reference": e.deposit_reference,
                    "amount_minor": e.amount_minor,
                    "currency": e.currency,
                    "observed_at_ms": e.observed_at_ms,
                    "occurred_at_ms": e.occurred_at_ms,
                    "after_ms": e.after_ms,
                    "raised": e.raised,
                    "met_at_ms": e.met_at_ms,
                }
                for e in self.expectations
            ],
        }

    @classmethod
    def from_record(cls, record: Mapping[str, Any]) -> PaymentWatch:
        if record.get("v") != RECORD_VERSION:
            raise ValueError(f"watch record version {record.get('v')!r}, expected {RECORD_VERSION}")
        return cls(
            str(record["payment_id"]),
            tuple(
                Expectation(
                    str(e["alert"]),
                    str(e["subject_key"]),
                    e["deposit_reference"],
                    int(e["amount_minor"]),
                    str(e["currency"]),
                    int(e["observed_at_ms"]),
                    int(e["occurred_at_ms"]),
                    int(e["after_ms"]),
                    bool(e["raised"]),
                    None if e["met_at_ms"] is None else int(e["met_at_ms"]),
                )
                for e in record["expectations"]
            ),
            bool(record["credited"]),
            frozenset(str(r) for r in record["booked"]),
            int(record["last_seen_ms"]),
        )


def needs_look(record: Mapping[str, Any], now_ms: int, retain_ms: int) -> bool:
    """From a stored record alone: does the watch have an alert due, or may it be forgotten?"""
    next_ms = record["next_ms"]
    return (next_ms is not None and next_ms <= now_ms) or now_ms - int(record["last_seen_ms"]) >= retain_ms
