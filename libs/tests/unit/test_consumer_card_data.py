"""The consumer's contract check refuses card data on every topic (backbone.consumer.messages), for
messages that come from upstream services above all: a command carrying a card number in any field
(text or number), its key or a Kafka header never reaches a handler; its dead letter keeps a redacted
re-encoding, never the digits; our own events are scanned as text only, so their millisecond
timestamps and tickets are never mistaken for card numbers; undecodable bytes are kept masked."""

from __future__ import annotations

from typing import Any

from backbone.avro import AvroCodec, DecodedEvent, SchemaCatalogue
from backbone.avro.envelope import new_envelope
from backbone.consumer.messages import Polled, Rejection, dead_letter_for, decode_inbound
from backbone.kafka.topics import TopicCatalogue

CODEC = AvroCodec(SchemaCatalogue.default())
TOPICS = TopicCatalogue.default()
PAN = "4000056655665556"


def _create(**fields: Any) -> tuple[bytes, dict[str, Any]]:
    body = {
        "merchant_id": "m1", "idempotency_key": "k-1", "amount_minor": 1000, "currency": "EUR",
        "payment_method_token": "pm_tok_1", "capture_method": "manual", "deposit_reference": None, **fields,
    }  # fmt: skip  # packed: a few items a line read better than one each
    envelope = new_envelope("CreatePayment", "pay_1", "broker-platform", schema_version=1, occurred_at_ms=1)
    return CODEC.encode("CreatePayment", {"envelope": envelope, **body}), body


def _decode(
    value: bytes, key: bytes = b"pay_1", headers: dict[str, str] | None = None
) -> DecodedEvent | Rejection:
    return decode_inbound(CODEC, TOPICS, "payments.commands", key, value, lambda: headers or {})


def test_an_honest_command_decodes() -> None:
    """No card data: the event, as before."""
    value, _ = _create()
    assert isinstance(_decode(value), DecodedEvent)


def test_a_command_with_card_data_anywhere_is_refused_and_kept_redacted() -> None:
    """A card number in a text field, grouped in another, as the amount, or in a header: refused
    before any other check; the kept payload decodes, with the numbers replaced and nothing else."""
    for fields, headers in (
        ({"payment_method_token": PAN}, None),
        ({"idempotency_key": "4000 0566 5566 5556"}, None),
        ({"amount_minor": int(PAN)}, None),
        ({}, {"x-note": f"card {PAN}"}),
    ):
        value, _ = _create(**fields)
        rejection = _decode(value, headers=headers)
        assert isinstance(rejection, Rejection) and rejection.error_class == "card_data_forbidden"
        assert rejection.redacted is not None
        key, payload = rejection.redacted
        assert key == b"pay_1" and payload is not None and PAN.encode() not in payload
        kept = CODEC.decode(payload).body
        assert kept["merchant_id"] == "m1" and kept["currency"] == "EUR"
        assert kept["amount_minor"] in (1000, 0)
        assert "4000" not in kept["payment_method_token"] + kept["idempotency_key"]
        message = Polled("payments.commands", 0, 7, b"pay_1", value, [("x-note", f"card {PAN}")])
        letter = dead_letter_for(
            message, rejection.error_class, rejection.reason, rejection.event, 1, rejection.redacted
        )
        assert letter.payload == payload and letter.headers == {"x-note": "card [redacted]"}


def test_a_card_number_as_the_key_is_refused() -> None:
    """The Kafka key (the payment id) is data too."""
    envelope = new_envelope("CreatePayment", PAN, "broker-platform", schema_version=1, occurred_at_ms=1)
    _, body = _create()
    value = CODEC.encode("CreatePayment", {"envelope": envelope, **body})
    rejection = decode_inbound(CODEC, TOPICS, "payments.commands", PAN.encode(), value)
    assert isinstance(rejection, Rejection) and rejection.redacted is not None
    assert rejection.redacted[0] == b"[redacted]" and PAN.encode() not in (rejection.redacted[1] or b"")


def test_our_events_are_scanned_as_text_only() -> None:
    """An event of ours whose integers look like card numbers (a ticket, a timestamp after 2033)
    is not refused; a card number in one of its text fields is."""
    envelope = new_envelope(
        "Mt5Credited", "pay_1", "mt5_credit", schema_version=CODEC.catalogue.latest_version("Mt5Credited"),
        occurred_at_ms=int(PAN),
    )  # fmt: skip  # packed: a few items a line read better than one each
    entry = CODEC.catalogue.entry("Mt5Credited")
    body: dict[str, Any] = {"envelope": envelope}
    for field in entry.schema["fields"][1:]:
        kind = field["type"] if isinstance(field["type"], str) else field["type"][-1]
        body[field["name"]] = {"long": int(PAN), "int": 5001, "string": "dep_1", "boolean": False}.get(kind)
        if body[field["name"]] is None and "default" in field:
            body[field["name"]] = field["default"]
    value = CODEC.encode("Mt5Credited", body)
    assert isinstance(decode_inbound(CODEC, TOPICS, "mt5.credit-events", b"pay_1", value), DecodedEvent)
    texts = [f["name"] for f in entry.schema["fields"][1:] if f["type"] == "string"]
    value = CODEC.encode("Mt5Credited", {**body, texts[0]: f"ref {PAN}"})
    assert isinstance(decode_inbound(CODEC, TOPICS, "mt5.credit-events", b"pay_1", value), Rejection)


def test_undecodable_bytes_are_kept_masked() -> None:
    """Bytes that are not a message at all: dead-lettered as before, card-shaped digits masked."""
    message = Polled("payments.commands", 0, 3, b"pay_1", f"garbage {PAN} garbage".encode(), None)
    rejection = _decode(message.value or b"")
    assert isinstance(rejection, Rejection) and rejection.error_class != "card_data_forbidden"
    letter = dead_letter_for(message, rejection.error_class, rejection.reason)
    assert letter.payload == b"garbage [redacted] garbage"


def test_a_card_number_in_any_text_field_of_an_event_is_refused() -> None:
    """The encoded-bytes screen in front of the event scan lets no card number through: one in any
    text field of our own event, plain or grouped, is still refused."""
    entry = CODEC.catalogue.entry("Mt5Credited")
    envelope = new_envelope(
        "Mt5Credited", "pay_1", "mt5_credit", schema_version=CODEC.catalogue.latest_version("Mt5Credited"),
        occurred_at_ms=1,
    )  # fmt: skip  # packed: a few items a line read better than one each
    body: dict[str, Any] = {"envelope": envelope}
    for field in entry.schema["fields"][1:]:
        kind = field["type"] if isinstance(field["type"], str) else field["type"][-1]
        body[field["name"]] = {"long": 7, "int": 5001, "string": "dep_1", "boolean": False}.get(kind)
        if body[field["name"]] is None and "default" in field:
            body[field["name"]] = field["default"]
    assert isinstance(
        decode_inbound(CODEC, TOPICS, "mt5.credit-events", b"pay_1", CODEC.encode("Mt5Credited", body)),
        DecodedEvent,
    )
    texts = [f["name"] for f in entry.schema["fields"][1:] if f["type"] == "string"]
    for name in texts:
        for shape in (PAN, "4000 0566 5566 5556", "4000-0566-5566-5556"):
            value = CODEC.encode("Mt5Credited", {**body, name: f"x {shape}"})
            rejection = decode_inbound(CODEC, TOPICS, "mt5.credit-events", b"pay_1", value)
            assert isinstance(rejection, Rejection) and rejection.error_class == "card_data_forbidden", name
