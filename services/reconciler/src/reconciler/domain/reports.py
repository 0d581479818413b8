"""The PSP's settlement report and bank-deposit file, parsed strictly.

A file is taken whole or not at all: the first bad line refuses the file with its line number and
the reason (``ReportRefused``), and nothing of it is stored. Checked: the header names every column,
every row has them all, the business date is the one asked for, currencies are ISO 4217 codes,
amounts are integers in minor units with the sign their type allows (a charge or a payout return
brings money in, a refund, a dispute or a withdrawal's payout takes it out), ``net = gross - fee``,
and no row appears twice. A fee is never negative, except on a refund: a PSP may give part of the
charge's fee back with the refund (Stripe does in some regions: the refund's balance transaction has
``fee < 0``), and then the refund must still take money out (``net < 0``). A negative fee on any
other row (a PSP paying us to take a charge, a dispute) is refused: no provider we know does that.
Only a payout or a payout return may have an empty ``payment_intent_id``
(a withdrawal pays no intent: its ``source_id`` is the PSP's payout, its ``reference`` our
withdrawal id).

Every row gets a stable source key ``<provider>|<report type>|<row id>``: the same row in another
version of the file has the same key, which is how versions are compared.
"""

from __future__ import annotations

import csv
import functools
import hashlib
import io
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import date, datetime
from typing import Final, Literal

from backbone.money import currency_exponents
from backbone.psp.reports import BANK_COLUMNS, SETTLEMENT_COLUMNS

ReportType = Literal["settlement", "bank_deposits"]
REPORT_TYPES: Final = ("settlement", "bank_deposits")
ROW_TYPES: Final = ("charge", "refund", "dispute", "payout", "payout_return")
PAYOUT_TYPES: Final = ("payout", "payout_return")  # a withdrawal's: no payment intent
MONEY_IN_TYPES: Final = ("charge", "payout_return")  # gross > 0; every other type's gross < 0
AMOUNT_ABS_MAX: Final = 10**15
_KNOWN: Final = frozenset(currency_exponents())
KNOWN_CURRENCIES: Final = tuple(sorted(_KNOWN))
TEXT_MAX: Final = 200
PLAIN_INT_DIGITS: Final = 15
# what str.strip() strips (every c with c.isspace()): a plain field neither starts nor ends with one
WHITESPACE: Final = (
    "\t\n\x0b\x0c\r\x1c\x1d\x1e\x1f \x85\xa0\u1680\u2000\u2001\u2002\u2003\u2004\u2005\u2006"
    "\u2007\u2008\u2009\u200a\u2028\u2029\u202f\u205f\u3000"
)


class ReportRefused(ValueError):
    """The file is not a valid report for that date; ``line`` is 1-based (the header is line 1)."""

    def __init__(self, line: int | None, reason: str) -> None:
        super().__init__(f"line {line}: {reason}" if line is not None else reason)
        self.line, self.reason = line, reason


@dataclass(frozen=True, slots=True)
class SettlementRow:
    line_no: int
    source_key: str
    balance_transaction_id: str
    type: str
    payment_intent_id: str
    source_id: str
    reference: str | None
    source_reference: str | None
    currency: str
    gross_minor: int
    fee_minor: int
    net_minor: int
    payout_batch_id: str
    created_at_ms: int


@dataclass(frozen=True, slots=True)
class BankRow:
    line_no: int
    source_key: str
    deposit_id: str
    payout_batch_id: str
    value_date: date
    currency: str
    amount_minor: int
    item_count: int
    bank_reference: str


@dataclass(frozen=True, slots=True)
class ParsedReport:
    provider: str
    report_type: ReportType
    business_date: date
    digest: bytes  # sha256 of the exact bytes: the same file imported twice is recognised
    settlement: tuple[SettlementRow, ...] = ()
    bank: tuple[BankRow, ...] = ()

    @property
    def row_count(self) -> int:
        return len(self.settlement) + len(self.bank)


def source_key(provider: str, report_type: ReportType, row_id: str) -> str:
    return f"{provider}|{report_type}|{row_id}"


def parse_report(provider: str, report_type: ReportType, business_date: date, data: bytes) -> ParsedReport:
    """The report in ``data`` or ``ReportRefused`` naming the first bad line."""
    digest = hashlib.sha256(data).digest()
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise ReportRefused(None, f"not UTF-8 text (byte {exc.start})") from None
    rows = list(csv.reader(io.StringIO(text, newline="")))
    columns = SETTLEMENT_COLUMNS if report_type == "settlement" else BANK_COLUMNS
    if not rows:
        raise ReportRefused(None, "empty file (no header)")
    if tuple(rows[0]) != columns:
        raise ReportRefused(1, f"header must be {','.join(columns)}")
    if not text.endswith("\n"):
        raise ReportRefused(len(rows), "truncated: the last line has no line end")
    seen: set[str] = set()
    if report_type == "settlement":
        settlement = []
        day = business_date.isoformat()
        for n, raw in enumerate(rows[1:], start=2):
            row = _settlement_fast(provider, day, n, raw) or _settlement_row(
                provider, business_date, n, _fields(n, raw, columns)
            )
            _once(n, row.balance_transaction_id, seen)
            settlement.append(row)
        return ParsedReport(provider, report_type, business_date, digest, settlement=tuple(settlement))
    bank = []
    for n, raw in enumerate(rows[1:], start=2):
        brow = _bank_row(provider, business_date, n, _fields(n, raw, columns))
        _once(n, brow.deposit_id, seen)
        bank.append(brow)
    return ParsedReport(provider, report_type, business_date, digest, bank=tuple(bank))


