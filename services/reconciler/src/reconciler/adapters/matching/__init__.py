"""The three-way match of one business date, set-based: each layer is one INSERT ... SELECT over the
whole day (SQLAlchemy Core), never a loop per row.

Matches first (``matches``: one row per pair and layer, each record in at most one pair, enforced
by the table's unique constraints), then findings (``findings``: one row per discrepancy, keyed by
its stable case key). Records younger than the grace period (``as_of - grace``) are "still in
flight": counted, never a finding.

One module per family of layers: ``stale`` (layer 1, what a person was handed), ``settlement``
(layers 2a and 3, the PSP's reports against our records), ``operations`` (layer 2b, money facts
against MT5 operations, two of them described as data in ``domain.layers``), ``journals`` (2c, the
ledger), ``deals`` (2d, MT5's deals); ``sql`` holds what they are made of.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from functools import partial

from sqlalchemy import Connection, text

from reconciler.adapters.matching.deals import deal_layer
from reconciler.adapters.matching.journals import journal_layer
from reconciler.adapters.matching.operations import pairing_layer, withdrawal_layer
from reconciler.adapters.matching.settlement import bank_layer, settlement_layer
from reconciler.adapters.matching.sql import LAYERS, open_partition, run_matches, seal_partition
from reconciler.adapters.matching.stale import stale_layer
from reconciler.application.ports import MatchParams
from reconciler.domain.layers import CREDITS, TAKEBACKS

__all__ = ["LAYERS", "match_all", "run_matches"]

Layer = Callable[[Connection, MatchParams], dict[str, int]]


def match_all(conn: Connection, p: MatchParams) -> dict[str, int]:
    """Every layer the run's inputs allow; returns counts (matches, findings, in flight) by name."""
    # fresh statistics for what this run imported and read, so that the day-wide joins are hash
    # joins, not nested loops planned for empty tables. A small sample is enough for that (row
    # counts, the date's share): 3,000 rows a table instead of 30,000
    conn.execute(text("SET LOCAL default_statistics_target = 10"))
    for table in ("settlement_rows", "bank_rows", "mt5_deals", "money_facts", "mt5_operations", "journals"):
        conn.execute(text(f"ANALYZE {table}"))
    conn.execute(text("RESET default_statistics_target"))
    open_partition(conn, p)
    counts: dict[str, int] = {}
    for name, layer in _layers(p):
        started = time.perf_counter()
        counts |= layer(conn, p)
        counts[f"ms_layer_{name}"] = round((time.perf_counter() - started) * 1000)
    started = time.perf_counter()
    seal_partition(conn, p)
    counts["ms_seal_matches"] = round((time.perf_counter() - started) * 1000)
    return counts


def _layers(p: MatchParams) -> list[tuple[str, Layer]]:
    """The layers to run, in order, by name: those whose inputs the run has."""
    layers: list[tuple[str, Layer]] = [("stale", stale_layer)]
    if p.settlement_import_id is not None:
        layers.append(("settlement", settlement_layer))
    layers += [(pairing.name, partial(pairing_layer, layer=pairing)) for pairing in (CREDITS, TAKEBACKS)]
    layers.append(("withdrawals", withdrawal_layer))
    layers.append(("journals", journal_layer))
    if p.mt5_complete:
        layers.append(("deals", deal_layer))
    if p.settlement_import_id is not None and p.bank_import_id is not None:
        layers.append(("bank", bank_layer))
    return layers
