"""Contract test of the reconciler's Stripe settlement input against stripe-mock, Stripe's official
mock server, which validates every request against Stripe's published OpenAPI spec.

What it proves: the two lists we send (``GET /v1/payouts`` with a ``created`` window, ``GET
/v1/balance_transactions?payout=…`` with ``expand[]=data.source``, both with ``limit``) are valid
requests, and the answers page and reach our normalization. What it cannot prove: stripe-mock is
stateless and answers with fixtures (a payout, and a ``charge`` transaction whose expanded source is
an application fee, with no metadata of ours), so shapes only; the mapping itself is proved from
Stripe's documented objects in ``tests/unit/test_stripe_settlement.py``.
"""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, time

import pytest
import stripe
from backbone.psp.stripe_client import StripeClient
from backbone.testing.stripe_mock import StripeMock
from reconciler.adapters.stripe_reports import StripeReportSource
from reconciler.application.ports import Unavailable
from reconciler.domain.dates import BusinessCalendar
from reconciler.testing.stripe import DAY

pytestmark = pytest.mark.integration


@pytest.fixture
def client(stripe_mock: StripeMock) -> Iterator[StripeClient]:
    c = StripeClient(stripe_mock.api_key, api_base=stripe_mock.base_url, timeout_ms=5000)
    yield c
    c.close()


def test_the_mock_refuses_a_balance_transaction_list_stripe_would_refuse(stripe_mock: StripeMock) -> None:
    """stripe-mock validates this endpoint: an unknown parameter is a 400, so our accepted list
    below is a valid request."""
    sdk = stripe.StripeClient(stripe_mock.api_key, base_addresses={"api": stripe_mock.base_url})
    with pytest.raises(stripe.InvalidRequestError):
        sdk.v1.balance_transactions.list({"payout": "po_123", "not_a_stripe_param": 1})  # type: ignore[typeddict-unknown-key]


def test_our_payout_and_balance_transaction_lists_are_valid_requests(client: StripeClient) -> None:
    """Both lists are accepted and read as complete lists of JSON objects: payouts, and balance
    transactions whose source came back expanded (an object, not an id)."""
    payouts = client.list_payouts(1_764_460_800, 1_765_324_800, pages_max=2)
    assert isinstance(payouts, list) and payouts and payouts[0]["object"] == "payout"
    txns = client.list_balance_transactions(payouts[0]["id"], pages_max=2)
    assert isinstance(txns, list) and txns and txns[0]["object"] == "balance_transaction"
    assert isinstance(txns[0]["source"], dict)


def test_the_whole_fetch_reaches_the_normalization(client: StripeClient) -> None:
    """The source's fetch of a date runs both calls and hands Stripe's answers to the normalization,
    which refuses the fixture for what it is (a charge whose source is an application fee): no
    request was refused (that would read http_400), and nothing is guessed from a fixture."""
    source = StripeReportSource(
        "stripe", client, BusinessCalendar(UTC, time(0, 0)), horizon_days=10, timeout_s=30
    )
    found = source.fetch("settlement", DAY)
    assert isinstance(found, Unavailable)
    assert "whose source is a 'application_fee', not a charge" in found.reason, found.reason
