"""Card data in a verified webhook body: the one input the product must take in and cannot refuse
(ADR 0004). Refusing a provider's webhook loses it; storing it as sent stores card data. So:

- a body without card data is kept byte for byte, as verified (``Clean``);
- a body with card data (a card number in any key or text value, a card-shaped number, a card-data
  field such as ``cvc``; ``backbone.carddata``'s rules) is parsed, every such value replaced by
  ``[redacted]``, and written back as compact JSON (``Redacted``): that is what is stored, digested
  and published, with a flag saying so. The bytes as signed are never stored, digested or logged;
- if the event's own identifiers (id, type, the PSP's payment id) carry card data, or the redacted
  body still reads as card data, the body cannot be made safe without losing what makes it a
  receipt (``Unredactable``): it is refused, nothing is stored, and the PSP's retries meet the same
  answer (payment-state's status lookups still learn the payment's outcome).

Pure: bytes in, a closed result out.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Final

from backbone.carddata import find_in_body, redact_document

from webhook_gateway.domain.events import ParsedEvent, parse_event

UNREDACTABLE: Final = "card_data_unredactable"


@dataclass(frozen=True, slots=True)
class Clean:
    """No card data: keep the body as verified."""


@dataclass(frozen=True, slots=True)
class Redacted:
    body: bytes  # compact JSON, card data replaced by "[redacted]"
    values: int  # how many values were replaced


@dataclass(frozen=True, slots=True)
class Unredactable:
    """Card data where the receipt cannot do without it (the event's identifiers)."""


BodyScreening = Clean | Redacted | Unredactable


def screen_body(raw_body: bytes, event: ParsedEvent) -> BodyScreening:
    """Decide what of a verified, readable body (``event`` is ``parse_event(raw_body)``) is stored."""
    if not find_in_body(raw_body):
        return Clean()
    document = json.loads(raw_body)  # parse_event already read it as a JSON object
    redacted, values = redact_document(document)
    body = json.dumps(redacted, ensure_ascii=False, separators=(",", ":")).encode()
    if parse_event(body) != event or find_in_body(body):
        return Unredactable()
    return Redacted(body, values)
