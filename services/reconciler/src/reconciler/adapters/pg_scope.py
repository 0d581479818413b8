"""The merchant scope of operators' reads, as SQL (SQLAlchemy Core): one predicate for every read
of cases, repairs and the audit (``domain.merchants.Scope``). An operator of every merchant reads
everything; any other reads the rows of their merchants' cases only, never a case of no merchant,
and so cannot tell another merchant's case from one that does not exist."""

from __future__ import annotations

from typing import Final

from sqlalchemy import BigInteger, and_, cast, exists, func, or_, true
from sqlalchemy.sql import ColumnElement

from reconciler.adapters.tables import audit, cases, repairs
from reconciler.domain.merchants import Scope

# the case or repair an audit entry is about: an act's target (case:7, repair:3) or, for a request
# refused at the API's door, its path (cases/7/acknowledge, repairs/3/approve)
_CASE_TARGET: Final = r"^(?:case:|cases/)([0-9]{1,18})(?:/|$)"
_REPAIR_TARGET: Final = r"^(?:repair:|repairs/)([0-9]{1,18})(?:/|$)"


def sees_case(scope: Scope) -> ColumnElement[bool]:
    """Whether the operator sees the row of ``cases`` in the query."""
    if scope.merchants is None:
        return true()
    return cases.c.merchant_id.in_(sorted(scope.merchants))


def sees_repair(scope: Scope) -> ColumnElement[bool]:
    """Whether the operator sees the row of ``repairs`` in the query (through its case)."""
    if scope.merchants is None:
        return true()
    return exists().where(cases.c.id == repairs.c.case_id, sees_case(scope))


def sees_audit(scope: Scope) -> ColumnElement[bool]:
    """Whether the operator sees the row of ``audit`` in the query: an entry about a case or a
    repair only when they see that case (not when it does not exist); any other entry always."""
    if scope.merchants is None:
        return true()
    named_case = func.substring(audit.c.target, _CASE_TARGET)
    named_repair = func.substring(audit.c.target, _REPAIR_TARGET)
    case_seen = exists().where(cases.c.id == cast(named_case, BigInteger), sees_case(scope))
    repair_seen = exists().where(
        repairs.c.id == cast(named_repair, BigInteger), cases.c.id == repairs.c.case_id, sees_case(scope)
    )
    return or_(and_(named_case.is_(None), named_repair.is_(None)), case_seen, repair_seen)
