"""What the handlers need besides a store: the provider each merchant's payments go to, ids and a clock.

Built once by ``bootstrap``; tests build one with their own clock or ids. (The outbox and the
events topic belong to the store: ``PaymentStore.publish`` writes in the store's transaction.)

Providers: ``provider`` is the default (``PAYMENT_STATE_PROVIDER``, simpsp unless configured);
``merchant_providers`` names another one for some merchants (``PAYMENT_STATE_MERCHANT_PROVIDERS``).
A payment keeps the provider it was created with for its whole life (it is stored on it): changing
a merchant's provider moves only its new payments, and an open operation is never sent to another
provider (DESIGN §5). ``for_provider`` gives the context a fact from one provider is applied in.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from types import MappingProxyType

from backbone.ids import new_id
from backbone.money import AmountLimit


def _now_ms() -> int:
    return time.time_ns() // 1_000_000


@dataclass(frozen=True)
class Context:
    provider: str
    new_id: Callable[[str], str] = field(default=new_id)
    now_ms: Callable[[], int] = field(default=_now_ms)
    merchant_providers: Mapping[str, str] = field(default_factory=lambda: MappingProxyType({}))
    amount_limit: AmountLimit = field(default_factory=AmountLimit)  # of a request (backbone.amounts)

    def provider_for(self, merchant_id: str) -> str:
        """The provider a new payment (or payout) of ``merchant_id`` goes to."""
        return self.merchant_providers.get(merchant_id, self.provider)

    @property
    def providers(self) -> frozenset[str]:
        """Every provider this deployment talks to (its webhooks are accepted, its adapters built)."""
        return frozenset({self.provider, *self.merchant_providers.values()})

    def for_provider(self, provider: str) -> Context:
        """This context with ``provider`` as the one facts are recorded under."""
        return self if provider == self.provider else replace(self, provider=provider)
