"""The reconciler's tables as SQLAlchemy Core metadata. The schema itself is the migrations'; this
follows them (tests/integration/test_tables.py compares the two on a migrated database)."""

from __future__ import annotations

from sqlalchemy import (
    CHAR,
    BigInteger,
    Boolean,
    Column,
    Date,
    DateTime,
    Integer,
    LargeBinary,
    MetaData,
    Numeric,
    SmallInteger,
    Table,
    Text,
)
from sqlalchemy.dialects.postgresql import JSONB

metadata = MetaData()

money_facts = Table(
    "money_facts",
    metadata,
    Column("id", BigInteger, nullable=False),
    Column("source_key", Text, primary_key=True),
    Column("kind", Text, nullable=False),
    Column("payment_id", Text, nullable=False),
    Column("merchant_id", Text, nullable=False),
    Column("provider", Text, nullable=False),
    Column("provider_object_id", Text, nullable=False),
    Column("amount_minor", BigInteger, nullable=False),
    Column("currency", CHAR(3), nullable=False),
    Column("deposit_reference", Text),
    Column("occurred_at_ms", BigInteger, nullable=False),
    Column("business_date", Date, nullable=False),
    Column("event_id", Text, nullable=False),
)

mt5_operations = Table(
    "mt5_operations",
    metadata,
    Column("id", BigInteger, nullable=False),
    Column("source_key", Text, primary_key=True),
    Column("kind", Text, nullable=False),
    Column("row_id", BigInteger, nullable=False),
    Column("comment", Text, nullable=False),
    Column("payment_id", Text, nullable=False),
    Column("mt5_login", BigInteger, nullable=False),
    Column("amount_minor", BigInteger, nullable=False),
    Column("currency", CHAR(3), nullable=False),
    Column("deal_ticket", BigInteger, nullable=False),
    Column("payment_amount_minor", BigInteger),
    Column("payment_currency", CHAR(3)),
    Column("fx_rate", Text),
    Column("cause_key", Text),
    Column("withdrawal_id", Text),
    Column("occurred_at_ms", BigInteger, nullable=False),
    Column("business_date", Date, nullable=False),
    Column("event_id", Text, nullable=False),
)

journals = Table(
    "journals",
    metadata,
    Column("journal_id", BigInteger, primary_key=True),
    Column("reference", Text, nullable=False),
    Column("payment_id", Text, nullable=False),
    Column("business_date", Date, nullable=False),
    Column("balanced", Boolean, nullable=False),
    Column("entries", JSONB, nullable=False),
    Column("event_id", Text, nullable=False),
)

attention = Table(
    "attention",
    metadata,
    Column("id", BigInteger, nullable=False),
    Column("attention_key", Text, primary_key=True),
    Column("source", Text, nullable=False),
    Column("subject_key", Text),
    Column("payment_id", Text, nullable=False),
    Column("kind", Text, nullable=False),
    Column("status", Text),
    Column("detail", Text, nullable=False),
    Column("facts", JSONB, nullable=False),
    Column("started_at_ms", BigInteger),
    Column("raised_at_ms", BigInteger, nullable=False),
    Column("business_date", Date, nullable=False),
    Column("event_id", Text, nullable=False),
    Column("settled_by", Text),
    Column("settled_at_ms", BigInteger),
)

imports = Table(
    "imports",
    metadata,
    Column("id", BigInteger, primary_key=True),
    Column("provider", Text, nullable=False),
    Column("report_type", Text, nullable=False),
    Column("business_date", Date, nullable=False),
    Column("version", Integer, nullable=False),
    Column("digest", LargeBinary, nullable=False),
    Column("source", Text, nullable=False),
    Column("row_count", Integer, nullable=False),
    Column("changes", JSONB, nullable=False),
    Column("imported_at", DateTime(timezone=True), nullable=False),
)

settlement_rows = Table(
    "settlement_rows",
    metadata,
    Column("id", BigInteger, nullable=False),
    Column("import_id", BigInteger, primary_key=True),
    Column("source_key", Text, primary_key=True),
    Column("line_no", Integer, nullable=False),
    Column("balance_transaction_id", Text, nullable=False),
    Column("type", Text, nullable=False),
    Column("payment_intent_id", Text, nullable=False),
    Column("source_id", Text, nullable=False),
    Column("reference", Text),
    Column("source_reference", Text),
    Column("currency", CHAR(3), nullable=False),
    Column("gross_minor", BigInteger, nullable=False),
    Column("fee_minor", BigInteger, nullable=False),
    Column("net_minor", BigInteger, nullable=False),
    Column("payout_batch_id", Text, nullable=False),
    Column("created_at_ms", BigInteger, nullable=False),
)

