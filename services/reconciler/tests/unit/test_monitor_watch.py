"""The streaming monitor's pure join (reconciler.monitor.watch): events and a clock in, alerts out."""

from __future__ import annotations

import ast
import json
from pathlib import Path
from typing import Any

import pytest
from reconciler.monitor.watch import (
    CAPTURED_NOT_CREDITED,
    CLEARED,
    CREDITED_NOT_BOOKED,
    RAISED,
    Alert,
    Observation,
    PaymentWatch,
    Thresholds,
    needs_look,
    observation_of,
)

T = Thresholds(credit_after_ms=600_000, journal_after_ms=300_000, retain_ms=86_400_000)
PAY = "pay-1"
T0 = 1_800_000_000_000


def captured(op: str = "op-1", ref: str | None = "dr-1") -> Observation:
    body = {"operation_id": op, "deposit_reference": ref, "amount_minor": 50_000, "currency": "USD"}
    obs = observation_of("PaymentCaptured", PAY, T0 - 5, body)
    assert obs is not None
    return obs


def credited(credit_id: int = 7) -> Observation:
    body = {"credit_id": credit_id, "deposit_reference": "dr-1", "amount_minor": 49_000, "currency": "EUR"}
    obs = observation_of("Mt5Credited", PAY, T0 + 1, body)
    assert obs is not None
    return obs


def booked(credit_id: int = 7) -> Observation:
    obs = observation_of("JournalPosted", PAY, T0 + 2, {"reference": f"mt5-credit:{credit_id}"})
    assert obs is not None
    return obs


def publish_all(watch: PaymentWatch, now_ms: int) -> tuple[PaymentWatch, list[Alert]]:
    alerts = watch.due(now_ms)
    for alert in alerts:
        watch = watch.published(alert)
    return watch, alerts


def states(alerts: list[Alert]) -> list[tuple[str, str, str]]:
    return [(a.alert, a.state, a.subject_key) for a in alerts]


def test_observations_are_taken_only_from_what_the_monitor_joins() -> None:
    """A capture paying a deposit, an MT5 credit and an MT5 credit's journal are observed, with the
    subject keys the ledger uses; a capture without a deposit, another journal or another event
    type is not."""
    assert captured().subject_key == "capture:op-1"
    assert credited().subject_key == "mt5-credit:7"
    assert booked().subject_key == "mt5-credit:7"
    no_deposit = {"operation_id": "x", "deposit_reference": None}
    assert observation_of("PaymentCaptured", PAY, T0, no_deposit) is None
    assert observation_of("JournalPosted", PAY, T0, {"reference": "capture:op-1"}) is None
    assert observation_of("Mt5Debited", PAY, T0, {"credit_id": 1}) is None


def test_a_capture_without_credit_is_raised_once_after_the_threshold() -> None:
    """Nothing is due before N; at N exactly one 'raised' with the capture's amount, deposit and the
    time waited; once published it is not due again."""
    watch = PaymentWatch(PAY).observe(captured(), T0, T)
    assert watch.due(T0 + 599_999) == []
    assert watch.next_action_ms() == T0 + 600_000
    watch, alerts = publish_all(watch, T0 + 600_500)
    (alert,) = alerts
    assert (alert.alert, alert.state, alert.subject_key, alert.payment_id) == (
        CAPTURED_NOT_CREDITED,
        RAISED,
        "capture:op-1",
        PAY,
    )
    assert (alert.deposit_reference, alert.amount_minor, alert.currency) == ("dr-1", 50_000, "USD")
    assert (alert.observed_at_ms, alert.subject_occurred_at_ms, alert.overdue_ms, alert.after_ms) == (
        T0,
        T0 - 5,
        600_500,
        600_000,
    )
    assert watch.due(T0 + 10_000_000) == []
    assert watch.raised() == [CAPTURED_NOT_CREDITED]
    assert watch.next_action_ms() is None


