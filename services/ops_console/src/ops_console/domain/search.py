"""What an operator typed into the deposit search, read once: an MT5 login (digits only), or a
reference (our payment id, a deposit reference or the PSP's payment id, tried in that order), or
something the console will not send anywhere (``Malformed``, with the reason shown)."""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Final

LOGIN_RE: Final = re.compile(r"[1-9][0-9]{0,18}")
REFERENCE_RE: Final = re.compile(r"[A-Za-z0-9_.:-]{1,100}")
LOGIN_MAX: Final = 2**63 - 1  # MT5 logins are unsigned 64-bit; the services keep them as bigint


@dataclass(frozen=True, slots=True)
class Login:
    mt5_login: int


@dataclass(frozen=True, slots=True)
class Reference:
    text: str


@dataclass(frozen=True, slots=True)
class Malformed:
    reason: str


Query = Login | Reference | Malformed


def classify(raw: str) -> Query:
    """``7401`` is a login; ``pay_…``, ``dpi_…``, ``pi_…`` a reference; anything else is refused."""
    text = raw.strip()
    if LOGIN_RE.fullmatch(text) is not None:
        login = int(text)
        if login > LOGIN_MAX:
            return Malformed(f"An MT5 login is at most {LOGIN_MAX}.")
        return Login(login)
    if REFERENCE_RE.fullmatch(text) is None:
        return Malformed(
            "Search by a payment id, deposit reference, PSP reference (pi_…) or MT5 login:"
            " letters, digits and _ . : - only, up to 100."
        )
    return Reference(text)
