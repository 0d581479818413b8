"""``StripeReportSource`` over real HTTP against a scripted local Stripe (the real SDK client, retries
off): the calls it makes (payouts of the date's horizon, each payout's balance transactions with
their sources expanded, page by page), and that every failure is ``Unavailable``, never a partial
file. Plus its wiring: ``RECON_PROVIDER=stripe`` selects it, with Stripe's own settings."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import UTC, time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlsplit

import pytest
from backbone.psp.results import NoAnswer
from backbone.psp.stripe_client import StripeClient
from backbone.settings import SettingsError, load_settings
from reconciler.adapters.stripe_reports import NO_BANK_FILE, StripeReportSource
from reconciler.application.ports import Unavailable
from reconciler.bootstrap import report_source
from reconciler.domain.dates import BusinessCalendar
from reconciler.domain.reports import parse_report
from reconciler.settings import ReconSettings, RunSettings
from reconciler.testing.stripe import DAY, T0, charge, payout, refund, txn

UTC_MIDNIGHT = BusinessCalendar(UTC, time(0, 0))


@dataclass
class Stripe:
    """Pages by path, served in order; what was asked (path, query)."""

    pages: dict[str, list[tuple[int, Any]]] = field(default_factory=dict)
    received: list[tuple[str, dict[str, list[str]]]] = field(default_factory=list)


@pytest.fixture
def stripe_http() -> Iterator[tuple[Stripe, str]]:
    stripe = Stripe()

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            url = urlsplit(self.path)
            stripe.received.append((url.path, parse_qs(url.query)))
            queue = stripe.pages.get(url.path) or [(404, {"error": {"type": "invalid_request_error"}})]
            status, body = queue.pop(0) if len(queue) > 1 else queue[0]
            data = json.dumps(body).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def log_message(self, *_: object) -> None:
            pass

    httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=httpd.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
    thread.start()
    yield stripe, f"http://127.0.0.1:{httpd.server_address[1]}"
    httpd.shutdown()
    httpd.server_close()


def page(data: list[Any], has_more: bool, url: str) -> tuple[int, Any]:
    return 200, {"object": "list", "data": data, "has_more": has_more, "url": url}


def source(url: str, horizon_days: int = 3, timeout_s: float = 30.0) -> StripeReportSource:
    client = StripeClient("sk_test_local", api_base=url, timeout_ms=2000, connect_timeout_ms=500)
    return StripeReportSource("stripe", client, UTC_MIDNIGHT, horizon_days=horizon_days, timeout_s=timeout_s)


def two_payouts(stripe: Stripe) -> None:
    """Two automatic payouts over two pages; the first's transactions over two pages."""
    first, second = payout(id="po_a", amount=9_680 - 970), payout(id="po_b", amount=1_940)
    stripe.pages["/v1/payouts"] = [page([first], True, "/v1/payouts"), page([second], False, "/v1/payouts")]
    bt = "/v1/balance_transactions"
    stripe.pages[bt] = [
        page([txn("txn_1", "charge", 10_000, 320, charge())], True, bt),
        page([txn("txn_2", "refund", -1_000, -30, refund(), T0 + 5)], False, bt),
        page(
            [txn("txn_3", "charge", 2_000, 60, charge(id="ch_2", payment_intent="pi_2"), T0 + 9)], False, bt
        ),
    ]


def test_it_pages_through_payouts_and_their_balance_transactions(stripe_http: tuple[Stripe, str]) -> None:
    """Payouts of [day start, day end + horizon) and each payout's balance transactions with
    data.source expanded (the SDK encodes ``expand[]`` as ``expand[0]``), every page through
    starting_after, limit 100; the rows of both payouts come out, and the file parses."""
    stripe, url = stripe_http
    two_payouts(stripe)
    data = source(url).fetch("settlement", DAY)
    assert isinstance(data, bytes), data
    rows = parse_report("stripe", "settlement", DAY, data).settlement
    assert [(r.balance_transaction_id, r.payout_batch_id) for r in rows] == [
        ("txn_1", "po_a"),
        ("txn_2", "po_a"),
        ("txn_3", "po_b"),
    ]
    paths = [p for p, _ in stripe.received]
    assert paths == ["/v1/payouts", "/v1/payouts", *["/v1/balance_transactions"] * 3]
    first_payouts, second_payouts = stripe.received[0][1], stripe.received[1][1]
    start_s = int(UTC_MIDNIGHT.window_ms(DAY)[0] / 1000)
    assert first_payouts["created[gte]"] == [str(start_s)]
    assert first_payouts["created[lt]"] == [str(start_s + 86_400 + 3 * 86_400)]
    assert first_payouts["limit"] == ["100"] and "starting_after" not in first_payouts
    assert second_payouts["starting_after"] == ["po_a"]
    txns = [q for p, q in stripe.received if p == "/v1/balance_transactions"]
    assert [q["payout"] for q in txns] == [["po_a"], ["po_a"], ["po_b"]]
    assert all(q["expand[0]"] == ["data.source"] and q["limit"] == ["100"] for q in txns)
    assert txns[1]["starting_after"] == ["txn_1"] and "starting_after" not in txns[2]


