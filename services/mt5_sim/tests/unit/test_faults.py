"""Unit tests of fault specs and scoping (mt5_sim.domain.faults): a test must be able to hit exactly
the call it means to, and a bad spec must be refused with the field named."""

from __future__ import annotations

import pytest
from mt5_sim.domain.faults import FaultBook, FaultSpecError, parse_spec


def test_scope_by_endpoint_login_comment_and_count() -> None:
    """A fault fires only on matching calls, as many times as its count, first armed first."""
    book = FaultBook()
    book.arm(
        parse_spec(
            {
                "kind": "drop_after_apply",
                "endpoint": "/api/trade/balance",
                "login": 7001,
                "comment_prefix": "dep:",
                "count": 2,
            }
        )
    )
    book.arm(parse_spec({"kind": "slow", "delay_ms": 5}))
    assert book.take("trade/balance", 7002, "dep:1").spec.kind == "slow"  # type: ignore[union-attr]
    assert book.take("trade/balance", 7001, "wd:1").spec.kind == "slow"  # type: ignore[union-attr]
    assert book.take("trade/balance", 7001, "dep:1").spec.kind == "drop_after_apply"  # type: ignore[union-attr]
    assert book.take("trade/balance", 7001, "dep:2").spec.kind == "drop_after_apply"  # type: ignore[union-attr]
    assert book.take("trade/balance", 7001, "dep:3").spec.kind == "slow"  # type: ignore[union-attr]
    described = book.describe()
    assert [(f["kind"], f["fired"], f["exhausted"]) for f in described] == [
        ("drop_after_apply", 2, True),
        ("slow", 3, False),
    ]
    assert book.clear() == 2 and book.take("trade/balance", 7001, "dep:4") is None


def test_defaults_and_retcodes() -> None:
    """Hangs default to a 30 s delay; a throttle answers 10024 unless told 12; 'retcode' needs one."""
    assert parse_spec({"kind": "hang_before_apply"}).delay_ms == 30_000
    assert parse_spec({"kind": "throttle"}).retcode == 10024
    assert parse_spec({"kind": "throttle", "retcode": 12}).retcode == 12
    assert parse_spec({"kind": "retcode", "retcode": 10006}).retcode == 10006


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({"kind": "explode"}, "kind"),
        ({"kind": "slow", "delay_ms": -1}, "delay_ms"),
        ({"kind": "slow", "delay_ms": 10**9}, "delay_ms"),
        ({"kind": "throttle", "retcode": 3}, "12 or 10024"),
        ({"kind": "retcode"}, "retcode"),
        ({"kind": "slow", "retcode": 3}, "retcode"),
        ({"kind": "slow", "count": 0}, "count"),
        ({"kind": "slow", "login": "7001"}, "login"),
        ({"kind": "slow", "bogus": 1}, "bogus"),
        ({"kind": "slow", "endpoint": ""}, "endpoint"),
    ],
)
def test_bad_specs_name_the_field(body: dict[str, object], field: str) -> None:
    """Every malformed fault spec is refused, and the message says what is wrong."""
    with pytest.raises(FaultSpecError, match=field):
        parse_spec(body)


def test_clear_one_fault() -> None:
    """A fault can be cleared by id; the others stay armed."""
    book = FaultBook()
    first = book.arm(parse_spec({"kind": "disconnect"}))
    book.arm(parse_spec({"kind": "garbage"}))
    assert book.clear(first.fault_id) == 1
    assert [f["kind"] for f in book.describe()] == ["garbage"]