def test_a_credit_within_the_threshold_raises_nothing() -> None:
    """A slow deposit credited before N never raises captured_not_credited; the credit's journal,
    in time too, leaves nothing to say."""
    watch = PaymentWatch(PAY).observe(captured(), T0, T)
    watch = watch.observe(credited(), T0 + 599_000, T).observe(booked(), T0 + 599_500, T)
    assert watch.due(T0 + 10_000_000) == []
    assert watch.expectations == ()


def test_a_late_credit_clears_the_raised_alert() -> None:
    """Raised at N, then the credit arrives: one 'cleared' with the time it was missing, then
    nothing more about the capture; the credit itself now waits for its journal."""
    watch, _ = publish_all(PaymentWatch(PAY).observe(captured(), T0, T), T0 + 600_000)
    watch = watch.observe(credited(), T0 + 900_000, T)
    assert watch.next_action_ms() == 0
    watch, alerts = publish_all(watch, T0 + 901_000)
    assert states(alerts) == [(CAPTURED_NOT_CREDITED, CLEARED, "capture:op-1")]
    assert alerts[0].overdue_ms == 900_000
    assert watch.raised() == []
    assert [e.alert for e in watch.expectations] == [CREDITED_NOT_BOOKED]


def test_a_credit_without_journal_is_raised_and_a_late_journal_clears_it() -> None:
    """credited_not_booked: raised journal_after_ms after the credit, with the credit's amount;
    cleared by the journal 'mt5-credit:<id>', not by a journal of another credit."""
    watch = PaymentWatch(PAY).observe(credited(7), T0, T)
    watch, alerts = publish_all(watch, T0 + 300_000)
    assert states(alerts) == [(CREDITED_NOT_BOOKED, RAISED, "mt5-credit:7")]
    assert (alerts[0].amount_minor, alerts[0].currency) == (49_000, "EUR")
    watch = watch.observe(booked(8), T0 + 400_000, T)
    assert watch.due(T0 + 400_001) == []
    watch, alerts = publish_all(watch.observe(booked(7), T0 + 500_000, T), T0 + 500_001)
    assert states(alerts) == [(CREDITED_NOT_BOOKED, CLEARED, "mt5-credit:7")]
    assert watch.expectations == ()


def test_events_seen_out_of_order_still_join() -> None:
    """The topics are read independently: a credit seen before its capture, a journal before its
    credit, meet them at once; nothing is ever due."""
    watch = PaymentWatch(PAY).observe(booked(7), T0, T).observe(credited(7), T0 + 1, T)
    watch = watch.observe(captured(), T0 + 2, T)
    assert watch.due(T0 + 10_000_000) == []
    assert watch.expectations == ()


def test_duplicates_change_nothing_and_alerts_have_a_stable_identity() -> None:
    """A capture delivered twice is one expectation, observed when first seen; the same alert
    computed twice has the same event_id (a re-publication is a duplicate to every consumer), and
    raised and cleared of one subject are two events."""
    watch = PaymentWatch(PAY).observe(captured(), T0, T)
    assert watch.observe(captured(), T0 + 60_000, T).expectations == watch.expectations
    first = watch.due(T0 + 600_000)[0]
    again = watch.due(T0 + 700_000)[0]
    assert first.event_id == again.event_id
    raised = watch.published(first)
    assert raised.published(first) == raised
    cleared = raised.observe(credited(), T0 + 800_000, T).due(T0 + 800_000)[0]
    assert cleared.state == CLEARED and cleared.event_id != first.event_id
    other = PaymentWatch(PAY).observe(captured("op-2"), T0, T).due(T0 + 600_000)[0]
    assert other.event_id != first.event_id


def test_a_late_duplicate_capture_after_the_clear_says_nothing() -> None:
    """A late duplicate capture after the clear finds the payment credited: nothing new."""
    watch, _ = publish_all(PaymentWatch(PAY).observe(captured(), T0, T), T0 + 600_000)
    watch, _ = publish_all(watch.observe(credited(), T0 + 700_000, T), T0 + 700_000)
    watch = watch.observe(captured(), T0 + 800_000, T)
    assert [e.alert for e in watch.expectations] == [CREDITED_NOT_BOOKED]


