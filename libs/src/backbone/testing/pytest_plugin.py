"""Pytest plugin shared by every test tree (libs/ and services/*): the real stack as a session
fixture, the ``integration`` marker on every test under an ``integration/`` folder, and the suite's
budget and hygiene, checked on every run.

Registered once in the repository's root ``conftest.py`` so a service's tests use the same
fixtures as the library's without importing another tree's conftest.

**Tiers.** A test marked ``long`` (a drill's schedule replayed, scale-out under kills) belongs to
``make test-long`` and is deselected from ``make test`` by its ``-m "not long"``.

**The budget** (issue 35): a test of ``make test`` may take ``TEST_BUDGET_TEST_S`` (60 s, its
setup, call and teardown together) and the whole run ``TEST_BUDGET_SUITE_S`` (900 s); a long test
``TEST_BUDGET_LONG_S`` (300 s). Past either, the run fails after its report, naming each test and
its time, so that the suite's cost is as visible as a lint error. With pytest-xdist the controller
counts the workers' reports.

**Leftovers.** Every process a test starts inherits ``BACKBONE_TEST_RUN=<this run's id>``; when the
run ends (after every fixture and worker), a process of this run that is still alive is named and
killed, and the run fails: nothing one run leaves behind (a stripe-mock, a broker, a database) may
change another's result.
"""

from __future__ import annotations

import contextlib
import os
import signal
import time
import uuid
from collections import defaultdict
from collections.abc import Iterator
from pathlib import Path
from typing import Final

import pytest

from backbone import tracing
from backbone.testing import stack as test_stack
from backbone.testing import stripe_mock as test_stripe_mock

RUN_ENV: Final = test_stack.RUN_ENV
LONG: Final = "long"
_RUN_INPUT: Final = "backbone_test_run"


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", f"{LONG}: the long tier (make test-long), not make test")
    worker_input = getattr(config, "workerinput", None)
    if worker_input is not None:  # an xdist worker: what it starts carries the controller's run id
        os.environ[RUN_ENV] = worker_input[_RUN_INPUT]
        return
    # /proc/<pid>/environ keeps a process's environment as it was started, so this process (and
    # each xdist worker, given the id in its input) never reads as its own run's leftover.
    os.environ[RUN_ENV] = uuid.uuid4().hex
    config.pluginmanager.register(_Judge(config), "backbone-test-judge")


@pytest.hookimpl(optionalhook=True)
def pytest_configure_node(node: object) -> None:
    """pytest-xdist: each worker learns the run's id (``_Judge``'s leftovers)."""
    node.workerinput[_RUN_INPUT] = os.environ[RUN_ENV]  # type: ignore[attr-defined]


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if "/integration/" in str(item.path):
            item.add_marker(pytest.mark.integration)


class _Judge:
    """The run's budget and leftovers, judged once by the controller (see the module docstring)."""

    def __init__(self, config: pytest.Config) -> None:
        self._config = config
        self._times: dict[str, float] = defaultdict(float)
        self._long: set[str] = set()
        self._started = time.monotonic()

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        """Each phase's time, summed per test (with xdist, the workers' reports too)."""
        self._times[report.nodeid] += report.duration
        if LONG in report.keywords:
            self._long.add(report.nodeid)

    @pytest.hookimpl(trylast=True)  # after the fixtures' teardown (and pytest-xdist's workers)
    def pytest_sessionfinish(self, session: pytest.Session) -> None:
        found = self._over_budget() + _leftovers()
        reporter = self._config.pluginmanager.get_plugin("terminalreporter")
        if reporter is not None and found:
            reporter.ensure_newline()
            for line in found:
                reporter.write_line(line, red=True)
        if found:
            session.exitstatus = pytest.ExitCode.TESTS_FAILED

    def _over_budget(self) -> list[str]:
        test_s, long_s = _budget("TEST_BUDGET_TEST_S", 60), _budget("TEST_BUDGET_LONG_S", 300)
        slowest = sorted(self._times.items(), key=lambda kv: -kv[1])
        found = [
            f"budget: {nodeid} took {took_s:.1f} s (setup, call and teardown), over {limit:.0f} s"
            for nodeid, took_s in slowest
            if took_s > (limit := long_s if nodeid in self._long else test_s)
        ]
        whole_s, suite_s = time.monotonic() - self._started, _budget("TEST_BUDGET_SUITE_S", 900)
        if whole_s > suite_s and not self._long:
            named = ", ".join(f"{nodeid} {took_s:.0f} s" for nodeid, took_s in slowest[:5])
            found.append(f"budget: the run took {whole_s:.0f} s, over {suite_s:.0f} s; slowest: {named}")
        return found


def _budget(name: str, default_s: float) -> float:
    return float(os.environ.get(name, default_s))


def _leftovers() -> list[str]:
    """Processes of this run still alive (their environment names it), killed and named."""
    marker = f"{RUN_ENV}={os.environ.get(RUN_ENV, '-')}".encode()
    found = []
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            if marker not in (proc / "environ").read_bytes().split(b"\0"):
                continue
            command = (proc / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue  # gone meanwhile, or not ours to read
        found.append(f"leftover: pid {proc.name} of this test run is still alive (killed): {command[:200]}")
        with contextlib.suppress(OSError):
            os.kill(int(proc.name), signal.SIGKILL)
    return found


@pytest.fixture(autouse=True)
def _no_payment_bound() -> Iterator[None]:
    """Each test starts and ends with no payment id bound to its thread: a test that calls a store
    outside any request or batch (``tracing.set_payment``) left one on every later log line and span
    of its process, and a later test of the same xdist worker failed on it."""
    token = tracing.payment_scope(None)
    yield
    tracing.end_payment_scope(token)


@pytest.fixture(scope="session")
def stack() -> test_stack.Stack:
    """Kafka and PostgreSQL that answer (env, testcontainers or the local scripts), or a loud failure."""
    return test_stack.discover()


@pytest.fixture(scope="session")
def stripe_mock(tmp_path_factory: pytest.TempPathFactory) -> Iterator[test_stripe_mock.StripeMock]:
    """Stripe's official mock server on a free port for the session (built once, cached); a test
    that needs it fails, saying why, when the binary cannot be built: CI installs it
    (``bash deploy/stripe-mock/stripe-mock.sh install``), and a skip would hide the contract."""
    log_path = tmp_path_factory.mktemp("stripe-mock") / "stripe-mock.log"
    try:
        with test_stripe_mock.running(log_path) as mock:
            yield mock
    except test_stripe_mock.StripeMockUnavailable as exc:
        pytest.fail(f"stripe-mock unavailable: {exc} (make stripe-mock)")
