"""mt5-credit's HTTP API as a real process: a small client and the tokens the tests start it with."""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from typing import Any, Final

ADMIN: Final = "admin-token-0123456789"
TOKEN_A: Final = "merchant-a-token-0123"  # noqa: S105 - a test value
TOKEN_B: Final = "merchant-b-token-0123"  # noqa: S105 - a test value


class Client:
    """Calls the API with a merchant's bearer token (``TOKEN_A`` unless told); returns (status, JSON)."""

    def __init__(self, base: str) -> None:
        self.base = base

    def call(
        self,
        method: str,
        path: str,
        body: Any = None,
        token: str = TOKEN_A,
        key: str | None = None,
        raw: bytes | None = None,
        headers: dict[str, str] | None = None,
    ) -> tuple[int, dict[str, Any]]:
        data = raw if raw is not None else (None if body is None else json.dumps(body).encode())
        req = urllib.request.Request(self.base + path, data=data, method=method)  # noqa: S310 - http://127.0.0.1
        req.add_header("Authorization", f"Bearer {token}")
        req.add_header("Content-Type", "application/json")
        for name, value in (headers or {}).items():
            req.add_header(name, value)
        if key:
            req.add_header("Idempotency-Key", key)
        try:
            with urllib.request.urlopen(req, timeout=10) as resp:  # noqa: S310 - the test's own process
                return resp.status, json.loads(resp.read())
        except urllib.error.HTTPError as err:
            raw = err.read() or b"{}"
            try:
                return err.code, json.loads(raw)
            except ValueError:  # aiohttp's own 404/405 pages are text
                return err.code, {"text": raw.decode(errors="replace")}


def answers(client: Client) -> bool:
    """The process serves HTTP (healthy or not yet ready)."""
    try:
        return client.call("GET", "/healthz")[0] in (200, 503)
    except OSError:
        return False
