"""The ``Psp`` port on provider ``simpsp`` (the simulator's Stripe-like API, ``backbone.psp.PspClient``)."""

from __future__ import annotations

from backbone.psp import PspClient, PspClientSettings

from payment_state.adapters.provider_psp import ProviderPsp


class SimPsp(ProviderPsp):
    """payment-state's adapter to simpsp; thread-safe (the client keeps a keep-alive pool)."""

    def __init__(self, client: PspClient) -> None:
        super().__init__(client)

    @classmethod
    def from_settings(cls, settings: PspClientSettings) -> SimPsp:
        return cls(PspClient.from_settings(settings))
