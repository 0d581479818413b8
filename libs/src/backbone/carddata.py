"""Card data: finding it, refusing it, redacting it (DESIGN §9: tokens only, never a card number or a
security code). Pure; the one set of rules every edge of the product uses (HTTP middleware in
``backbone.http``, the consumer's contract check, the webhook gateway's redaction, the log formatter,
the command lines, the PSP simulator).

What counts as a card number (``card_spans``/``find_card_number``): anywhere in a text, 12 to 19
digits that pass the Luhn check and start with 2-6 (the major networks' ranges: Mastercard 2/5,
Amex/JCB/Diners 3, Visa 4, Discover/UnionPay/Maestro 6). The number is either one run of digits or
groups of 2-6 digits (the first of 3-6) separated by single spaces or dashes, as people type them
("4242 4242 4242 4242", "3782-822463-10005"); every run of consecutive groups is checked, so a number
written next to a card number ("4242... 12/30") does not hide it. Digits glued to letters are not a
card number (they are part of a hash or an identifier: ``a3f9123456789012``), and canonical UUIDs are
skipped; after an underscore they still count (``tok_4242424242424242`` is a card number dressed as
a token).

What counts as a card-data field (``is_card_field``/``find_card_field``): a key, at any depth, that
names a security code or raw card data (``cvv``, ``cvc``, ``card_number``, ``Card-Number``, ...),
whatever its value; names are compared lower-cased with everything but letters and digits removed.

Why not "any Luhn-valid 12-19 digits": a 13-digit millisecond timestamp, a hex id or a UUID passes
Luhn one time in ten when its digits line up; measured on random UUIDs, the naive rule refused 0.5 %
of honest requests. The rules above refuse none of 60 000 UUIDs, hex ids or prefixed ids (tested),
and still catch every test card number of the major networks, plain or grouped. Millisecond
timestamps start with 1 until May 2033; numbers inside our own events are therefore not scanned as
card numbers (``find_card_data(numbers=False)``), only text is.

A request that carries either is refused with 400 ``CARD_DATA_CODE`` before anything is parsed
further, stored or logged; where the product cannot refuse (a provider's signed webhook), the
values are replaced by ``REDACTED`` (``redact_document``).
"""

from __future__ import annotations

import functools
import json
import re
from collections.abc import Iterable, Iterator
from typing import Any, Final, Literal

CARD_DATA_CODE: Final = "card_data_forbidden"
CARD_DATA_MESSAGE: Final = "card numbers and security codes are never accepted: send a token"
REDACTED: Final = "[redacted]"

_UUID: Final = re.compile(r"[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}")
# A run of digits in groups separated by single spaces or dashes, not glued to letters or digits on
# either side, at least 12 characters long. Written to start with a digit class (the engine then skips
# to digits at C speed) and to give up at once on runs too short to hold a card number.
_DIGIT_RUN: Final = re.compile(
    r"[0-9](?<![0-9A-Za-z][0-9])(?=[0-9 -]{11})[0-9]*(?:[ -][0-9]+)*(?![0-9A-Za-z])"
)
_GROUP: Final = re.compile(r"[0-9]+")
# Twelve characters of a card number's alphabet in a row, starting with a digit: every card number
# ``_iter_spans`` can find is such a run, whatever surrounds it (see ``encoded_may_hold_card_number``).
_ENCODED_RUN: Final = re.compile(rb"[0-9][0-9 -]{11}")
# A W3C traceparent (ADR 0012): random hex ids whose all-digit span id (about 1 in 2000) could read as
# a card number; exactly this shape is not screened, anything else in the header is.
_TRACEPARENT: Final = re.compile(r"[0-9a-f]{2}-[0-9a-f]{32}-[0-9a-f]{16}-[0-9a-f]{2}")
_TWELVE_DIGITS: Final = re.compile(r"(?:[^0-9]*[0-9]){12}")  # linear: the two classes are disjoint
_NOT_NAME_CHARS: Final = re.compile(r"[^a-z0-9]")
_NAME_PUNCTUATION: Final = str.maketrans("", "", "_-. ")
_FIRST_DIGITS: Final = frozenset("23456")
GROUP_DIGITS_MIN: Final = 3
GROUP_DIGITS_MAX: Final = 6
PAN_DIGITS_MIN: Final = 12
PAN_DIGITS_MAX: Final = 19
FORBIDDEN_FIELDS: Final[frozenset[str]] = frozenset(
    {
        "cvv",
        "cvv2",
        "cvc",
        "cvc2",
        "cvn",
        "cid",
        "csc",
        "securitycode",
        "cardsecuritycode",
        "cardverificationcode",
        "cardverificationvalue",
        "cardnumber",
        "pan",
        "primaryaccountnumber",
        "track1",
        "track2",
        "trackdata",
        "pin",
        "pinblock",
    }
)  # compared after normalise_name: "Card-Number", "card_number" and "cardNumber" match
DEPTH_MAX: Final = 32

