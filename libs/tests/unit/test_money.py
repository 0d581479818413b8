"""Unit tests of backbone.money: integer minor units, one currency per sum, exact decimal edges.

Money is the one thing this system must never get approximately right. These tests prove that
amounts are plain ints within bigint range, that currencies never mix, and that conversion to and
from decimal is exact or raises MoneyError, never rounds.
"""

from __future__ import annotations

from decimal import Decimal, localcontext

import pytest
from backbone.invariants import InvariantViolation
from backbone.money import (
    _EXPONENT_BY_CURRENCY,
    AMOUNT_MINOR_ABS_MAX,
    Money,
    MoneyError,
    check_amount_minor,
    currency_exponent,
    from_decimal,
    to_decimal,
)
from hypothesis import given
from hypothesis import strategies as st

SUPPORTED_CURRENCIES = sorted(_EXPONENT_BY_CURRENCY)

# --- arithmetic --------------------------------------------------------------------------------


def test_add_sub_neg_within_one_currency() -> None:
    """Sums, differences and negation keep the currency and are exact integer arithmetic."""
    a, b = Money(1_000, "USD"), Money(250, "USD")
    assert a + b == Money(1_250, "USD")
    assert a - b == Money(750, "USD")
    assert b - a == Money(-750, "USD")
    assert -a == Money(-1_000, "USD")
    assert (a - a).amount_minor == 0


def test_is_positive_is_strict() -> None:
    """is_positive is true only above zero: a zero or negative delta is not a credit."""
    assert Money(1, "EUR").is_positive()
    assert not Money(0, "EUR").is_positive()
    assert not Money(-1, "EUR").is_positive()


@pytest.mark.parametrize("op", ["add", "sub"])
def test_arithmetic_across_currencies_is_refused(op: str) -> None:
    """Adding or subtracting USD and EUR raises MoneyError naming both currencies."""
    usd, eur = Money(100, "USD"), Money(100, "EUR")
    with pytest.raises(MoneyError, match="currency mismatch: USD vs EUR"):
        _ = usd + eur if op == "add" else usd - eur


@pytest.mark.parametrize("other", [5, Decimal(5), 5.0, "5"])
def test_arithmetic_with_a_non_money_is_refused(other: object) -> None:
    """Money + a bare number is a MoneyError naming the other type, not a silent unit-less sum."""
    with pytest.raises(MoneyError, match=f"cannot combine Money with {type(other).__name__}"):
        _ = Money(100, "USD") + other  # type: ignore[operator]


def test_sum_leaving_bigint_range_is_refused() -> None:
    """A sum beyond the 64-bit range raises MoneyError instead of producing an unstorable amount."""
    top = Money(AMOUNT_MINOR_ABS_MAX, "USD")
    with pytest.raises(MoneyError, match="out of range"):
        _ = top + Money(1, "USD")
    with pytest.raises(MoneyError, match="out of range"):
        _ = -top - Money(1, "USD")


def test_money_is_immutable() -> None:
    """A Money value cannot be changed in place (frozen): amounts change only by making new values."""
    money = Money(100, "USD")
    with pytest.raises(AttributeError):
        money.amount_minor = 5  # type: ignore[misc]


# --- amounts ------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("amount", "type_name"),
    [
        (True, "bool"),
        (False, "bool"),
        (1.0, "float"),
        ("100", "str"),
        (Decimal(100), "Decimal"),
        (None, "NoneType"),
    ],
)
def test_non_int_amounts_are_rejected(amount: object, type_name: str) -> None:
    """bool (although an int subclass), float, str, Decimal and None are refused with the type named."""
    with pytest.raises(MoneyError, match=f"must be an int of minor units, got {type_name}"):
        Money(amount, "USD")  # type: ignore[arg-type]
    with pytest.raises(MoneyError):
        check_amount_minor(amount)


@pytest.mark.parametrize("amount", [AMOUNT_MINOR_ABS_MAX, -AMOUNT_MINOR_ABS_MAX, 0])
def test_bigint_range_edges_are_accepted(amount: int) -> None:
    """The largest magnitudes that fit a Postgres bigint / Avro long are valid amounts."""
    assert Money(amount, "USD").amount_minor == amount
    assert check_amount_minor(amount) == amount


