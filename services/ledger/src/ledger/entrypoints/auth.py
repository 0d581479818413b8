"""The ledger's bearer tokens (``LEDGER_API_TOKENS_FILE``, format in ``backbone.tokens``):
``ledger:read`` for reads, ``ledger:import`` for the settlement import, ``deadletters:view`` and
``deadletters:replay`` for the consumer's dead letters."""

from __future__ import annotations

from typing import Final

from backbone.consumer import dlq_http
from backbone.tokens import Caller, TokenFileError, Tokens, token_hash

PERMISSIONS: Final = frozenset({"ledger:read", "ledger:import"}) | dlq_http.PERMISSIONS

__all__ = ["PERMISSIONS", "Caller", "TokenFileError", "Tokens", "token_hash"]
