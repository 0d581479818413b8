"""Contract between the two verifiers of the `Simpsp-Signature` header: the gateway's (production,
domain/signatures.py) and backbone.psp's (the PSP client's helper, used by test stand-ins). Two
implementations of one security check must never disagree: on any header, body, secrets and clock,
both accept or both refuse."""

from __future__ import annotations

import hashlib
import hmac

from backbone.psp import Verified
from backbone.psp import verify_signature as psp_verify
from hypothesis import given, settings
from hypothesis import strategies as st
from webhook_gateway.domain.signatures import SignatureVerified, SigningSecrets
from webhook_gateway.domain.signatures import verify_signature as gateway_verify

SECRETS = [b"whsec_current_0123456789", b"whsec_previous_0123456789", b"whsec_other_0123456789ab"]
NOW = 1_800_000_000


def _v1(secret: bytes, t: int, body: bytes) -> str:
    return hmac.new(secret, f"{t}.".encode() + body, hashlib.sha256).hexdigest()


@st.composite
def headers(draw: st.DrawFn) -> tuple[str, bytes]:
    body = draw(st.binary(min_size=0, max_size=64))
    t = NOW + draw(st.integers(-400, 400))
    signers = draw(st.lists(st.sampled_from(SECRETS), min_size=0, max_size=3))
    parts = [f"t={t}"] + [f"v1={_v1(s, t, body)}" for s in signers]
    if draw(st.booleans()):
        parts.append("v1=" + "0" * 64)  # a wrong signature next to the others
    if draw(st.booleans()) and parts:
        body = body + b"x"  # tampered after signing
    return ",".join(parts), body


@settings(max_examples=300, deadline=None)
@given(headers(), st.booleans())
def test_the_gateway_and_the_client_helper_agree(case: tuple[str, bytes], with_previous: bool) -> None:
    """Signed by current, previous or an unknown secret, tampered or not, in or out of the 300 s window:
    the gateway's verifier and backbone.psp's give the same verdict."""
    header, body = case
    previous = SECRETS[1] if with_previous else None
    ours = gateway_verify(header, body, SigningSecrets(SECRETS[0], previous), now_s=NOW, tolerance_s=300)
    secrets = [SECRETS[0].decode()] + ([previous.decode()] if previous else [])
    theirs = psp_verify(header, body, secrets, now_s=NOW, tolerance_s=300)
    assert isinstance(ours, SignatureVerified) == isinstance(theirs, Verified), (header, ours, theirs)
