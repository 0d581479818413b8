"""Bearer tokens for a service's HTTP API, with permissions (each service names its own set).

A tokens file holds hashes, never tokens, one caller per line:

    # principal permissions             sha256 of the token (64 hex digits)
    recon ledger:read,ledger:import sha256:9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08

A request's token is hashed and compared with every line in constant time; the caller's principal
is recorded with what it does (e.g. who imported a settlement). These are service-to-service
tokens; operators' own identities come with the console.

**Acting for an operator.** A token granted ``operators:assert`` is a front end's (the ops
console's): it may only act for a person it has authenticated, named in ``X-Operator`` with that
person's permissions in ``X-Operator-Permissions`` (comma-separated). The caller is then the
*operator*, holding the asserted permissions that the token itself also holds (never more), so the
service's own rules (maker-checker, audit) see the person, not the console. Such a token without
``X-Operator`` is refused: a console never acts as itself. A token without ``operators:assert``
that sends ``X-Operator`` is refused too, so the header can never be smuggled past a service. Use
``Tokens.authenticate(headers)`` at the one place a service checks its callers.

**The operator's merchants.** The front end also names the merchants the person may see, in
``X-Operator-Merchants`` (comma-separated). A service that keeps records of several merchants
answers such a caller only for those (``Caller.merchants``); a front end that names none gets
none (fail closed). ``*`` alone (``EVERY_MERCHANT``) names every merchant: the operator's
``merchants`` is None, as a service token's own caller's. A service token's own caller has
``merchants = None``: it is not a person acting through a front end, and what it may see is its
permissions' business alone. A record that names no merchant is seen only by a caller of every
merchant (``Caller.sees(None)``).
"""

from __future__ import annotations

import hashlib
import hmac
import re
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Final

_LINE_RE: Final = re.compile(r"([A-Za-z0-9_.@-]{1,64})\s+([a-z:,]+)\s+sha256:([0-9a-f]{64})")
PRINCIPAL_RE: Final = re.compile(r"[A-Za-z0-9_.@-]{1,64}")
ASSERT: Final = "operators:assert"
OPERATOR_HEADER: Final = "X-Operator"
OPERATOR_PERMISSIONS_HEADER: Final = "X-Operator-Permissions"
OPERATOR_MERCHANTS_HEADER: Final = "X-Operator-Merchants"
EVERY_MERCHANT: Final = "*"  # alone in X-Operator-Merchants: the operator has every merchant
MERCHANTS_MAX: Final = 100  # merchants one operator may carry in the header


@dataclass(frozen=True, slots=True)
class Caller:
    principal: str
    permissions: frozenset[str]
    # the merchants an operator acting through a front end may see; None: every merchant (a
    # service token's own caller, or an operator the front end names with EVERY_MERCHANT)
    merchants: frozenset[str] | None = None

    def sees(self, merchant_id: str | None) -> bool:
        """Whether a record of ``merchant_id`` may be shown to (or acted on by) this caller; a record
        of no merchant (None) only to a caller of every merchant."""
        if self.merchants is None:
            return True
        return merchant_id is not None and merchant_id in self.merchants


class TokenFileError(ValueError):
    """The tokens file is malformed; the message names the line, never a hash."""


def token_hash(token: str) -> str:
    return hashlib.sha256(token.encode()).hexdigest()


class Tokens:
    def __init__(self, entries: list[tuple[bytes, Caller]]) -> None:
        self._entries = entries

    @classmethod
    def load(cls, path: Path, permissions: frozenset[str]) -> Tokens:
        """The callers of ``path``; a permission outside ``permissions`` refuses the file."""
        entries = []
        for number, raw in enumerate(path.read_text().splitlines(), start=1):
            line = raw.split("#", 1)[0].strip()
            if not line:
                continue
            match = _LINE_RE.fullmatch(line)
            if match is None:
                raise TokenFileError(
                    f"{path}:{number}: expected '<principal> <permission,...> sha256:<64 hex>'"
                )
            granted = frozenset(match.group(2).split(","))
            unknown = granted - permissions - {ASSERT}
            if unknown:
                raise TokenFileError(f"{path}:{number}: unknown permission(s) {sorted(unknown)}")
            entries.append((bytes.fromhex(match.group(3)), Caller(match.group(1), granted)))
        if not entries:
            raise TokenFileError(f"{path}: no tokens: nobody could call the API")
        return cls(entries)

    def caller(self, token: str) -> Caller | None:
        digest = hashlib.sha256(token.encode()).digest()
        found = None
        for expected, caller in self._entries:  # every line, always: no timing hint of which matched
            if hmac.compare_digest(digest, expected):
                found = caller
        return found

    def authenticate(self, headers: Mapping[str, str]) -> Caller | None:
        """The caller of a request from its headers (``Authorization: Bearer``, and for a front
        end's token the operator it acts for), or None: no valid token, a front end's token
        without a well-formed operator (or merchants), or an operator header from a token not
        allowed to send it.
        """
        scheme, _, token = headers.get("Authorization", "").partition(" ")
        caller = self.caller(token.strip()) if scheme.lower() == "bearer" and token.strip() else None
        if caller is None:
            return None
        operator = headers.get(OPERATOR_HEADER)
        if ASSERT not in caller.permissions:
            return None if operator is not None else caller
        if operator is None or PRINCIPAL_RE.fullmatch(operator) is None:
            return None
        asserted = frozenset(p for p in headers.get(OPERATOR_PERMISSIONS_HEADER, "").split(",") if p)
        merchants = frozenset(m for m in headers.get(OPERATOR_MERCHANTS_HEADER, "").split(",") if m)
        if merchants == {EVERY_MERCHANT}:
            return Caller(operator, (asserted & caller.permissions) - {ASSERT}, None)
        if len(merchants) > MERCHANTS_MAX or not all(PRINCIPAL_RE.fullmatch(m) for m in merchants):
            return None  # malformed, too many, or "*" beside named merchants: ambiguous, refused
        return Caller(operator, (asserted & caller.permissions) - {ASSERT}, merchants)
