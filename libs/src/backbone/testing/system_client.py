"""What tests, the demo and the drills do against a running ``System``, over HTTP.

``SystemClient`` is the part of ``System`` that only needs the running system's URLs (and the MT5
simulator's control API): the flows a broker's server drives (accounts, deposits, captures,
refunds, withdrawals), its operators' calls, one-off reconciliation runs, and ``http``, the JSON
request every one of them makes.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import urllib.error
import urllib.request
import uuid
from dataclasses import dataclass
from typing import Any

from backbone.mt5.testing import MANAGER_LOGIN, MANAGER_PASSWORD, SimulatorProcess
from backbone.testing.processes import wait_until
from backbone.testing.system_config import (
    CREDIT_ADMIN_TOKEN,
    CREDIT_OPERATORS,
    CREDIT_TOKEN,
    LEDGER_TOKEN,
    MERCHANT_TOKEN,
    MT5_GROUP,
    OPERATORS,
    PSP_API_KEY,
)


@dataclass
class Urls:
    """Where each service of a running system answers (empty until ``System.start`` sets it)."""

    psp: str = ""
    psp_control: str = ""
    gateway: str = ""
    payment_state: str = ""
    mt5_credit: str = ""
    ledger: str = ""
    reconciler: str = ""
    console: str = ""


class SystemClient:
    """Calls on a running system; ``System`` starts the processes and fills in what these read."""

    urls: Urls
    mt5: SimulatorProcess | None
    dbs: dict[str, str]
    prefix: str

    def recon_api(self, operator: str, method: str, path: str, body: Any = None) -> tuple[int, Any]:
        """One call of the reconciler's API as ``operator`` (a name of ``OPERATORS``)."""
        return self.http(method, self.urls.reconciler + path, body, token=OPERATORS[operator][0])

    def reconciler_env(self, grace_s: int = 0) -> dict[str, str]:
        """What ``python -m reconciler run`` needs against this system (PSP reports, MT5 deals)."""
        assert self.mt5 is not None
        return {
            **os.environ,
            "DATABASE_URL": self.dbs["reconciler"],
            "KAFKA_TOPIC_PREFIX": self.prefix,
            "RECON_PSP_API_URL": self.urls.psp,
            "RECON_PSP_API_KEY": PSP_API_KEY,
            "RECON_GRACE_S": str(grace_s),
            "MT5_WEBAPI_URL": self.mt5.url,
            "MT5_MANAGER_LOGIN": str(MANAGER_LOGIN),
            "MT5_MANAGER_PASSWORD": MANAGER_PASSWORD,
        }

    def reconcile(self, day: str, grace_s: int = 0, *extra: str) -> dict[str, Any]:
        """One run of ``python -m reconciler run --date day --json``: its JSON and exit code."""
        done = subprocess.run(
            [sys.executable, "-m", "reconciler", "run", "--date", day, "--json", *extra],
            env=self.reconciler_env(grace_s),
            capture_output=True,
            text=True,
            timeout=300,
            check=False,
        )
        if not done.stdout.strip():
            raise AssertionError(
                f"reconciler run printed nothing (exit {done.returncode}): {done.stderr[-2000:]}"
            )
        result: dict[str, Any] = json.loads(done.stdout)
        result["exit_code"] = done.returncode
        return result

    def journals(self, payment_id: str) -> list[dict[str, Any]]:
        status, body = self.http(
            "GET", f"{self.urls.ledger}/v1/journals?payment_id={payment_id}", token=LEDGER_TOKEN
        )
        assert status == 200, body
        return list(body["journals"] if isinstance(body, dict) else body)

    # --- the flows a broker drives ---------------------------------------------------------------

    def open_mt5_account(self, login: int, customer: str, currency: str = "USD") -> None:
        """The account on the MT5 server and its owner in mt5-credit's mapping."""
        assert self.mt5 is not None
        self.mt5.control.create_account(login, MT5_GROUP, balance="0")
        status, body = self.http(
            "PUT",
            f"{self.urls.mt5_credit}/accounts/{login}",
            {"customer_id": customer, "currency": currency, "enabled": True},
            token=CREDIT_ADMIN_TOKEN,
        )
        assert status == 200, body

    def create_deposit(
        self,
        customer: str,
        login: int,
        amount_minor: int,
        card: str,
        currency: str = "USD",
        *,
        traceparent: str | None = None,
    ) -> tuple[str, str]:
        """A deposit intent (server side) and its payment; returns (deposit_reference, payment_id).
        ``traceparent``: both calls are made in this trace, as a traced broker server would."""
        status, intent = self.http(
            "POST",
            f"{self.urls.mt5_credit}/deposit-intents",
            {"customer_id": customer, "mt5_login": login, "amount_minor": amount_minor, "currency": currency},
            token=CREDIT_TOKEN,
            key=new_key(),
            traceparent=traceparent,
        )
        assert status == 201, intent
        ref = str(intent["deposit_reference"])
        body = {
            "amount_minor": amount_minor,
            "currency": currency,
            "payment_method_token": card,
            "deposit_reference": ref,
        }
        status, created = self.http(
            "POST",
            f"{self.urls.payment_state}/payments",
            body,
            token=MERCHANT_TOKEN,
            key=new_key(),
            traceparent=traceparent,
        )
        assert status == 201, created
        return ref, str(created.get("payment", created)["payment_id"])

    def payment(self, payment_id: str) -> dict[str, Any]:
        status, body = self.http(
            "GET", f"{self.urls.payment_state}/payments/{payment_id}", token=MERCHANT_TOKEN
        )
        assert status == 200, body
        return dict(body.get("payment", body))

    def wait_payment(self, payment_id: str, status: str, timeout_s: float = 60) -> dict[str, Any]:
        wait_until(lambda: self.payment(payment_id)["status"] == status, timeout_s, f"payment {status}")
        return self.payment(payment_id)

    def capture(self, payment_id: str, *, traceparent: str | None = None) -> None:
        status, body = self.http(
            "POST",
            f"{self.urls.payment_state}/payments/{payment_id}/capture",
            {},
            token=MERCHANT_TOKEN,
            key=new_key(),
            traceparent=traceparent,
        )
        assert status in (200, 202), body

    def refund(self, payment_id: str, amount_minor: int, currency: str = "USD") -> None:
        status, body = self.http(
            "POST",
            f"{self.urls.payment_state}/payments/{payment_id}/refunds",
            {"amount_minor": amount_minor, "currency": currency},
            token=MERCHANT_TOKEN,
            key=new_key(),
        )
        assert status in (200, 201, 202), body

    def credits(self, ref: str) -> list[dict[str, Any]]:
        status, body = self.http("GET", f"{self.urls.mt5_credit}/deposit-intents/{ref}", token=CREDIT_TOKEN)
        assert status == 200, body
        return list(body["credits"])

    def wait_credits(self, ref: str, statuses: list[str], timeout_s: float = 60) -> list[dict[str, Any]]:
        def reached() -> bool:
            return [c["status"] for c in self.credits(ref)] == statuses

        wait_until(reached, timeout_s, f"credits of {ref} to be {statuses}")
        return self.credits(ref)

    # withdrawals (docs/adr/0008): the broker's server asks, two operators approve

    def request_withdrawal(
        self,
        customer: str,
        login: int,
        amount_minor: int,
        card: str,
        currency: str = "USD",
        key: str | None = None,
    ) -> tuple[int, Any]:
        """``POST /v1/withdrawals`` as the broker's server; (status, body)."""
        body = {
            "customer_id": customer,
            "mt5_login": login,
            "amount_minor": amount_minor,
            "currency": currency,
            "destination_token": card,
        }
        return self.http(
            "POST", f"{self.urls.mt5_credit}/v1/withdrawals", body, token=CREDIT_TOKEN, key=key or new_key()
        )

    def credit_api(self, operator: str, method: str, path: str, body: Any = None) -> tuple[int, Any]:
        """One call of mt5-credit's API as ``operator`` (a name of ``CREDIT_OPERATORS``)."""
        return self.http(method, self.urls.mt5_credit + path, body, token=CREDIT_OPERATORS[operator][0])

    def approve_withdrawal(self, wid: str, maker: str = "alice", checker: str = "bob") -> dict[str, Any]:
        """Prepared by ``maker``, approved by ``checker`` with the digest the preparation showed."""
        status, prepared = self.credit_api(
            maker, "POST", f"/v1/withdrawals/{wid}/prepare", {"reason": "checked"}
        )
        assert status == 200, prepared
        status, approved = self.credit_api(
            checker,
            "POST",
            f"/v1/withdrawals/{wid}/approve",
            {"command_digest": prepared["command_digest"], "reason": "second pair of eyes"},
        )
        assert status == 200, approved
        return dict(approved)

    def withdrawal(self, wid: str) -> dict[str, Any]:
        status, body = self.http("GET", f"{self.urls.mt5_credit}/v1/withdrawals/{wid}", token=CREDIT_TOKEN)
        assert status == 200, body
        return dict(body)

    def wait_withdrawal(self, wid: str, status: str, timeout_s: float = 60) -> dict[str, Any]:
        wait_until(lambda: self.withdrawal(wid)["status"] == status, timeout_s, f"withdrawal {status}")
        return self.withdrawal(wid)

    def psp_write(self, path: str, body: dict[str, Any]) -> tuple[int, Any]:
        return self.http("POST", self.urls.psp + path, body, token=PSP_API_KEY, key=new_key())

    def psp_fault(self, **rule: Any) -> None:
        status, body = self.http("POST", f"{self.urls.psp_control}/control/faults", rule)
        assert status in (200, 201), body

    def deals(self, comment: str) -> list[dict[str, Any]]:
        assert self.mt5 is not None
        return self.mt5.control.deals(comment=comment)

    # --- talking to it --------------------------------------------------------------------------

    def http(
        self,
        method: str,
        url: str,
        body: Any = None,
        *,
        token: str | None = None,
        key: str | None = None,
        timeout_s: float = 15,
        traceparent: str | None = None,
    ) -> tuple[int, Any]:
        """One JSON request; returns (status, parsed body or None)."""
        data = None if body is None else json.dumps(body).encode()
        request = urllib.request.Request(url, data=data, method=method)  # noqa: S310 - built from our URLs
        request.add_header("Content-Type", "application/json")
        if token:
            request.add_header("Authorization", f"Bearer {token}")
        if key:
            request.add_header("Idempotency-Key", key)
        if traceparent:
            request.add_header("traceparent", traceparent)
        try:
            with urllib.request.urlopen(request, timeout=timeout_s) as response:  # noqa: S310 - our own URL
                raw = response.read()
                return response.status, json.loads(raw) if raw else None
        except urllib.error.HTTPError as error:
            raw = error.read()
            try:
                return error.code, json.loads(raw) if raw else None
            except ValueError:
                return error.code, raw.decode(errors="replace")


def new_key() -> str:
    """A fresh Idempotency-Key."""
    return f"k-{uuid.uuid4().hex}"
