"""make bench-recon: one synthetic business date of BENCH_PAYMENTS card deposits (default 1,000,000),
reconciled three ways on real PostgreSQL with durable commits.

Generated beforehand (not timed): the read models as the consumer would have built them (a capture,
an MT5 credit and two journals per payment), the PSP's settlement report (CSV bytes, one charge per
payment) and bank-deposit file, and the MT5 balance deals. A few hundred discrepancies are injected
(50 of each: internal_only, amount_mismatch, not_credited, credit_without_deal, missing_journal,
external_only, deal_without_record; and 5 bank deposits paid short).

Timed: one ``run_date``: import the report and the bank file (parse, checks, COPY), store the deals,
match every layer, open the cases. Prints seconds and rows/s per phase; the last line is JSON with
``payments``, ``seconds`` and ``cases``. Every injected discrepancy must be found, and nothing else
(exit 1 otherwise).
"""

from __future__ import annotations

import itertools
import json
import os
import sys
import time
from collections import Counter
from decimal import Decimal
from pathlib import Path
from typing import Final

import psycopg
from backbone.testing import databases
from backbone.testing.stack import discover
from reconciler.application.ports import Deal
from reconciler.application.runs import RunConfig, run_date
from reconciler.testing.sources import ScriptedDeals, ScriptedReports
from reconciler.testing.world import DAY, UTC_MIDNIGHT, World, at

MIGRATIONS: Final = Path(__file__).resolve().parents[1] / "migrations"
N: Final = int(os.environ.get("BENCH_PAYMENTS", "1000000"))
K: Final = 50  # per injected class
BATCH: Final = 1000
EXPECTED: Final = {
    "internal_only": K,
    "amount_mismatch": K,
    "not_credited": K,
    "credit_without_deal": K,
    "missing_journal": K,
    "external_only": K,
    "deal_without_record": K,
    "bank_deposit_different": 5,
}


def _amount(i: int) -> int:
    return 1_000 + (i * 7919) % 500_000


