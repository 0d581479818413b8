"""Scale-out, end to end (issue 15, docs/operations/scaling.md): every consumer and worker of the
product runs as three instances and every relay as two (one leader, one standby) on 12-partition
topics, while instances are added (a rebalance in flight) and SIGKILLed mid-flow (the relays'
leaders among them), then started again as a supervisor would. Card deposits, captures and refunds
flow throughout. Afterwards nothing is lost or doubled and each payment's order is kept."""

from __future__ import annotations

import random
from collections import Counter, defaultdict
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import psycopg
import pytest
from backbone.avro import AvroCodec, SchemaCatalogue
from backbone.testing import kafka as test_kafka
from backbone.testing.processes import wait_until
from backbone.testing.stack import Stack
from backbone.testing.system import System

pytestmark = [pytest.mark.integration, pytest.mark.long]  # make test-long: minutes of kills

WORKERS_AND_CONSUMERS = (
    "payment_state-worker",
    "payment_state-consume",
    "mt5_credit-consume",
    "mt5_credit-worker",
    "ledger-consume",
    "reconciler-consume",
)
RELAYS = ("gateway-relay", "payment_state-relay", "mt5_credit-relay", "ledger-relay", "reconciler-relay")
LOGINS = tuple(range(7600, 7606))
WAVE = 10  # deposits per wave; three waves
PAYMENT_ORDER = ("PaymentAuthorized", "PaymentCaptured", "RefundSucceeded")


@dataclass
class Deposit:
    login: int
    amount_minor: int
    ref: str
    payment_id: str
    refunded_minor: int = 0


@pytest.fixture(scope="module")
def system(stack: Stack, tmp_path_factory: pytest.TempPathFactory) -> Iterator[System]:
    workdir: Path = tmp_path_factory.mktemp("scale-out")
    replicas = {kind: 3 for kind in WORKERS_AND_CONSUMERS} | {relay: 2 for relay in RELAYS}
    with System(stack, workdir, partitions=12, replicas=replicas, with_reconciler=True).start() as running:
        yield running


def _leader(system: System, relay: str) -> str:
    """The instance of ``relay`` publishing now (its /readyz says role=leader)."""

    def found() -> bool:
        return any(_role(system, name) == "leader" for name in _alive(system, relay))

    wait_until(found, 30, f"a leader among {relay}'s instances")
    return next(name for name in _alive(system, relay) if _role(system, name) == "leader")


def _role(system: System, name: str) -> str:
    return str(system.readiness(name)[1].get("role", {}).get("detail", ""))


def _alive(system: System, kind: str) -> list[str]:
    return [n for n in system.instances(kind) if system.procs[n].popen.poll() is None]


def _wave(system: System, deposits: list[Deposit], rng: random.Random) -> list[Deposit]:
    made = []
    for _ in range(WAVE):
        login = rng.choice(LOGINS)
        amount = rng.randrange(1_000, 90_000)
        ref, payment_id = system.create_deposit(f"cust-{login}", login, amount, "pm_card_visa")
        made.append(Deposit(login, amount, ref, payment_id))
    deposits.extend(made)
    return made


def _capture(system: System, wave: list[Deposit]) -> None:
    for d in wave:
        system.wait_payment(d.payment_id, "AUTHORIZED", timeout_s=120)
        system.capture(d.payment_id)


