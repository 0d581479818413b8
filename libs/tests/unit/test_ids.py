"""Unit tests of backbone.ids: the UUIDv7 bit layout, time ordering, prefixed ids and validators.

Event ids are dedup keys and index keys: these tests prove the layout other systems will parse
(version, variant, timestamp), that ids sort by time across milliseconds, and that a prefixed id
of one kind is never accepted as another kind.
"""

from __future__ import annotations

import re
import time
import uuid
from collections.abc import Callable

import pytest
from backbone import ids
from backbone.avro.envelope import is_canonical_uuid
from backbone.ids import is_prefixed_id, is_uuid, new_event_id, new_id, uuid7

CROCKFORD = "0123456789abcdefghjkmnpqrstvwxyz"
NOW_MS = 1_767_225_600_123  # 2026-01-01T00:00:00.123Z


def _crockford_to_int(text: str) -> int:
    value = 0
    for char in text:
        value = value * 32 + CROCKFORD.index(char)
    return value


# --- uuid7 --------------------------------------------------------------------------------------


@pytest.mark.parametrize("now_ms", [0, 1, NOW_MS, 2**48 - 1])
def test_uuid7_layout(now_ms: int) -> None:
    """Version 7, RFC 4122 variant, and the top 48 bits are exactly the given Unix milliseconds."""
    value = uuid7(now_ms=now_ms)
    assert value.version == 7
    assert value.variant == uuid.RFC_4122
    assert value.int >> 80 == now_ms
    assert (value.int >> 76) & 0xF == 7
    assert (value.int >> 62) & 0b11 == 0b10


def test_uuid7_without_now_uses_the_wall_clock() -> None:
    """With no now_ms, the timestamp is the current time in milliseconds."""
    before_ms = time.time_ns() // 1_000_000
    value = uuid7()
    after_ms = time.time_ns() // 1_000_000
    assert before_ms <= value.int >> 80 <= after_ms


@pytest.mark.parametrize("now_ms", [-1, 2**48, 2**63])
def test_uuid7_refuses_timestamps_outside_48_bits(now_ms: int) -> None:
    """A timestamp that does not fit 48 bits raises instead of wrapping into the version bits."""
    with pytest.raises(ValueError, match="timestamp out of range"):
        uuid7(now_ms=now_ms)


def test_uuid7_random_bits_differ_within_one_millisecond() -> None:
    """Ids minted in the same millisecond are still distinct (74 random bits)."""
    values = {uuid7(now_ms=NOW_MS) for _ in range(1_000)}
    assert len(values) == 1_000


