"""What the reconciler's own records say about the ids a case names, for its merchant
(``domain.merchants``), and the merchant written on the case (psycopg, on the caller's
transaction).

Every lookup is one statement per kind of id for a whole batch of cases (a run's findings, or one
event's case): the MT5 comments first (to our payment ids), then the payments, then the PSP's
intents. Sources: ``money_facts`` (payment-state's money facts carry their merchant), payment-state's
``attention`` rows (their facts carry it), ``mt5_operations`` and mt5-credit's ``attention`` rows
(their comment names a payment). Nothing here reads another service's tables.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Final

import psycopg

from reconciler.domain.merchants import KnownMerchants, MerchantRefs

# an attention about an MT5 row is keyed mt5-row:<row id>; a comment is <prefix>:<row id>
_COMMENTS: Final = (
    "SELECT o.comment, o.payment_id FROM mt5_operations o WHERE o.comment = ANY(%(comments)s)"
    " UNION SELECT a.facts ->> 'comment', a.payment_id FROM attention a"
    " WHERE a.attention_key = ANY(%(rows)s) AND a.source = 'mt5_credit'"
    " AND a.facts ->> 'comment' = ANY(%(comments)s)"
)
_PAYMENTS: Final = (
    "SELECT f.payment_id, f.merchant_id FROM money_facts f WHERE f.payment_id = ANY(%(payments)s)"
    " UNION SELECT a.payment_id, a.facts ->> 'merchant_id' FROM attention a"
    " WHERE a.payment_id = ANY(%(payments)s) AND a.source = 'payment_state'"
    " AND a.facts ->> 'merchant_id' <> ''"
)
_INTENTS: Final = (
    "SELECT f.provider, f.provider_object_id, f.merchant_id"
    " FROM unnest(%(providers)s::text[], %(intents)s::text[]) AS u (provider, intent)"
    " JOIN money_facts f ON f.provider = u.provider AND f.kind = 'capture'"
    " AND f.provider_object_id = u.intent"
)
_STAMP: Final = (
    "UPDATE cases c SET merchant_id = u.merchant_id"
    " FROM unnest(%(keys)s::text[], %(merchants)s::text[]) AS u (case_key, merchant_id)"
    " WHERE c.case_key = u.case_key AND c.merchant_id IS DISTINCT FROM u.merchant_id"
)


def _grouped(rows: list[tuple[Any, ...]]) -> dict[Any, frozenset[str]]:
    """(key..., value) rows → key → the values (a key of several columns is a tuple)."""
    found: dict[Any, set[str]] = {}
    for *key, value in rows:
        found.setdefault(tuple(key) if len(key) > 1 else key[0], set()).add(str(value))
    return {k: frozenset(v) for k, v in found.items()}


def known(cur: psycopg.Cursor[Any], refs: MerchantRefs) -> KnownMerchants:
    """The merchants of the payments and intents ``refs`` name, and the payments of its comments."""
    comments: dict[Any, frozenset[str]] = {}
    if refs.comments:
        ordered = sorted(refs.comments)
        rows = [f"mt5-row:{c.split(':', 1)[1]}" for c in ordered]
        comments = _grouped(cur.execute(_COMMENTS, {"comments": ordered, "rows": rows}).fetchall())
    payments = sorted(refs.payments.union(*comments.values()))
    of_payment = _grouped(cur.execute(_PAYMENTS, {"payments": payments}).fetchall()) if payments else {}
    of_intent: dict[Any, frozenset[str]] = {}
    if refs.intents:
        providers, intents = zip(*sorted(refs.intents), strict=True)
        query = {"providers": list(providers), "intents": list(intents)}
        of_intent = _grouped(cur.execute(_INTENTS, query).fetchall())
    return KnownMerchants(of_payment, of_intent, comments)


def stamp(cur: psycopg.Cursor[Any], merchants: Mapping[str, str | None]) -> None:
    """Write each case's merchant (by case key) where it differs, in one statement."""
    if merchants:
        keys = sorted(merchants)
        cur.execute(_STAMP, {"keys": keys, "merchants": [merchants[k] for k in keys]})
