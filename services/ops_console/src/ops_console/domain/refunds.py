"""A refund asked for from the console: the idempotency key that makes a double submit one refund.

The refund form carries a nonce made when the page was drawn; the key is a digest of who asks, for
which merchant's payment, with which form. The same form posted twice (a double click, a resubmit
after the browser's back button) is the same key, and payment-state answers the second with the
first's result (``Idempotent-Replayed``): one refund. The same form posted with another amount is
payment-state's ``idempotency_key_reused`` (409/422), never a second refund. A new page is a new
nonce: a second, deliberate refund is a new key.
"""

from __future__ import annotations

import hashlib
import re
from typing import Final

NONCE_RE: Final = re.compile(r"[0-9a-f]{32}")
KEY_PREFIX: Final = "console-refund-"


class BadNonce(ValueError):
    pass


def idempotency_key(operator: str, merchant_id: str, payment_id: str, nonce: str) -> str:
    """``console-refund-<64 hex>``: printable ASCII under payment-state's 255 characters."""
    if NONCE_RE.fullmatch(nonce) is None:
        raise BadNonce("the refund form is stale or forged: open the deposit again")
    digest = hashlib.sha256("\x1f".join((operator, merchant_id, payment_id, nonce)).encode()).hexdigest()
    return KEY_PREFIX + digest


def reason_for_payment_state(operator: str, reason: str, chars_max: int = 500) -> str:
    """The reason kept on the refund operation names who asked (payment-state sees the merchant's
    token, not the person); cut to what payment-state stores."""
    return f"{operator} (ops console): {reason}"[:chars_max]
