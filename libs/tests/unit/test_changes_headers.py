"""How ``backbone.changes`` reads a client's ``Prefer: wait`` (RFC 7240): among other preferences,
capped at ``WAIT_MAX_S``, and ignored (no wait) when it cannot be read; and the ETag is the digest
of the exact bytes, so any change of the body changes it."""

from __future__ import annotations

import pytest
from aiohttp.test_utils import make_mocked_request
from backbone.changes import WAIT_MAX_S, etag_of, wanted_wait_s


@pytest.mark.parametrize(
    ("prefer", "seconds"),
    [
        (None, 0.0),
        ("wait=5", 5.0),
        ("respond-async, wait=2.5", 2.5),
        ("return=minimal; wait=3", 3.0),
        ('wait="4"', 4.0),
        ("WAIT = 6", 6.0),
        ("wait=100000", WAIT_MAX_S),
        ("wait=abc", 0.0),
        ("wait=-3", 0.0),
        ("nowait=5", 0.0),
    ],
)
def test_prefer_wait_is_read_capped_or_ignored(prefer: str | None, seconds: float) -> None:
    """Each header gives the wait shown: a readable one capped, anything else no wait at all."""
    headers = {} if prefer is None else {"Prefer": prefer}
    assert wanted_wait_s(make_mocked_request("GET", "/x", headers=headers)) == seconds


def test_the_tag_changes_with_any_byte_and_is_quoted() -> None:
    """Two bodies that differ in one byte have different tags; a tag is a quoted strong ETag."""
    one, two = etag_of(b'{"status":"CREATED"}'), etag_of(b'{"status":"CREATEd"}')
    assert one != two and one.startswith('"') and one.endswith('"') and not one.startswith("W/")
