"""Finding a deposit and telling its story side by side, through the services' APIs only.

A deposit is found under the operator's merchants only: by our payment id, its deposit reference
or the PSP's payment id (payment-state and mt5-credit with the merchant's own token, so another
merchant's is never even asked for), or by MT5 login (mt5-credit's operator API, which answers for
the operator's merchants; the console checks the merchant again). Its story is the payment and its
operations, its credit rows with their MT5 deals, its journals (with ``ledger_read``), the webhooks
the gateway received for it (never their bodies) and the reconciler's cases that name it. A service
that does not answer is said in the story's notes, never left blank.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Final, assert_never

from ops_console.application.ports import OperatorApi, Payments, ServiceError
from ops_console.domain.operators import Operator
from ops_console.domain.permissions import Permission
from ops_console.domain.search import Login, Reference

LOGIN_DEPOSITS_MAX: Final = 10  # the newest deposits of a login shown at once (each story is ~5 calls)
STORY_ROWS_MAX: Final = 50  # webhooks and cases shown per deposit


@dataclass(frozen=True)
class DepositApis:
    """The services a deposit's story is read from; an unset one is said, not guessed."""

    payments: Payments
    credit: OperatorApi | None = None  # mt5-credit's operator API: the deposits on a login
    ledger: OperatorApi | None = None
    gateway: OperatorApi | None = None  # the webhook gateway's receipts
    reconciler: OperatorApi | None = None  # the cases that name a payment


@dataclass
class Found:
    stories: list[dict[str, Any]] = field(default_factory=list)
    waiting: list[dict[str, Any]] = field(default_factory=list)  # a login's deposits not captured yet
    notes: list[str] = field(default_factory=list)


async def find(apis: DepositApis, operator: Operator, query: Login | Reference) -> Found:
    """The deposits ``query`` names under ``operator``'s merchants. Raises ``ServiceError`` when the
    service that must answer the search itself (not a part of a story) does not."""
    match query:
        case Login(mt5_login=login):
            return await _on_login(apis, operator, login)
        case Reference(text=text):
            found = Found()
            merchants = apis.payments.merchants() if operator.every_merchant else operator.merchants
            for merchant in merchants:
                for payment in await _by_reference(apis.payments, merchant, text):
                    found.stories.append(await story(apis, operator, merchant, payment))
            return found
        case _:
            assert_never(query)


async def _by_reference(payments: Payments, merchant: str, text: str) -> list[dict[str, Any]]:
    """Our payment id first, then a deposit reference, then the PSP's payment id."""
    payment = await payments.payment(merchant, text)
    if payment is None:
        payment = await _by_deposit_reference(payments, merchant, text)
    if payment is not None:
        return [payment]
    return await payments.payments_by_psp_reference(merchant, text)


async def _by_deposit_reference(payments: Payments, merchant: str, reference: str) -> dict[str, Any] | None:
    """The payment of a deposit reference: mt5-credit's intent (the merchant's token) names the
    payment on its credit row, payment-state answers for it. None before the capture (no credit
    row names the payment yet) or under another merchant."""
    intent = await payments.deposit_intent(merchant, reference)
    payment_id = _credited_payment((intent or {}).get("credits", []))
    return None if payment_id is None else await payments.payment(merchant, payment_id)


def _credited_payment(credits: list[dict[str, Any]]) -> str | None:
    for row in credits:
        if row.get("kind") == "credit" and isinstance(row.get("payment_id"), str):
            return str(row["payment_id"])
    return None


