"""The ledger's bearer tokens (``LEDGER_API_TOKENS_FILE``, format in ``backbone.tokens``):
``ledger:read`` for reads, ``ledger:import`` for the settlement import."""

from __future__ import annotations

from typing import Final

from backbone.tokens import Caller, TokenFileError, Tokens, token_hash

PERMISSIONS: Final = frozenset({"ledger:read", "ledger:import"})

__all__ = ["PERMISSIONS", "Caller", "TokenFileError", "Tokens", "token_hash"]