def test_uuid7_orders_by_millisecond_as_uuid_and_as_text() -> None:
    """An id from a later millisecond sorts after every id of an earlier one, both as a UUID and
    in its canonical text (what Postgres indexes and consumers compare)."""
    for offset_ms in range(200):
        earlier, later = uuid7(now_ms=NOW_MS + offset_ms), uuid7(now_ms=NOW_MS + offset_ms + 1)
        assert earlier < later
        assert str(earlier) < str(later)
    minted = [uuid7(now_ms=NOW_MS + i // 3) for i in range(300)]
    assert [v.int >> 80 for v in sorted(minted)] == [v.int >> 80 for v in minted]


def test_new_event_id_is_a_canonical_lowercase_uuid7() -> None:
    """new_event_id passes the envelope's own canonical-UUID rule and is a version 7 UUID."""
    event_id = new_event_id()
    assert is_canonical_uuid(event_id)
    assert uuid.UUID(event_id).version == 7
    assert new_event_id() != event_id


# --- prefixed ids -------------------------------------------------------------------------------


@pytest.mark.parametrize("prefix", ["pay", "dep", "op", "a1", "abcdefghijkl"])
def test_new_id_format(prefix: str) -> None:
    """``<prefix>_`` then 26 lowercase Crockford base-32 characters that encode a UUIDv7."""
    value = new_id(prefix)
    assert re.fullmatch(rf"{prefix}_[{CROCKFORD}]{{26}}", value)
    assert is_prefixed_id(value, prefix)
    decoded = uuid.UUID(int=_crockford_to_int(value.split("_", 1)[1]))
    assert decoded.version == 7
    assert decoded.variant == uuid.RFC_4122


@pytest.mark.parametrize("prefix", ["", "p", "Pay", "1pay", "pay_", "pa-y", "abcdefghijklm", "pay "])
def test_new_id_rejects_bad_prefixes(prefix: str) -> None:
    """Prefixes must be 2-12 lowercase letters/digits starting with a letter; the error quotes it."""
    with pytest.raises(ValueError, match="bad id prefix"):
        new_id(prefix)


def test_new_ids_are_unique_and_sort_by_time(monkeypatch: pytest.MonkeyPatch) -> None:
    """Prefixed ids of later milliseconds sort later as text (the base-32 digits are big-endian)."""
    real_uuid7 = ids.uuid7
    clock_ms = iter(range(NOW_MS, NOW_MS + 100))
    monkeypatch.setattr(ids, "uuid7", lambda: real_uuid7(now_ms=next(clock_ms)))
    minted = [new_id("pay") for _ in range(100)]
    assert minted == sorted(minted)
    assert len(set(minted)) == 100


def test_is_prefixed_id_rejects_other_prefixes() -> None:
    """A payment id is not a deposit id, nor an id of a prefix that merely starts the same way."""
    value = new_id("pay")
    assert not is_prefixed_id(value, "dep")
    assert not is_prefixed_id(value, "pa")
    assert not is_prefixed_id(value, "payx")
    assert not is_prefixed_id(value, "")


@pytest.mark.parametrize(
    "mutate",
    [
        lambda body: body[:-1],  # 25 characters
        lambda body: body + "0",  # 27 characters
        lambda body: body[:-1] + "i",  # Crockford excludes i, l, o, u
        lambda body: body[:-1] + "l",
        lambda body: body[:-1] + "o",
        lambda body: body[:-1] + "u",
        lambda body: body.upper(),
        lambda body: body[:-1] + "-",
        lambda body: body[:-1] + " ",
    ],
    ids=["short", "long", "i", "l", "o", "u", "upper", "hyphen", "space"],
)
def test_is_prefixed_id_rejects_bad_bodies(mutate: Callable[[str], str]) -> None:
    """A wrong length or a character outside lowercase Crockford base-32 is not a valid id."""
    body = new_id("pay").split("_", 1)[1]
    assert is_prefixed_id("pay_" + body, "pay")
    assert not is_prefixed_id("pay_" + mutate(body), "pay")


@pytest.mark.parametrize(
    "value", ["pay" + "0" * 26, "pay-" + "0" * 26, "pay__" + "0" * 26, " pay_" + "0" * 26, ""]
)
def test_is_prefixed_id_rejects_bad_separators(value: str) -> None:
    """Exactly one underscore separates prefix and body; nothing may surround them."""
    assert not is_prefixed_id(value, "pay")


# --- is_uuid -------------------------------------------------------------------------------------


def test_is_uuid_accepts_only_the_canonical_lowercase_form() -> None:
    """Lowercase hex-with-hyphens UUIDs (any version) are accepted; the uppercase spelling of the
    same UUID is refused, so one event can never have two textual ids."""
    value = str(uuid.uuid4())
    assert is_uuid(value)
    assert not is_uuid(value.upper())
    assert is_uuid(new_event_id())


@pytest.mark.parametrize(
    "value",
    [
        "",
        "not-a-uuid",
        uuid.UUID(int=0).hex,  # 32 hex digits, no hyphens
        "{" + str(uuid.UUID(int=1)) + "}",
        "zzzzzzzz-zzzz-zzzz-zzzz-zzzzzzzzzzzz",
        "12345678-1234-1234-1234-1234567890abc",
    ],
)
def test_is_uuid_rejects_other_text(value: str) -> None:
    """Text of the wrong length or with non-hex characters is not a UUID."""
    assert not is_uuid(value)


@pytest.mark.parametrize(
    "value",
    ["----" + "12345678123456781234567812345678", "urn:" + "12345678123456781234567812345678"],
    ids=["hyphens-moved", "urn-prefix"],
)
def test_is_uuid_rejects_non_canonical_spellings(value: str) -> None:
    """Only the 8-4-4-4-12 form is canonical: another spelling of the same UUID would be a
    different dedup key, so it must be refused."""
    assert not is_uuid(value)
