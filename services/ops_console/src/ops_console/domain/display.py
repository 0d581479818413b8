"""How the console shows things, readable at a glance: amounts in their currency's own digits
(minor units never shown raw), states colour-coded by what they ask of a person, every time in one
timezone with its business date beside it, and the records of a case side by side with the fields
that differ marked."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime, time, timedelta
from typing import Any, Final
from zoneinfo import ZoneInfo

from backbone.money import MoneyError, currency_exponent, to_decimal

# ok: nothing to do; wait: in flight; attention: a person should look; bad: money is at risk
TONE: Final[dict[str, str]] = {
    "CAPTURED": "ok",
    "REFUNDED": "ok",
    "PARTIALLY_REFUNDED": "ok",
    "done": "ok",
    "resolved": "ok",
    "executed": "ok",
    "clean": "ok",
    "paid": "ok",
    "held": "wait",
    "prepared": "wait",
    "approved": "wait",
    "paid_out": "wait",
    "returning": "attention",
    "returned": "attention",
    "refused": "attention",
    "AUTHORIZED": "wait",
    "CREATED": "wait",
    "REQUIRES_ACTION": "wait",
    "pending": "wait",
    "proposed": "wait",
    "sent": "wait",
    "running": "wait",
    "acknowledged": "attention",
    "UNKNOWN": "attention",
    "unknown": "attention",
    "rejected": "attention",
    "discrepancies": "attention",
    "open": "bad",
    "incomplete": "bad",
    "failed": "bad",
    "FAILED": "bad",
    "high": "bad",
    "medium": "attention",
    "low": "wait",
}


def tone(state: object) -> str:
    return TONE.get(str(state), "plain")


def money(amount_minor: object, currency: object) -> str:
    """``50000, "USD"`` → ``500.00 USD``; ``1500, "JPY"`` → ``1,500 JPY``; what cannot be shown as
    money is shown as it is, never guessed."""
    if not isinstance(amount_minor, int) or isinstance(amount_minor, bool) or not isinstance(currency, str):
        return f"{amount_minor} {currency}"
    try:
        digits = currency_exponent(currency)
    except MoneyError:
        return f"{amount_minor} (minor units) {currency}"
    return f"{to_decimal(amount_minor, digits):,} {currency}"


def major(amount_minor: object, currency: object) -> str:
    """``25000, "USD"`` → ``250.00``: what a person types back into a form (no grouping)."""
    if not isinstance(amount_minor, int) or isinstance(amount_minor, bool) or not isinstance(currency, str):
        return ""
    try:
        return str(to_decimal(amount_minor, currency_exponent(currency)))
    except MoneyError:
        return ""


@dataclass(frozen=True, slots=True)
class Clock:
    """One timezone for every time on every page, and the business day's cut-off in it."""

    zone: ZoneInfo
    cutoff: time

    def business_date(self, at: datetime) -> str:
        """A time at or after the cut-off belongs to the next business day (cut-off 00:00: the date)."""
        local = at.astimezone(self.zone)
        late = self.cutoff != time(0) and local.time() >= self.cutoff
        return (local.date() + timedelta(days=1) if late else local.date()).isoformat()

    def show(self, value: object) -> str:
        """An ISO time, epoch milliseconds, or a datetime → ``2026-12-01 14:03:07 UTC (bd 2026-12-01)``."""
        at = _as_datetime(value)
        if at is None:
            return "" if value is None else str(value)
        local = at.astimezone(self.zone)
        return f"{local:%Y-%m-%d %H:%M:%S} {local.tzname()} (bd {self.business_date(at)})"


def age(elapsed: timedelta) -> str:
    """``timedelta(hours=26, minutes=5)`` → ``1 d 2 h 5 min``: how long something has waited."""
    minutes = max(0, int(elapsed.total_seconds() // 60))
    days, rest = divmod(minutes, 24 * 60)
    hours, mins = divmod(rest, 60)
    parts = [f"{days} d"] if days else []
    parts += [f"{hours} h"] if hours or days else []
    return " ".join([*parts, f"{mins} min"])


def as_datetime(value: object) -> datetime | None:
    """An aware datetime from a datetime, epoch milliseconds or an ISO text; None otherwise."""
    return _as_datetime(value)


def _as_datetime(value: object) -> datetime | None:
    if isinstance(value, datetime):
        return value if value.tzinfo else value.replace(tzinfo=UTC)
    if isinstance(value, int) and not isinstance(value, bool) and value > 10**11:
        return datetime.fromtimestamp(value / 1000, UTC)
    if isinstance(value, str) and len(value) >= 19 and value[4] == "-" and value[10] in " T":
        try:
            parsed = datetime.fromisoformat(value)
        except ValueError:
            return None
        return parsed if parsed.tzinfo else parsed.replace(tzinfo=UTC)
    return None


# fields whose values must agree across a case's records; a difference is the discrepancy
COMPARED: Final = (
    "amount_minor",
    "gross_minor",
    "currency",
    "mt5_login",
    "login",
    "comment",
    "payment_id",
    "deposit_reference",
    "reference",
    "business_date",
    "type",
    "kind",
)


@dataclass(frozen=True, slots=True)
class SideBySide:
    records: tuple[str, ...]  # the evidence's record names, the columns
    rows: tuple[tuple[str, tuple[str, ...], bool], ...]  # field, value per record, differs?


def side_by_side(evidence: Mapping[str, Any], clock: Clock) -> SideBySide:
    """The evidence's records as columns, every field a row; a compared field whose values differ
    between the records that carry it is marked (the one the operator should look at first).
    Amounts are shown in their record's currency, times in the clock's zone; the comparison is of
    the raw values."""
    records = {name: value for name, value in evidence.items() if isinstance(value, Mapping)}
    singles = {name: value for name, value in evidence.items() if not isinstance(value, Mapping)}
    for name, value in singles.items():  # lists of records (e.g. two deals) become one column each
        if isinstance(value, list):
            for i, item in enumerate(value):
                if isinstance(item, Mapping):
                    records[f"{name}[{i}]"] = item
    names = tuple(records)
    fields: list[str] = []
    for record in records.values():
        fields.extend(f for f in record if f not in fields)
    fields.sort(key=lambda f: (f not in COMPARED, COMPARED.index(f) if f in COMPARED else 0, f))
    rows = []
    for field in fields:
        present = [records[n][field] for n in names if field in records[n]]
        differs = field in COMPARED and len(present) > 1 and len({_norm(v) for v in present}) > 1
        values = tuple("—" if field not in records[n] else _shown(field, records[n], clock) for n in names)
        rows.append((field, values, differs))
    return SideBySide(names, tuple(rows))


def _norm(value: object) -> str:
    return str(value).strip().lower()


def _shown(field: str, record: Mapping[str, Any], clock: Clock) -> str:
    value = record[field]
    if value is None:
        return ""
    if field.endswith("_minor") and isinstance(record.get("currency"), str):
        return money(value, record["currency"])
    if field.endswith(("_at", "_at_ms", "_time_ms")):
        return clock.show(value)
    return str(value)
