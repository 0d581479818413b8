"""MT5's balance deals through the Web API (``backbone.mt5``'s ``deal/get_batch`` by group mask)."""

from __future__ import annotations

from backbone.mt5 import NoAnswer as Mt5NoAnswer
from backbone.mt5.gateway import Mt5Gateway

from reconciler.application.ports import Deal, NoAnswer


class Mt5DealSource:
    def __init__(self, gateway: Mt5Gateway, group_mask: str) -> None:
        self._gateway, self._mask = gateway, group_mask

    def balance_deals(self, from_ms: int, to_ms: int) -> list[Deal] | NoAnswer:
        """Every deal of the window (every action: the matching picks balance deals), in whole
        seconds that cover it; NoAnswer when MT5 could not be read completely."""
        found = self._gateway.deals_of_groups(self._mask, from_ms // 1000, -(-to_ms // 1000))
        if isinstance(found, Mt5NoAnswer):
            return NoAnswer(found.reason)
        return [Deal(d.ticket, d.login, d.action, d.comment, d.profit, d.time_s * 1000) for d in found]
