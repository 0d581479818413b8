"""The end-to-end system's fixed configuration: credentials, operators and short timings.

The tokens, keys and operators every service of ``System`` is started with, which tests, the load
client and the drills present in turn; and the short timings that make faults resolve in seconds
(mt5-credit's are shared with its process tests and bench-mt5).
"""

from __future__ import annotations

from typing import Final

PSP_API_KEY: Final = "sk_test_system_0123456789"
WEBHOOK_SECRET: Final = "whsec_system_0123456789abcdef"  # noqa: S105 - a test value
MERCHANT: Final = "broker-eu"
MERCHANT_TOKEN: Final = "system-merchant-token-0123456789"  # noqa: S105 - a test value
CREDIT_TOKEN: Final = "system-credit-token-0123456789"  # noqa: S105 - a test value
CREDIT_ADMIN_TOKEN: Final = "system-credit-admin-0123456789"  # noqa: S105 - a test value
LEDGER_TOKEN: Final = "system-ledger-token-0123456789"  # noqa: S105 - a test value
# the reconciler's operators: each their own token (maker-checker needs two people)
OPERATORS: Final = {
    "alice": ("system-operator-alice-0123456789", "cases:view,cases:work,repairs:propose,repairs:approve"),
    "bob": ("system-operator-bob-0123456789", "cases:view,cases:work,repairs:propose,repairs:approve"),
}
# the console's token at the reconciler (it acts for the operator who logged in) and its operators
CONSOLE_TOKEN: Final = "system-console-token-0123456789"  # noqa: S105 - a test value
CONSOLE_PASSWORD: Final = "system operator password"  # noqa: S105 - a test value
CONSOLE_OPERATORS: Final = {  # name -> (console permissions, merchants)
    "alice": (
        "view,case_work,ledger_read,repair_propose,repair_approve,withdrawal_prepare,withdrawal_approve,"
        "deadletter_replay,refund",
        MERCHANT,
    ),
    "bob": ("view,case_work,repair_approve,withdrawal_approve", MERCHANT),
    "eve": ("view", "another-merchant"),
}
# mt5-credit's operators (withdrawals): the same people, their own tokens for this service
CREDIT_OPERATORS: Final = {
    "alice": ("system-credit-alice-0123456789", "withdrawals:view,withdrawals:prepare,withdrawals:approve"),
    "bob": ("system-credit-bob-0123456789", "withdrawals:view,withdrawals:prepare,withdrawals:approve"),
}
LEDGER_ROLE: Final = "ledger_app_test"  # shared by every test database (roles are cluster-wide)
LEDGER_ROLE_PASSWORD: Final = "ledger_app_test"  # noqa: S105 - a throwaway role on a dev cluster
MT5_GROUP: Final = "real\\usd"
FX_RATES: Final = "EUR:USD=1.0835"  # mt5-credit's fixed table: a EUR card deposit into a USD account

# The one home of mt5-credit's short test timings (the end-to-end system, the credit process tests
# and bench-mt5 all use these): MT5 call budget = lock 1 s + connect 1 s + 4 x call 1 s = 6 s;
# lease 8 s >= budget + 1 s margin (the worker refuses to start otherwise); the resolver waits the
# budget + 0.5 s after the call's start.
MT5_WORKER_ENV: Final = {
    "MT5_CALL_TIMEOUT_MS": "1000",
    "MT5_LOCK_TIMEOUT_MS": "1000",
    "MT5_CONNECT_TIMEOUT_MS": "1000",
    "CREDIT_LEASE_MS": "8000",
    "CREDIT_LEASE_MARGIN_MS": "1000",
    "RESOLVE_DEAD_MARGIN_MS": "500",
    "RESOLVE_BACKOFF_BASE_MS": "200",
    "RESOLVE_BACKOFF_CAP_MS": "1000",
    "CREDIT_POLL_INTERVAL_MS": "50",
    "CREDIT_LANES": "2",
}
CONSUMER_ENV: Final = {"CONSUMER_POLL_TIMEOUT_MS": "100", "CONSUMER_BATCH_LINGER_MS": "5"}
RELAY_ENV: Final = {"OUTBOX_POLL_INTERVAL_MS": "100"}
# the gateway's catch-up of lost webhooks, at test pace: a webhook later than 5 s is caught up
CATCH_UP_ENV: Final = {"CATCH_UP_INTERVAL_MS": "1000", "CATCH_UP_SETTLE_S": "5", "CATCH_UP_OVERLAP_S": "30"}
