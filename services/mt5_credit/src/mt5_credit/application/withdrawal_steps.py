"""The withdrawal's steps after its approval (docs/adr/0008), each inside the transaction of the
change that causes it, so a step is never lost and never taken twice:

- the debit row done (executor or resolver) → ``paid_out`` + the ``CreatePayout`` command;
- the debit row failed (MT5 refused: not enough money) → ``refused``: nothing moved;
- ``PayoutPaid`` → ``paid``;
- ``PayoutFailed`` / ``PayoutReturned`` → one give-back credit row (business key
  ``withdrawal-return:<id>``, deal comment ``wbk:<row id>``) through the normal flow, and a case;
- the give-back row done → ``returned``.
A give-back row that fails stays a case for a person (the money is then neither on MT5 nor paid
out: the withdrawal stays ``returning``).
"""

from __future__ import annotations

from typing import Any, Final

from backbone.logs import get_logger

from mt5_credit.application.ports import CreditStore
from mt5_credit.domain.model import CreditKind, CreditRow
from mt5_credit.domain.withdrawals import WithdrawalStatus as S
from mt5_credit.domain.withdrawals import mt5_row

log = get_logger("mt5_credit.withdrawals")

PAYOUT_EVENTS: Final = frozenset({"PayoutPaid", "PayoutFailed", "PayoutReturned"})
_APPROVED: Final = frozenset({S.APPROVED})


def row_done(store: CreditStore, row: CreditRow, ticket: int) -> None:
    """A withdrawal row MT5 confirmed (no-op for other rows)."""
    if row.withdrawal_id is None:
        return
    wid = row.withdrawal_id
    if row.kind is CreditKind.DEBIT:
        withdrawal = store.load_withdrawal(wid)
        if withdrawal is not None and store.move_withdrawal(
            wid, _APPROVED, S.PAID_OUT, f"MT5 debited, deal {ticket}"
        ):
            store.publish_payout(withdrawal, row)
            log.info("withdrawal_debited", withdrawal_id=wid, debit_id=row.id, ticket=ticket)
    elif store.move_withdrawal(
        wid, frozenset({S.RETURNING}), S.RETURNED, f"given back on MT5, deal {ticket}"
    ):
        log.info("withdrawal_returned", withdrawal_id=wid, credit_id=row.id, ticket=ticket)


def row_failed(store: CreditStore, row: CreditRow, reason: str) -> None:
    """A withdrawal row MT5 (or the pre-check) refused (no-op for other rows)."""
    if row.withdrawal_id is None:
        return
    if row.kind is CreditKind.DEBIT:
        store.move_withdrawal(row.withdrawal_id, _APPROVED, S.REFUSED, f"MT5 refused the debit: {reason}")
        log.warning("withdrawal_refused", withdrawal_id=row.withdrawal_id, reason=reason)
    else:
        log.error(
            "withdrawal_return_failed", withdrawal_id=row.withdrawal_id, credit_id=row.id, reason=reason
        )


def payout_fact(store: CreditStore, event_type: str, withdrawal_id: str, body: dict[str, Any]) -> None:
    """A payout fact from payment-state (inside the consumer's batch transaction)."""
    withdrawal = store.load_withdrawal(withdrawal_id)
    if withdrawal is None:
        store.open_case(f"withdrawal:{withdrawal_id}", "refused", f"{event_type} of an unknown withdrawal")
        log.error("payout_of_unknown_withdrawal", withdrawal_id=withdrawal_id, event_type=event_type)
        return
    if event_type == "PayoutPaid":
        store.move_withdrawal(
            withdrawal_id, frozenset({S.PAID_OUT}), S.PAID, f"paid out as {body['provider_payout_id']}"
        )
        return
    returned = event_type == "PayoutReturned"
    why = body.get("failure_code") or ("returned" if returned else "failed")
    reason = f"payout {'returned after paid' if returned else 'failed'}: {why}"
    if int(body["amount_minor"]) != withdrawal.amount_minor or body["currency"] != withdrawal.currency:
        store.open_case(f"withdrawal:{withdrawal_id}", "conflict", f"{reason}, for another amount than ours")
        return  # never give back an amount the books did not take
    credit_id = store.insert_row(
        mt5_row(withdrawal, CreditKind.CREDIT),
        payment_id=withdrawal_id,
        provider=withdrawal.provider,
        provider_payment_id=None,
        source_reference=body.get("provider_payout_id"),
    )
    if credit_id is None:  # given back already (a return after a failure, a redelivery)
        log.info("withdrawal_return_exists", withdrawal_id=withdrawal_id, event_type=event_type)
        return
    store.move_withdrawal(
        withdrawal_id,
        frozenset({S.PAID_OUT, S.PAID}),
        S.RETURNING,
        reason,
        return_id=credit_id,
        payout_failure=why,
    )
    store.open_case(
        f"withdrawal:{withdrawal_id}",
        "payout_returned" if returned else "payout_failed",
        f"{reason}; given back to MT5 by credit {credit_id}",
        credit_id=credit_id,
        deposit_reference=withdrawal.deposit_reference,
    )
    log.warning("withdrawal_giving_back", withdrawal_id=withdrawal_id, credit_id=credit_id, reason=reason)
