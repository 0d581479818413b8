"""Operators: who they are, which merchants they may see, and the rules for names and passwords.
Passwords are hashed with argon2id (argon2-cffi's defaults, RFC 9106's second recommended profile);
the hash carries its own parameters, so they can be raised without invalidating existing users.

An operator's merchants are named (``broker-eu``), or ``*`` alone: every merchant, and then also the
records that name no merchant (the reconciler's cases of a bank deposit, a payout batch, a deal
without our reference). ``*`` travels as it is in ``X-Operator-Merchants`` (``backbone.tokens``)."""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Final

from argon2 import PasswordHasher
from argon2.exceptions import InvalidHashError, VerificationError

from ops_console.domain.permissions import Permission

USERNAME_RE: Final = re.compile(r"[a-z][a-z0-9_.-]{1,31}")
# a merchant travels to the services in X-Operator-Merchants (backbone.tokens.PRINCIPAL_RE's shape)
MERCHANT_RE: Final = re.compile(r"[A-Za-z0-9_.@-]{1,64}")
EVERY_MERCHANT: Final = "*"  # backbone.tokens.EVERY_MERCHANT (the domain imports no adapter's module)
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

    @property
    def every_merchant(self) -> bool:
        return EVERY_MERCHANT in self.merchants

    def sees(self, merchant_id: object) -> bool:
        """Whether a record of ``merchant_id`` (None or anything but a name: of no merchant) may be
        shown to this operator: one of their merchants, or any record for an operator of every
        merchant."""
        return self.every_merchant or (isinstance(merchant_id, str) and merchant_id in self.merchants)


class BadOperator(ValueError):
    pass


def check_username(username: str) -> str:
    if USERNAME_RE.fullmatch(username) is None:
        raise BadOperator("username: 2-32 characters, a-z first, then a-z 0-9 _ . -")
    return username


def check_merchant(merchant_id: str) -> str:
    if merchant_id != EVERY_MERCHANT and MERCHANT_RE.fullmatch(merchant_id) is None:
        raise BadOperator(
            f"merchant {merchant_id[:70]!r}: 1-64 characters, letters, digits and _ . @ - only,"
            f" or {EVERY_MERCHANT} alone for every merchant"
        )
    return merchant_id


def check_merchants(merchant_ids: Iterable[str]) -> tuple[str, ...]:
    """An operator's merchants: each a name the services accept, or ``*`` alone (every merchant)."""
    merchants = tuple(dict.fromkeys(check_merchant(m) for m in merchant_ids))
    if EVERY_MERCHANT in merchants and len(merchants) > 1:
        raise BadOperator(f"merchant {EVERY_MERCHANT} is every merchant: give it alone, not beside others")
    return merchants


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