Where = Literal["path", "query", "header", "body"]


def luhn_valid(digits: str) -> bool:
    """The Luhn (mod 10) check over a string of ASCII digits."""
    total = 0
    for index, char in enumerate(reversed(digits)):
        value = ord(char) - 48
        if index % 2 == 1:
            value = value * 2 - 9 if value > 4 else value * 2
        total += value
    return total % 10 == 0


# -- text ---------------------------------------------------------------------------------------------


def card_spans(text: str) -> list[tuple[int, int]]:
    """The (start, end) offsets of every card number in ``text``, merged where they overlap."""
    spans = sorted(_iter_spans(text))
    merged: list[tuple[int, int]] = []
    for start, end in spans:
        if merged and start <= merged[-1][1]:
            merged[-1] = (merged[-1][0], max(end, merged[-1][1]))
        else:
            merged.append((start, end))
    return merged


def find_card_number(text: str) -> bool:
    """True if ``text`` contains something shaped like a card number (see the module docstring)."""
    return next(_iter_spans(text), None) is not None


def encoded_may_hold_card_number(encoded: bytes) -> bool:
    """False only when no text inside this Avro datum can hold a card number: a cheap screen, in C,
    before ``find_card_data(..., numbers=False)`` walks the decoded record in Python.

    Why it is exact enough: Avro writes a string or bytes value as its raw bytes (UTF-8 keeps ASCII
    digits, spaces and dashes as they are), and every card number the rules find is a run of at
    least 12 such characters starting with a digit. Without such a run in the encoded bytes, no value
    holds one. Integers are not covered (they are varints, not digits): a caller that scans numbers
    must not use this screen. A match proves nothing (UUIDs, varints): the full scan decides."""
    return _ENCODED_RUN.search(encoded) is not None


def redact_card_numbers(text: str) -> str:
    """``text`` with every card number replaced by ``REDACTED``; everything else unchanged."""
    spans = card_spans(text)
    if not spans:
        return text
    parts, position = [], 0
    for start, end in spans:
        parts += [text[position:start], REDACTED]
        position = end
    parts.append(text[position:])
    return "".join(parts)


def _iter_spans(text: str) -> Iterator[tuple[int, int]]:
    if _TWELVE_DIGITS.match(text) is None or _DIGIT_RUN.search(text) is None:
        return  # fewer than 12 digits, or no long run of them: the common case, decided in C
    # UUIDs become blanks of the same length, so offsets still point into ``text``.
    masked = _UUID.sub(lambda m: " " * len(m.group()), text)
    for run in _DIGIT_RUN.finditer(masked):
        if run.end() - run.start() < PAN_DIGITS_MIN:
            continue  # too short to hold 12 digits (most runs: ports, versions, amounts)
        groups = [(g.start() + run.start(), g.end() + run.start()) for g in _GROUP.finditer(run.group())]
        for index, (start, end) in enumerate(groups):
            if _card_shaped(masked[start:end]):
                yield start, end
            for last in _windows(masked, groups, index):
                yield start, groups[last][1]


