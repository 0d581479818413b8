"""Operators: who they are, and the rules for names and passwords. Passwords are hashed with
argon2id (argon2-cffi's defaults, RFC 9106's second recommended profile); the hash carries its own
parameters, so they can be raised without invalidating existing users."""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Final

from argon2 import PasswordHasher
from argon2.exceptions import InvalidHashError, VerificationError

from ops_console.domain.permissions import Permission

USERNAME_RE: Final = re.compile(r"[a-z][a-z0-9_.-]{1,31}")
# a merchant travels to the services in X-Operator-Merchants (backbone.tokens.PRINCIPAL_RE's shape)
MERCHANT_RE: Final = re.compile(r"[A-Za-z0-9_.@-]{1,64}")
PASSWORD_MIN: Final = 12
PASSWORD_MAX: Final = 256
_HASHER: Final = PasswordHasher()
# a hash of nothing anyone knows: a login for an unknown name costs the same as a wrong password
_DUMMY: Final = _HASHER.hash("no operator has this password: it only spends the time")


@dataclass(frozen=True, slots=True)
class Operator:
    username: str
    display_name: str
    permissions: frozenset[Permission]
    merchants: tuple[str, ...]

    def may(self, permission: Permission) -> bool:
        return permission in self.permissions


class BadOperator(ValueError):
    pass


def check_username(username: str) -> str:
    if USERNAME_RE.fullmatch(username) is None:
        raise BadOperator("username: 2-32 characters, a-z first, then a-z 0-9 _ . -")
    return username


def check_merchant(merchant_id: str) -> str:
    if MERCHANT_RE.fullmatch(merchant_id) is None:
        raise BadOperator(f"merchant {merchant_id[:70]!r}: 1-64 characters, letters, digits and _ . @ - only")
    return merchant_id


def hash_password(password: str) -> str:
    if not PASSWORD_MIN <= len(password) <= PASSWORD_MAX:
        raise BadOperator(f"password: {PASSWORD_MIN}-{PASSWORD_MAX} characters")
    return _HASHER.hash(password)


def password_matches(stored_hash: str | None, password: str) -> bool:
    """Whether ``password`` is the one behind ``stored_hash`` (None: no such operator, checked
    against a dummy hash so the answer takes as long)."""
    try:
        return _HASHER.verify(stored_hash or _DUMMY, password[:PASSWORD_MAX]) and stored_hash is not None
    except (VerificationError, InvalidHashError):
        return False
