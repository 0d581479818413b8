"""``python -m payment_state api|executor|inbound|relay|dlq ...``: payment-state's processes.

- ``api``: the HTTP API (port ``PAYMENT_STATE_HTTP_PORT``, default 8082);
- ``executor``: calls the PSP for open operations and resolves unknown outcomes;
- ``inbound``: consumes payments.commands and psp.provider-events;
- ``relay``: publishes the outbox to Kafka (``SERVICE_NAME`` defaults to ``payment_state``);
- ``dlq list|replay|discard``: the inbound consumer's dead letters (operators; audited).
Migrations: ``python -m backbone.postgres.migrations --url $DATABASE_URL services/payment_state/migrations``.
"""

from __future__ import annotations

import os
import sys

USAGE = "usage: python -m payment_state api|executor|inbound|relay|dlq ..."


def main(argv: list[str]) -> int:
    command = argv[0] if argv else ""
    if command == "api":
        from payment_state.entrypoints import api  # noqa: PLC0415 - each process imports what it runs

        api.main()
    elif command == "executor":
        from payment_state.entrypoints import executor  # noqa: PLC0415

        executor.main()
    elif command == "inbound":
        from payment_state.entrypoints import inbound  # noqa: PLC0415

        inbound.main()
    elif command == "relay":
        from backbone.outbox.relay import run_relay_from_env  # noqa: PLC0415

        os.environ.setdefault("SERVICE_NAME", "payment_state")
        run_relay_from_env()
    elif command == "dlq":
        from payment_state.entrypoints import dlq  # noqa: PLC0415

        return dlq.main(argv[1:])
    else:
        print(USAGE, file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
