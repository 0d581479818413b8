"""The payment service providers the gateway accepts webhooks from, and how each signs them.

A provider that is not listed here gets 404 before its body is read. Adding one means: a ``Provider``
here, its secrets in ``settings.py``, and (if its scheme differs) a verifier next to ``signatures``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final

from backbone.psp.signature import SigningSecrets


@dataclass(frozen=True, slots=True)
class Provider:
    name: str  # lower case; the {provider} path segment and the ``provider`` field of events
    signature_header: str  # the HTTP header carrying ``t=…,v1=…``


@dataclass(frozen=True, slots=True)
class ProviderConfig:
    """A provider together with its webhook secrets (from settings; never printed)."""

    provider: Provider
    secrets: SigningSecrets


SIMPSP: Final = Provider("simpsp", "Simpsp-Signature")
KNOWN_PROVIDERS: Final = {p.name: p for p in (SIMPSP,)}
