"""The reconciler's tables as SQLAlchemy Core metadata (the schema itself is migrations/0001)."""

from __future__ import annotations

from sqlalchemy import (
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
    Column("id", BigInteger),
    Column("source_key", Text, primary_key=True),
    Column("kind", Text),
    Column("payment_id", Text),
    Column("merchant_id", Text),
    Column("provider", Text),
    Column("provider_object_id", Text),
    Column("amount_minor", BigInteger),
    Column("currency", Text),
    Column("deposit_reference", Text),
    Column("occurred_at_ms", BigInteger),
    Column("business_date", Date),
    Column("event_id", Text),
)

mt5_operations = Table(
    "mt5_operations",
    metadata,
    Column("id", BigInteger),
    Column("source_key", Text, primary_key=True),
    Column("kind", Text),
    Column("row_id", BigInteger),
    Column("comment", Text),
    Column("payment_id", Text),
    Column("mt5_login", BigInteger),
    Column("amount_minor", BigInteger),
    Column("currency", Text),
    Column("deal_ticket", BigInteger),
    Column("payment_amount_minor", BigInteger),
    Column("payment_currency", Text),
    Column("fx_rate", Text),
    Column("cause_key", Text),
    Column("withdrawal_id", Text),
    Column("occurred_at_ms", BigInteger),
    Column("business_date", Date),
    Column("event_id", Text),
)

journals = Table(
    "journals",
    metadata,
    Column("journal_id", BigInteger, primary_key=True),
    Column("reference", Text),
    Column("payment_id", Text),
    Column("business_date", Date),
    Column("balanced", Boolean),
    Column("entries", JSONB),
    Column("event_id", Text),
)

attention = Table(
    "attention",
    metadata,
    Column("id", BigInteger),
    Column("attention_key", Text, primary_key=True),
    Column("source", Text),
    Column("subject_key", Text),
    Column("payment_id", Text),
    Column("kind", Text),
    Column("status", Text),
    Column("detail", Text),
    Column("facts", JSONB),
    Column("started_at_ms", BigInteger),
    Column("raised_at_ms", BigInteger),
    Column("business_date", Date),
    Column("event_id", Text),
    Column("settled_by", Text),
    Column("settled_at_ms", BigInteger),
)

imports = Table(
    "imports",
    metadata,
    Column("id", BigInteger, primary_key=True),
    Column("provider", Text),
    Column("report_type", Text),
    Column("business_date", Date),
    Column("version", Integer),
    Column("digest", LargeBinary),
    Column("source", Text),
    Column("row_count", Integer),
    Column("changes", JSONB),
    Column("imported_at"),
)

settlement_rows = Table(
    "settlement_rows",
    metadata,
    Column("id", BigInteger),
    Column("import_id", BigInteger, primary_key=True),
    Column("source_key", Text, primary_key=True),
    Column("line_no", Integer),
    Column("balance_transaction_id", Text),
    Column("type", Text),
    Column("payment_intent_id", Text),
    Column("source_id", Text),
    Column("reference", Text),
    Column("source_reference", Text),
    Column("currency", Text),
    Column("gross_minor", BigInteger),
    Column("fee_minor", BigInteger),
    Column("net_minor", BigInteger),
    Column("payout_batch_id", Text),
    Column("created_at_ms", BigInteger),
)

bank_rows = Table(
    "bank_rows",
    metadata,
    Column("import_id", BigInteger, primary_key=True),
    Column("source_key", Text, primary_key=True),
    Column("line_no", Integer),
    Column("deposit_id", Text),
    Column("payout_batch_id", Text),
    Column("value_date", Date),
    Column("currency", Text),
    Column("amount_minor", BigInteger),
    Column("item_count", Integer),
    Column("bank_reference", Text),
)

runs = Table(
    "runs",
    metadata,
    Column("id", BigInteger, primary_key=True),
    Column("business_date", Date),
    Column("status", Text),
    Column("started_at"),
    Column("finished_at"),
    Column("as_of_ms", BigInteger),
    Column("settlement_import_id", BigInteger),
    Column("bank_import_id", BigInteger),
    Column("problems", JSONB),
    Column("summary", JSONB),
)

mt5_deals = Table(
    "mt5_deals",
    metadata,
    Column("run_id", BigInteger, primary_key=True),
    Column("ticket", BigInteger, primary_key=True),
    Column("login", BigInteger),
    Column("action", Integer),
    Column("comment", Text),
    Column("profit", Numeric),
    Column("time_ms", BigInteger),
)

currency_exponents = Table(
    "currency_exponents",
    metadata,
    Column("currency", Text, primary_key=True),
    Column("exponent", Integer),
)

matches = Table(
    "matches",
    metadata,
    Column("run_id", BigInteger),
    Column("layer", SmallInteger),  # matching.LAYERS
    Column("left_id", BigInteger),
    Column("right_id", BigInteger),
)

findings = Table(
    "findings",
    metadata,
    Column("run_id", BigInteger, primary_key=True),
    Column("case_key", Text, primary_key=True),
    Column("case_class", Text),
    Column("summary", Text),
    Column("evidence", JSONB),
)

cases = Table(
    "cases",
    metadata,
    Column("id", BigInteger, primary_key=True),
    Column("case_key", Text),
    Column("case_class", Text),
    Column("severity", Text),
    Column("business_date", Date),
    Column("status", Text),
    Column("summary", Text),
    Column("evidence", JSONB),
    Column("evidence_digest", LargeBinary),
    Column("first_run_id", BigInteger),
    Column("last_run_id", BigInteger),
    Column("reopened", Integer),
    Column("opened_at"),
    Column("updated_at"),
    Column("resolved_at"),
    Column("resolution", Text),
    Column("merchant_id", Text),  # migration 0011: the merchant its records name, or NULL
)

case_history = Table(
    "case_history",
    metadata,
    Column("id", BigInteger, primary_key=True),
    Column("case_id", BigInteger),
    Column("at"),
    Column("action", Text),
    Column("run_id", BigInteger),
    Column("actor", Text),
    Column("note", Text),
)

repairs = Table(
    "repairs",
    metadata,
    Column("id", BigInteger, primary_key=True),
    Column("case_id", BigInteger),
    Column("source_key", Text),
    Column("repair_type", Text),
    Column("target", Text),
    Column("command", JSONB),
    Column("command_digest", Text),
    Column("revision", Integer),
    Column("status", Text),
    Column("proposed_by", Text),
    Column("proposed_at", DateTime(timezone=True)),
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
    Column("at", DateTime(timezone=True)),
    Column("operator", Text),
    Column("action", Text),
    Column("target", Text),
    Column("outcome", Text),
    Column("reason", Text),
    Column("detail", JSONB),
)
