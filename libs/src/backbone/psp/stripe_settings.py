"""Settings of provider ``stripe`` (no SDK import: every process may read them, only the executor
loads the SDK). The key comes from ``STRIPE_API_KEY`` or from a file (``STRIPE_API_KEY_FILE``, a
mounted secret); it is a ``Secret`` and never printed."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from backbone.invariants import invariant
from backbone.settings import Secret, setting


@dataclass(frozen=True)
class StripeClientSettings:
    api_key: Secret | None = setting(
        "STRIPE_API_KEY", None, secret=True, doc="secret key (sk_test_… / sk_live_… / rk_…); or _FILE"
    )
    api_key_file: str = setting("STRIPE_API_KEY_FILE", "", doc="a file holding the key (mounted secret)")
    api_base: str = setting("STRIPE_API_BASE", "https://api.stripe.com", doc="stripe-mock in tests")
    timeout_ms: int = setting("STRIPE_TIMEOUT_MS", 10_000, doc="read timeout of one call")
    connect_timeout_ms: int = setting("STRIPE_CONNECT_TIMEOUT_MS", 2_000)

    def key(self) -> Secret:
        """The key from ``STRIPE_API_KEY``, else from the file ``STRIPE_API_KEY_FILE``."""
        if self.api_key is not None:
            return self.api_key
        invariant(bool(self.api_key_file), "STRIPE_API_KEY or STRIPE_API_KEY_FILE is required")
        return Secret(Path(self.api_key_file).read_text(encoding="utf-8").strip())
