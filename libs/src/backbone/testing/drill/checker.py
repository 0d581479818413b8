"""The promises a drill checks once the faults are over and the system is quiet.

Each check returns the violations it found as sentences naming the deposit or withdrawal, the
payment and what was expected; an empty list is a pass. The checks read the product through its own
APIs (payment-state, mt5-credit, the ledger), MT5 through the simulator's control API (what the
trading server holds), the PSP's payouts through its API, the payment facts topic from Kafka, each
service's ``dead_letters`` table, and the reconciler's runs, cases and locks.
"""

from __future__ import annotations

import datetime as dt
import time
from collections import Counter, defaultdict
from collections.abc import Callable
from decimal import Decimal
from typing import Any, Final

import psycopg

from backbone.avro import AvroCodec, SchemaCatalogue
from backbone.testing import kafka as test_kafka
from backbone.testing.drill.history import History
from backbone.testing.drill.injector import RECON_BUSY_EXIT, RECON_LOCK_WAIT_S
from backbone.testing.drill.traffic import LOGINS, Deposit, Withdrawal
from backbone.testing.drill.workload import CHECKER, Workload
from backbone.testing.system import LEDGER_TOKEN, System

CAPTURED_OR_LATER: Final = frozenset({"CAPTURED", "PARTIALLY_REFUNDED", "REFUNDED"})
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
# a withdrawal's statuses where nothing more happens by itself: approved ones end paid or returned
# (refused: MT5 refused the debit), the others were never approved
SETTLED: Final = frozenset({"paid", "returned", "refused"})
NEVER_APPROVED: Final = frozenset({"held", "prepared", "rejected"})
ROW_FINAL: Final = frozenset({"done", "rejected", "failed", "cancelled", "canceled"})
RECON_LOCK_NAMESPACE: Final = 0x5EC0  # the reconciler's run lock: pg_advisory_lock(0x5EC0, date)