bank_rows = Table(
    "bank_rows",
    metadata,
    Column("import_id", BigInteger, primary_key=True),
    Column("source_key", Text, primary_key=True),
    Column("line_no", Integer, nullable=False),
    Column("deposit_id", Text, nullable=False),
    Column("payout_batch_id", Text, nullable=False),
    Column("value_date", Date, nullable=False),
    Column("currency", CHAR(3), nullable=False),
    Column("amount_minor", BigInteger, nullable=False),
    Column("item_count", Integer, nullable=False),
    Column("bank_reference", Text, nullable=False),
)

runs = Table(
    "runs",
    metadata,
    Column("id", BigInteger, primary_key=True),
    Column("business_date", Date, nullable=False),
    Column("status", Text, nullable=False),
    Column("started_at", DateTime(timezone=True), nullable=False),
    Column("finished_at", DateTime(timezone=True)),
    Column("as_of_ms", BigInteger, nullable=False),
    Column("settlement_import_id", BigInteger),
    Column("bank_import_id", BigInteger),
    Column("problems", JSONB, nullable=False),
    Column("summary", JSONB, nullable=False),
)

mt5_deals = Table(
    "mt5_deals",
    metadata,
    Column("run_id", BigInteger, primary_key=True),
    Column("ticket", BigInteger, primary_key=True),
    Column("login", BigInteger, nullable=False),
    Column("action", Integer, nullable=False),
    Column("comment", Text, nullable=False),
    Column("profit", Numeric, nullable=False),
    Column("time_ms", BigInteger, nullable=False),
)

currency_exponents = Table(
    "currency_exponents",
    metadata,
    Column("currency", CHAR(3), primary_key=True),
    Column("exponent", Integer, nullable=False),
)

matches = Table(
    "matches",
    metadata,
    Column("run_id", BigInteger, nullable=False),
    Column("layer", SmallInteger, nullable=False),  # matching.LAYERS
    Column("left_id", BigInteger, nullable=False),
    Column("right_id", BigInteger, nullable=False),
)

findings = Table(
    "findings",
    metadata,
    Column("run_id", BigInteger, primary_key=True),
    Column("case_key", Text, primary_key=True),
    Column("case_class", Text, nullable=False),
    Column("summary", Text, nullable=False),
    Column("evidence", JSONB, nullable=False),
)

cases = Table(
    "cases",
    metadata,
    Column("id", BigInteger, primary_key=True),
    Column("case_key", Text, nullable=False),
    Column("case_class", Text, nullable=False),
    Column("severity", Text, nullable=False),
    Column("business_date", Date, nullable=False),
    Column("status", Text, nullable=False),
    Column("summary", Text, nullable=False),
    Column("evidence", JSONB, nullable=False),
    Column("evidence_digest", LargeBinary, nullable=False),
    Column("first_run_id", BigInteger),
    Column("last_run_id", BigInteger),
    Column("reopened", Integer, nullable=False),
    Column("opened_at", DateTime(timezone=True), nullable=False),
    Column("updated_at", DateTime(timezone=True), nullable=False),
    Column("resolved_at", DateTime(timezone=True)),
    Column("resolution", Text),
    Column("merchant_id", Text),  # migration 0011: the merchant its records name, or NULL
)

case_history = Table(
    "case_history",
    metadata,
    Column("id", BigInteger, primary_key=True),
    Column("case_id", BigInteger, nullable=False),
    Column("at", DateTime(timezone=True), nullable=False),
    Column("action", Text, nullable=False),
    Column("run_id", BigInteger),
    Column("actor", Text, nullable=False),
    Column("note", Text),
)

repairs = Table(
    "repairs",
    metadata,
    Column("id", BigInteger, primary_key=True),
    Column("case_id", BigInteger, nullable=False),
    Column("source_key", Text, nullable=False),
    Column("repair_type", Text, nullable=False),
    Column("target", Text, nullable=False),
    Column("command", JSONB, nullable=False),
    Column("command_digest", Text, nullable=False),
    Column("revision", Integer, nullable=False),
    Column("status", Text, nullable=False),
    Column("proposed_by", Text, nullable=False),
    Column("proposed_at", DateTime(timezone=True), nullable=False),
    Column("approved_by", Text),
    Column("approved_at", DateTime(timezone=True)),
    Column("approved_digest", Text),
    Column("rejected_by", Text),
    Column("rejected_reason", Text),
    Column("outcome_detail", Text),
    Column("finished_at", DateTime(timezone=True)),
)

audit = Table(
    "audit",
    metadata,
    Column("id", BigInteger, primary_key=True),
    Column("at", DateTime(timezone=True), nullable=False),
    Column("operator", Text, nullable=False),
    Column("action", Text, nullable=False),
    Column("target", Text, nullable=False),
    Column("outcome", Text, nullable=False),
    Column("reason", Text),
    Column("detail", JSONB, nullable=False),
)
