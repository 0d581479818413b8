"""The promises a drill checks once the faults are over and the system is quiet.

Each check returns the violations it found as sentences naming the deposit or withdrawal, the
payment and what was expected; an empty list is a pass. The checks read the end state the drill
waited for (``end_state``), the product through its own APIs (payment-state, mt5-credit, the
ledger), MT5 through the simulator's control API (what the trading server holds), the PSP's payouts
through its API, the payment facts topic from Kafka and each service's ``dead_letters`` table. The
reconciler's runs, cases and locks are ``recon_checks``'s.
"""

from __future__ import annotations

import time
from collections import Counter, defaultdict
from collections.abc import Callable
from decimal import Decimal
from typing import Any, Final

import psycopg

from backbone.avro import AvroCodec, SchemaCatalogue
from backbone.testing import kafka as test_kafka
from backbone.testing.drill.end_state import (
    CAPTURED_OR_LATER,
    SETTLED,
    EndState,
    answered_ok,
    in_transit,
)
from backbone.testing.drill.traffic import LOGINS, Withdrawal
from backbone.testing.drill.workload import CHECKER
from backbone.testing.system_config import LEDGER_TOKEN

RANK: Final = {
    "CREATED": 0,
    "REQUIRES_ACTION": 1,
    "AUTHORIZED": 2,
    "CAPTURED": 3,
    "PARTIALLY_REFUNDED": 4,
    "REFUNDED": 5,
    "FAILED": 9,
    "CANCELED": 9,
}
WITHDRAWAL_RANK: Final = {
    "held": 0,
    "prepared": 1,
    "approved": 2,
    "paid_out": 3,
    "paid": 4,
    "returning": 5,
    "returned": 6,
    "rejected": 9,
    "refused": 9,
}
PAYMENT_ORDER: Final = ("PaymentAuthorized", "PaymentCaptured", "RefundSucceeded")
SERVICES_WITH_CONSUMERS: Final = ("payment_state", "mt5_credit", "ledger", "reconciler")