@pytest.mark.parametrize("failing", ["/v1/payouts", "/v1/balance_transactions"])
@pytest.mark.parametrize("status", [401, 429, 500])
def test_a_failed_page_is_unavailable_after_one_request(
    stripe_http: tuple[Stripe, str], failing: str, status: int
) -> None:
    """Any error on either list (a bad key, rate limiting, a 5xx) makes the whole fetch Unavailable
    naming the call, after one request for that page (the SDK's retries are off)."""
    stripe, url = stripe_http
    two_payouts(stripe)
    stripe.pages[failing] = [(status, {"error": {"type": "api_error", "message": "x"}})]
    found = source(url).fetch("settlement", DAY)
    assert isinstance(found, Unavailable)
    assert f"http_{status}" in found.reason
    assert ("payouts" if failing == "/v1/payouts" else "balance transactions of po_a") in found.reason
    assert [p for p, _ in stripe.received].count(failing) == 1


def test_stripe_not_answering_is_unavailable() -> None:
    """Nobody listening: Unavailable (a connection error), never an empty file."""
    found = source("http://127.0.0.1:9").fetch("settlement", DAY)
    assert isinstance(found, Unavailable) and "connection_error" in found.reason


def test_a_refusal_of_the_normalization_is_unavailable_with_its_reason(
    stripe_http: tuple[Stripe, str],
) -> None:
    """A transaction the normalization does not understand makes the fetch Unavailable with the
    date and the reason."""
    stripe, url = stripe_http
    stripe.pages["/v1/payouts"] = [page([payout(id="po_a", amount=100)], False, "/v1/payouts")]
    bt = "/v1/balance_transactions"
    stripe.pages[bt] = [page([txn("txn_t", "transfer", 100, 0, "tr_1")], False, bt)]
    found = source(url).fetch("settlement", DAY)
    assert isinstance(found, Unavailable)
    assert "stripe settlement of 2026-11-30" in found.reason and "'transfer'" in found.reason


def test_a_manual_payout_is_refused_without_listing_its_transactions(stripe_http: tuple[Stripe, str]) -> None:
    """Stripe assigns no transactions to a manual payout: it is not listed, and it refuses the fetch."""
    stripe, url = stripe_http
    stripe.pages["/v1/payouts"] = [page([payout(automatic=False)], False, "/v1/payouts")]
    found = source(url).fetch("settlement", DAY)
    assert isinstance(found, Unavailable) and "manual payout" in found.reason
    assert [p for p, _ in stripe.received] == ["/v1/payouts"]


def test_the_bank_file_is_not_stripes_to_give() -> None:
    """The source serves the settlement only; asked for bank deposits it says where they come from."""
    s = source("http://127.0.0.1:9")
    assert s.report_types == ("settlement",)
    assert s.fetch("bank_deposits", DAY) == Unavailable(NO_BANK_FILE)
    assert "import-bank" in NO_BANK_FILE


class SlowStripe:
    """A client whose every list answers, while a fake clock moves 10 s a call."""

    def __init__(self) -> None:
        self.now_s = 0.0

    def clock(self) -> float:
        return self.now_s

    def list_payouts(self, created_gte_s: int, created_lt_s: int, *, pages_max: int) -> list[Any] | NoAnswer:
        self.now_s += 10
        return [payout(id=f"po_{n}") for n in range(5)]

    def list_balance_transactions(self, payout_id: str, *, pages_max: int) -> list[Any] | NoAnswer:
        self.now_s += 10
        return []


def test_a_fetch_past_its_time_bound_is_unavailable() -> None:
    """RECON_PSP_TIMEOUT_S bounds the whole fetch, not one request: past it, Unavailable."""
    slow = SlowStripe()
    s = StripeReportSource("stripe", slow, UTC_MIDNIGHT, horizon_days=3, timeout_s=25, clock_s=slow.clock)
    found = s.fetch("settlement", DAY)
    assert isinstance(found, Unavailable) and "longer than 25 s" in found.reason


def _settings(env: dict[str, str]) -> tuple[ReconSettings, RunSettings]:
    return load_settings(ReconSettings, env), load_settings(RunSettings, env)


def test_recon_provider_stripe_selects_stripe_with_the_key_from_a_file(tmp_path: Path) -> None:
    """RECON_PROVIDER=stripe and STRIPE_API_KEY_FILE (a mounted secret): the Stripe source, with
    the configured horizon; simpsp's report API stays the source for simpsp."""
    key = tmp_path / "stripe-key"
    key.write_text("rk_test_reconciler\n")
    env = {"DATABASE_URL": "postgresql://x/y", "RECON_PROVIDER": "stripe", "STRIPE_API_KEY_FILE": str(key)}
    settings, run = _settings({**env, "RECON_STRIPE_PAYOUT_HORIZON_DAYS": "5"})
    found = report_source(settings, run, env)
    assert isinstance(found, StripeReportSource) and found.provider == "stripe"
    assert found.report_types == ("settlement",)
    simpsp = {"DATABASE_URL": "postgresql://x/y", "RECON_PSP_API_URL": "http://psp"}
    assert report_source(*_settings(simpsp), simpsp) is not None
    assert report_source(*_settings({"DATABASE_URL": "postgresql://x/y"})) is None


@pytest.mark.parametrize(
    ("extra", "expected"),
    [
        ({}, "STRIPE_API_KEY or STRIPE_API_KEY_FILE is required"),
        ({"STRIPE_API_KEY": "sk_test_x", "RECON_PSP_API_URL": "http://psp"}, "RECON_PSP_API_URL"),
    ],
)
def test_stripe_without_its_key_or_with_simpsps_api_fails_fast(extra: dict[str, str], expected: str) -> None:
    """No Stripe key, or simpsp's report API configured beside RECON_PROVIDER=stripe: a
    SettingsError naming the variable, before anything is fetched."""
    env = {"DATABASE_URL": "postgresql://x/y", "RECON_PROVIDER": "stripe", **extra}
    with pytest.raises(SettingsError, match=expected):
        report_source(*_settings(env), env)