@pytest.mark.parametrize("amount", [AMOUNT_MINOR_ABS_MAX + 1, -AMOUNT_MINOR_ABS_MAX - 1, 10**30])
def test_amounts_outside_bigint_range_are_rejected(amount: int) -> None:
    """2**63 and beyond (and -2**63, so that negation can never leave the range) are refused."""
    assert AMOUNT_MINOR_ABS_MAX == 2**63 - 1
    with pytest.raises(MoneyError, match="out of range for a 64-bit integer"):
        Money(amount, "USD")


# --- currencies ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("currency", "exponent"), [("JPY", 0), ("USD", 2), ("EUR", 2), ("KWD", 3), ("CLF", 4)]
)
def test_currency_exponents(currency: str, exponent: int) -> None:
    """The ISO-4217 minor-unit digits of representative currencies, including every non-2 class."""
    assert currency_exponent(currency) == exponent


@pytest.mark.parametrize("currency", ["usd", "XXX", "US", "USDT", "", " USD"])
def test_unknown_currency_is_rejected_with_a_clear_message(currency: str) -> None:
    """An unknown or mis-cased code raises MoneyError quoting the code and saying what is expected."""
    with pytest.raises(MoneyError) as exc_info:
        Money(100, currency)
    message = str(exc_info.value)
    assert repr(currency) in message
    assert "ISO-4217" in message
    with pytest.raises(MoneyError):
        currency_exponent(currency)


# --- decimal edges ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("amount_minor", "currency", "text"),
    [
        (123_456, "JPY", "123456"),
        (0, "JPY", "0"),
        (-5, "JPY", "-5"),
        (123_456, "USD", "1234.56"),
        (5, "USD", "0.05"),
        (0, "USD", "0.00"),
        (-100, "USD", "-1.00"),
        (123_456, "KWD", "123.456"),
        (1, "KWD", "0.001"),
        (-1_000, "KWD", "-1.000"),
        (AMOUNT_MINOR_ABS_MAX, "USD", "92233720368547758.07"),
    ],
)
def test_to_and_from_decimal_are_exact(amount_minor: int, currency: str, text: str) -> None:
    """to_decimal gives exactly the currency's number of places (also for zero and negatives) and
    from_decimal reads both the Decimal and its text back to the same minor units."""
    digits = currency_exponent(currency)
    value = to_decimal(amount_minor, digits)
    assert str(value) == text
    assert value.as_tuple().exponent == -digits
    assert from_decimal(value, digits) == amount_minor
    assert from_decimal(text, digits) == amount_minor
    money = Money(amount_minor, currency)
    assert money.to_decimal() == value
    assert Money.from_decimal(text, currency) == money


@pytest.mark.parametrize(
    ("text", "currency", "amount_minor"),
    [
        ("12.3", "USD", 1_230),
        ("12.340", "USD", 1_234),
        ("7", "KWD", 7_000),
        ("-0", "USD", 0),
    ],
)
def test_from_decimal_accepts_fewer_places_and_trailing_zeros(
    text: str, currency: str, amount_minor: int
) -> None:
    """Fewer places, zeros beyond the exponent and exponent notation are exact, so they are accepted."""
    assert Money.from_decimal(text, currency).amount_minor == amount_minor


@pytest.mark.parametrize(
    ("value", "currency"),
    [
        ("1.5", "JPY"),
        ("12.345", "USD"),
        ("0.001", "USD"),
        (Decimal("12.345"), "USD"),
        ("1.2345", "KWD"),
        ("-0.0001", "KWD"),
    ],
)
def test_from_decimal_refuses_extra_digits(value: Decimal | str, currency: str) -> None:
    """More places than the currency has raises MoneyError instead of rounding (1.005 USD is no cent)."""
    with pytest.raises(MoneyError, match=f"more than {currency_exponent(currency)} decimal places"):
        Money.from_decimal(value, currency)


@pytest.mark.parametrize(
    "value", ["NaN", "nan", "sNaN", "Infinity", "-Infinity", "inf", Decimal("NaN"), Decimal("-Inf")]
)
def test_from_decimal_refuses_non_finite_values(value: Decimal | str) -> None:
    """NaN and infinities are not amounts: MoneyError, not an exception from deep inside int()."""
    with pytest.raises(MoneyError, match="not a finite amount"):
        from_decimal(value, 2)


