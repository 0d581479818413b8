"""Pytest plugin shared by every test tree (libs/ and services/*): the real stack as a session
fixture, and the ``integration`` marker on every test under an ``integration/`` folder.

Registered once in the repository's root ``conftest.py`` so a service's tests use the same
fixtures as the library's without importing another tree's conftest.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from backbone.testing import stack as test_stack
from backbone.testing import stripe_mock as test_stripe_mock


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if "/integration/" in str(item.path):
            item.add_marker(pytest.mark.integration)


@pytest.fixture(scope="session")
def stack() -> test_stack.Stack:
    """Kafka and PostgreSQL that answer (env, testcontainers or the local scripts), or a loud failure."""
    return test_stack.discover()


@pytest.fixture(scope="session")
def stripe_mock(tmp_path_factory: pytest.TempPathFactory) -> Iterator[test_stripe_mock.StripeMock]:
    """Stripe's official mock server on a free port for the session (built once, cached); the
    tests are skipped, saying why, only when the binary cannot be built on this machine."""
    log_path = tmp_path_factory.mktemp("stripe-mock") / "stripe-mock.log"
    try:
        with test_stripe_mock.running(log_path) as mock:
            yield mock
    except test_stripe_mock.StripeMockUnavailable as exc:
        pytest.skip(f"stripe-mock unavailable: {exc}")