@dataclass(frozen=True, slots=True)
class PlainFile:
    """A settlement file whose bytes can be loaded as they stand and checked row by row in bulk
    (``plain_settlement``); ``rows`` is its number of lines after the header."""

    provider: str
    business_date: date
    digest: bytes
    rows: int


def plain_settlement(provider: str, business_date: date, data: bytes) -> PlainFile | None:
    """The settlement file as a ``PlainFile`` when nothing in its bytes needs the CSV parser's
    judgement: UTF-8, the exact header, a line end after the last line, no quote, no carriage
    return, no backslash-dot (COPY's end-of-data marker). Then every line is a row and every comma a
    field boundary, read the same by Python's csv module and by PostgreSQL's COPY. Whether each row
    is one ``_settlement_fast`` accepts (no field padded, amounts plain integers, a known currency,
    ...) is then checked in bulk by the store, which declines the file when any row is not; the
    checked parser (``parse_report``) decides every file declined here or there, and is the rule."""
    header = ",".join(SETTLEMENT_COLUMNS).encode() + b"\n"
    if not data.startswith(header) or not data.endswith(b"\n"):
        return None
    if b'"' in data or b"\r" in data or b"\\." in data:
        return None
    try:
        data.decode("utf-8")
    except UnicodeDecodeError:
        return None
    digest = hashlib.sha256(data).digest()
    return PlainFile(provider, business_date, digest, data.count(b"\n") - 1)


def plain_epoch_ms(text: str) -> int | None:
    """``created_at`` as ``_settlement_fast`` reads it (None: not plain)."""
    return _epoch_ms(text) if text == text.strip() else None


def _once(line: int, row_id: str, seen: set[str]) -> None:
    if row_id in seen:
        raise ReportRefused(line, f"duplicate row {row_id!r}")
    seen.add(row_id)


def _fields(line: int, raw: Sequence[str], columns: Sequence[str]) -> dict[str, str]:
    if len(raw) != len(columns):
        raise ReportRefused(line, f"{len(raw)} fields, expected {len(columns)}")
    return dict(zip(columns, raw, strict=True))


def _text(line: int, f: dict[str, str], name: str, *, required: bool = True) -> str:
    value = f[name].strip()
    if required and not value:
        raise ReportRefused(line, f"{name} is empty")
    if len(value) > 200:
        raise ReportRefused(line, f"{name} is longer than 200 characters")
    return value


def _int(line: int, f: dict[str, str], name: str) -> int:
    value = f[name].strip()
    digits = value[1:] if value.startswith("-") else value
    if not digits.isascii() or not digits.isdigit():
        raise ReportRefused(line, f"{name}={value!r} is not an integer amount in minor units")
    number = int(value)
    if abs(number) > AMOUNT_ABS_MAX:
        raise ReportRefused(line, f"{name}={value} is out of range")
    return number


def _currency(line: int, f: dict[str, str]) -> str:
    code = f["currency"].strip()
    if code in _KNOWN:
        return code
    if len(code) != 3 or not code.isascii() or not code.isupper():
        raise ReportRefused(line, f"currency={code!r} is not an ISO 4217 code")
    raise ReportRefused(line, f"currency={code!r} is not a currency we know")


@functools.lru_cache(maxsize=1 << 16)
def _epoch_ms(text: str) -> int | None:
    """``YYYY-MM-DDTHH:MM:SSZ`` (or with an offset) as epoch ms; rows of one second share it."""
    try:
        parsed = datetime.fromisoformat(text)
    except ValueError:
        return None
    if parsed.tzinfo is None or "T" not in text:
        return None
    return int(parsed.timestamp() * 1000)


def _date(line: int, f: dict[str, str], name: str) -> date:
    try:
        return date.fromisoformat(f[name].strip())
    except ValueError:
        raise ReportRefused(line, f"{name}={f[name]!r} is not a date YYYY-MM-DD") from None


def _same_date(line: int, f: dict[str, str], business_date: date) -> None:
    found = _date(line, f, "business_date")
    if found != business_date:
        raise ReportRefused(line, f"business_date {found} is not the report's date {business_date}")


