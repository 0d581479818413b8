"""The Web API challenge-response (reference §1.4), client side.

``password_hash = MD5(MD5(UTF-16LE(password)) ‖ "WebAPI")``, 16 raw bytes. The client answers the
server's ``srv_rand`` with ``hex(MD5(password_hash ‖ bytes(srv_rand)))`` and checks the server's
``cli_rand_answer`` the same way (a server that cannot answer does not know the password: 1008).
Checked against the reference's test vectors in the unit tests.
"""

from __future__ import annotations

import hashlib
import hmac
import os
import re
from typing import Final

_WEB_API_WORD: Final = b"WebAPI"
_RAND_HEX: Final = re.compile(r"[0-9a-f]{32}")


def password_hash(password: str) -> bytes:
    first = hashlib.md5(password.encode("utf-16-le"), usedforsecurity=False).digest()
    return hashlib.md5(first + _WEB_API_WORD, usedforsecurity=False).digest()


def rand_answer(pw_hash: bytes, rand_hex: str) -> str:
    """The answer to a 16-byte challenge given as 32 hex characters; lowercase hex."""
    return hashlib.md5(pw_hash + bytes.fromhex(rand_hex), usedforsecurity=False).hexdigest()


def new_cli_rand() -> str:
    return os.urandom(16).hex()


def is_rand_hex(value: object) -> bool:
    return isinstance(value, str) and _RAND_HEX.fullmatch(value.lower()) is not None


def server_answer_ok(pw_hash: bytes, cli_rand: str, cli_rand_answer: object) -> bool:
    """Constant-time check that the server answered our challenge correctly."""
    if not isinstance(cli_rand_answer, str):
        return False
    return hmac.compare_digest(rand_answer(pw_hash, cli_rand), cli_rand_answer.lower())
