"""The ``Psp`` port on provider ``stripe`` (``backbone.psp.stripe_client.StripeClient``, the official SDK).

Everything provider-specific (parameters, error classes, Stripe's JSON) lives in ``backbone.psp``;
the mapping onto our facts is ``provider_psp``'s, shared with simpsp.
"""

from __future__ import annotations

from backbone.psp.stripe_client import StripeClient, StripeClientSettings

from payment_state.adapters.provider_psp import ProviderPsp


class StripePsp(ProviderPsp):
    """payment-state's adapter to Stripe; thread-safe."""

    def __init__(self, client: StripeClient) -> None:
        # After a lost create, replay it first (Stripe keeps the key 24 h): ADR 0010.
        super().__init__(client, replays_lost_creates=True)

    @classmethod
    def from_settings(cls, settings: StripeClientSettings) -> StripePsp:
        return cls(StripeClient.from_settings(settings))