def _plain_int(text: str) -> int | None:
    digits = text[1:] if text[:1] == "-" else text
    if not digits or not digits.isascii() or not digits.isdigit() or len(digits) > PLAIN_INT_DIGITS:
        return None
    return int(text)


def _settlement_fast(provider: str, day: str, line: int, raw: list[str]) -> SettlementRow | None:  # noqa: PLR0911 - None if unsure
    """The common, well-formed row without the per-field checks' overhead (a million rows a day).
    It accepts only rows ``_settlement_row`` accepts and builds the same value; anything unusual
    (None) goes to ``_settlement_row``, which is the rule and names the problem."""
    if len(raw) != len(SETTLEMENT_COLUMNS) or raw[0] != day:
        return None
    _, txn_id, row_type, intent, source, reference, source_ref, currency, g, f, n, batch, created = raw
    for text in (txn_id, intent, source, batch, reference, source_ref):
        if len(text) > TEXT_MAX or text != text.strip():
            return None
    if not (txn_id and source and batch) or currency not in _KNOWN:
        return None
    if not intent and row_type not in PAYOUT_TYPES:
        return None
    gross, fee, net = _plain_int(g), _plain_int(f), _plain_int(n)
    if gross is None or fee is None or net is None or fee < 0 or net != gross - fee:
        return None
    if row_type not in ROW_TYPES or (gross > 0) != (row_type in MONEY_IN_TYPES) or gross == 0:
        return None
    created_ms = plain_epoch_ms(created)
    if created_ms is None:
        return None
    return SettlementRow(
        line,
        f"{provider}|settlement|{txn_id}",
        txn_id,
        row_type,
        intent,
        source,
        reference or None,
        source_ref or None,
        currency,
        gross,
        fee,
        net,
        batch,
        created_ms,
    )


def _settlement_row(provider: str, business_date: date, line: int, f: dict[str, str]) -> SettlementRow:
    _same_date(line, f, business_date)
    row_type = _text(line, f, "type")
    if row_type not in ROW_TYPES:
        raise ReportRefused(line, f"type={row_type!r} is not one of {', '.join(ROW_TYPES)}")
    gross, fee, net = (_int(line, f, n) for n in ("gross_minor", "fee_minor", "net_minor"))
    if row_type in MONEY_IN_TYPES and gross <= 0:
        raise ReportRefused(line, f"a {row_type} has a positive gross_minor, not {gross}")
    if row_type not in MONEY_IN_TYPES and gross >= 0:
        raise ReportRefused(line, f"a {row_type} has a negative gross_minor, not {gross}")
    if fee < 0 and row_type != "refund":
        raise ReportRefused(line, f"fee_minor={fee} is negative (only a refund may give a fee back)")
    if fee < 0 and gross - fee >= 0:
        raise ReportRefused(line, f"a refund gives back a fee of {-fee}, more than it refunds ({-gross})")
    if net != gross - fee:
        raise ReportRefused(line, f"net_minor {net} is not gross_minor - fee_minor ({gross - fee})")
    created_ms = _epoch_ms(f["created_at"].strip())
    if created_ms is None:
        raise ReportRefused(line, f"created_at={f['created_at']!r} is not an ISO 8601 time with its zone")
    txn_id = _text(line, f, "balance_transaction_id")
    return SettlementRow(
        line_no=line,
        source_key=source_key(provider, "settlement", txn_id),
        balance_transaction_id=txn_id,
        type=row_type,
        payment_intent_id=_text(line, f, "payment_intent_id", required=row_type not in PAYOUT_TYPES),
        source_id=_text(line, f, "source_id"),
        reference=_text(line, f, "reference", required=False) or None,
        source_reference=_text(line, f, "source_reference", required=False) or None,
        currency=_currency(line, f),
        gross_minor=gross,
        fee_minor=fee,
        net_minor=net,
        payout_batch_id=_text(line, f, "payout_batch_id"),
        created_at_ms=created_ms,
    )


def _bank_row(provider: str, business_date: date, line: int, f: dict[str, str]) -> BankRow:
    _same_date(line, f, business_date)
    count = _int(line, f, "item_count")
    if count < 1:
        raise ReportRefused(line, f"item_count={count} is not positive")
    value_date = _date(line, f, "value_date")
    if value_date < business_date:
        raise ReportRefused(line, f"value_date {value_date} is before the business date")
    deposit_id = _text(line, f, "deposit_id")
    return BankRow(
        line_no=line,
        source_key=source_key(provider, "bank_deposits", deposit_id),
        deposit_id=deposit_id,
        payout_batch_id=_text(line, f, "payout_batch_id"),
        value_date=value_date,
        currency=_currency(line, f),
        amount_minor=_int(line, f, "amount_minor"),
        item_count=count,
        bank_reference=_text(line, f, "bank_reference", required=False),
    )