class Checker(EndState):
    """The promises a drill checks against its end state (see the module docstring)."""

    # --- the checks ------------------------------------------------------------------------------

    def run_all(self) -> dict[str, list[str]]:
        checks: dict[str, Callable[[], list[str]]] = {
            "every request got a definite answer": self.answers,
            "every acknowledged request is reflected": self.acknowledged,
            "one MT5 deal per money movement, none else": self.deals,
            "no payment status moved backwards": self.forward_only,
            "payment facts in state-machine order": self.event_order,
            "every journal balances, each once": self.journals,
            "client liability per login equals its MT5 deals": self.liability,
            "withdrawals: one debit, at most one payout, a give-back if it failed or came back": (
                self.withdrawal_money
            ),
            "withdrawals: every journal balances, each once, nothing left in transit": self.withdrawal_books,
            "no dead letters": self.dead_letters,
        }
        results: dict[str, list[str]] = {}
        for name, check in checks.items():
            try:
                results[name] = check()
            except Exception as error:
                results[name] = [f"the check could not run: {error!r}"]
        return results

    def answers(self) -> list[str]:
        out = []
        for r in self.history.requests:
            if r.outcome == "unknown" and r.op != "dispute":
                out.append(
                    f"{r.op} {r.subject}: no definite answer after quiescence ({r.status} {r.last_error})"
                )
            if r.outcome == "failed":
                out.append(f"{r.op} {r.subject}: a valid request was refused: {r.status} {r.answer}")
        return out

    def acknowledged(self) -> list[str]:
        out = []
        for d in self.deposits:
            payment = self.payments.get(d.number)
            if answered_ok(d, "payment") and payment is None:
                out.append(f"d{d.number}: payment {d.payment_id} acknowledged but not found")
                continue
            status = str(payment["status"]) if payment else ""
            if answered_ok(d, "capture") and status not in CAPTURED_OR_LATER:
                out.append(f"d{d.number}: capture acknowledged, payment {d.payment_id} is {status}")
            if answered_ok(d, "refund") and status not in ("PARTIALLY_REFUNDED", "REFUNDED"):
                out.append(f"d{d.number}: refund acknowledged, payment {d.payment_id} is {status}")
            rows = self.credit_rows.get(d.number, [])
            debits = [r for r in rows if r["kind"] == "debit" and r["status"] == "done"]
            if len(debits) < answered_ok(d, "refund") + answered_ok(d, "dispute"):
                out.append(f"d{d.number}: refund/dispute acknowledged, debits done: {debits}")
        for w in self.withdrawals:
            view = self.views.get(w.number) or {}
            name = f"w{w.number} ({w.withdrawal_id})"
            if answered_ok(w, "withdrawal") and not view:
                out.append(f"{name}: withdrawal acknowledged but mt5-credit does not show it")
                continue
            if answered_ok(w, "approve") and (
                view.get("approved_by") != CHECKER or view.get("status") not in SETTLED
            ):
                out.append(f"{name}: approval acknowledged, withdrawal {view.get('status')}, {view}")
            if answered_ok(w, "reject") and view.get("status") != "rejected":
                out.append(f"{name}: rejection acknowledged, withdrawal is {view.get('status')}")
            if answered_ok(w, "return") and view.get("status") != "returned":
                out.append(f"{name}: the bank's return acknowledged, withdrawal is {view.get('status')}")
        return out

    def deals(self) -> list[str]:  # noqa: PLR0912 - deposits' and withdrawals' deals in one pass
        assert self.system.mt5 is not None
        out: list[str] = []
        explained: dict[str, tuple[int, Decimal]] = {}  # comment -> (login, amount)
        for d in self.deposits:
            status = str((self.payments.get(d.number) or {}).get("status", ""))
            rows = self.credit_rows.get(d.number, [])
            credits = [r for r in rows if r["kind"] == "credit"]
            if status in CAPTURED_OR_LATER and len(credits) != 1:
                out.append(f"d{d.number}: captured payment {d.payment_id} has credit rows {credits}")
            if status and status not in CAPTURED_OR_LATER and rows:
                out.append(f"d{d.number}: payment {d.payment_id} is {status} but has credit rows {rows}")
            for row in rows:
                prefix = "dep" if row["kind"] == "credit" else "dbt"
                amount = Decimal(row["amount_minor"]) / 100 * (1 if row["kind"] == "credit" else -1)
                explained[f"{prefix}:{row['credit_id']}"] = (d.login, amount)
        explained.update({comment: want for comment, (want, _) in self._withdrawal_rows().items()})
        for login in LOGINS:
            found = self.system.mt5.control.deals(login=login)
            per_comment = Counter(str(deal["Comment"]) for deal in found)
            for deal in found:
                comment = str(deal["Comment"])
                want = explained.get(comment)
                if want is None:
                    out.append(
                        f"login {login}: deal {deal['Deal']} {comment!r} {deal['Profit']}"
                        " explained by nothing"
                    )
                elif want != (login, Decimal(str(deal["Profit"]))):
                    out.append(
                        f"login {login}: deal {deal['Deal']} {comment!r} {deal['Profit']}, expected {want}"
                    )
            out += [f"login {login}: {n} deals with comment {c!r}" for c, n in per_comment.items() if n > 1]
        seen = {
            str(deal["Comment"]) for login in LOGINS for deal in self.system.mt5.control.deals(login=login)
        }
        for d in self.deposits:
            for row in self.credit_rows.get(d.number, []):
                comment = f"{'dep' if row['kind'] == 'credit' else 'dbt'}:{row['credit_id']}"
                if row["status"] == "done" and comment not in seen:
                    out.append(f"d{d.number}: {row['kind']} {row['credit_id']} is done without a deal")
        for comment, (_, row) in self._withdrawal_rows().items():
            if row["status"] == "done" and comment not in seen:
                out.append(f"{row['withdrawal']}: {comment} is done without a deal")
        return out

    def _withdrawal_rows(self) -> dict[str, tuple[tuple[int, Decimal], dict[str, Any]]]:
        """comment -> ((login, signed amount), row) of every withdrawal's debit and give-back."""
        rows = {}
        for w in self.withdrawals:
            view = self.views.get(w.number) or {}
            for part, sign in (("debit", -1), ("give_back", 1)):
                if view.get(part):
                    row = {**view[part], "withdrawal": f"w{w.number} ({w.withdrawal_id})"}
                    rows[row["comment"]] = ((w.login, Decimal(w.amount_minor) / 100 * sign), row)
        return rows

    def forward_only(self) -> list[str]:
        out = []
        for d in self.deposits:
            ranks = [RANK.get(s, -1) for s in d.seen]
            if ranks != sorted(ranks):
                out.append(f"d{d.number}: payment {d.payment_id} seen as {d.seen}")
        for w in self.withdrawals:
            ranks = [WITHDRAWAL_RANK.get(s, -1) for s in w.seen]
            if ranks != sorted(ranks):
                out.append(f"w{w.number}: withdrawal {w.withdrawal_id} seen as {w.seen}")
        return out

    def event_order(self) -> list[str]:
        codec = AvroCodec(SchemaCatalogue.default())
        records = test_kafka.read_topic(
            self.system.stack.kafka_bootstrap, f"{self.system.prefix}payments.events"
        )
        partitions: dict[str, set[int]] = defaultdict(set)
        order: dict[str, list[str]] = defaultdict(list)
        for record in sorted(records, key=lambda r: (r.partition, r.offset)):
            event = codec.decode(record.value or b"")
            partitions[event.envelope.payment_id].add(record.partition)
            if event.event_type in PAYMENT_ORDER:
                order[event.envelope.payment_id].append(event.event_type)
        out = []
        for d in self.deposits:
            if not d.payment_id:
                continue
            if len(partitions[d.payment_id]) > 1:
                out.append(f"d{d.number}: facts of {d.payment_id} on partitions {partitions[d.payment_id]}")
            seen = order[d.payment_id]
            if seen != sorted(seen, key=PAYMENT_ORDER.index):
                out.append(f"d{d.number}: facts of {d.payment_id} in order {seen}")
        return out

    def journals(self) -> list[str]:
        out = []
        for d in self.deposits:
            if not d.payment_id:
                continue
            journals = self._journals(d.payment_id)
            if journals is None:
                out.append(f"d{d.number}: the ledger did not answer for {d.payment_id}")
                continue
            kinds = Counter(j["reference"] for j in journals)
            out += [f"d{d.number}: journal {ref} posted {n} times" for ref, n in kinds.items() if n > 1]
            for j in journals:
                sums: Counter[str] = Counter()
                for line in j["entries"]:
                    sign = 1 if line["direction"] == "debit" else -1
                    sums[line["currency"]] += sign * int(line["amount_minor"])
                if any(sums.values()):
                    out.append(f"d{d.number}: journal {j['journal_id']} does not balance: {dict(sums)}")
            status = str((self.payments.get(d.number) or {}).get("status", ""))
            have = {ref.split(":")[0] for ref in kinds}
            if status in CAPTURED_OR_LATER and not {"capture", "mt5-credit"} <= have:
                out.append(f"d{d.number}: captured and credited, journals {sorted(have)}")
        return out

    def liability(self) -> list[str]:
        assert self.system.mt5 is not None
        out = []
        for login in LOGINS:
            deals = self.system.mt5.control.deals(login=login)
            on_mt5 = sum(int(Decimal(str(deal["Profit"])) * 100) for deal in deals)
            status, body = self.workload.client.get(
                f"{self.system.urls.ledger}/v1/accounts/client_mt5_balances/USD/balance?holder=mt5:{login}",
                LEDGER_TOKEN,
            )
            if status != 200:
                out.append(f"login {login}: the ledger's balance did not answer ({status} {body})")
                continue
            books = int(body["balance_minor"])
            if books != on_mt5:
                out.append(f"login {login}: the books hold {books}, MT5's deals sum to {on_mt5}")
        return out

    def withdrawal_money(self) -> list[str]:
        """An approved withdrawal: one ``wdr:`` deal for minus its amount on its login, settled paid or
        returned; at most one PSP payout; a payout the PSP failed or got back (or refused: none) has
        exactly one ``wbk:`` give-back deal for its amount, a paid one none. One never approved:
        no MT5 row, no payout."""
        out: list[str] = []
        for w in self.withdrawals:
            view = self.views.get(w.number)
            if not w.withdrawal_id or view is None:
                continue
            name, status = f"w{w.number} ({w.withdrawal_id})", str(view["status"])
            payouts = self._payout_count(w.withdrawal_id)
            if payouts is None:
                out.append(f"{name}: the PSP did not say how many payouts it made")
            elif payouts > 1:
                out.append(f"{name}: {payouts} PSP payouts for one withdrawal")
            debit_deals, back_deals = self._deals_of(w, view["debit"]), self._deals_of(w, view["give_back"])
            if view["approved_by"] is None:
                if view["debit"] or view["give_back"] or payouts:
                    out.append(
                        f"{name}: never approved ({status}) but debit {view['debit']}, payouts {payouts}"
                    )
                continue
            if status not in ("paid", "returned"):
                out.append(f"{name}: approved, ended {status} ({view['last_reason']})")
            out += _one_deal(name, "debit", debit_deals, w.login, -w.amount_minor)
            payout = self.workload.payout(w)
            psp = None if payout is None else str(payout["status"])
            if status == "paid" and (psp != "paid" or view["give_back"] or back_deals):
                out.append(f"{name}: paid, the PSP's payout is {psp}, give-back {view['give_back']}")
            if psp in ("failed", "returned") and status != "returned":
                out.append(f"{name}: the PSP's payout is {psp}, the withdrawal is {status}")
            if status == "returned":
                if psp == "paid":
                    out.append(f"{name}: given back, yet the PSP's payout is paid")
                out += _one_deal(name, "give-back", back_deals, w.login, w.amount_minor)
        return out

    def withdrawal_books(self) -> list[str]:
        """Each withdrawal's journals balance and are posted once; a settled one has its debit's
        journal, its payout's or its give-back's, and ``payouts_in_transit`` back to zero; one
        never approved has no journal."""
        out: list[str] = []
        for w in self.withdrawals:
            view = self.views.get(w.number)
            if not w.withdrawal_id or view is None:
                continue
            name, status = f"w{w.number} ({w.withdrawal_id})", str(view["status"])
            journals = self._journals(w.withdrawal_id)
            if journals is None:
                out.append(f"{name}: the ledger did not answer")
                continue
            refs = Counter(j["reference"] for j in journals)
            out += [f"{name}: journal {ref} posted {n} times" for ref, n in refs.items() if n > 1]
            out += [
                f"{name}: journal {j['journal_id']} does not balance" for j in journals if not _balanced(j)
            ]
            if view["approved_by"] is None:
                out += [f"{name}: never approved, yet journal {ref}" for ref in refs]
                continue
            wanted = {f"mt5-debit:{view['debit']['credit_id']}"} if view["debit"] else set()
            if status == "paid":
                wanted.add(f"payout:{w.withdrawal_id}")
            if status == "returned" and view["give_back"]:
                wanted.add(f"mt5-credit:{view['give_back']['credit_id']}")
            if status in ("paid", "returned"):
                out += [f"{name}: {status}, no journal {ref}" for ref in sorted(wanted - set(refs))]
                if in_transit(journals):
                    out.append(f"{name}: {status}, {in_transit(journals)} left in payouts_in_transit")
        return out

    def _payout_count(self, wid: str, timeout_s: float = 30.0) -> int | None:
        """How many payouts the PSP made with this reference (None: it did not answer)."""
        deadline = time.monotonic() + timeout_s
        while True:
            status, body = self.workload.client.get(
                f"{self.system.urls.psp_control}/control/payouts/count?reference={wid}", None
            )
            if status == 200 and isinstance(body, dict):
                return int(body["count"])
            if time.monotonic() > deadline:
                return None
            time.sleep(0.5)

    def _deals_of(self, w: Withdrawal, row: dict[str, Any] | None) -> list[dict[str, Any]]:
        """MT5's deals carrying the comment of the withdrawal's ``row``, on any drill login."""
        assert self.system.mt5 is not None
        if row is None:
            return []
        return [
            deal
            for login in LOGINS
            for deal in self.system.mt5.control.deals(login=login)
            if deal["Comment"] == row["comment"]
        ]

    def dead_letters(self) -> list[str]:
        out = []
        for service in SERVICES_WITH_CONSUMERS:
            with psycopg.connect(self.system.dbs[service], autocommit=True) as conn:
                rows = conn.execute(
                    "SELECT consumer, topic, error_class, reason FROM dead_letters"
                ).fetchall()
            out += [f"{service}: dead letter {row}" for row in rows]
        return out


def _balanced(journal: dict[str, Any]) -> bool:
    sums: Counter[str] = Counter()
    for line in journal["entries"]:
        sums[line["currency"]] += int(line["amount_minor"]) * (1 if line["direction"] == "debit" else -1)
    return not any(sums.values())


def _one_deal(name: str, what: str, deals: list[dict[str, Any]], login: int, amount_minor: int) -> list[str]:
    """Exactly one deal, on ``login``, for ``amount_minor`` (signed)."""
    if len(deals) != 1:
        return [f"{name}: {len(deals)} {what} deals: {deals}"]
    deal = deals[0]
    if int(deal["Login"]) != login or Decimal(str(deal["Profit"])) != Decimal(amount_minor) / 100:
        return [f"{name}: {what} deal {deal} is not {amount_minor} on {login}"]
    return []
