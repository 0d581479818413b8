"""The Web API challenge-response hash (reference §1.4), written independently of the client's.

``password_hash = MD5(MD5(UTF-16LE(password)) ‖ "WebAPI")`` (16 raw bytes); an answer to a random
challenge is ``hex(MD5(password_hash ‖ bytes(challenge)))``. The simulator keeps its own copy so that
a mistake in the client's cannot hide behind a shared function: both are checked against the
reference's test vectors.
"""

from __future__ import annotations

import hashlib
import hmac
import re
from typing import Final

_WEB_API_WORD: Final = b"WebAPI"
_RAND_HEX: Final = re.compile(r"[0-9a-fA-F]{32}")


def password_hash(password: str) -> bytes:
    first = hashlib.md5(password.encode("utf-16-le"), usedforsecurity=False).digest()
    return hashlib.md5(first + _WEB_API_WORD, usedforsecurity=False).digest()


def is_rand_hex(value: str) -> bool:
    """16 random bytes as 32 hex characters, as both sides send them."""
    return _RAND_HEX.fullmatch(value) is not None


def rand_answer(pw_hash: bytes, rand_hex: str) -> str:
    """The answer to a challenge ``rand_hex`` (32 hex characters), as lowercase hex."""
    return hashlib.md5(pw_hash + bytes.fromhex(rand_hex), usedforsecurity=False).hexdigest()


def answer_matches(pw_hash: bytes, rand_hex: str, answer: str) -> bool:
    """Constant-time check of a client's answer to our challenge."""
    return hmac.compare_digest(rand_answer(pw_hash, rand_hex), answer.lower())
