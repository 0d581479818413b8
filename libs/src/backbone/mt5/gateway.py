"""The MT5 gateway: credit/debit a trading account and find that operation again by its comment.

Promises (DESIGN §3, §7; reference §6):
- ``balance`` calls ``/api/trade/balance`` at most once per invocation: never retried, because a
  retry could credit twice. Its answer ``0 Done`` is then checked by reading the deal back
  (``/api/deal/get``): login, action, comment and amount must be ours, else ``NoAnswer``.
- Only a retcode that means "not applied" becomes ``Refused``; every timeout, disconnect,
  unparseable, unexpected or crossed answer is ``NoAnswer`` (maybe applied).
- Every answer that carries a login is checked against the login asked for; an answer about
  another account is never success (``NoAnswer("cross_account_answer")``, logged as an error).
- Amounts leave integer minor units only here, exactly, in the account currency's digits (learnt
  from the account's group); an amount those digits cannot carry is refused, never rounded.
- ``find_balance_deal`` says ``Absent`` only after reading every deal of the login in the window,
  successfully and consistently (count, pages, count again); anything less is ``NoAnswer``.
"""

from __future__ import annotations

from decimal import Decimal
from types import TracebackType
from typing import Final

from backbone.invariants import invariant
from backbone.logs import get_logger
from backbone.mt5 import metrics
from backbone.mt5.amounts import amount_decimal, wire_amount
from backbone.mt5.arguments import check_balance_args, check_login, check_lookup_args
from backbone.mt5.cache import BoundedTtlCache
from backbone.mt5.connection import ManagerConnection
from backbone.mt5.lookup import match_balance_deal
from backbone.mt5.mapping import (
    GroupFacts,
    UserFacts,
    balance_ticket,
    deal_list,
    deal_of,
    deal_total,
    parse_group,
    server_time_of,
    trade_state_of,
    user_of,
)
from backbone.mt5.protocol import Answer, DealRecord, cut_comment
from backbone.mt5.results import (
    AccountInfo,
    AccountMissing,
    AccountResult,
    Applied,
    BalanceResult,
    DealLookup,
    DealType,
    NoAnswer,
    Refused,
    TimeResult,
    TradeState,
    TradeStateResult,
)
from backbone.mt5.settings import Mt5GatewaySettings
from backbone.mt5.transport import TransportFailure

PAGE_SIZE: Final = 100  # get_page's maximum (reference §2)
BATCH_ROWS_MAX: Final = 10_000  # a get_batch answer this long may have been cut: split the window
# (and ~4 MB of JSON: the transport refuses answers over 8 MB, which splits the window too)
SCAN_ATTEMPTS_MAX: Final = 3  # a window that keeps changing under a scan gives NoAnswer
USER_RIGHT_ENABLED: Final = 0x1
log = get_logger(__name__)