def _windows(text: str, groups: list[tuple[int, int]], first: int) -> Iterator[int]:
    """Indexes of the last group of every run of at least two consecutive groups from ``first`` that
    reads as a card number: the first group of 3-6 digits, the next ones of 2-6 (a 14-digit Diners
    number typed by fours ends with a group of 2), at most 19 digits in all."""
    digits = ""
    for index in range(first, len(groups)):
        start, end = groups[index]
        low = GROUP_DIGITS_MIN if index == first else GROUP_DIGITS_MIN - 1
        if not low <= end - start <= GROUP_DIGITS_MAX or len(digits) + end - start > PAN_DIGITS_MAX:
            return
        digits += text[start:end]
        if index > first and _card_shaped(digits):
            yield index


def _card_shaped(digits: str) -> bool:
    return (
        PAN_DIGITS_MIN <= len(digits) <= PAN_DIGITS_MAX and digits[0] in _FIRST_DIGITS and luhn_valid(digits)
    )


# -- documents (parsed JSON, decoded Avro) -----------------------------------------------------------


def normalise_name(key: str) -> str:
    """Lower case, letters and digits only: ``Card-Number``, ``card_number`` and ``cardNumber`` meet."""
    name = key.lower().translate(_NAME_PUNCTUATION)
    return name if name.isalnum() else _NOT_NAME_CHARS.sub("", name)


@functools.lru_cache(maxsize=4096)  # names repeat (headers, JSON keys): decide each once
def is_card_field(key: str) -> bool:
    """True if ``key`` names a security code or raw card data."""
    return normalise_name(key) in FORBIDDEN_FIELDS


def find_card_field(document: Any, depth: int = 0) -> bool:
    """True if a key anywhere in the parsed JSON ``document`` names card data."""
    if depth > DEPTH_MAX:
        return True  # deeper than any honest request: refuse rather than recurse without bound
    if isinstance(document, dict):
        return any(is_card_field(str(k)) or find_card_field(v, depth + 1) for k, v in document.items())
    if isinstance(document, list | tuple):
        return any(find_card_field(item, depth + 1) for item in document)
    return False


def find_card_data(document: Any, *, numbers: bool = True, fields: bool = True) -> bool:
    """True if ``document`` (parsed JSON or a decoded record) carries card data anywhere: a card
    number in a key or a text value (bytes are read as Latin-1, so digits stay digits), a card-data
    field name (``fields``; unless its value is ``REDACTED``), or a card number as a number
    (``numbers``). Nesting deeper than ``DEPTH_MAX`` counts as card data (refuse, do not recurse).

    Every text is gathered first and scanned once, joined by newlines (which end a card number as
    any letter would): one pass over a request costs less than one per value."""
    texts: list[str] = []
    stack: list[tuple[Any, int]] = [(document, 0)]
    while stack:
        value, depth = stack.pop()
        if depth > DEPTH_MAX:
            return True
        if isinstance(value, dict):
            for key, item in value.items():
                name = str(key)
                if fields and item != REDACTED and is_card_field(name):
                    return True
                texts.append(name)
                stack.append((item, depth + 1))
        elif isinstance(value, list | tuple):
            stack.extend((item, depth + 1) for item in value)
        elif isinstance(value, str):
            texts.append(value)
        elif isinstance(value, bytes | bytearray | memoryview):
            texts.append(bytes(value).decode("latin-1"))
        elif numbers and isinstance(value, int | float) and not isinstance(value, bool):
            texts.append(_number_text(value))
    return find_card_number("\n".join(texts))


def _number_text(number: int | float) -> str:
    """A JSON number as the digits a card number would show: an integer, or a float with an
    integral value (``4242424242424242.0``, ``4.242424242424242e15``); other floats show none."""
    if isinstance(number, float):
        return str(int(number)) if number.is_integer() else ""
    return str(number)


