"""A reconciler on a fresh, migrated database with scriptable inputs, for tests and the benchmark.

Events go through the real intake handler (encoded and decoded by the real Avro codec, as the
consumer would hand them over); reports and MT5 deals are the scripted sources of ``sources``
(the real ``Mt5DealSource`` is exercised against the MT5 simulator in its own tests).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import UTC, date, datetime, time, timedelta
from decimal import Decimal
from typing import Any, Final

from backbone.avro import AvroCodec, SchemaCatalogue
from backbone.consumer.messages import InboundEvent, UnitOfWork
from backbone.kafka.topics import TopicCatalogue
from backbone.outbox.writer import OutboxWriter
from backbone.postgres import connect

from reconciler.adapters.pg_records import PgRecordStore
from reconciler.adapters.pg_repairs import PgRepairDesk
from reconciler.adapters.pg_store import PgReconStore, make_engine
from reconciler.application.intake import make_handler
from reconciler.application.runs import RunConfig, RunResult, run_date
from reconciler.domain.dates import BusinessCalendar
from reconciler.testing.sources import (
    SERIAL,
    ScriptedDeals,
    ScriptedReports,
    SettlementLine,
    bank_csv,
    settlement_csv,
)

CODEC: Final = AvroCodec(SchemaCatalogue.default())
CATALOGUE: Final = TopicCatalogue.default()
UTC_MIDNIGHT: Final = BusinessCalendar(UTC, time(0, 0))
DAY: Final = date(2026, 11, 30)
HOUR_MS: Final = 3_600_000


def at(day: date, hour: int, minute: int = 0) -> int:
    """Epoch ms of ``day`` at hh:mm UTC."""
    return int(datetime.combine(day, time(hour, minute), tzinfo=UTC).timestamp() * 1000)


@dataclass
class World:
    """The reconciler's parts on one real database."""

    url: str
    grace_ms: int = HOUR_MS
    deals: ScriptedDeals = field(default_factory=ScriptedDeals)
    reports: ScriptedReports = field(default_factory=ScriptedReports)
    outbox: OutboxWriter = field(default_factory=lambda: OutboxWriter(CODEC, CATALOGUE, "reconciler"))
    settlement: list[SettlementLine] = field(default_factory=list)
    merchant: str = "m1"  # whose deposits, refunds and withdrawals the next events are

    def __post_init__(self) -> None:
        self.engine = make_engine(self.url)
        self.store = PgReconStore(self.engine, self.outbox, "recon.events")
        self.desk = PgRepairDesk(self.engine, self.outbox, "recon.events", "recon.repair-commands")
        self.handler = make_handler(
            UTC_MIDNIGHT, lambda uow: PgRecordStore(uow.conn, self.outbox, "recon.events")
        )
        self.config = RunConfig("simpsp", UTC_MIDNIGHT, self.grace_ms)

    def close(self) -> None:
        self.engine.dispose()

    # -- events, through the real intake ----------------------------------------------------------

    def deliver(self, event_type: str, payment_id: str, body: dict[str, Any], at_ms: int) -> None:
        topic = "payments.events"
        if event_type == "JournalPosted":
            topic = "ledger.events"
        elif event_type.startswith("Mt5"):
            topic = "mt5.credit-events"
        elif event_type == "RepairOutcome":
            topic = "recon.repair-outcomes"
        elif event_type == "MonitorAlert":
            topic = "recon.monitor-events"
        message = self.outbox.event(topic, event_type, payment_id, body, occurred_at_ms=at_ms)
        inbound = InboundEvent(CODEC.decode(message.payload), topic, 0, next(SERIAL))
        with connect(self.url, application_name="recon-test") as conn, conn.transaction():
            self.handler(UnitOfWork(conn, None, "test"), [inbound])

    def journal(self, reference: str, payment_id: str, amount: int, currency: str, at_ms: int) -> None:
        self.deliver(
            "JournalPosted",
            payment_id,
            {
                "journal_id": next(SERIAL),
                "reference": reference,
                "business_date": UTC_MIDNIGHT.date_of(at_ms).isoformat(),
                "source_event_id": f"evt-{next(SERIAL)}",
                "entries": [
                    {
                        "account": "psp_receivable",
                        "direction": "debit",
                        "amount_minor": amount,
                        "currency": currency,
                    },
                    {
                        "account": "client_deposits_pending",
                        "direction": "credit",
                        "amount_minor": amount,
                        "currency": currency,
                    },
                ],
            },
            at_ms,
        )

    def deposit(
        self,
        n: int,
        *,
        amount: int = 50_000,
        currency: str = "USD",
        login: int = 7001,
        at_ms: int | None = None,
        credited: bool = True,
        deal: bool = True,
        settled: bool = True,
        journals: bool = True,
    ) -> dict[str, Any]:
        """One deposit end to end as the other services would report it: captured, credited to
        MT5 with its deal, booked, and settled by the PSP (each step can be left out)."""
        t = at_ms if at_ms is not None else at(DAY, 10) + n * 1000
        pi, pay, op = f"pi_{n}", f"pay-{n}", f"op-{n}"
        self.deliver(
            "PaymentCaptured",
            pay,
            {
                "merchant_id": self.merchant,
                "operation_id": op,
                "provider": "simpsp",
                "provider_payment_id": pi,
                "amount_minor": amount,
                "currency": currency,
                "deposit_reference": f"dr-{n}",
            },
            t,
        )
        if journals:
            self.journal(f"capture:{op}", pay, amount, currency, t)
        credit_id = 10_000 + n
        if credited:
            self.deliver(
                "Mt5Credited",
                pay,
                {
                    "credit_id": credit_id,
                    "deposit_reference": f"dr-{n}",
                    "mt5_login": login,
                    "amount_minor": amount,
                    "currency": currency,
                    "deal_ticket": 500_000 + n,
                    "provider": "simpsp",
                    "provider_payment_id": pi,
                    "payment_amount_minor": amount,
                    "payment_currency": currency,
                    "fx_rate": None,
                },
                t + 2000,
            )
            if journals:
                self.journal(f"mt5-credit:{credit_id}", pay, amount, currency, t + 2000)
            if deal:
                self.deals.add(login, f"dep:{credit_id}", str(Decimal(amount) / 100), t + 1500)
        line = SettlementLine(
            f"txn_{n}", "charge", pi, f"ch_{n}", pay, currency, amount, 200 + amount // 100, "po_1", t
        )
        if settled:
            self.settlement.append(line)
        return {"payment_id": pay, "pi": pi, "credit_id": credit_id, "line": line, "at_ms": t}

    def refund(
        self,
        made: dict[str, Any],
        k: int,
        amount: int,
        *,
        debited: bool = True,
        debit_amount: int | None = None,
    ) -> None:
        """A refund of deposit ``made`` as the services would report it: refunded at the PSP (and
        settled), booked, and taken back from MT5 by a debit with its deal (unless ``debited`` is off)."""
        t, pay, refund_id = int(made["at_ms"]) + 60_000, str(made["payment_id"]), f"rf-{k}"
        n = pay.removeprefix("pay-")
        self.deliver(
            "RefundSucceeded",
            pay,
            {
                "merchant_id": self.merchant,
                "refund_id": refund_id,
                "operation_id": f"op-{refund_id}",
                "provider": "simpsp",
                "provider_refund_id": f"re_{k}",
                "amount_minor": amount,
                "currency": "USD",
                "deposit_reference": f"dr-{n}",
            },
            t,
        )
        self.journal(f"refund:{refund_id}", pay, amount, "USD", t)
        self.settlement.append(
            SettlementLine(
                f"txn_r{k}", "refund", str(made["pi"]), f"re_{k}", pay, "USD", -amount, 0, "po_1", t
            )
        )
        if not debited:
            return
        debit_id, taken = 30_000 + k, debit_amount if debit_amount is not None else amount
        self.deliver(
            "Mt5Debited",
            pay,
            {
                "debit_id": debit_id,
                "mt5_login": 7001,
                "amount_minor": taken,
                "currency": "USD",
                "deal_ticket": 600_000 + k,
                "debit_reason": "refund",
                "source_reference": refund_id,
                "original_credit_id": made["credit_id"],
                "payment_amount_minor": taken,
                "payment_currency": "USD",
                "fx_rate": None,
            },
            t + 2000,
        )
        self.journal(f"mt5-debit:{debit_id}", pay, taken, "USD", t + 2000)
        self.deals.add(7001, f"dbt:{debit_id}", str(-Decimal(taken) / 100), t + 1500)

    def withdrawal(
        self,
        n: int,
        *,
        ending: str = "paid",
        amount: int = 20_000,
        login: int = 7001,
        at_ms: int | None = None,
        settled: bool = True,
        journals: bool = True,
        debited: bool = True,
        given_back: bool = True,
        give_back_payment_id: str | None = None,
    ) -> dict[str, Any]:
        """One withdrawal end to end as the other services would report it (ADR 0008), keyed by
        its id: the MT5 debit (deal ``wdr:<debit_id>``), then the payout paid (``ending`` 'paid'),
        failed ('failed') or paid and returned ('returned'), settled by the PSP as ``payout`` and
        ``payout_return`` rows, and a failed or returned one given back by a credit (deal
        ``wbk:<credit_id>``); every step booked by the ledger unless ``journals`` is off.
        ``debited`` / ``given_back`` off leave out the MT5 debit / the give-back credit (with their
        deals and journals); ``give_back_payment_id`` keys the give-back credit by another payment."""
        assert ending in ("paid", "failed", "returned"), ending
        t = at_ms if at_ms is not None else at(DAY, 14) + n * 1000
        wid, debit_id, credit_id, payout_id = f"wd_{n:032x}", 40_000 + n, 20_000 + n, f"po_w{n}"
        if debited:
            self._debit(n, wid, debit_id, amount, login, t, journals)
        payout = {
            "merchant_id": self.merchant,
            "withdrawal_id": wid,
            "operation_id": f"op-po-{n}",
            "provider": "simpsp",
            "provider_payout_id": payout_id,
            "amount_minor": amount,
            "currency": "USD",
        }
        lines = []
        if ending == "failed":
            failed = payout | {"failure_code": "card_declined", "failure_message": None}
            self.deliver("PayoutFailed", wid, failed, t + 1000)
        else:
            self.deliver("PayoutPaid", wid, payout, t + 1000)
            if journals:
                self.journal(f"payout:{wid}", wid, amount, "USD", t + 1000)
            lines.append(
                SettlementLine(f"txn_w{n}", "payout", "", payout_id, wid, "USD", -amount, 0, "po_1", t + 1000)
            )
        if ending == "returned":
            self.deliver("PayoutReturned", wid, payout | {"failure_code": "account_closed"}, t + 2000)
            if journals:
                self.journal(f"payout-return:{wid}", wid, amount, "USD", t + 2000)
            lines.append(
                SettlementLine(
                    f"txn_wr{n}", "payout_return", "", payout_id, wid, "USD", amount, 0, "po_1", t + 2000
                )
            )
        if ending != "paid" and given_back:
            self._give_back(n, wid, credit_id, amount, login, t + 3000, journals, give_back_payment_id)
        if settled:
            self.settlement += lines
        return {"withdrawal_id": wid, "debit_id": debit_id, "credit_id": credit_id, "lines": lines}

    def _debit(
        self, n: int, wid: str, debit_id: int, amount: int, login: int, t: int, journals: bool
    ) -> None:
        """The withdrawal's MT5 debit (``wdr:``), its deal and journal."""
        self.deliver(
            "Mt5Debited",
            wid,
            {
                "debit_id": debit_id,
                "mt5_login": login,
                "amount_minor": amount,
                "currency": "USD",
                "deal_ticket": 700_000 + n,
                "debit_reason": "withdrawal",
                "source_reference": wid,
                "original_credit_id": None,
                "payment_amount_minor": None,
                "payment_currency": None,
                "fx_rate": None,
            },
            t,
        )
        self.deals.add(login, f"wdr:{debit_id}", str(-Decimal(amount) / 100), t - 500)
        if journals:
            self.journal(f"mt5-debit:{debit_id}", wid, amount, "USD", t)

    def _give_back(
        self,
        n: int,
        wid: str,
        credit_id: int,
        amount: int,
        login: int,
        t: int,
        journals: bool,
        payment_id: str | None,
    ) -> None:
        """The give-back credit of a failed or returned payout (``wbk:``), its deal and journal."""
        self.deliver(
            "Mt5Credited",
            payment_id or wid,
            {
                "credit_id": credit_id,
                "deposit_reference": f"dr-{n}",
                "mt5_login": login,
                "amount_minor": amount,
                "currency": "USD",
                "deal_ticket": 710_000 + n,
                "provider": "simpsp",
                "provider_payment_id": "",
                "payment_amount_minor": amount,
                "payment_currency": "USD",
                "fx_rate": None,
                "credit_reason": "withdrawal_return",
                "withdrawal_id": wid,
            },
            t,
        )
        self.deals.add(login, f"wbk:{credit_id}", str(Decimal(amount) / 100), t - 500)
        if journals:
            self.journal(f"mt5-credit:{credit_id}", payment_id or wid, amount, "USD", t)

    def publish_reports(self, day: date = DAY, *, bank_delta: dict[str, int] | None = None) -> None:
        self.reports.files[("settlement", day)] = settlement_csv(day, self.settlement)
        self.reports.files[("bank_deposits", day)] = bank_csv(day, self.settlement, delta=bank_delta)

    def run(self, day: date = DAY, *, as_of_ms: int | None = None, wait: bool = False) -> RunResult:
        as_of = as_of_ms if as_of_ms is not None else at(day + timedelta(days=1), 6)
        return run_date(self.store, self.reports, self.deals, self.config, day, as_of, wait=wait)

    def classes(self, result: RunResult) -> list[str]:
        return sorted(f.case_class.value for f in result.findings)
