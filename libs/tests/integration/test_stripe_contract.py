"""Contract tests of provider ``stripe`` (``backbone.psp.StripeClient``) against stripe-mock, Stripe's
official mock server, which validates every request against Stripe's published OpenAPI spec and
answers with the spec's fixture objects.

What they prove: each request we send is accepted (a parameter Stripe does not know, a missing or
mistyped one would be a 400 ``Refused``), and each answer's shape is read by our strict parsers.
What they cannot prove: behaviour across calls (stripe-mock is stateless; its fixtures do not carry
our metadata back): that is for ``libs/tests/unit/test_stripe_*.py``.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest
import stripe
from backbone.psp import Absent, Applied, Found, NoAnswer, PaymentIntent, Payout, PayoutStatus, Refund
from backbone.psp.stripe_client import StripeClient
from backbone.testing.stripe_mock import StripeMock


@pytest.fixture
def client(stripe_mock: StripeMock) -> Iterator[StripeClient]:
    c = StripeClient(stripe_mock.api_key, api_base=stripe_mock.base_url, timeout_ms=5000)
    yield c
    c.close()


def test_the_mock_refuses_what_stripe_would_refuse(stripe_mock: StripeMock) -> None:
    """stripe-mock is not a yes-machine: an unknown parameter and a missing required one are 400s,
    so an accepted request below means Stripe's published API accepts it."""
    sdk = stripe.StripeClient(stripe_mock.api_key, base_addresses={"api": stripe_mock.base_url})
    with pytest.raises(stripe.InvalidRequestError):
        sdk.v1.payment_intents.create({"amount": 100, "currency": "eur", "not_a_stripe_param": 1})
    with pytest.raises(stripe.InvalidRequestError):
        sdk.v1.payment_intents.create({"currency": "eur"})


def test_create_intent_with_manual_capture_and_confirm_is_accepted(client: StripeClient) -> None:
    """The authorize call (amount, currency, manual capture, card only, our metadata, confirm) is a
    valid PaymentIntent create and its answer parses into our PaymentIntent."""
    result = client.create_intent(
        "op_contract_create",
        amount_minor=1234,
        currency="EUR",
        reference="pay_contract",
        payment_method="pm_card_visa",
        metadata={"merchant_id": "m_1"},
        confirm=True,
    )
    assert isinstance(result, Applied) and isinstance(result.value, PaymentIntent)
    assert result.value.amount_minor == 1234 and result.value.currency == "EUR"
    assert result.value.capture_method == "manual"  # reflected from our request


def test_confirm_capture_cancel_are_accepted(client: StripeClient) -> None:
    """confirm (payment method), capture (a partial amount), capture (all) and cancel (a reason)
    are valid requests and their answers parse."""
    results = [
        client.confirm_intent("op_c1", "pi_123", payment_method="pm_card_visa"),
        client.capture_intent("op_c2", "pi_123", amount_minor=500),
        client.capture_intent("op_c3", "pi_123"),
        client.cancel_intent("op_c4", "pi_123", reason="requested_by_customer"),
        client.cancel_intent("op_c5", "pi_123"),
    ]
    for result in results:
        assert isinstance(result, Applied) and result.value.id == "pi_123", result


def test_create_refund_is_accepted(client: StripeClient) -> None:
    """A partial refund of a payment intent with a reason and our reference is a valid request and
    the refund parses (stripe-mock reflects our payment intent into it)."""
    result = client.create_refund(
        "op_refund", "pi_123", amount_minor=100, reference="op_refund", reason="requested_by_customer"
    )
    assert isinstance(result, Applied) and isinstance(result.value, Refund)
    assert result.value.payment_intent_id == "pi_123" and result.value.amount_minor == 100


def test_create_payout_is_accepted(client: StripeClient) -> None:
    """A payout (amount, currency, destination, our reference) is a valid request; it parses as pending."""
    result = client.create_payout(
        "op_payout", amount_minor=700, currency="EUR", destination="ba_123", reference="wd_1"
    )
    assert isinstance(result, Applied) and isinstance(result.value, Payout)
    assert result.value.status is PayoutStatus.PENDING and result.value.amount_minor == 700


def test_retrieves_parse(client: StripeClient) -> None:
    """Retrieving a payment intent and a payout by id: valid requests, answers parse into Found."""
    intent = client.retrieve_intent("pi_123")
    payout = client.retrieve_payout("po_123")
    assert isinstance(intent, Found) and intent.value.id == "pi_123"
    assert isinstance(payout, Found) and payout.value.id == "po_123"


def test_refund_fixture_without_payment_intent_is_not_an_answer(client: StripeClient) -> None:
    """The spec's refund fixture has ``payment_intent: null`` (a charge-only refund): the request is
    valid, and our strict reading says it proves nothing about a refund of ours (NoAnswer), for a
    retrieve and for the list of an intent's refunds alike."""
    retrieved = client.retrieve_refund("re_123")
    listed = client.list_refunds("pi_123")
    assert isinstance(retrieved, NoAnswer) and "payment_intent" in retrieved.reason
    assert isinstance(listed, NoAnswer) and "payment_intent" in listed.reason


def test_lookups_by_reference_are_valid_requests(client: StripeClient) -> None:
    """The Search API query (``metadata['reference']:'…'``), the refund list by payment intent and
    the payout list are accepted and read as complete answers; the fixtures do not carry our
    reference, so each is Absent."""
    assert isinstance(client.find_intent_by_reference("pay_x'1"), Absent)
    assert isinstance(client.find_refund_by_reference("op_refund", intent_id="pi_123"), Absent)
    assert isinstance(client.find_payout_by_reference("wd_1"), Absent)
