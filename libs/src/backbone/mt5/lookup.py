"""Matching a balance operation among a login's deals (pure; the gateway fetches the deals).

A deal matches on the exact stored comment (cut to 31 like MT5 cuts it), then action and amount:
- no deal with the comment → ``Absent`` (the caller guarantees the list is complete);
- one deal with the comment, same action and amount → ``Found``;
- one with another amount or action → ``Conflict``; two or more with the comment → ``Conflict``.
"""

from __future__ import annotations

from collections.abc import Sequence
from decimal import Decimal

from backbone.mt5.protocol import DealRecord, cut_comment
from backbone.mt5.results import Absent, Conflict, Found


def match_balance_deal(
    deals: Sequence[DealRecord], comment: str, action: int, amount: Decimal
) -> Found | Absent | Conflict:
    stored = cut_comment(comment)
    same = sorted((d for d in deals if d.comment == stored), key=lambda d: d.ticket)
    if not same:
        return Absent()
    tickets = tuple(d.ticket for d in same)
    if len(same) > 1:
        return Conflict("duplicate_reference", tickets)
    deal = same[0]
    if deal.action != action:
        return Conflict("action_differs", tickets)
    if deal.profit != amount:
        return Conflict("amount_differs", tickets)
    return Found(deal.ticket)
