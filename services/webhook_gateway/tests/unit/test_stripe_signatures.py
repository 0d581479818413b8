"""Provider ``stripe``'s signatures: our one verifier (``backbone.psp.signature``) and Stripe's
official SDK agree in both directions (what the SDK signs we accept, what we sign the SDK's
``Webhook.construct_event`` accepts), and every way the SDK refuses a delivery we refuse too.
Also the gateway's Stripe settings (endpoint secrets, rotation, off when unset)."""

from __future__ import annotations

import time

import pytest
import stripe
from backbone.psp.signature import SignatureInvalid, SignatureVerified, signature_header, verify_signature
from backbone.settings import SettingsError
from webhook_gateway.domain.providers import STRIPE
from webhook_gateway.settings import load_gateway_settings
from webhook_gateway.testing import STRIPE_CURRENT, STRIPE_PREVIOUS, stripe_event

SECRETS = [STRIPE_CURRENT, STRIPE_PREVIOUS]
BASE = {
    "DATABASE_URL": "postgresql://gw:pw-that-must-not-print@127.0.0.1:1/gw",
    "SIMPSP_WEBHOOK_SECRET": "whsec_current_secret_value",
}


def sdk_header(raw: bytes, secret: str, t: int) -> str:
    return str(stripe.WebhookSignature.generate_signature_header(raw.decode(), secret, timestamp=t))


def test_what_the_sdk_signs_we_verify_with_either_secret() -> None:
    """A header made by stripe.WebhookSignature with the current or the previous endpoint secret
    verifies, and says which secret matched (rotation progress)."""
    raw, now = stripe_event("evt_sdk"), int(time.time())
    current = verify_signature(sdk_header(raw, STRIPE_CURRENT, now), raw, SECRETS, now_s=now)
    previous = verify_signature(sdk_header(raw, STRIPE_PREVIOUS, now), raw, SECRETS, now_s=now)
    assert current == SignatureVerified("current", now)
    assert previous == SignatureVerified("previous", now)


def test_what_we_sign_the_sdk_verifies_and_constructs() -> None:
    """Our signing helper's header passes stripe.Webhook.construct_event (the SDK's verification
    and parsing), so the two implementations compute the same thing."""
    raw, now = stripe_event("evt_ours"), int(time.time())
    header = signature_header(STRIPE_CURRENT.encode(), now, raw)
    event = stripe.Webhook.construct_event(raw, header, STRIPE_CURRENT)
    assert event.id == "evt_ours" and event.type == "payment_intent.succeeded"


@pytest.mark.parametrize("case", ["tampered", "stale", "unknown_secret", "future"])
def test_the_sdk_and_we_refuse_the_same_deliveries(case: str) -> None:
    """Tampered body, a stamp older than 300 s, a secret we do not hold: the SDK raises
    SignatureVerificationError and we answer SignatureInvalid. (A stamp far in the FUTURE the SDK
    accepts; we refuse it too, as the gateway always has: a stricter, documented difference.)"""
    raw, now = stripe_event("evt_bad"), int(time.time())
    body, header = raw, sdk_header(raw, STRIPE_CURRENT, now)
    if case == "tampered":
        body = raw.replace(b"2000", b"2001")
    elif case == "stale":
        header = sdk_header(raw, STRIPE_CURRENT, now - 301)
    elif case == "unknown_secret":
        header = sdk_header(raw, "whsec_not_ours_000000000000", now)
    else:
        header = sdk_header(raw, STRIPE_CURRENT, now + 301)
    ours = verify_signature(header, body, SECRETS, now_s=now, tolerance_s=300)
    assert isinstance(ours, SignatureInvalid)
    if case != "future":
        with pytest.raises(stripe.SignatureVerificationError):
            stripe.Webhook.construct_event(body, header, STRIPE_CURRENT, tolerance=300)


def test_stripe_settings_enable_the_endpoint_with_its_secrets() -> None:
    """STRIPE_WEBHOOK_SECRET (and _PREVIOUS during a roll) enable provider stripe with the
    Stripe-Signature header; without them the gateway knows simpsp only."""
    off = load_gateway_settings(BASE)
    assert set(off.providers()) == {"simpsp"}
    on = load_gateway_settings(
        {**BASE, "STRIPE_WEBHOOK_SECRET": STRIPE_CURRENT, "STRIPE_WEBHOOK_SECRET_PREVIOUS": STRIPE_PREVIOUS}
    )
    config = on.providers()["stripe"]
    assert config.provider == STRIPE and config.provider.signature_header == "Stripe-Signature"
    assert (config.secrets.current, config.secrets.previous) == (
        STRIPE_CURRENT.encode(),
        STRIPE_PREVIOUS.encode(),
    )


def test_bad_stripe_secrets_are_named_never_printed() -> None:
    """A short secret, a previous equal to the current one, or a previous without a current one
    stops the gateway at start, naming the variable and never the value."""
    for env, needle in [
        ({"STRIPE_WEBHOOK_SECRET": "whsec_short"}, "STRIPE_WEBHOOK_SECRET=<secret> is invalid"),
        (
            {"STRIPE_WEBHOOK_SECRET": STRIPE_CURRENT, "STRIPE_WEBHOOK_SECRET_PREVIOUS": STRIPE_CURRENT},
            "must differ",
        ),
        ({"STRIPE_WEBHOOK_SECRET_PREVIOUS": STRIPE_PREVIOUS}, "without STRIPE_WEBHOOK_SECRET"),
    ]:
        with pytest.raises(SettingsError) as caught:
            load_gateway_settings({**BASE, **env})
        assert needle in str(caught.value)
        assert STRIPE_CURRENT not in str(caught.value) and "whsec_short" not in str(caught.value)
