"""Unit tests of the Web API challenge-response hash (backbone.mt5.auth) against the reference's
test vectors (DOC-AUTH, re-computed by the reference with hashlib): if these fail, no real MT5 server
would ever let the gateway in, and the gateway could not tell a fake server from the real one."""

from __future__ import annotations

import hashlib

from backbone.mt5 import auth

PASSWORD = "Password1"
MD5_UTF16_BYTES = bytes([236, 46, 146, 255, 112, 191, 70, 145, 174, 12, 104, 224, 47, 220, 108, 34])
PASSWORD_HASH_HEX = "904ba8ecb16273d2f0ae9c3b8a023752"
SRV_RAND = "73007dc7184747ce0f7c98516ef1c851"
SRV_RAND_ANSWER = "77fe51827f7fa69dd80fbec9aa33f1bb"
CLI_RAND = "4db98fec17aab4dc5a240bdc659e8395"
CLI_RAND_ANSWER = "1732021b1b332f51660b2b315eed3a35"


def test_first_step_is_md5_of_utf16le_password() -> None:
    """Step 1 of the hash is MD5 over the UTF-16-LE bytes (not UTF-8) of the password."""
    assert hashlib.md5(PASSWORD.encode("utf-16-le"), usedforsecurity=False).digest() == MD5_UTF16_BYTES


def test_password_hash_matches_vector() -> None:
    """password_hash = MD5(MD5(UTF-16LE(pw)) ‖ "WebAPI") gives the documented 16 bytes."""
    assert auth.password_hash(PASSWORD).hex() == PASSWORD_HASH_HEX


def test_srv_rand_answer_matches_vector() -> None:
    """The answer to the server's challenge concatenates bytes (not hex strings) before MD5."""
    assert auth.rand_answer(auth.password_hash(PASSWORD), SRV_RAND) == SRV_RAND_ANSWER


def test_server_answer_check_accepts_the_vector_and_refuses_others() -> None:
    """The client accepts the documented cli_rand_answer (any case) and refuses a wrong or missing one."""
    pw_hash = auth.password_hash(PASSWORD)
    assert auth.server_answer_ok(pw_hash, CLI_RAND, CLI_RAND_ANSWER)
    assert auth.server_answer_ok(pw_hash, CLI_RAND, CLI_RAND_ANSWER.upper())
    assert not auth.server_answer_ok(pw_hash, CLI_RAND, SRV_RAND_ANSWER)
    assert not auth.server_answer_ok(auth.password_hash("password1"), CLI_RAND, CLI_RAND_ANSWER)
    assert not auth.server_answer_ok(pw_hash, CLI_RAND, None)


def test_cli_rand_is_fresh_16_bytes_of_hex() -> None:
    """Each session sends a new 16-byte challenge, so a recorded server answer cannot be replayed."""
    first, second = auth.new_cli_rand(), auth.new_cli_rand()
    assert auth.is_rand_hex(first) and auth.is_rand_hex(second) and first != second
    assert not auth.is_rand_hex("xyz") and not auth.is_rand_hex(None)
