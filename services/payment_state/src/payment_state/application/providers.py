"""The adapters of every provider a deployment talks to, by name: each payment (and payout) is sent
to the provider stored on it, and to no other (never a failover while an outcome is unknown)."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from types import MappingProxyType

from backbone.invariants import invariant

from payment_state.application.ports import Psp


class Psps:
    """Provider name → its ``Psp`` adapter. Built from one adapter (a single-provider deployment,
    every test) or several."""

    def __init__(self, psps: Iterable[Psp]) -> None:
        by_name: dict[str, Psp] = {}
        for psp in psps:
            invariant(psp.provider not in by_name, f"provider {psp.provider} configured twice")
            by_name[psp.provider] = psp
        invariant(bool(by_name), "at least one provider")
        self._by_name: Mapping[str, Psp] = MappingProxyType(by_name)

    def get(self, provider: str) -> Psp | None:
        return self._by_name.get(provider)

    @property
    def names(self) -> frozenset[str]:
        return frozenset(self._by_name)

    def close(self) -> None:
        for psp in self._by_name.values():
            close = getattr(psp, "close", None)
            if callable(close):
                close()


def as_psps(psp: Psp | Psps) -> Psps:
    return psp if isinstance(psp, Psps) else Psps([psp])