def generate(url: str) -> tuple[bytes, bytes, list[Deal]]:
    start_ms, _ = UTC_MIDNIGHT.window_ms(DAY)
    day = DAY.isoformat()
    step = max(1, 80_000_000 // N)  # spread over ~22 h of the day

    def t(i: int) -> int:
        return start_ms + 60_000 + i * step

    with psycopg.connect(url) as conn, conn.cursor() as cur:
        with cur.copy(
            "COPY money_facts (source_key, kind, payment_id, merchant_id, provider, provider_object_id,"
            " amount_minor, currency, deposit_reference, occurred_at_ms, business_date, event_id) FROM STDIN"
        ) as copy:
            for i in range(N):
                copy.write_row(
                    (
                        f"capture:op-{i}",
                        "capture",
                        f"pay-{i}",
                        "m1",
                        "simpsp",
                        f"pi_{i}",
                        _amount(i),
                        "USD",
                        f"dr-{i}",
                        t(i),
                        day,
                        f"e-c-{i}",
                    )
                )
        with cur.copy(
            "COPY mt5_operations (source_key, kind, row_id, comment, payment_id, mt5_login, amount_minor,"
            " currency, deal_ticket, payment_amount_minor, payment_currency, occurred_at_ms, business_date,"
            " event_id) FROM STDIN"
        ) as copy:
            for i in range(N):
                if 2 * K <= i < 3 * K:
                    continue  # not credited
                copy.write_row(
                    (
                        f"mt5-credit:{i}",
                        "credit",
                        i,
                        f"dep:{i}",
                        f"pay-{i}",
                        100_000 + i % 50_000,
                        _amount(i),
                        "USD",
                        i + 1,
                        _amount(i),
                        "USD",
                        t(i) + 2000,
                        day,
                        f"e-m-{i}",
                    )
                )
        with cur.copy(
            "COPY journals (journal_id, reference, payment_id, business_date, balanced, entries, event_id)"
            " FROM STDIN"
        ) as copy:
            for i in range(N):
                if not 4 * K <= i < 5 * K:
                    copy.write_row((2 * i + 1, f"capture:op-{i}", f"pay-{i}", day, True, "[]", f"e-j-{i}"))
                if not 2 * K <= i < 3 * K:
                    copy.write_row((2 * i + 2, f"mt5-credit:{i}", f"pay-{i}", day, True, "[]", f"e-k-{i}"))
    # the read models as a day's steady feed leaves them: vacuumed and analyzed (autovacuum caught
    # up). After a bulk load of millions of rows autovacuum would otherwise start on them during the
    # timed run, and the run's own ANALYZE would wait deadlock_timeout (1 s a table) to cancel it
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute("VACUUM ANALYZE")
    lines = [
        "business_date,balance_transaction_id,type,payment_intent_id,source_id,reference,source_reference,"
        "currency,gross_minor,fee_minor,net_minor,payout_batch_id,created_at"
    ]
    batches: dict[str, list[int]] = {}
    created = f"{day}T10:00:00Z"

    def row(txn: str, pi: str, pay: str, gross: int, batch: str) -> None:
        fee = 30 + gross // 100
        lines.append(
            f"{day},{txn},charge,{pi},ch_{txn},{pay},,USD,{gross},{fee},{gross - fee},{batch},{created}"
        )
        entry = batches.setdefault(batch, [0, 0])
        entry[0] += gross - fee
        entry[1] += 1

    for i in range(N):
        if i < K:
            continue  # missing from the report: internal_only
        gross = _amount(i) + (1 if K <= i < 2 * K else 0)
        row(f"txn_{i}", f"pi_{i}", f"pay-{i}", gross, f"po_{i // BATCH:05d}")
    for k in range(K):
        row(f"txn_x{k}", f"pi_x{k}", f"pay-x{k}", 5_000, "po_x")
    settlement = ("\n".join(lines) + "\n").encode()
    bank = [
        "deposit_id,payout_batch_id,business_date,value_date,currency,amount_minor,item_count,bank_reference"
    ]
    for n, (batch, (net, count)) in enumerate(sorted(batches.items())):
        short = 1 if n < 5 else 0
        bank.append(f"dep_{batch},{batch},{day},{day},USD,{net - short},{count},SIMPSP {batch}")
    deals = [
        Deal(10_000_000 + i, 100_000 + i % 50_000, 2, f"dep:{i}", Decimal(_amount(i)) / 100, t(i) + 1500)
        for i in range(N)
        if not (2 * K <= i < 4 * K)
    ]
    deals += [
        Deal(20_000_000 + k, 100_001, 2, f"dep:{N + k}", Decimal("1.00"), t(k) + 1500) for k in range(K)
    ]
    return settlement, ("\n".join(bank) + "\n").encode(), deals


def main() -> int:
    stack = discover()
    url = databases.create_database(stack.pg_admin_url, [MIGRATIONS], prefix="bench_recon")
    try:
        began = time.perf_counter()
        settlement, bank, deals = generate(url)
        print(
            f"generated {N:,} payments, {len(deals):,} deals, {len(settlement) / 1e6:.0f} MB report "
            f"in {time.perf_counter() - began:.1f} s (not timed)",
            file=sys.stderr,
        )
        world = World(url)
        reports = ScriptedReports(files={("settlement", DAY): settlement, ("bank_deposits", DAY): bank})
        marks: list[tuple[str, float]] = []
        config = RunConfig("simpsp", UTC_MIDNIGHT, 3_600_000)
        started = time.perf_counter()
        result = run_date(
            world.store,
            reports,
            ScriptedDeals(deals),
            config,
            DAY,
            at(DAY.replace(day=DAY.day), 23, 59) + 12 * 3_600_000,
            progress=lambda step: marks.append((step, time.perf_counter())),
        )
        seconds = time.perf_counter() - started
        marks.append(("done", time.perf_counter()))
        for (step, t0), (_, t1) in itertools.pairwise(marks):
            print(f"  {step:<34} {t1 - t0:7.2f} s", file=sys.stderr)
        for name, ms in sorted(result.counts.items()):
            if name.startswith("ms_"):
                print(f"    {name[3:]:<32} {ms / 1000:7.2f} s", file=sys.stderr)
        found = Counter(f.case_class.value for f in result.findings)
        print(
            f"{N:,} payments reconciled in {seconds:.2f} s ({N / seconds:,.0f} payments/s), "
            f"status {result.status}, {len(result.findings)} findings",
            file=sys.stderr,
        )
        ok = dict(found) == EXPECTED and result.status == "discrepancies"
        if not ok:
            print(
                f"MISMATCH: expected {EXPECTED}, found {dict(found)}; problems {result.problems}",
                file=sys.stderr,
            )
        print(
            json.dumps(
                {"payments": N, "seconds": round(seconds, 2), "cases": result.cases["opened"], "ok": ok}
            )
        )
        world.close()
        return 0 if ok else 1
    finally:
        if os.environ.get("BENCH_KEEP"):
            print(f"kept {url}", file=sys.stderr)
        else:
            databases.drop_database(stack.pg_admin_url, url)


if __name__ == "__main__":
    raise SystemExit(main())