def test_three_instances_of_every_consumer_and_worker_added_and_killed_lose_and_double_nothing(
    system: System,
) -> None:
    """Three waves of deposits; between them a fourth instance of every consumer and worker joins,
    one instance of each type and every relay's leader is SIGKILLed, and later each is started again.
    Proves: every deposit has exactly one MT5 deal with its reference on its login for its amount and
    every refund exactly one debit deal, and no other deals exist; each payment has each journal once;
    no service dead-lettered anything; each payment's events sit on one partition in state-machine
    order, and the ledger applied its capture before its refund."""
    rng = random.Random(15)
    assert system.mt5 is not None
    for login in LOGINS:
        system.open_mt5_account(login, f"cust-{login}")
    deposits: list[Deposit] = []

    first = _wave(system, deposits, rng)
    added = [system.add_instance(kind) for kind in WORKERS_AND_CONSUMERS]  # a rebalance in flight
    _capture(system, first)

    second = _wave(system, deposits, rng)
    killed = [rng.choice(_alive(system, kind)) for kind in WORKERS_AND_CONSUMERS]
    killed += [_leader(system, relay) for relay in RELAYS]
    for name in killed:
        system.procs[name].kill()
    _capture(system, second)
    for d in first[:4]:  # refunds while instances are gone: after the credit, so MT5 is debited
        system.wait_credits(d.ref, ["done"], timeout_s=180)
        d.refunded_minor = d.amount_minor // 2
        system.refund(d.payment_id, d.refunded_minor)

    third = _wave(system, deposits, rng)
    for name in killed:
        system.restart(name)  # as a supervisor would
    _capture(system, third)

    for d in deposits:
        system.wait_payment(
            d.payment_id, "PARTIALLY_REFUNDED" if d.refunded_minor else "CAPTURED", timeout_s=180
        )
        want = ["done", "done"] if d.refunded_minor else ["done"]
        system.wait_credits(d.ref, want, timeout_s=180)
        journals = 4 if d.refunded_minor else 2
        wait_until(lambda d=d, n=journals: len(system.journals(d.payment_id)) >= n, 120, "journals")

    _check_deals(system, deposits)
    _check_books(system, deposits)
    _check_order(system, deposits)
    assert len(added) == len(WORKERS_AND_CONSUMERS)


def _check_deals(system: System, deposits: list[Deposit]) -> None:
    """MT5: exactly the deals the deposits and refunds explain, each once, on the right login."""
    assert system.mt5 is not None
    deals_by_login = {login: system.mt5.control.deals(login=login) for login in LOGINS}
    for d in deposits:
        rows = {row["kind"]: row for row in system.credits(d.ref)}
        (deal,) = system.deals(f"dep:{rows['credit']['credit_id']}")
        assert (int(deal["Login"]), deal["Profit"]) == (d.login, f"{d.amount_minor / 100:.2f}")
        if d.refunded_minor:
            (back,) = system.deals(f"dbt:{rows['debit']['credit_id']}")
            assert (int(back["Login"]), back["Profit"]) == (d.login, f"{-d.refunded_minor / 100:.2f}")
    explained = Counter(d.login for d in deposits) + Counter(d.login for d in deposits if d.refunded_minor)
    assert {login: len(found) for login, found in deals_by_login.items()} == {
        login: explained[login] for login in LOGINS
    }


def _check_books(system: System, deposits: list[Deposit]) -> None:
    """Each journal once per payment, capture before refund in the ledger's order; no dead letters."""
    for d in deposits:
        journals = system.journals(d.payment_id)
        kinds = Counter(j["reference"].split(":")[0] for j in journals)
        assert all(n == 1 for n in kinds.values()), (d.payment_id, kinds)
        assert len(kinds) == (4 if d.refunded_minor else 2), (d.payment_id, kinds)
        if d.refunded_minor:
            ids = {j["reference"].split(":")[0]: j["journal_id"] for j in journals}
            assert ids["capture"] < ids["refund"], ids

    for service in ("payment_state", "mt5_credit", "ledger", "reconciler"):
        with psycopg.connect(system.dbs[service], autocommit=True) as conn:
            assert conn.execute("SELECT count(*) FROM dead_letters").fetchone() == (0,), service


def _check_order(system: System, deposits: list[Deposit]) -> None:
    """Per-payment order on the payment facts topic: one partition each, in state-machine order."""
    codec = AvroCodec(SchemaCatalogue.default())
    records = test_kafka.read_topic(
        system.stack.kafka_bootstrap, f"{system.prefix}payments.events", expect_at_least=2 * len(deposits)
    )
    partitions: dict[str, set[int]] = defaultdict(set)
    order: dict[str, list[str]] = defaultdict(list)
    for record in sorted(records, key=lambda r: (r.partition, r.offset)):
        event = codec.decode(record.value or b"")
        partitions[event.envelope.payment_id].add(record.partition)
        if event.event_type in PAYMENT_ORDER:
            order[event.envelope.payment_id].append(event.event_type)
    for d in deposits:
        assert len(partitions[d.payment_id]) == 1, d.payment_id
        seen = order[d.payment_id]
        assert seen == sorted(seen, key=PAYMENT_ORDER.index), (d.payment_id, seen)
        assert seen[:2] == ["PaymentAuthorized", "PaymentCaptured"], (d.payment_id, seen)
