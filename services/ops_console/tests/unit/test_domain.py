"""The console's domain: permissions and what they become at a service, operators' names and
passwords, and how amounts, times and a case's records are shown."""

from __future__ import annotations

from datetime import UTC, datetime, time
from zoneinfo import ZoneInfo

import pytest
from backbone import tokens
from ops_console.domain import display, permissions, refunds, search
from ops_console.domain.operators import (
    EVERY_MERCHANT,
    BadOperator,
    Operator,
    check_merchant,
    check_merchants,
    check_username,
    hash_password,
    password_matches,
)
from ops_console.domain.permissions import Permission

UTC_CLOCK = display.Clock(ZoneInfo("UTC"), time(0))


def test_permissions_parse_and_map_to_the_reconciler() -> None:
    """A list of names parses to permissions (an unknown one refused, named); only the ones the
    reconciler knows become its permission names, never more than the operator holds."""
    held = permissions.parse("view, repair_approve,refund")
    assert held == {Permission.VIEW, Permission.REPAIR_APPROVE, Permission.REFUND}
    assert (
        permissions.at_service(held, permissions.RECONCILER) == "cases:view,deadletters:view,repairs:approve"
    )
    replay = held | {Permission.DEADLETTER_REPLAY}
    assert permissions.at_service(replay, permissions.LEDGER) == "deadletters:replay,deadletters:view"
    assert permissions.at_service(frozenset(), permissions.RECONCILER) == ""
    with pytest.raises(permissions.UnknownPermission, match="'admin'"):
        permissions.parse("view,admin")


def test_usernames_and_passwords() -> None:
    """Names are short lowercase identifiers; passwords 12+ characters, stored as argon2id hashes
    that verify only the right password; an unknown operator (no hash) never matches."""
    assert check_username("alice.b") == "alice.b"
    for bad in ("A", "1abc", "al ice", "x" * 33, "bob<b>"):
        with pytest.raises(BadOperator):
            check_username(bad)
    with pytest.raises(BadOperator, match="12-256"):
        hash_password("short")
    stored = hash_password("correct horse battery staple")
    assert stored.startswith("$argon2id$")
    assert password_matches(stored, "correct horse battery staple")
    assert not password_matches(stored, "correct horse battery stapler")
    assert not password_matches(None, "correct horse battery staple")
    assert not password_matches("not a hash", "correct horse battery staple")


@pytest.mark.parametrize(
    ("amount", "currency", "shown"),
    [
        (50000, "USD", "500.00 USD"),
        (123456789, "USD", "1,234,567.89 USD"),
        (1500, "JPY", "1,500 JPY"),
        (1234, "KWD", "1.234 KWD"),
        (-250, "EUR", "-2.50 EUR"),
        (5, "ZZZ", "5 (minor units) ZZZ"),
        ("5", "USD", "5 USD"),
    ],
)
def test_money_in_its_currency(amount: object, currency: str, shown: str) -> None:
    """Amounts are shown in their currency's own digits; what is not money is shown as it is."""
    assert display.money(amount, currency) == shown


def test_times_in_one_zone_with_the_business_date() -> None:
    """Every time is shown in the console's zone with its business date; after the cut-off a
    time belongs to the next business day."""
    at = datetime(2026, 11, 30, 22, 30, tzinfo=UTC)
    assert UTC_CLOCK.show(at) == "2026-11-30 22:30:00 UTC (bd 2026-11-30)"
    late = display.Clock(ZoneInfo("Asia/Kuala_Lumpur"), time(22, 0))
    assert late.show(at) == "2026-12-01 06:30:00 +08 (bd 2026-12-01)"
    assert late.show(datetime(2026, 11, 30, 14, 30, tzinfo=UTC)) == "2026-11-30 22:30:00 +08 (bd 2026-12-01)"
    assert UTC_CLOCK.show(1796032802000) == "2026-11-30 10:00:02 UTC (bd 2026-11-30)"
    assert UTC_CLOCK.show("2026-12-02 14:58:55.555532+00:00") == "2026-12-02 14:58:55 UTC (bd 2026-12-02)"
    assert UTC_CLOCK.show(None) == ""
    assert UTC_CLOCK.show("pay-1") == "pay-1"


def test_records_side_by_side_mark_what_differs() -> None:
    """Each record is a column; a compared field whose values differ (amount, login) is marked,
    one that agrees or that only one record has is not; amounts show in their currency; a list
    of records (two deals) becomes one column each."""
    grid = display.side_by_side(
        {
            "payment": {"amount_minor": 50000, "currency": "USD", "mt5_login": 1001, "payment_id": "pay-1"},
            "settlement": {"amount_minor": 49000, "currency": "USD", "payment_id": "pay-1"},
            "deals": [{"mt5_login": 1002, "comment": "dep:1"}],
        },
        UTC_CLOCK,
    )
    assert grid.records == ("payment", "settlement", "deals[0]")
    rows = {field: (values, differs) for field, values, differs in grid.rows}
    assert rows["amount_minor"] == (("500.00 USD", "490.00 USD", "—"), True)
    assert rows["mt5_login"] == (("1001", "—", "1002"), True)
    assert rows["currency"][1] is False and rows["payment_id"][1] is False
    assert rows["comment"] == (("—", "—", "dep:1"), False)
    assert grid.rows[0][0] == "amount_minor"  # the compared fields first


