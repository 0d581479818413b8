"""Request bodies: the one reader every HTTP process of the product uses (DESIGN §9, ADR 0004).

A body is read and parsed once, before any handler sees it (``backbone.http``'s guard, or a
simulator's own middleware), and refused with a 4xx that changes nothing when it is:

- larger than the application's ``client_max_size``: 413 ``body_too_large``, read no further;
- of a media type the application does not take: 415 ``unsupported_media_type`` (a JSON API
  refuses ``text/plain`` and forms, which a browser may send across origins without a preflight);
- JSON that does not parse: 400 ``malformed_json``; nested deeper than ``JSON_DEPTH_MAX``: 400
  ``body_too_deep`` (``json.loads`` recurses, and at ~1000 levels raises ``RecursionError``);
- a form that does not parse (not in its charset, a multipart body without its boundary, a file
  part, too many fields): 400 ``malformed_form``; text that is not in its charset: 400
  ``malformed_text``;
- text of any kind holding a NUL character (``\u0000`` in JSON): 400 ``nul_character``, since
  PostgreSQL's ``text`` and ``jsonb`` cannot store one and a handler would fail on its first write.

What was parsed stays on the request, so the card-data guard screens exactly what the handler
reads, decoded (a form's ``card+4242+4242…`` is ``card 4242 4242…`` to both), and no handler
parses a body again: ``json_body``, ``form_body`` and ``text_body`` return it. An empty body is
taken whatever its media type.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Final, Literal
from urllib.parse import parse_qsl

from aiohttp import web
from multidict import MultiDict, MultiDictProxy

JSON: Final = "application/json"
URLENCODED: Final = "application/x-www-form-urlencoded"
MULTIPART: Final = "multipart/form-data"
CSV: Final = "text/csv"
JSON_TYPES: Final = frozenset({JSON})
FORM_TYPES: Final = frozenset({URLENCODED, MULTIPART})
JSON_DEPTH_MAX: Final = 32  # deeper than any request of ours; the card-data scan's own bound
FORM_FIELDS_MAX: Final = 200
_FORM_METHODS: Final = frozenset({"POST", "PUT", "PATCH"})  # where aiohttp parses a multipart form

Kind = Literal["empty", "json", "form", "text"]


@dataclass(frozen=True, slots=True)
class Body:
    """A request's body as the reader parsed it; ``raw`` is empty for a multipart body (its parts
    are in ``form``)."""

    kind: Kind
    raw: bytes = b""
    text: str = ""
    document: object = None
    form: tuple[tuple[str, str], ...] = field(default=())


@dataclass(frozen=True, slots=True)
class Refusal:
    """Why a body is refused, as the HTTP answer says it."""

    status: int
    code: str
    message: str


EMPTY: Final = Body("empty")
NUL_REFUSAL: Final = Refusal(400, "nul_character", "a NUL character is not accepted in a request")
_NUL: Final = "\x00"
_NUL_ESCAPE: Final = "\\u0000"
_BODY: Final = web.RequestKey("backbone_body", Body)


def is_json_type(content_type: str) -> bool:
    """``application/json`` or one of its ``application/…+json`` variants."""
    return content_type == JSON or (
        content_type.startswith("application/") and content_type.endswith("+json")
    )


async def read(request: web.Request, accepted: frozenset[str], body_max_bytes: int) -> Body | Refusal:
    """Read, parse and keep ``request``'s body (see the module docstring); ``accepted``: the media
    types the application takes (JSON's ``+json`` variants go with ``application/json``)."""
    content_type = request.content_type
    if not request.body_exists:
        body: Body | Refusal = EMPTY
    elif content_type == MULTIPART and MULTIPART in accepted and request.method in _FORM_METHODS:
        body = await _multipart(request, body_max_bytes)
    else:
        try:
            raw = await request.read()
        except web.HTTPRequestEntityTooLarge:
            return _too_large(body_max_bytes)
        body = parse(raw, content_type, request.charset, accepted)
    if isinstance(body, Body):
        request[_BODY] = body
    return body


def parse(raw: bytes, content_type: str, charset: str | None, accepted: frozenset[str]) -> Body | Refusal:
    """The parsed form of ``raw`` (a whole, non-multipart body), or why it is refused. Pure."""
    if not raw.strip():
        return EMPTY
    json_type = is_json_type(content_type)
    if not (content_type in accepted or (json_type and JSON in accepted)):
        takes = ", ".join(sorted(accepted))
        return Refusal(415, "unsupported_media_type", f"the body must be one of: {takes}")
    if json_type:
        return _json(raw)
    if content_type == URLENCODED:
        return _urlencoded(raw, charset or "utf-8")
    try:
        text = raw.decode(charset or "utf-8")
    except (UnicodeDecodeError, LookupError):
        return Refusal(400, "malformed_text", f"the body is not text in {charset or 'utf-8'}")
    return NUL_REFUSAL if _NUL in text else Body("text", raw, text)


def _json(raw: bytes) -> Body | Refusal:
    try:
        text = raw.decode(json.detect_encoding(raw))  # what json.loads would read
        document = json.loads(text)
    except RecursionError:
        return _too_deep()
    except ValueError:  # JSONDecodeError, UnicodeDecodeError, an integer of over 4300 digits
        return Refusal(400, "malformed_json", "the body is not valid JSON")
    if nesting_exceeds(document, JSON_DEPTH_MAX):
        return _too_deep()
    if _NUL_ESCAPE in text:  # the only way a NUL gets into a parsed string (json refuses it raw)
        return NUL_REFUSAL
    return Body("json", raw, text, document)


def nesting_exceeds(document: object, depth_max: int) -> bool:
    """True if arrays and objects nest deeper than ``depth_max`` in ``document`` (no recursion)."""
    stack: list[tuple[object, int]] = [(document, 0)]
    while stack:
        value, depth = stack.pop()
        if isinstance(value, dict):
            items: Iterable[object] = value.values()
        elif isinstance(value, list):
            items = value
        else:
            continue
        if depth >= depth_max:
            return True
        stack.extend((item, depth + 1) for item in items if isinstance(item, dict | list))
    return False


def _urlencoded(raw: bytes, charset: str) -> Body | Refusal:
    try:
        text = raw.decode(charset)
        pairs = parse_qsl(text, keep_blank_values=True, encoding=charset, max_num_fields=FORM_FIELDS_MAX)
    except (UnicodeDecodeError, LookupError, ValueError):
        return Refusal(400, "malformed_form", f"the form is not valid {URLENCODED} in {charset}")
    if any(_NUL in name or _NUL in value for name, value in pairs):
        return NUL_REFUSAL
    return Body("form", raw, text, form=tuple(pairs))


async def _multipart(request: web.Request, body_max_bytes: int) -> Body | Refusal:
    try:
        posted = await request.post()  # aiohttp's parser, bounded by client_max_size
    except web.HTTPRequestEntityTooLarge:
        return _too_large(body_max_bytes)
    except (ValueError, AssertionError, LookupError, web.HTTPBadRequest):
        return Refusal(400, "malformed_form", f"the form is not valid {MULTIPART}")
    pairs = [(name, value) for name, value in posted.items() if isinstance(value, str)]
    if len(pairs) != len(posted):
        return Refusal(400, "malformed_form", "files are not accepted")
    if len(pairs) > FORM_FIELDS_MAX:
        return Refusal(400, "malformed_form", f"a form has at most {FORM_FIELDS_MAX} fields")
    if any(_NUL in name or _NUL in value for name, value in pairs):
        return NUL_REFUSAL
    return Body("form", form=tuple(pairs))


def _too_large(body_max_bytes: int) -> Refusal:
    return Refusal(413, "body_too_large", f"request bodies are limited to {body_max_bytes} bytes")


def _too_deep() -> Refusal:
    return Refusal(400, "body_too_deep", f"JSON may nest at most {JSON_DEPTH_MAX} levels")


# -- what handlers read -------------------------------------------------------------------------------


def body_of(request: web.Request) -> Body:
    """The body the reader kept; a request it did not read (an unscreened route) is a defect."""
    body: Body | None = request.get(_BODY)
    if body is None:
        raise RuntimeError("the body was not read by backbone.bodies.read (is the route screened?)")
    return body


def json_body(request: web.Request) -> object:
    """The request's parsed JSON, or None when it has no body."""
    return body_of(request).document


def form_body(request: web.Request) -> MultiDictProxy[str]:
    """The request's decoded form fields (empty when it has no body)."""
    return MultiDictProxy(MultiDict(body_of(request).form))


def text_body(request: web.Request) -> str:
    """The request's body as text (empty when it has none)."""
    return body_of(request).text
