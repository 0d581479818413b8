"""Pytest plugin shared by every test tree (libs/ and services/*): the real stack as a session
fixture, and the ``integration`` marker on every test under an ``integration/`` folder.

Registered once in the repository's root ``conftest.py`` so a service's tests use the same
fixtures as the library's without importing another tree's conftest.
"""

from __future__ import annotations

import pytest

from backbone.testing import stack as test_stack


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if "/integration/" in str(item.path):
            item.add_marker(pytest.mark.integration)


@pytest.fixture(scope="session")
def stack() -> test_stack.Stack:
    """Kafka and PostgreSQL that answer (env, testcontainers or the local scripts), or a loud failure."""
    return test_stack.discover()
