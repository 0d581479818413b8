"""Test support for payment-state on the real stack (imported by its tests and its benchmark only,
never by production code): a throwaway service (database, topics, processes) with in-process access
to the application (``service``), a small HTTP client for the API (``api``), Kafka input as other
services publish it (``kafka``), the provider's objects and webhooks (``psp_objects``), and the PSP
simulator as a real process with a gateway stand-in (``psp_sim``), either payment store behind
one harness with builders of payments (``stores``), and repairs as the reconciler sends them
(``repairs``). Everything is re-exported here.
"""

from payment_state.testing.api import Http, Response
from payment_state.testing.kafka import Publisher
from payment_state.testing.psp_objects import (
    dispute_object,
    intent_object,
    provider_event,
    refund_object,
    webhook_body,
)
from payment_state.testing.psp_sim import (
    PSP_API_KEY,
    PSP_SIM_MIGRATIONS,
    PSP_WEBHOOK_SECRET,
    GatewayStandIn,
    PspSim,
)
from payment_state.testing.repairs import repair_body, repair_event, settlement_row
from payment_state.testing.service import (
    MERCHANT_A,
    MERCHANT_B,
    MIGRATIONS,
    TOKEN_A,
    TOKEN_B,
    Service,
    fact_keys,
    only_topics,
)
from payment_state.testing.stores import (
    StoreHarness,
    create_request,
    memory_harness,
    new_payment_state,
    postgres_harness,
    requires_action_body,
)

__all__ = [
    "MERCHANT_A",
    "MERCHANT_B",
    "MIGRATIONS",
    "PSP_API_KEY",
    "PSP_SIM_MIGRATIONS",
    "PSP_WEBHOOK_SECRET",
    "TOKEN_A",
    "TOKEN_B",
    "GatewayStandIn",
    "Http",
    "PspSim",
    "Publisher",
    "Response",
    "Service",
    "StoreHarness",
    "create_request",
    "dispute_object",
    "fact_keys",
    "intent_object",
    "memory_harness",
    "new_payment_state",
    "only_topics",
    "postgres_harness",
    "provider_event",
    "refund_object",
    "repair_body",
    "repair_event",
    "requires_action_body",
    "settlement_row",
    "webhook_body",
]