@pytest.mark.parametrize("value", [12.34, 0.0, float("nan")])
def test_from_decimal_refuses_float(value: float) -> None:
    """A float is refused outright, even one whose value looks exact."""
    with pytest.raises(MoneyError, match="float is not accepted"):
        from_decimal(value, 2)  # type: ignore[arg-type]
    with pytest.raises(MoneyError, match="float is not accepted"):
        Money.from_decimal(value, "USD")  # type: ignore[arg-type]


@pytest.mark.parametrize("text", ["", "abc", "12,34", "1.2.3", "$5", "5 USD", "0x10", "--1"])
def test_from_decimal_refuses_garbage_text(text: str) -> None:
    """Text that is not a decimal number raises MoneyError quoting it."""
    with pytest.raises(MoneyError, match="not a decimal amount"):
        from_decimal(text, 2)


def test_from_decimal_refuses_amounts_beyond_bigint() -> None:
    """An exact decimal whose minor units do not fit 64 bits raises MoneyError."""
    with pytest.raises(MoneyError, match="out of range"):
        from_decimal("92233720368547758.08", 2)


def test_from_decimal_with_unknown_currency_names_the_currency() -> None:
    """Money.from_decimal checks the currency first, with the same clear message."""
    with pytest.raises(MoneyError, match="'ABC'"):
        Money.from_decimal("1.00", "ABC")


def test_from_decimal_never_rounds_digits_beyond_the_decimal_context_precision() -> None:
    """1.000000000000000000000000000001 USD is not a whole number of cents: it must be refused."""
    with pytest.raises(MoneyError):
        from_decimal("1.000000000000000000000000000001", 2)


def test_from_decimal_does_not_depend_on_the_ambient_decimal_context() -> None:
    """Whatever precision another library set on this thread's context, 1234.567 USD is refused."""
    with localcontext() as context:
        context.prec = 6
        with pytest.raises(MoneyError):
            from_decimal("1234.567", 2)


def test_to_decimal_does_not_depend_on_the_ambient_decimal_context() -> None:
    """Whatever precision the thread's decimal context has, 123456789 cents are 1234567.89 USD."""
    with localcontext() as context:
        context.prec = 6
        assert to_decimal(123_456_789, 2) == Decimal("1234567.89")


def test_from_decimal_huge_exponent_is_a_money_error() -> None:
    """'1e1000000' (garbage from a PSP) raises MoneyError like every other bad input."""
    with pytest.raises(MoneyError):
        from_decimal("1e1000000", 2)


@pytest.mark.parametrize("digits", [-1, 9])
def test_digits_out_of_range_is_an_invariant_violation(digits: int) -> None:
    """A nonsense exponent is a programming error (InvariantViolation), in both directions."""
    with pytest.raises(InvariantViolation, match="digits out of range"):
        to_decimal(1, digits)
    with pytest.raises(InvariantViolation, match="digits out of range"):
        from_decimal("1", digits)


# --- property -----------------------------------------------------------------------------------


@given(
    amount_minor=st.integers(min_value=-AMOUNT_MINOR_ABS_MAX, max_value=AMOUNT_MINOR_ABS_MAX),
    currency=st.sampled_from(SUPPORTED_CURRENCIES),
)
def test_decimal_round_trip_is_exact_for_every_amount_and_currency(amount_minor: int, currency: str) -> None:
    """For any bigint amount and any supported currency, minor -> Decimal -> minor (and through the
    decimal text the edges actually exchange) is the identity."""
    digits = currency_exponent(currency)
    value = to_decimal(amount_minor, digits)
    assert from_decimal(value, digits) == amount_minor
    assert from_decimal(str(value), digits) == amount_minor
    money = Money(amount_minor, currency)
    assert Money.from_decimal(money.to_decimal(), currency) == money


@pytest.mark.parametrize("text", ["1E+2", "1_000", " 12.34", "12.34 ", "+5", "\u0661\u0662", ".5", "5."])
def test_from_decimal_text_must_be_plain_ascii_decimal(text: str) -> None:
    """Amount text from a PSP or MT5 is accepted only as plain ASCII ``-123.45``: exponents,
    underscores, spaces, a plus sign or non-ASCII digits are refused rather than guessed."""
    with pytest.raises(MoneyError, match="not a decimal amount"):
        from_decimal(text, 2)


def test_from_decimal_decimal_objects_may_use_exponents() -> None:
    """A Decimal object (not text) is exact whatever its exponent form."""
    assert from_decimal(Decimal("1E+2"), 0) == 100
