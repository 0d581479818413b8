"""What the console needs from the world: its own store (operators, sessions, audit) and the
services' HTTP APIs. Each service port answers with the service's JSON, or ``ServiceError`` with
the status and the service's own error (shown to the operator as it is)."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any, Protocol

from ops_console.domain.operators import Operator


@dataclass(frozen=True, slots=True)
class Session:
    operator: Operator
    csrf_token: str
    expires_at: datetime


@dataclass(frozen=True, slots=True)
class AuditEntry:
    id: int
    at: datetime
    operator: str
    action: str
    target: str
    reason: str
    outcome: str
    detail: dict[str, Any]


class ServiceError(Exception):
    """A service said no (4xx), or could not be reached (status 503, ``error`` unavailable)."""

    def __init__(self, service: str, status: int, error: str, detail: str) -> None:
        super().__init__(f"{service}: {status} {error}: {detail}")
        self.service, self.status, self.error, self.detail = service, status, error, detail

    def said(self) -> str:
        """What an operator is shown: the service's own words, and that nothing changed on no answer."""
        if self.status >= 500:
            return f"The {self.service} did not answer ({self.detail or self.error}); nothing was changed."
        return f"The {self.service} refused: {self.detail or self.error}"


@dataclass(frozen=True, slots=True)
class Refunded:
    """payment-state's answer to a refund: its body, and whether it replays an earlier identical
    request (the same idempotency key: the refund was asked for once)."""

    answer: dict[str, Any]
    replayed: bool


class ConsoleStore(Protocol):
    async def password_hash(self, username: str) -> str | None: ...
    async def operator(self, username: str) -> Operator | None: ...
    async def add_operator(self, operator: Operator, password_hash: str, *, replace: bool = True) -> bool: ...
    async def operators(self) -> list[Operator]: ...
    async def open_session(self, token_sha256: bytes, username: str, csrf: str, ttl_s: int) -> None: ...
    async def session(self, token_sha256: bytes) -> Session | None: ...
    async def close_session(self, token_sha256: bytes) -> None: ...
    async def audit(
        self, operator: str, action: str, target: str, reason: str, outcome: str, detail: dict[str, Any]
    ) -> None: ...
    async def refused_logins(self, target: str, window_s: int) -> int: ...
    async def audit_entries(
        self, *, operator: str | None, target: str | None, limit: int
    ) -> list[AuditEntry]: ...


class OperatorApi(Protocol):
    """A service's operator API (the reconciler's /v1, mt5-credit's /v1/withdrawals), called for
    ``operator``."""

    async def get(self, operator: Operator, path: str, query: dict[str, str] | None = None) -> Any: ...
    async def post(self, operator: Operator, path: str, body: dict[str, Any]) -> Any: ...


class Payments(Protocol):
    """payment-state's read API with the merchant tokens the console holds: a payment is found
    only under a merchant the operator may see (the service answers 404 for any other)."""

    def merchants(self) -> tuple[str, ...]:
        """The merchants the console holds a token for: those an operator of every merchant is
        searched under."""
        ...

    async def payment(self, merchant_id: str, payment_id: str) -> dict[str, Any] | None: ...
    async def payments_by_psp_reference(self, merchant_id: str, reference: str) -> list[dict[str, Any]]:
        """The merchant's payments whose PSP payment id is ``reference`` (``pi_…``); [] for none."""
        ...

    async def deposit_intent(self, merchant_id: str, deposit_reference: str) -> dict[str, Any] | None: ...
    async def refund(
        self, merchant_id: str, payment_id: str, idempotency_key: str, body: dict[str, Any]
    ) -> Refunded:
        """``POST /payments/{id}/refunds`` with the merchant's token; ``ServiceError`` on a refusal."""
        ...
