"""The services' HTTP APIs (aiohttp client, one session per console process, bounded timeouts).
The operator APIs are called with the console's token acting for the operator (``X-Operator``, the
operator's permissions at that service and their merchants, ``backbone.tokens``); payment-state's
and mt5-credit's merchant APIs with the merchant's own token, so a merchant the operator may not
see is not even asked."""

from __future__ import annotations

import json
from typing import Any

import aiohttp
from backbone.tokens import (
    EVERY_MERCHANT,
    OPERATOR_HEADER,
    OPERATOR_MERCHANTS_HEADER,
    OPERATOR_PERMISSIONS_HEADER,
)

from ops_console.application.ports import Refunded, ServiceError
from ops_console.domain import permissions
from ops_console.domain.operators import Operator


async def _answer(service: str, response: aiohttp.ClientResponse) -> Any:
    raw = await response.read()
    try:
        body = json.loads(raw) if raw else {}
    except ValueError:
        body = {"error": "not_json", "detail": raw[:200].decode(errors="replace")}
    if response.status >= 400:
        error = body.get("error", f"http_{response.status}") if isinstance(body, dict) else "error"
        detail = body.get("detail", "") if isinstance(body, dict) else ""
        if isinstance(error, dict):  # payment-state's shape: {"error": {"code", "message"}}
            error, detail = error.get("code", "error"), error.get("message", "")
        raise ServiceError(service, response.status, str(error), str(detail))
    return body


class _Client:
    """One aiohttp session per process, opened on the server's loop (``start``) and closed with it;
    every call goes through ``_call``: a service's 4xx/5xx is its ``ServiceError``, no answer is a
    503 ``unavailable``."""

    def __init__(self, timeout_s: float) -> None:
        self._timeout = aiohttp.ClientTimeout(total=timeout_s)
        self._http: aiohttp.ClientSession | None = None

    async def start(self) -> None:
        self._http = aiohttp.ClientSession(timeout=self._timeout)

    async def close(self) -> None:
        if self._http is not None:
            await self._http.close()

    async def _call(
        self,
        service: str,
        method: str,
        url: str,
        headers: dict[str, str],
        *,
        absent_is_none: bool = False,
        **kw: Any,
    ) -> Any:
        """The JSON answer; None for a 404 when ``absent_is_none`` (a read of something not there)."""
        assert self._http is not None, "start() first"
        try:
            async with self._http.request(method, url, headers=headers, **kw) as response:
                if absent_is_none and response.status == 404:
                    return None
                return await _answer(service, response)
        except (aiohttp.ClientError, TimeoutError) as exc:
            raise ServiceError(service, 503, "unavailable", type(exc).__name__) from None


class OperatorClient(_Client):
    """A service's operator API, called with the console's token for the operator who logged in,
    asserting only that service's share of the operator's permissions."""

    def __init__(
        self,
        service: str,
        base_url: str,
        token: str,
        mapping: dict[permissions.Permission, tuple[str, ...]],
        timeout_s: float,
    ) -> None:
        super().__init__(timeout_s)
        self._service, self._base, self._token, self._mapping = service, base_url.rstrip("/"), token, mapping

    def _headers(self, operator: Operator) -> dict[str, str]:
        merchants = EVERY_MERCHANT if operator.every_merchant else ",".join(operator.merchants)
        return {
            "Authorization": f"Bearer {self._token}",
            OPERATOR_HEADER: operator.username,
            OPERATOR_PERMISSIONS_HEADER: permissions.at_service(operator.permissions, self._mapping),
            OPERATOR_MERCHANTS_HEADER: merchants,
        }

    async def get(self, operator: Operator, path: str, query: dict[str, str] | None = None) -> Any:
        return await self._call(
            self._service, "GET", self._base + path, self._headers(operator), params=query or {}
        )

    async def post(self, operator: Operator, path: str, body: dict[str, Any]) -> Any:
        return await self._call(self._service, "POST", self._base + path, self._headers(operator), json=body)


