"""Money facts as the ledger receives them: the events of deposits, refunds, chargebacks and MT5
balance operations, built per payment in the order their producers emit them.

``deposit(n, ...)`` returns one payment's facts, ``withdrawal(n, ...)`` one withdrawal's (ADR 0008);
``n`` makes every id unique. Each fact knows its
topic role (payments or mt5), so tests can deliver them the way Kafka would: in order per payment
and topic, in any interleaving across payments and topics.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any, Literal

from backbone.avro import AvroCodec, DecodedEvent, Envelope, new_envelope
from backbone.consumer import InboundEvent
from backbone.ids import new_event_id

Role = Literal["payments", "mt5", "repairs"]
WithdrawalEnding = Literal["paid", "failed", "returned"]
WITHDRAWAL_ENDINGS: tuple[WithdrawalEnding, ...] = ("paid", "failed", "returned")
Ending = Literal["credited", "refunded", "charged_back", "refunded_before_credit", "not_deposit", "repaired"]
ENDINGS: tuple[Ending, ...] = (
    "credited",
    "refunded",
    "charged_back",
    "refunded_before_credit",
    "not_deposit",
    "repaired",
)
BASE_MS = 1_764_460_800_000  # 2025-11-30T00:00:00Z


@dataclass(frozen=True)
class Fact:
    role: Role
    event_type: str
    payment_id: str
    body: dict[str, Any]
    event_id: str
    occurred_at_ms: int
    schema_version: int = 0  # 0: the default below

    @property
    def version(self) -> int:
        """Facts are written as their first schema version (a v1 producer); a repair as v2, the
        first that names its target; a withdrawal's MT5 facts as v2 (``schema_version``), the first
        with their reasons."""
        if self.schema_version:
            return self.schema_version
        return 2 if self.event_type == "ExecuteRepair" else 1

    def with_new_event_id(self) -> Fact:
        """The same business fact published again under a new event id (a producer's retry)."""
        return Fact(
            self.role,
            self.event_type,
            self.payment_id,
            self.body,
            new_event_id(),
            self.occurred_at_ms,
            self.schema_version,
        )

    def envelope(self, producer: str = "test") -> dict[str, Any]:
        return new_envelope(
            self.event_type,
            self.payment_id,
            producer,
            schema_version=self.version,
            occurred_at_ms=self.occurred_at_ms,
            event_id=self.event_id,
        )

    def encode(self, codec: AvroCodec) -> bytes:
        return codec.encode(self.event_type, {"envelope": self.envelope(), **self.body}, version=self.version)

    def inbound(self, topic: str, partition: int = 0, offset: int = 0) -> InboundEvent:
        env = self.envelope()
        decoded = DecodedEvent(Envelope(**env), self.event_type, self.version, {"envelope": env, **self.body})
        return InboundEvent(decoded, topic, partition, offset)


def _fact(role: Role, event_type: str, payment_id: str, at_ms: int, body: dict[str, Any]) -> Fact:
    return Fact(role, event_type, payment_id, body, new_event_id(), at_ms)


def deposit(
    n: int,
    *,
    amount_minor: int = 10_000,
    currency: str = "EUR",
    login: int | None = None,
    mt5_currency: str | None = None,
    fx_rate: str | None = None,
    ending: Ending = "credited",
    returned_minor: int | None = None,
    at_ms: int = BASE_MS,
) -> list[Fact]:
    """The facts of one payment, in production order.

    ``mt5_currency`` and ``fx_rate`` make the MT5 account's currency differ from the payment's;
    ``returned_minor`` is the amount refunded or charged back (default: all of it).
    """
    payment_id = f"pay_{n}"
    login = 700_000 + n % 50 if login is None else login
    account_currency = mt5_currency or currency
    credited = _converted(amount_minor, fx_rate) if mt5_currency else amount_minor
    returned = amount_minor if returned_minor is None else returned_minor
    is_deposit = ending != "not_deposit"
    facts = [_captured(n, payment_id, amount_minor, currency, is_deposit, at_ms)]
    if ending == "refunded_before_credit":
        return [*facts, _refund(n, payment_id, returned, currency, at_ms + 2)]
    if not is_deposit:
        return facts
    facts.append(
        _credited(
            n, payment_id, login, credited, account_currency, amount_minor, currency, fx_rate, at_ms + 1
        )
    )
    if ending == "refunded":
        debit = returned if not mt5_currency else _converted(returned, fx_rate)
        facts.append(_refund(n, payment_id, returned, currency, at_ms + 2))
        facts.append(_debited(n, payment_id, login, debit, account_currency, "refund", f"rf_{n}", at_ms + 3))
    if ending == "charged_back":
        debit = returned if not mt5_currency else _converted(returned, fx_rate)
        facts.append(_chargeback(n, payment_id, returned, currency, at_ms + 2))
        facts.append(
            _debited(n, payment_id, login, debit, account_currency, "chargeback", f"cb_{n}", at_ms + 3)
        )
    if ending == "repaired":
        facts.append(_debited(n, payment_id, login, 1, account_currency, "repair", f"rp_{n}", at_ms + 3))
    return facts


def _converted(amount_minor: int, fx_rate: str | None) -> int:
    """Payment minor units to account minor units at a rate, both currencies with 2 digits (tests)."""
    assert fx_rate is not None
    whole, _, frac = fx_rate.partition(".")
    scale: int = 10 ** len(frac)
    return amount_minor * int(whole + frac) // scale


def _captured(n: int, payment_id: str, amount: int, currency: str, is_deposit: bool, at_ms: int) -> Fact:
    return _fact(
        "payments",
        "PaymentCaptured",
        payment_id,
        at_ms,
        {
            "merchant_id": "m1",
            "operation_id": f"op_cap_{n}",
            "provider": "simpsp",
            "provider_payment_id": f"pi_{n}",
            "amount_minor": amount,
            "currency": currency,
            "deposit_reference": f"dep_{n}" if is_deposit else None,
        },
    )


def _credited(
    n: int,
    payment_id: str,
    login: int,
    amount: int,
    currency: str,
    paid: int,
    paid_currency: str,
    fx_rate: str | None,
    at_ms: int,
) -> Fact:
    return _fact(
        "mt5",
        "Mt5Credited",
        payment_id,
        at_ms,
        {
            "credit_id": n + 1,
            "deposit_reference": f"dep_{n}",
            "mt5_login": login,
            "amount_minor": amount,
            "currency": currency,
            "deal_ticket": 900_000 + n,
            "provider": "simpsp",
            "provider_payment_id": f"pi_{n}",
            "payment_amount_minor": paid,
            "payment_currency": paid_currency,
            "fx_rate": fx_rate,
        },
    )


def _refund(n: int, payment_id: str, amount: int, currency: str, at_ms: int) -> Fact:
    return _fact(
        "payments",
        "RefundSucceeded",
        payment_id,
        at_ms,
        {
            "merchant_id": "m1",
            "refund_id": f"rf_{n}",
            "operation_id": f"op_ref_{n}",
            "provider": "simpsp",
            "provider_refund_id": f"re_{n}",
            "amount_minor": amount,
            "currency": currency,
            "deposit_reference": f"dep_{n}",
        },
    )


def _chargeback(n: int, payment_id: str, amount: int, currency: str, at_ms: int) -> Fact:
    return _fact(
        "payments",
        "ChargebackReceived",
        payment_id,
        at_ms,
        {
            "merchant_id": "m1",
            "chargeback_id": f"cb_{n}",
            "provider": "simpsp",
            "provider_dispute_id": f"dp_{n}",
            "amount_minor": amount,
            "currency": currency,
            "deposit_reference": f"dep_{n}",
            "reason": "fraudulent",
        },
    )


def _debited(
    n: int, payment_id: str, login: int, amount: int, currency: str, reason: str, source: str, at_ms: int
) -> Fact:
    return _fact(
        "mt5",
        "Mt5Debited",
        payment_id,
        at_ms,
        {
            "debit_id": n + 1,
            "mt5_login": login,
            "amount_minor": amount,
            "currency": currency,
            "deal_ticket": 800_000 + n,
            "debit_reason": reason,
            "source_reference": source,
            "original_credit_id": n + 1,
        },
    )


def withdrawal_id(n: int) -> str:
    return f"wd_{n:032x}"


def withdrawal(
    n: int,
    *,
    login: int,
    amount_minor: int = 3_000,
    currency: str = "EUR",
    ending: WithdrawalEnding = "paid",
    at_ms: int = BASE_MS + 3_600_000,
) -> list[Fact]:
    """One withdrawal's facts in production order (ADR 0008): the MT5 debit (``wdr:``), then the
    payout paid, failed (and given back by a ``wbk:`` credit) or paid and returned (and given back).
    Every fact is keyed by the withdrawal id. The login needs a credited deposit first (its floor)."""
    wid = withdrawal_id(n)
    debit = _fact(
        "mt5",
        "Mt5Debited",
        wid,
        at_ms,
        {
            "debit_id": 1_000_000 + n,
            "mt5_login": login,
            "amount_minor": amount_minor,
            "currency": currency,
            "deal_ticket": 1_800_000 + n,
            "debit_reason": "withdrawal",
            "source_reference": wid,
            "original_credit_id": None,
            "payment_amount_minor": None,
            "payment_currency": None,
            "fx_rate": None,
        },
    )
    facts = [_v2(debit)]
    payout = {
        "merchant_id": "m1",
        "withdrawal_id": wid,
        "operation_id": f"op_po_{n}",
        "provider": "simpsp",
        "provider_payout_id": f"po_{n}",
        "amount_minor": amount_minor,
        "currency": currency,
    }
    if ending == "failed":
        failed = {**payout, "failure_code": "card_declined", "failure_message": None}
        facts.append(_fact("payments", "PayoutFailed", wid, at_ms + 1, failed))
    else:
        facts.append(_fact("payments", "PayoutPaid", wid, at_ms + 1, payout))
    if ending == "returned":
        returned = {**payout, "failure_code": "account_closed"}
        facts.append(_fact("payments", "PayoutReturned", wid, at_ms + 2, returned))
    if ending != "paid":
        facts.append(_v2(_given_back(n, wid, login, amount_minor, currency, at_ms + 3)))
    return facts


def _v2(fact: Fact) -> Fact:
    return Fact(fact.role, fact.event_type, fact.payment_id, fact.body, fact.event_id, fact.occurred_at_ms, 2)


def _given_back(n: int, wid: str, login: int, amount: int, currency: str, at_ms: int) -> Fact:
    """The give-back credit (``wbk:``): its deposit fields name the deposit whose card was paid."""
    return _fact(
        "mt5",
        "Mt5Credited",
        wid,
        at_ms,
        {
            "credit_id": 1_000_000 + n,
            "deposit_reference": f"dep_{n}",
            "mt5_login": login,
            "amount_minor": amount,
            "currency": currency,
            "deal_ticket": 1_900_000 + n,
            "provider": "simpsp",
            "provider_payment_id": "",
            "payment_amount_minor": amount,
            "payment_currency": currency,
            "fx_rate": None,
            "credit_reason": "withdrawal_return",
            "withdrawal_id": wid,
        },
    )


def with_body(fact: Fact, **changes: Any) -> Fact:
    """The same event with some body fields changed (bad input for tests), under a new event id."""
    return Fact(
        fact.role,
        fact.event_type,
        fact.payment_id,
        {**fact.body, **changes},
        new_event_id(),
        fact.occurred_at_ms,
        fact.schema_version,
    )


def repair(
    fact: Fact,
    *,
    repair_id: int = 1,
    repair_type: str = "post_journal",
    target: str = "ledger",
    requested_by: str = "alice",
    approved_by: str = "bob",
    at_ms: int | None = None,
) -> Fact:
    """An approved ExecuteRepair (v2) asking the ledger to book ``fact``, as the reconciler sends it."""
    body = {
        "repair_id": repair_id,
        "case_id": 100 + repair_id,
        "repair_type": repair_type,
        "target": target,
        "source_key": f"repair-source-{repair_id}",
        "requested_by": requested_by,
        "approved_by": approved_by,
        "amount_minor": fact.body.get("amount_minor"),
        "currency": fact.body.get("currency"),
        "mt5_login": None,
        "reason": "the event was lost",
        "fact_type": fact.event_type,
        "fact_json": json.dumps(fact.body),
        "command_digest": "d" * 64,
    }
    return _fact("repairs", "ExecuteRepair", fact.payment_id, at_ms or fact.occurred_at_ms + 86_400_000, body)