class Checker:
    def __init__(
        self,
        system: System,
        workload: Workload,
        history: History,
        deposits: list[Deposit],
        withdrawals: list[Withdrawal] | None = None,
    ) -> None:
        self.system, self.workload, self.history, self.deposits = system, workload, history, deposits
        self.withdrawals = withdrawals or []
        self.payments: dict[int, dict[str, Any] | None] = {}
        self.credit_rows: dict[int, list[dict[str, Any]]] = {}  # a deposit's own rows (not withdrawals')
        self.views: dict[int, dict[str, Any] | None] = {}  # a withdrawal as mt5-credit shows it

    # --- getting to the end state ---------------------------------------------------------------

    def settle_unknowns(self) -> None:
        """A client asks again, with the same key, whatever it never got a definite answer to."""
        for request in self.history.unknown():
            if request.op == "dispute":
                continue  # the bank's dispute has no key: asking again could dispute twice
            self.workload.client.retry(request, deadline_s=60)

    def converge(self, timeout_s: float) -> list[str]:
        """Wait until every deposit's and withdrawal's visible state is final; returns those that
        never got there (``d<n>``, ``w<n>``)."""
        for w in self.withdrawals:  # asked again by settle_unknowns: the id is in the answer
            asked = w.requests.get("withdrawal")
            if not w.withdrawal_id and asked is not None and asked.outcome == "ok":
                w.withdrawal_id = str(asked.answer["withdrawal_id"])
        deadline = time.monotonic() + timeout_s
        pending = [d for d in self.deposits if d.payment_id]
        waiting = [w for w in self.withdrawals if w.withdrawal_id]
        while (pending or waiting) and time.monotonic() < deadline:
            pending = [d for d in pending if not self._final(d)]
            waiting = [w for w in waiting if not self._withdrawal_final(w)]
            if pending or waiting:
                time.sleep(1.0)
        for d in self.deposits:
            if d.payment_id:
                self.payments[d.number] = self.workload.payment(d)
                self.credit_rows[d.number] = self._rows(d) or []
        for w in self.withdrawals:
            if w.withdrawal_id:
                self.views[w.number] = self.workload.withdrawal(w)
        return [f"d{d.number}" for d in pending] + [f"w{w.number} ({w.withdrawal_id})" for w in waiting]

    def _rows(self, d: Deposit) -> list[dict[str, Any]] | None:
        """The deposit's own credit and debit rows; a withdrawal's rows name its deposit reference
        too (the card it goes back to) but carry the withdrawal's id as their payment id."""
        rows = self.workload.credits(d)
        return None if rows is None else [r for r in rows if r["payment_id"] == d.payment_id]

    def _final(self, d: Deposit) -> bool:  # noqa: PLR0911 - one early answer per unfinished part
        payment = self.workload.payment(d)
        if payment is None:
            return False
        status = str(payment["status"])
        if status in ("CREATED", "REQUIRES_ACTION"):
            return False
        rows = self._rows(d)
        if rows is None:
            return False
        if status in CAPTURED_OR_LATER and not any(
            r["kind"] == "credit" and r["status"] == "done" for r in rows
        ):
            return False
        wanted_debits = _ok(d, "refund") + _ok(d, "dispute")
        done_debits = sum(1 for r in rows if r["kind"] == "debit" and r["status"] == "done")
        if done_debits < wanted_debits:
            return False
        if any(r["status"] not in ROW_FINAL for r in rows):
            return False
        journals = self._journals(d.payment_id)
        if journals is None:
            return False
        kinds = {j["reference"].split(":")[0] for j in journals}
        return status not in CAPTURED_OR_LATER or {"capture", "mt5-credit"} <= kinds

    def _withdrawal_final(self, w: Withdrawal) -> bool:
        """Settled (or never approved), its MT5 rows final, and, once settled, nothing of it left
        in transit in the books. A withdrawal whose payout the bank returned (the drill's ``return``,
        acknowledged) is final only once it shows ``returned``: ``paid`` is where it was before."""
        view = self.workload.withdrawal(w)
        if view is None:
            return False
        status = str(view["status"])
        if status in NEVER_APPROVED:
            approve = w.requests.get("approve")
            return approve is None or approve.outcome != "ok"  # approved: its debit is coming
        if status not in SETTLED:
            return False
        if _ok(w, "return") and status != "returned":
            return False  # paid, but the bank's acknowledged return is still on its way to us
        rows = [r for r in (view["debit"], view["give_back"]) if r is not None]
        if any(r["status"] not in ROW_FINAL for r in rows):
            return False
        journals = self._journals(w.withdrawal_id)
        return journals is not None and (status == "refused" or _in_transit(journals) == 0)

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
            if _ok(d, "payment") and payment is None:
                out.append(f"d{d.number}: payment {d.payment_id} acknowledged but not found")
                continue
            status = str(payment["status"]) if payment else ""
            if _ok(d, "capture") and status not in CAPTURED_OR_LATER:
                out.append(f"d{d.number}: capture acknowledged, payment {d.payment_id} is {status}")
            if _ok(d, "refund") and status not in ("PARTIALLY_REFUNDED", "REFUNDED"):
                out.append(f"d{d.number}: refund acknowledged, payment {d.payment_id} is {status}")
            rows = self.credit_rows.get(d.number, [])
            debits = [r for r in rows if r["kind"] == "debit" and r["status"] == "done"]
            if len(debits) < _ok(d, "refund") + _ok(d, "dispute"):
                out.append(f"d{d.number}: refund/dispute acknowledged, debits done: {debits}")
        for w in self.withdrawals:
            view = self.views.get(w.number) or {}
            name = f"w{w.number} ({w.withdrawal_id})"
            if _ok(w, "withdrawal") and not view:
                out.append(f"{name}: withdrawal acknowledged but mt5-credit does not show it")
                continue
            if _ok(w, "approve") and (
                view.get("approved_by") != CHECKER or view.get("status") not in SETTLED
            ):
                out.append(f"{name}: approval acknowledged, withdrawal {view.get('status')}, {view}")
            if _ok(w, "reject") and view.get("status") != "rejected":
                out.append(f"{name}: rejection acknowledged, withdrawal is {view.get('status')}")
            if _ok(w, "return") and view.get("status") != "returned":
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

    def _journals(self, payment_id: str) -> list[dict[str, Any]] | None:
        status, body = self.workload.client.get(
            f"{self.system.urls.ledger}/v1/journals?payment_id={payment_id}", LEDGER_TOKEN
        )
        if status != 200:
            return None
        return list(body["journals"] if isinstance(body, dict) else body)

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
                if _in_transit(journals):
                    out.append(f"{name}: {status}, {_in_transit(journals)} left in payouts_in_transit")
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

    def reconciliation(self, attempts: int = 3) -> tuple[list[str], dict[str, Any]]:
        """Today's run must be clean; a run that is not is tried again a little later (the
        reconciler's read models may still be catching up), then its findings are violations."""
        day = dt.datetime.now(dt.UTC).date().isoformat()
        result: dict[str, Any] = {}
        for _ in range(attempts):
            result = self.system.reconcile(day)
            if result.get("status") == "clean":
                return [], result
            time.sleep(10)
        findings = result.get("findings") or []
        return [f"reconciliation {result.get('status')}: {f}" for f in findings] or [
            f"reconciliation {result.get('status')}: {result}"
        ], result

    def runs_recovered(self) -> list[str]:
        """After the final run: each reconciliation killed mid-run let go of its date (its re-run
        got the lock within ``RECON_LOCK_WAIT_S``), no run is left ``running``, nobody holds a run
        lock, and no case was opened twice or announced twice (CaseOpened once per opening)."""
        out = []
        for f in self.history.faults:
            if f.kind != "recon_kill":
                continue
            if "rerun_exit" not in f.detail:
                out.append(f"the reconciliation killed at {f.at}s was never run again: {f.detail}")
            elif f.detail["rerun_exit"] == RECON_BUSY_EXIT:
                out.append(
                    f"the reconciliation killed at {f.at}s ({f.detail['step']}): its re-run found the date"
                    f" locked for {f.detail['lock_wait_s']} s (more than {RECON_LOCK_WAIT_S:.0f} s)"
                )
        with psycopg.connect(self.system.dbs["reconciler"], autocommit=True) as conn:
            running = conn.execute("SELECT id, business_date FROM runs WHERE status = 'running'").fetchall()
            out += [f"run {run} of {day} is still 'running' after the final run" for run, day in running]
            locks = conn.execute(_RUN_LOCKS, (RECON_LOCK_NAMESPACE,)).fetchall()
            out += [f"backend {pid} still holds the run lock of day {day}" for pid, day in locks]
            announced: dict[str, int] = dict(
                conn.execute(
                    "SELECT message_key, count(*) FROM outbox WHERE event_type = 'CaseOpened' GROUP BY 1"
                ).fetchall()
            )
            for key, opened, openings in conn.execute(_OPENINGS).fetchall():
                if opened != 1:
                    out.append(f"case {key} opened {opened} times")
                if announced.get(key, 0) != openings:
                    out.append(f"case {key}: {announced.get(key, 0)} CaseOpened for {openings} openings")
        return out