def test_quiet_watches_are_forgotten_after_retention() -> None:
    """A watch with nothing due is forgettable retain_ms after its last event, even with a raised
    alert nothing cleared (the daily run has it by then); never while an alert is still due."""
    done = PaymentWatch(PAY).observe(captured(), T0, T).observe(credited(), T0, T).observe(booked(), T0, T)
    assert not done.forgettable(T0 + T.retain_ms - 1, T.retain_ms)
    assert done.forgettable(T0 + T.retain_ms, T.retain_ms)
    waiting = PaymentWatch(PAY).observe(captured(), T0, T)
    assert not waiting.forgettable(T0 + T.retain_ms, T.retain_ms)  # its 'raised' is due first
    raised, _ = publish_all(waiting, T0 + 600_000)
    assert raised.forgettable(T0 + T.retain_ms, T.retain_ms)


@pytest.mark.parametrize("steps", [0, 1, 2, 3, 4])
def test_records_round_trip_through_json(steps: int) -> None:
    """What the state store keeps (JSON) gives back the same watch at every stage, and needs_look
    on the record agrees with the watch."""
    watch = PaymentWatch(PAY)
    for now, obs in list(
        zip(
            [T0, T0 + 1, T0 + 2, T0 + 3],
            [captured(), credited(7), booked(9), captured("op-2")],
            strict=True,
        )
    )[:steps]:
        watch = watch.observe(obs, now, T)
    watch, _ = publish_all(watch, T0 + 700_000)
    record: dict[str, Any] = json.loads(json.dumps(watch.to_record()))
    assert PaymentWatch.from_record(record) == watch
    for now in (T0, T0 + 700_000, T0 + T.retain_ms + 10):
        expected = bool(watch.due(now)) or now - watch.last_seen_ms >= T.retain_ms
        assert needs_look(record, now, T.retain_ms) == expected


def test_a_record_of_another_version_is_refused() -> None:
    """A record written by another layout is refused by name, never misread."""
    record = PaymentWatch(PAY).to_record()
    with pytest.raises(ValueError, match="version"):
        PaymentWatch.from_record({**record, "v": 2})


def test_the_watch_module_is_pure() -> None:
    """monitor/watch.py imports only the standard library's pure parts: no faust, no Kafka client,
    no clock of its own."""
    source = Path(__file__).resolve().parents[2] / "src" / "reconciler" / "monitor" / "watch.py"
    found: set[str] = set()
    for node in ast.walk(ast.parse(source.read_text())):
        if isinstance(node, ast.Import):
            found |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module:
            found.add(node.module)
    assert found <= {"__future__", "uuid", "collections.abc", "dataclasses", "typing"}, found


def test_a_give_back_credit_waits_for_its_journal_but_credits_no_deposit() -> None:
    """A withdrawal's give-back credit (credit_reason 'withdrawal_return') keyed by the payment of a
    deposit still waiting for its credit: the capture stays raised (the give-back pays no capture),
    and the give-back itself is raised when its journal is late and cleared by it."""
    body = {
        "credit_id": 9,
        "deposit_reference": "dr-1",
        "amount_minor": 3_000,
        "currency": "USD",
        "credit_reason": "withdrawal_return",
    }
    give_back = observation_of("Mt5Credited", PAY, T0 + 1, body)
    assert give_back is not None and give_back.kind == "given_back"
    watch = PaymentWatch(PAY).observe(captured(), T0, T).observe(give_back, T0 + 1, T)
    assert not watch.credited
    watch, alerts = publish_all(watch, T0 + 600_000)
    assert sorted(states(alerts)) == [
        (CAPTURED_NOT_CREDITED, RAISED, "capture:op-1"),
        (CREDITED_NOT_BOOKED, RAISED, "mt5-credit:9"),
    ]
    watch, alerts = publish_all(watch.observe(booked(9), T0 + 700_000, T), T0 + 700_001)
    assert states(alerts) == [(CREDITED_NOT_BOOKED, CLEARED, "mt5-credit:9")]
    assert watch.raised() == [CAPTURED_NOT_CREDITED]