class Mt5Gateway:
    """Synchronous and thread-safe; one keep-alive manager session. ``start()`` before use."""

    def __init__(self, settings: Mt5GatewaySettings, *, name: str = "mt5") -> None:
        self._s, self._name = settings, name
        self._conn = ManagerConnection(settings, name)
        self._logins: BoundedTtlCache[int, str] = BoundedTtlCache(
            settings.account_cache_size_max, settings.account_cache_ttl_ms
        )
        self._groups: BoundedTtlCache[str, GroupFacts] = BoundedTtlCache(
            settings.account_cache_size_max, settings.account_cache_ttl_ms
        )

    def start(self) -> Mt5Gateway:
        self._conn.start()
        return self

    def close(self) -> None:
        self._conn.close()

    def __enter__(self) -> Mt5Gateway:
        return self.start()

    def __exit__(self, *_: type[BaseException] | BaseException | TracebackType | None) -> None:
        self.close()

    @property
    def session_generation(self) -> int:
        """Sessions opened so far; grows by one at every re-authentication."""
        return self._conn.generation

    # -- reads -----------------------------------------------------------------------------------

    def server_time(self) -> TimeResult:
        answer = self._read("time/server", {})
        return answer if isinstance(answer, NoAnswer) else server_time_of(answer)

    def account(self, login: int) -> AccountResult:
        """The account now (fresh ``user/get`` and ``group/get``; refreshes the caches)."""
        check_login(login)
        user = self._user(login)
        if not isinstance(user, UserFacts):
            return user
        group = self._group(user.group, fresh=True)
        if isinstance(group, NoAnswer):
            return group
        return AccountInfo(
            login,
            user.group,
            group.currency,
            group.digits,
            user.rights,
            bool(user.rights & USER_RIGHT_ENABLED),
            user.balance,
            user.credit,
        )

    def trade_state(self, login: int) -> TradeStateResult:
        """The account's trade state now (``user/account/get``: balance, equity, margin, free margin).

        An answer about another login is never taken (NoAnswer, logged loudly)."""
        check_login(login)
        answer = self._read("user/account/get", {"login": login})
        if isinstance(answer, NoAnswer):
            return answer
        state = trade_state_of(answer, login)
        if isinstance(state, TradeState) and state.login != login:
            return self._crossed("user/account/get", login, state.login)
        return state

    # -- the balance operation -------------------------------------------------------------------

    def balance(
        self,
        login: int,
        amount_minor: int,
        currency: str,
        deal_type: DealType,
        comment: str,
        check_margin: bool,
    ) -> BalanceResult:
        """Credit (positive) or debit (negative) ``amount_minor`` of ``currency`` with this comment."""
        check_balance_args(login, amount_minor, currency, deal_type, comment, check_margin)
        result = self._balance(login, amount_minor, currency, deal_type, comment, check_margin)
        kind = type(result).__name__
        reason = result.reason if isinstance(result, Refused | NoAnswer) else ""
        metrics.BALANCE_RESULTS.labels(self._name, kind, reason).inc()
        log.info(
            "mt5.balance",
            gateway=self._name,
            login=login,
            comment=comment,
            amount_minor=amount_minor,
            currency=currency,
            deal_type=int(deal_type),
            result=kind,
            reason=reason,
        )
        return result

    def _balance(
        self,
        login: int,
        amount_minor: int,
        currency: str,
        deal_type: DealType,
        comment: str,
        check_margin: bool,
    ) -> BalanceResult:
        group = self._account_group(login)
        if not isinstance(group, GroupFacts):
            return group
        if group.currency != currency:
            return Refused(None, "currency_mismatch")
        wire = wire_amount(amount_minor, currency, group.digits)
        if wire is None:
            return Refused(None, "amount_not_representable")
        params: dict[str, str | int] = {
            "login": login,
            "type": int(deal_type),
            "balance": wire,
            "comment": comment,
            "check_margin": int(check_margin),
        }
        answer = self._read("trade/balance", params)  # exactly once: never retried
        if isinstance(answer, NoAnswer):
            return answer
        ticket = balance_ticket(answer)
        if not isinstance(ticket, int):
            return ticket
        return self._verify(login, ticket, deal_type, comment, Decimal(wire), group.digits)

    def _verify(
        self, login: int, ticket: int, deal_type: DealType, comment: str, amount: Decimal, digits: int
    ) -> BalanceResult:
        """Read the deal back: a ticket is ours only if login, action, comment and amount are."""
        answer = self._read("deal/get", {"ticket": ticket})
        if isinstance(answer, NoAnswer):
            return NoAnswer(f"unverified_{answer.reason}", answer.retcode)
        deal = deal_of(answer)
        if isinstance(deal, NoAnswer):
            return deal
        if deal.login != login:
            return self._crossed("trade/balance", login, deal.login)
        if (deal.ticket, deal.action, deal.comment, deal.profit) != (ticket, deal_type, comment, amount):
            log.error("mt5.ticket_mismatch", gateway=self._name, login=login, ticket=ticket, comment=comment)
            return NoAnswer("ticket_mismatch")
        # Applied, but with currency digits we did not convert for: a person must look.
        return Applied(ticket) if deal.digits_currency in (None, digits) else NoAnswer("digits_changed")

    # -- finding a balance operation -------------------------------------------------------------

    def find_balance_deal(
        self,
        login: int,
        comment: str,
        amount_minor: int,
        currency: str,
        deal_type: DealType,
        from_server_time: int,
        to_server_time: int,
    ) -> DealLookup:
        """Every deal of ``login`` with ``Time`` in ``[from, to]`` (server clock, both ends included)."""
        check_lookup_args(login, comment, amount_minor, currency, deal_type, from_server_time, to_server_time)
        amount = amount_decimal(amount_minor, currency)
        result: DealLookup = NoAnswer("window_unstable")
        for _ in range(SCAN_ATTEMPTS_MAX):
            deals = self._scan(login, from_server_time, to_server_time)
            if deals is None:
                continue  # the window changed while we read it: read it again
            result = (
                deals
                if isinstance(deals, NoAnswer)
                else match_balance_deal(deals, comment, deal_type, amount)
            )
            break
        reason = getattr(result, "reason", "")
        metrics.LOOKUP_RESULTS.labels(self._name, type(result).__name__, reason).inc()
        log.info(
            "mt5.lookup",
            gateway=self._name,
            login=login,
            comment=cut_comment(comment),
            result=type(result).__name__,
            reason=reason,
            tickets=list(getattr(result, "tickets", ())),
        )
        return result

    def _scan(self, login: int, from_s: int, to_s: int) -> list[DealRecord] | NoAnswer | None:
        """All deals of the window, or NoAnswer, or None if the window changed under us."""
        window: dict[str, str | int] = {"login": login, "from": from_s, "to": to_s}
        total = self._total(window)
        if not isinstance(total, int):
            return total
        if total > PAGE_SIZE * self._s.lookup_pages_max:
            return NoAnswer("too_many_deals")
        deals: dict[int, DealRecord] = {}
        for offset in range(0, total, PAGE_SIZE):
            page = self._page(login, {**window, "offset": offset, "total": PAGE_SIZE})
            if not isinstance(page, list):
                return page
            if len(page) != min(PAGE_SIZE, total - offset) or any(d.ticket in deals for d in page):
                return None
            deals.update((d.ticket, d) for d in page)
        again = self._total(window)
        if not isinstance(again, int):
            return again
        return list(deals.values()) if again == total else None

    def _total(self, window: dict[str, str | int]) -> int | NoAnswer:
        answer = self._read("deal/get_total", window)
        return answer if isinstance(answer, NoAnswer) else deal_total(answer)

    def _page(self, login: int, params: dict[str, str | int]) -> list[DealRecord] | NoAnswer:
        answer = self._read("deal/get_page", params)
        if isinstance(answer, NoAnswer):
            return answer
        page = deal_list(answer)
        if isinstance(page, NoAnswer):
            return page
        stranger = next((d.login for d in page if d.login != login), None)
        return self._crossed("deal/get_page", login, stranger) if stranger is not None else page

    def deals_of_groups(
        self, group_mask: str, from_s: int, to_s: int, *, rows_max: int = BATCH_ROWS_MAX
    ) -> list[DealRecord] | NoAnswer:
        """Every deal of the accounts in the groups matching ``group_mask`` with a time in
        [from_s, to_s] (``deal/get_batch``), or NoAnswer: never a partial list.

        The Web API states no size limit for a batch [U] and a server may cut one silently: an answer
        of ``rows_max`` rows or more is taken as possibly cut, and its window is split in two and
        read again, down to one second (still full there: NoAnswer "too_many_deals"); so is an
        answer too large for the transport."""
        invariant(from_s <= to_s, "a window ends after it starts")
        found: dict[int, DealRecord] = {}
        windows = [(from_s, to_s)]
        while windows:
            start, end = windows.pop()
            answer = self._read("deal/get_batch", {"group": group_mask, "from": start, "to": end})
            if isinstance(answer, NoAnswer) and answer.reason == "answer_too_large" and start < end:
                middle = (start + end) // 2
                windows.extend(((start, middle), (middle + 1, end)))
                continue
            if isinstance(answer, NoAnswer):
                return answer
            deals = deal_list(answer)
            if isinstance(deals, NoAnswer):
                return deals
            if len(deals) >= rows_max:
                if start == end:
                    return NoAnswer("too_many_deals")
                middle = (start + end) // 2
                windows.extend(((start, middle), (middle + 1, end)))
                continue
            found.update((d.ticket, d) for d in deals)
        return sorted(found.values(), key=lambda d: d.ticket)

    # -- account facts ---------------------------------------------------------------------------

    def _account_group(self, login: int) -> GroupFacts | Refused | NoAnswer:
        """The account's group facts for a balance call (cached; a missing login is a rejection)."""
        name = self._logins.get(login)
        if name is None:
            user = self._user(login)
            if isinstance(user, AccountMissing):
                return Refused(13, "unknown_login")
            if isinstance(user, NoAnswer):
                return NoAnswer(user.reason, user.retcode, sent=False)
            name = user.group
        group = self._group(name, fresh=False)
        return NoAnswer(group.reason, group.retcode, sent=False) if isinstance(group, NoAnswer) else group

    def _user(self, login: int) -> UserFacts | AccountMissing | NoAnswer:
        answer = self._read("user/get", {"login": login})
        if isinstance(answer, NoAnswer):
            return answer
        user = user_of(answer, login)
        if isinstance(user, AccountMissing):
            self._logins.drop(login)
        if not isinstance(user, UserFacts):
            return user
        if user.login != login:
            return self._crossed("user/get", login, user.login)
        self._logins.put(login, user.group)
        return user

    def _group(self, name: str, *, fresh: bool) -> GroupFacts | NoAnswer:
        cached = None if fresh else self._groups.get(name)
        if cached is not None:
            return cached
        answer = self._read("group/get", {"group": name})
        if isinstance(answer, NoAnswer):
            return answer
        group = parse_group(answer)
        if isinstance(group, NoAnswer):
            return group
        if group.name != name:
            log.error("mt5.cross_group_answer", gateway=self._name, asked=name, answered=group.name)
            return NoAnswer("cross_account_answer")
        self._groups.put(name, group)
        return group

    # -- plumbing --------------------------------------------------------------------------------

    def _read(self, endpoint: str, params: dict[str, str | int]) -> Answer | NoAnswer:
        result = self._conn.call(endpoint, params)
        if isinstance(result, TransportFailure):
            return NoAnswer(result.reason, result.retcode, sent=result.sent)
        return result

    def _crossed(self, endpoint: str, asked: int, answered: int) -> NoAnswer:
        """An answer about another account: never success, always loud."""
        metrics.CROSS_ACCOUNT_ANSWERS.labels(self._name).inc()
        log.error(
            "mt5.cross_account_answer",
            gateway=self._name,
            endpoint=endpoint,
            asked_login=asked,
            answered_login=answered,
        )
        return NoAnswer("cross_account_answer")