async def _on_login(apis: DepositApis, operator: Operator, login: int) -> Found:
    found = Found()
    if apis.credit is None:
        found.notes.append("Search by MT5 login needs mt5-credit (CONSOLE_MT5_CREDIT_URL).")
        return found
    query = {"mt5_login": str(login), "limit": str(LOGIN_DEPOSITS_MAX)}
    deposits = (await apis.credit.get(operator, "/v1/deposits", query))["deposits"]
    for deposit in deposits:
        merchant = str(deposit.get("merchant_id", ""))
        if not operator.sees(merchant):  # mt5-credit scoped it; a page never relies on one place
            continue
        payment_id = _credited_payment(deposit.get("credits", []))
        payment = None if payment_id is None else await apis.payments.payment(merchant, payment_id)
        if payment is None:
            found.waiting.append(deposit)
        else:
            found.stories.append(await story(apis, operator, merchant, payment))
    if len(deposits) >= LOGIN_DEPOSITS_MAX:
        found.notes.append(f"The newest {LOGIN_DEPOSITS_MAX} deposits on login {login} are shown.")
    return found


async def story(
    apis: DepositApis, operator: Operator, merchant: str, payment: dict[str, Any]
) -> dict[str, Any]:
    """One deposit side by side: the payment and its operations (payment-state), the credit rows
    with their MT5 deals (mt5-credit, the merchant's token), the journals (the ledger, for an
    operator with ledger_read), the webhooks received (the gateway) and the cases (the reconciler)."""
    told: dict[str, Any] = {"merchant": merchant, "payment": payment, "intent": None, "journals": None}
    notes: list[str] = []
    told["webhooks"] = await _webhooks(apis.gateway, operator, payment, notes)
    told["cases"] = await _cases(apis.reconciler, operator, payment, notes)
    reference = payment.get("deposit_reference")
    if isinstance(reference, str) and reference:
        try:
            told["intent"] = await apis.payments.deposit_intent(merchant, reference)
        except ServiceError as exc:
            notes.append(exc.said())
    if apis.ledger is None:
        notes.append("Journals: the ledger is not configured (CONSOLE_LEDGER_URL).")
    elif not operator.may(Permission.LEDGER_READ):
        notes.append("Journals: you need the ledger_read permission.")
    else:
        try:
            query = {"payment_id": str(payment["payment_id"])}
            told["journals"] = (await apis.ledger.get(operator, "/v1/journals", query))["journals"]
        except ServiceError as exc:
            notes.append(exc.said())
    told["notes"] = notes
    return told


async def _webhooks(
    gateway: OperatorApi | None, operator: Operator, payment: dict[str, Any], notes: list[str]
) -> list[dict[str, Any]] | None:
    """The gateway's receipts of the payment's PSP payment id, in the order received; None when
    they cannot be asked for (said in ``notes``)."""
    provider, reference = payment.get("provider"), payment.get("provider_payment_id")
    if gateway is None:
        notes.append("Webhooks: the webhook gateway is not configured (CONSOLE_GATEWAY_URL).")
        return None
    if not (isinstance(provider, str) and isinstance(reference, str) and reference):
        return []  # no PSP payment yet: no webhook can name it
    query = {"provider": provider, "provider_payment_id": reference, "limit": str(STORY_ROWS_MAX)}
    try:
        receipts: list[dict[str, Any]] = (await gateway.get(operator, "/v1/receipts", query))["receipts"]
    except ServiceError as exc:
        notes.append(exc.said())
        return None
    return receipts


async def _cases(
    reconciler: OperatorApi | None, operator: Operator, payment: dict[str, Any], notes: list[str]
) -> list[dict[str, Any]] | None:
    """The reconciler's cases whose records name the payment (our id or the PSP's), any status, of
    the operator's merchants (the reconciler scopes them; a page never relies on one place)."""
    if reconciler is None:
        return None
    query = {"payment_id": str(payment["payment_id"]), "limit": str(STORY_ROWS_MAX)}
    if isinstance(payment.get("provider_payment_id"), str) and payment["provider_payment_id"]:
        query["provider_payment_id"] = payment["provider_payment_id"]
    try:
        found: list[dict[str, Any]] = (await reconciler.get(operator, "/v1/cases", query))["cases"]
    except ServiceError as exc:
        notes.append(exc.said())
        return None
    return [case for case in found if operator.sees(case.get("merchant_id"))]
