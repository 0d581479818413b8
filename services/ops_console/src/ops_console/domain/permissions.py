"""The console's permissions, one per kind of act (seed 004 Langkah 8), and what each means at the
services the console calls. An operator holds a set of them; a page or a form names the one it
needs, and the console asserts only the service permissions that follow from what the operator
holds (the service checks again: the console is never trusted with more than its own token)."""

from __future__ import annotations

from enum import StrEnum
from typing import Final


class Permission(StrEnum):
    VIEW = "view"  # search deposits (their webhooks and cases), read cases, runs and the audit
    CASE_WORK = "case_work"  # acknowledge or reopen a case
    REFUND = "refund"
    LEDGER_READ = "ledger_read"
    REPAIR_PROPOSE = "repair_propose"
    REPAIR_APPROVE = "repair_approve"
    WITHDRAWAL_PREPARE = "withdrawal_prepare"  # the maker: bind the exact withdrawal, or reject it
    WITHDRAWAL_APPROVE = "withdrawal_approve"  # the checker: approve what another prepared
    DEADLETTER_REPLAY = "deadletter_replay"


ALL: Final = frozenset(Permission)

# what an operator's console permission becomes at each service (backbone.tokens permissions);
# every service that runs a consumer also serves its dead letters (backbone.consumer.dlq_http)
DEAD_LETTERS: Final[dict[Permission, tuple[str, ...]]] = {
    Permission.VIEW: ("deadletters:view",),
    Permission.DEADLETTER_REPLAY: ("deadletters:replay",),
}

RECONCILER: Final[dict[Permission, tuple[str, ...]]] = {
    Permission.VIEW: ("cases:view", "deadletters:view"),
    Permission.CASE_WORK: ("cases:work",),
    Permission.REPAIR_PROPOSE: ("repairs:propose",),
    Permission.REPAIR_APPROVE: ("repairs:approve",),
    Permission.DEADLETTER_REPLAY: ("deadletters:replay",),
}

MT5_CREDIT: Final[dict[Permission, tuple[str, ...]]] = {
    Permission.VIEW: ("deposits:view", "withdrawals:view", "deadletters:view"),
    Permission.WITHDRAWAL_PREPARE: ("withdrawals:prepare",),
    Permission.WITHDRAWAL_APPROVE: ("withdrawals:approve",),
    Permission.DEADLETTER_REPLAY: ("deadletters:replay",),
}

GATEWAY: Final[dict[Permission, tuple[str, ...]]] = {
    Permission.VIEW: ("receipts:view",),
}

PAYMENT_STATE: Final[dict[Permission, tuple[str, ...]]] = DEAD_LETTERS  # merchants' own tokens do the rest

LEDGER: Final[dict[Permission, tuple[str, ...]]] = {
    Permission.LEDGER_READ: ("ledger:read",),
    **DEAD_LETTERS,
}


class UnknownPermission(ValueError):
    pass


def parse(names: str) -> frozenset[Permission]:
    """``view,repair_propose`` → the permissions; an unknown name is refused, naming it."""
    found = set()
    for raw in names.split(","):
        name = raw.strip()
        if not name:
            continue
        try:
            found.add(Permission(name))
        except ValueError:
            known = ", ".join(sorted(ALL))
            raise UnknownPermission(f"unknown permission {name!r} (known: {known})") from None
    return frozenset(found)


def at_service(held: frozenset[Permission], mapping: dict[Permission, tuple[str, ...]]) -> str:
    """The ``X-Operator-Permissions`` header value for one service."""
    return ",".join(sorted({name for p in held if p in mapping for name in mapping[p]}))
