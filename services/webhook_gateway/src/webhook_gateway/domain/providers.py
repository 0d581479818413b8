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
# Stripe signs exactly as simpsp does (``t=…,v1=…``, HMAC-SHA256 of ``t.raw_body`` with the
# endpoint's signing secret ``whsec_…``; while a secret is rolled, one ``v1`` per valid secret), so
# the one verifier (``backbone.psp.signature``) serves both; the tests prove it against the
# official SDK's own signing and verification (``stripe.WebhookSignature``, ``Webhook.construct_event``).
STRIPE: Final = Provider("stripe", "Stripe-Signature")
KNOWN_PROVIDERS: Final = {p.name: p for p in (SIMPSP, STRIPE)}
