"""Bearer tokens for a service's HTTP API, with permissions (each service names its own set).

A tokens file holds hashes, never tokens, one caller per line:

    # principal permissions             sha256 of the token (64 hex digits)
    recon ledger:read,ledger:import sha256:9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08

A request's token is hashed and compared with every line in constant time; the caller's principal
is recorded with what it does (e.g. who imported a settlement). These are service-to-service
tokens; operators' own identities come with the console.
"""

from __future__ import annotations

import hashlib
import hmac
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Final

_LINE_RE: Final = re.compile(r"([A-Za-z0-9_.@-]{1,64})\s+([a-z:,]+)\s+sha256:([0-9a-f]{64})")


@dataclass(frozen=True, slots=True)
class Caller:
    principal: str
    permissions: frozenset[str]


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
            unknown = granted - permissions
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