def _card_shaped_number(number: int | float) -> bool:
    return find_card_number(_number_text(number))


def redact_document(document: Any, depth: int = 0) -> tuple[Any, int]:
    """A copy of the parsed JSON ``document`` with its card data replaced, and how many values were:
    card numbers inside text become ``REDACTED``, a card-shaped number becomes the text ``REDACTED``,
    the value of a card-data field becomes ``REDACTED`` whatever it was, and a card-shaped key is
    renamed ``[redacted]#n``. Anything deeper than ``DEPTH_MAX`` is replaced whole."""
    if depth > DEPTH_MAX:
        return REDACTED, 1
    if isinstance(document, str):
        redacted = redact_card_numbers(document)
        return redacted, int(redacted != document)
    if isinstance(document, int | float) and not isinstance(document, bool) and _card_shaped_number(document):
        return REDACTED, 1
    if isinstance(document, dict):
        copy: dict[str, Any] = {}
        count = 0
        for key, value in document.items():
            name = str(key)
            if find_card_number(name):
                name, count = f"{REDACTED}#{count + 1}", count + 1
            if is_card_field(name):
                copy[name], count = REDACTED, count + 1
                continue
            copy[name], found = redact_document(value, depth + 1)
            count += found
        return copy, count
    if isinstance(document, list):
        items = [redact_document(item, depth + 1) for item in document]
        return [item for item, _ in items], sum(found for _, found in items)
    return document, 0


def redact_text(text: str | None) -> str | None:
    """``text`` with its card numbers replaced (None stays None): what an audit row, a resolution
    note or any other text kept for people stores, a second line behind the edges' refusals."""
    return None if text is None else redact_card_numbers(text)


def redact_detail(detail: dict[str, Any]) -> dict[str, Any]:
    """A JSON detail kept for people (an audit row's), with its card data replaced."""
    redacted, found = redact_document(detail)
    return redacted if found and isinstance(redacted, dict) else detail


# -- requests -----------------------------------------------------------------------------------------


def find_in_text_pairs(pairs: Iterable[tuple[str, str]]) -> bool:
    """True if any name or value of these pairs (headers, query parameters) carries card data: a
    card number in either, or a name that is a card-data field. One scan over all of them."""
    texts: list[str] = []
    for name, value in pairs:
        if is_card_field(name):
            return True
        if name.lower() == "traceparent" and _TRACEPARENT.fullmatch(value):
            continue  # our own random hex ids, in the one shape W3C allows
        texts += (name, value)
    return find_card_number("\n".join(texts))


def find_in_body(body: bytes) -> bool:
    """True if a request body carries card data: a card number anywhere in its text (JSON or not), or,
    when it is JSON, a card-data field or a card number hidden in a string (``\\u0034\\u0032…``)."""
    if not body.strip():
        return False
    try:
        text = body.decode(json.detect_encoding(body))  # what json.loads would read
    except (UnicodeDecodeError, LookupError):
        text = body.decode("latin-1")  # not text: scan the bytes as they are
    if find_card_number(text):
        return True
    try:
        document = json.loads(text)
    except (ValueError, RecursionError):
        return False
    return find_card_data(document)


def find_in_request(
    path: str, query: Iterable[tuple[str, str]], headers: Iterable[tuple[str, str]], body: bytes | None
) -> Where | None:
    """Where a request carries card data, checked in this order (cheapest first), or None.

    ``path`` and ``query`` are the decoded forms (percent-escapes and ``+`` undone); ``body`` None
    means "not screened here" (the webhook gateway's own rule, ADR 0004)."""
    if find_card_number(path):
        return "path"
    if find_in_text_pairs(query):
        return "query"
    if find_in_text_pairs(headers):
        return "header"
    if body is not None and find_in_body(body):
        return "body"
    return None
