"""The real inputs: the PSP simulator's report runs on its authenticated /v1 API, read by the
reconciler's ``PspReportSource`` and accepted by its strict parser (the same bytes as the control
API's files); a wrong key or an unreachable PSP is ``Unavailable``, never an empty report."""

from __future__ import annotations

import datetime as dt
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest
from backbone.ids import new_id
from backbone.psp import Applied
from backbone.testing import databases
from backbone.testing.stack import Stack
from psp_sim.testing import API_KEY, SimProcess
from reconciler.adapters.psp_reports import PspReportSource
from reconciler.application.ports import Unavailable
from reconciler.domain.reports import parse_report

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def psp(stack: Stack, tmp_path_factory: pytest.TempPathFactory) -> Iterator[SimProcess]:
    db_url = databases.create_database(stack.pg_admin_url, [], prefix="pspsim")
    sim = SimProcess(db_url, Path(tmp_path_factory.mktemp("psp_recon"))).start()
    yield sim
    sim.kill()
    databases.drop_database(stack.pg_admin_url, db_url)


def _capture(psp: SimProcess, amount: int) -> str:
    with psp.client() as client:
        created = client.create_intent(
            new_id("op"),
            amount_minor=amount,
            currency="EUR",
            reference=new_id("pay"),
            payment_method="pm_card_visa",
            confirm=True,
        )
        assert isinstance(created, Applied)
        assert isinstance(client.capture_intent(new_id("op"), created.value.id), Applied)
        return created.value.id


def test_report_runs_give_the_files_the_parser_accepts(psp: SimProcess) -> None:
    """Two captures; the settlement report and the bank file fetched through report runs parse
    strictly, hold both charges, and are byte for byte the control API's files."""
    intents = {_capture(psp, 1_000), _capture(psp, 2_500)}
    day = dt.datetime.now(dt.UTC).date()
    source = PspReportSource("simpsp", psp.api_url, API_KEY, 10.0)
    settlement = source.fetch("settlement", day)
    bank = source.fetch("bank_deposits", day)
    assert isinstance(settlement, bytes) and isinstance(bank, bytes)
    report = parse_report("simpsp", "settlement", day, settlement)
    assert intents <= {r.payment_intent_id for r in report.settlement}
    assert parse_report("simpsp", "bank_deposits", day, bank).bank
    with urllib.request.urlopen(f"{psp.control_url}/control/reports/settlement?date={day}") as r:
        assert r.read() == settlement


def test_wrong_key_or_no_psp_is_unavailable(psp: SimProcess) -> None:
    """A refused key and a closed port: Unavailable with the reason."""
    day = dt.datetime.now(dt.UTC).date()
    refused = PspReportSource("simpsp", psp.api_url, "sk_wrong", 5.0).fetch("settlement", day)
    assert refused == Unavailable("report run: http_401")
    down = PspReportSource("simpsp", "http://127.0.0.1:9", API_KEY, 2.0).fetch("settlement", day)
    assert isinstance(down, Unavailable)
