"""What the Web API and the control API need from storage (implemented by adapters/store.py)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from decimal import Decimal
from typing import Any, Protocol

from mt5_sim.domain.balance import Apply, BalanceOrder, Refusal
from mt5_sim.domain.model import Account, Deal, Group

Decider = Callable[[BalanceOrder, Account | None, Group | None], Apply | Refusal]


@dataclass(frozen=True, slots=True)
class DealWindow:
    """Deals of one login whose ``Time`` (seconds) lies in ``[from_s, to_s]``, both ends included."""

    login: int
    from_s: int
    to_s: int


@dataclass(frozen=True, slots=True)
class NewDeal:
    """A deal written by the control API (a dealer's manual operation), with its balance change."""

    login: int
    action: int
    amount: Decimal
    comment: str
    time_msc: int


class StoreConflict(Exception):
    """A control-API write that contradicts the stored state (duplicate login, unknown group, …)."""


class Store(Protocol):
    async def group(self, name: str) -> Group | None: ...
    async def groups(self) -> list[Group]: ...
    async def account(self, login: int) -> tuple[Account, Group] | None: ...
    async def apply_balance(
        self, order: BalanceOrder, decide: Decider, time_msc: int, dealer: int
    ) -> Deal | Refusal: ...
    async def deal(self, ticket: int) -> Deal | None: ...
    async def count_deals(self, window: DealWindow) -> int: ...
    async def page_deals(self, window: DealWindow, offset: int, total: int) -> list[Deal]: ...
    async def batch_deals(
        self, logins: Sequence[int] | None, tickets: Sequence[int] | None, from_s: int, to_s: int
    ) -> list[Deal]: ...
    async def logins_in_groups(self, groups: Sequence[str]) -> list[int]: ...
    async def latest_deals(self, login: int, limit: int) -> list[Deal]: ...
    async def other_login(self, login: int) -> int | None: ...
    # control API
    async def create_group(self, group: Group) -> None: ...
    async def create_account(self, account: Account) -> None: ...
    async def update_account(
        self,
        login: int,
        *,
        rights: int | None,
        group: str | None,
        balance: Decimal | None,
        credit: Decimal | None,
        margin: Decimal | None,
    ) -> bool: ...
    async def insert_deals(self, deals: Sequence[NewDeal], dealer: int) -> list[Deal]: ...
    async def list_deals(
        self, login: int | None, comment: str | None, prefix: str | None, limit: int
    ) -> list[Deal]: ...
    async def reset(self) -> None: ...
    async def ping(self) -> None: ...
    async def load_control_state(self) -> dict[str, Any] | None: ...
    async def save_control_state(self, state: dict[str, Any]) -> None: ...