_OPENINGS = """SELECT c.case_key, count(*) FILTER (WHERE h.action = 'opened'),
    count(*) FILTER (WHERE h.action IN ('opened', 'reopened'))
  FROM cases c JOIN case_history h ON h.case_id = c.id GROUP BY c.case_key"""
_RUN_LOCKS = """SELECT pid, objid FROM pg_locks WHERE locktype = 'advisory' AND classid = %s
  AND database = (SELECT oid FROM pg_database WHERE datname = current_database())"""


def _ok(d: Deposit | Withdrawal, op: str) -> int:
    request = d.requests.get(op)
    return 1 if request is not None and request.outcome == "ok" else 0


def _balanced(journal: dict[str, Any]) -> bool:
    sums: Counter[str] = Counter()
    for line in journal["entries"]:
        sums[line["currency"]] += int(line["amount_minor"]) * (1 if line["direction"] == "debit" else -1)
    return not any(sums.values())


def _in_transit(journals: list[dict[str, Any]]) -> int:
    """What the journals leave in ``payouts_in_transit`` (a liability: credits minus debits)."""
    return sum(
        int(line["amount_minor"]) * (1 if line["direction"] == "credit" else -1)
        for j in journals
        for line in j["entries"]
        if line["account"].startswith("payouts_in_transit")
    )


def _one_deal(name: str, what: str, deals: list[dict[str, Any]], login: int, amount_minor: int) -> list[str]:
    """Exactly one deal, on ``login``, for ``amount_minor`` (signed)."""
    if len(deals) != 1:
        return [f"{name}: {len(deals)} {what} deals: {deals}"]
    deal = deals[0]
    if int(deal["Login"]) != login or Decimal(str(deal["Profit"])) != Decimal(amount_minor) / 100:
        return [f"{name}: {what} deal {deal} is not {amount_minor} on {login}"]
    return []