class PaymentsClient(_Client):
    """payment-state's payments and mt5-credit's deposit intents, each with the merchant's own token
    at that service (a merchant without a token there is not asked)."""

    def __init__(
        self,
        base_url: str,
        merchant_tokens: dict[str, str],
        timeout_s: float,
        credit_url: str | None = None,
        credit_tokens: dict[str, str] | None = None,
    ) -> None:
        super().__init__(timeout_s)
        self._base, self._tokens = base_url.rstrip("/"), merchant_tokens
        self._credit_base, self._credit_tokens = (credit_url or "").rstrip("/"), credit_tokens or {}

    def merchants(self) -> tuple[str, ...]:
        return tuple(sorted(self._tokens))

    async def deposit_intent(self, merchant_id: str, deposit_reference: str) -> dict[str, Any] | None:
        """The intent with its credit rows (status, MT5 deal ticket), or None (unknown, another
        merchant's, or no mt5-credit token for this merchant)."""
        token = self._credit_tokens.get(merchant_id)
        if token is None or not self._credit_base:
            return None
        url = f"{self._credit_base}/deposit-intents/{deposit_reference}"
        found = await self._call("mt5-credit", "GET", url, _bearer(token), absent_is_none=True)
        return found if isinstance(found, dict) else None

    async def payment(self, merchant_id: str, payment_id: str) -> dict[str, Any] | None:
        token = self._tokens.get(merchant_id)
        if token is None:
            return None
        url = f"{self._base}/payments/{payment_id}"
        found = await self._call("payment-state", "GET", url, _bearer(token), absent_is_none=True)
        payment = found.get("payment") if isinstance(found, dict) else None  # {"payment": {...}}
        return payment if isinstance(payment, dict) else None

    async def payments_by_psp_reference(self, merchant_id: str, reference: str) -> list[dict[str, Any]]:
        token = self._tokens.get(merchant_id)
        if token is None:
            return []
        url = f"{self._base}/payments"
        query = {"provider_payment_id": reference}
        found = await self._call("payment-state", "GET", url, _bearer(token), params=query)
        payments = found.get("payments") if isinstance(found, dict) else None  # {"payments": [...]}
        return [p for p in payments if isinstance(p, dict)] if isinstance(payments, list) else []

    async def refund(
        self, merchant_id: str, payment_id: str, idempotency_key: str, body: dict[str, Any]
    ) -> Refunded:
        token = self._tokens.get(merchant_id)
        if token is None:
            raise ServiceError("payment-state", 404, "payment_not_found", "no token for this merchant")
        assert self._http is not None, "start() first"
        url = f"{self._base}/payments/{payment_id}/refunds"
        headers = {**_bearer(token), "Idempotency-Key": idempotency_key}
        try:
            async with self._http.post(url, headers=headers, json=body) as response:
                answer = await _answer("payment-state", response)
                replayed = response.headers.get("Idempotent-Replayed") == "true"
        except (aiohttp.ClientError, TimeoutError) as exc:
            # no answer: the refund may have been made; the same form again is the same key
            raise ServiceError("payment-state", 503, "unavailable", type(exc).__name__) from None
        return Refunded(answer if isinstance(answer, dict) else {}, replayed)


def _bearer(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


def parse_merchant_tokens(text: str, source: str) -> dict[str, str]:
    """Lines ``<merchant_id> <token>`` (``#`` comments); a malformed line refuses the file, naming
    the line, never its token."""
    tokens: dict[str, str] = {}
    for number, raw in enumerate(text.splitlines(), start=1):
        line = raw.split("#", 1)[0].strip()
        if not line:
            continue
        parts = line.split()
        if len(parts) != 2 or len(parts[1]) < 16:
            raise ValueError(f"{source}:{number}: expected '<merchant_id> <token of 16+ characters>'")
        tokens[parts[0]] = parts[1]
    return tokens
