"""Test and benchmark support for mt5-credit, never imported by production code (as the ledger's
``ledger/testing/``): throwaway databases (``database``), the money facts it consumes (``facts``),
builders of accounts, intents and rows on either store (``rows``), its parts on one real database
with the in-memory MT5 (``world``), its processes on real Kafka,
PostgreSQL and the MT5 simulator (``processes``), and a client of its HTTP API (``api``).
Everything is re-exported here.
"""

from mt5_credit.testing.api import ADMIN, TOKEN_A, TOKEN_B, Client, answers
from mt5_credit.testing.database import MIGRATIONS, credit_database
from mt5_credit.testing.facts import captured_body, charged_back_body, payment_id_for, refunded_body
from mt5_credit.testing.processes import GROUP, WORKER_ENV, System, catalogue_in
from mt5_credit.testing.rows import new_row, put_intent, put_row
from mt5_credit.testing.world import CATALOGUE, CODEC, RATES, World

__all__ = [
    "ADMIN",
    "CATALOGUE",
    "CODEC",
    "GROUP",
    "MIGRATIONS",
    "RATES",
    "TOKEN_A",
    "TOKEN_B",
    "WORKER_ENV",
    "Client",
    "System",
    "World",
    "answers",
    "captured_body",
    "catalogue_in",
    "charged_back_body",
    "credit_database",
    "new_row",
    "payment_id_for",
    "put_intent",
    "put_row",
    "refunded_body",
]