def test_tones() -> None:
    """States read at a glance: done is ok, in flight is wait, a person's attention, money at risk."""
    assert [display.tone(s) for s in ("CAPTURED", "AUTHORIZED", "UNKNOWN", "open", "weird")] == [
        "ok",
        "wait",
        "attention",
        "bad",
        "plain",
    ]


def test_how_long_something_has_waited() -> None:
    """Ages read in days, hours and minutes; a negative elapsed time (clock skew) is zero."""
    from datetime import timedelta  # noqa: PLC0415 - only this test

    assert display.age(timedelta(minutes=5, seconds=59)) == "5 min"
    assert display.age(timedelta(hours=2)) == "2 h 0 min"
    assert display.age(timedelta(days=1, hours=2, minutes=5)) == "1 d 2 h 5 min"
    assert display.age(timedelta(seconds=-30)) == "0 min"


def test_a_search_is_a_login_a_reference_or_refused() -> None:
    """Digits only (no leading zero) are an MT5 login, up to the largest bigint; our ids, deposit
    references and the PSP's pi_… ids are references; markup, inner spaces, empty text or more than
    100 characters are refused with the reason, so nothing is sent anywhere."""
    assert search.classify(" 7401 ") == search.Login(7401)
    assert search.classify(str(2**63 - 1)) == search.Login(2**63 - 1)
    assert isinstance(search.classify(str(2**63)), search.Malformed)
    for reference in ("pay_01J9", "dpi_abc", "pi_3Nx", "0123"):
        assert search.classify(reference) == search.Reference(reference)
    for bad in ("<b>x</b>", "pay 1", "x" * 101, "", "  "):
        assert isinstance(search.classify(bad), search.Malformed), bad


def test_a_merchant_is_a_name_the_services_accept() -> None:
    """An operator's merchants travel to the services in X-Operator-Merchants: a merchant with a
    comma, a space or markup (which would split or break the header) is refused when the operator
    is added, naming it."""
    assert check_merchant("broker-eu") == "broker-eu"
    for bad in ("a,b", "broker eu", "<b>", "", "x" * 65, "**", "m*"):
        with pytest.raises(BadOperator, match="merchant"):
            check_merchant(bad)


def test_star_alone_is_every_merchant_and_records_of_no_merchant() -> None:
    """``*`` is the services' every-merchant (backbone.tokens.EVERY_MERCHANT) and stands alone;
    an operator of every merchant sees any record, those of no merchant too; an operator of named
    merchants sees those only, never a record of no merchant."""
    assert EVERY_MERCHANT == tokens.EVERY_MERCHANT
    assert check_merchants(["*"]) == ("*",) and check_merchants(["m1", "m2", "m1"]) == ("m1", "m2")
    with pytest.raises(BadOperator, match="alone"):
        check_merchants(["*", "m1"])
    every = Operator("root", "Root", frozenset(), ("*",))
    named = Operator("xena", "Xena", frozenset(), ("m1",))
    assert every.every_merchant and every.sees("m2") and every.sees(None)
    assert not named.every_merchant and named.sees("m1")
    assert not named.sees("m2") and not named.sees(None) and not named.sees("*")


def test_a_refunds_idempotency_key_is_the_form_and_who_asked() -> None:
    """The same operator, merchant, payment and form nonce give the same key (a double submit is
    one refund); any of them different gives another; the key fits payment-state's rule (printable,
    at most 255); a nonce that is not 32 hex digits is refused. The reason kept at payment-state
    names who asked, cut to what it stores."""
    key = refunds.idempotency_key("rita", "broker-eu", "pay_1", "a" * 32)
    assert key == refunds.idempotency_key("rita", "broker-eu", "pay_1", "a" * 32)
    assert len(key) <= 255 and key.isascii() and key.isprintable() and " " not in key
    others = {
        refunds.idempotency_key("bob", "broker-eu", "pay_1", "a" * 32),
        refunds.idempotency_key("rita", "broker-uk", "pay_1", "a" * 32),
        refunds.idempotency_key("rita", "broker-eu", "pay_2", "a" * 32),
        refunds.idempotency_key("rita", "broker-eu", "pay_1", "b" * 32),
    }
    assert key not in others and len(others) == 4
    for bad in ("", "A" * 32, "a" * 31, "g" * 32):
        with pytest.raises(refunds.BadNonce):
            refunds.idempotency_key("rita", "broker-eu", "pay_1", bad)
    kept = refunds.reason_for_payment_state("rita", "x" * 600)
    assert kept.startswith("rita (ops console): ") and len(kept) == 500
