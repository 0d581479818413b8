"""A small HTTP client for payment-state's API running as a real process."""

from __future__ import annotations

import http.client
import json
from dataclasses import dataclass
from typing import Any

from payment_state.testing.service import TOKEN_A


@dataclass(frozen=True)
class Response:
    status: int
    body: dict[str, Any]
    headers: dict[str, str]

    @property
    def code(self) -> str | None:
        error = self.body.get("error")
        return error.get("code") if isinstance(error, dict) else None


@dataclass(frozen=True)
class Http:
    port: int

    def call(
        self,
        method: str,
        path: str,
        body: object | None = None,
        *,
        key: str | None = None,
        token: str | None = TOKEN_A,
        raw: bytes | None = None,
        headers: dict[str, str] | None = None,
    ) -> Response:
        headers = {"Content-Type": "application/json", **(headers or {})}
        if token is not None:
            headers["Authorization"] = f"Bearer {token}"
        if key is not None:
            headers["Idempotency-Key"] = key
        data = raw if raw is not None else (None if body is None else json.dumps(body).encode())
        conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=30)
        try:
            conn.request(method, path, body=data, headers=headers)
            answer = conn.getresponse()
            payload = answer.read()
            return Response(answer.status, json.loads(payload) if payload else {}, dict(answer.getheaders()))
        finally:
            conn.close()

    def post(self, path: str, body: object | None = None, **kwargs: Any) -> Response:
        return self.call("POST", path, body, **kwargs)

    def get(self, path: str, **kwargs: Any) -> Response:
        return self.call("GET", path, **kwargs)
