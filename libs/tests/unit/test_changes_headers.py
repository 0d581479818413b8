"""How ``backbone.changes`` reads a client's ``Prefer: wait`` (RFC 7240): among other preferences,
capped at ``WAIT_MAX_S``, and ignored (no wait) when it cannot be read; and the ETag is the digest
of the exact bytes, so any change of the body changes it, and a create's tag is its first read's."""

from __future__ import annotations

import pytest
from aiohttp import web
from aiohttp.test_utils import make_mocked_request
from backbone.changes import WAIT_MAX_S, etag_of, read_tag, wanted_wait_s


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


def test_a_creates_tag_is_the_one_its_status_read_sends() -> None:
    """``read_tag`` of a representation equals the ETag ``conditional_read`` gives the body that
    ``web.json_response`` writes for it (unicode and nesting included), so a create's tag matches
    its record's first read."""
    view = {"deposit_reference": "dep_é1", "amount_minor": 100, "credits": [], "nested": {"a": [1, None]}}
    assert read_tag(view) == etag_of(web.json_response(view).body)  # type: ignore[arg-type]
