"""What a PSP use case answers: the HTTP status and the exact bytes (as recorded under an
idempotency key and replayed), and the call fault the entrypoint applies after the commit."""

from __future__ import annotations

from dataclasses import dataclass

from psp_sim.application.faults import FaultRule
from psp_sim.domain.wire import dumps, error_json


@dataclass(frozen=True, slots=True)
class Response:
    status: int
    body: bytes


@dataclass(frozen=True, slots=True)
class Outcome:
    """An answer plus the call fault that hit it (the entrypoint acts on it after the commit)."""

    response: Response
    fault: FaultRule | None = None
    sync_deliveries: tuple[int, ...] = ()


def not_found(kind: str, object_id: str) -> Response:
    body = error_json("invalid_request_error", "resource_missing", f"No such {kind}: '{object_id}'")
    return Response(404, dumps(body))
