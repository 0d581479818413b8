"""Wiring: the real adapters for each process. Tests call the same functions with test topics."""

from __future__ import annotations

from collections.abc import Mapping

from backbone.avro import AvroCodec, SchemaCatalogue
from backbone.consumer import BatchHandler, UnitOfWork
from backbone.consumer.dlq import ReplayContext
from backbone.kafka.topics import TopicCatalogue
from backbone.mt5.gateway import Mt5Gateway
from backbone.mt5.settings import Mt5GatewaySettings
from backbone.outbox import OutboxWriter
from backbone.psp.stripe_settings import StripeClientSettings
from backbone.settings import SettingsError, load_settings
from sqlalchemy import Engine

from reconciler.adapters.mt5_deals import Mt5DealSource
from reconciler.adapters.pg_records import PgRecordStore
from reconciler.adapters.pg_repairs import PgRepairDesk
from reconciler.adapters.pg_store import PgReconStore, make_engine
from reconciler.adapters.psp_reports import PspReportSource
from reconciler.application.intake import make_handler
from reconciler.application.ports import ReportSource
from reconciler.application.runs import RunConfig
from reconciler.settings import SERVICE_NAME, ReconSettings, RunSettings


def catalogue_for(settings: ReconSettings) -> TopicCatalogue:
    """The catalogue entries of the reconciler's topics under the configured names."""
    return TopicCatalogue.default().renamed(
        {
            "payments.events": settings.payments_topic,
            "mt5.credit-events": settings.mt5_topic,
            "ledger.events": settings.ledger_topic,
            "recon.events": settings.events_topic,
            "recon.repair-commands": settings.repairs_topic,
            "recon.repair-outcomes": settings.outcomes_topic,
            "recon.monitor-events": settings.monitor_topic,
        }
    )


def outbox_writer(settings: ReconSettings) -> tuple[AvroCodec, TopicCatalogue, OutboxWriter]:
    codec = AvroCodec(SchemaCatalogue.default())
    catalogue = catalogue_for(settings)
    return codec, catalogue, OutboxWriter(codec, catalogue, SERVICE_NAME)


def consumer_handler(settings: ReconSettings) -> BatchHandler:
    def store_for(uow: UnitOfWork) -> PgRecordStore:
        return PgRecordStore(uow.conn, uow.outbox, settings.events_topic)

    return make_handler(settings.calendar(), store_for)


def consumer_parts(
    settings: ReconSettings,
) -> tuple[BatchHandler, AvroCodec, TopicCatalogue, OutboxWriter | None]:
    codec, catalogue, outbox = outbox_writer(settings)  # the monitor's cases announce themselves
    return consumer_handler(settings), codec, catalogue, outbox


def replay_context(consumer_name: str, settings: ReconSettings) -> ReplayContext:
    handler, codec, catalogue, outbox = consumer_parts(settings)
    return ReplayContext(consumer_name, handler, codec, catalogue, outbox)


def recon_store(settings: ReconSettings, engine: Engine | None = None) -> PgReconStore:
    _, _, outbox = outbox_writer(settings)
    return PgReconStore(engine or make_engine(settings.database_url), outbox, settings.events_topic)


def repair_desk(settings: ReconSettings, engine: Engine) -> PgRepairDesk:
    _, _, outbox = outbox_writer(settings)
    return PgRepairDesk(engine, outbox, settings.events_topic, settings.repairs_topic)


def run_config(settings: ReconSettings, run: RunSettings) -> RunConfig:
    return RunConfig(settings.provider, settings.calendar(), settings.grace_s * 1000, run.require_bank)


def report_source(
    settings: ReconSettings, run: RunSettings, environ: Mapping[str, str] | None = None
) -> ReportSource | None:
    """The PSP's report API of ``RECON_PROVIDER``: Stripe's balance transactions by payout for
    ``stripe`` (``STRIPE_*`` settings), simpsp's report runs at ``RECON_PSP_API_URL`` otherwise, or
    None (only imported files are matched). Raises SettingsError naming what is wrong."""
    if settings.provider == "stripe":
        return stripe_report_source(settings, run, environ)
    if not run.psp_api_url:
        return None
    key = run.psp_api_key.reveal() if run.psp_api_key is not None else ""
    return PspReportSource(settings.provider, run.psp_api_url, key, float(run.psp_timeout_s))


def stripe_report_source(
    settings: ReconSettings, run: RunSettings, environ: Mapping[str, str] | None = None
) -> ReportSource:
    if run.psp_api_url or run.psp_api_key is not None:
        raise SettingsError(
            [
                "RECON_PSP_API_URL / RECON_PSP_API_KEY are simpsp's report API: unset them with"
                " RECON_PROVIDER=stripe (Stripe's key is STRIPE_API_KEY or STRIPE_API_KEY_FILE)"
            ]
        )
    # imported here: only a run of a Stripe-configured reconciler loads the SDK (as payment-state's
    # executor is the only process there that does)
    from backbone.psp.stripe_client import StripeClient  # noqa: PLC0415 - Stripe runs only

    from reconciler.adapters.stripe_reports import StripeReportSource  # noqa: PLC0415 - Stripe runs only

    stripe_settings = load_settings(StripeClientSettings, environ)
    if stripe_settings.api_key is None and not stripe_settings.api_key_file:
        raise SettingsError(["STRIPE_API_KEY or STRIPE_API_KEY_FILE is required with RECON_PROVIDER=stripe"])
    return StripeReportSource(
        settings.provider,
        StripeClient.from_settings(stripe_settings),
        settings.calendar(),
        horizon_days=run.stripe_payout_horizon_days,
        timeout_s=float(run.psp_timeout_s),
    )


def deal_source(gateway: Mt5Gateway, run: RunSettings) -> Mt5DealSource:
    return Mt5DealSource(gateway, run.mt5_groups)


def mt5_gateway(settings: Mt5GatewaySettings) -> Mt5Gateway:
    return Mt5Gateway(settings, name="reconciler")
