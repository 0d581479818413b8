"""Consumer lag taken from librdkafka's statistics JSON into ``consumer_lag_messages``."""

from __future__ import annotations

from backbone.consumer.lag import lags_of, publish_lags
from prometheus_client import REGISTRY


def _stats(**partitions: int) -> dict[str, object]:
    parts: dict[str, object] = {"-1": {"consumer_lag": -1}}
    parts.update({k.removeprefix("p"): {"consumer_lag": v} for k, v in partitions.items()})
    return {"topics": {"payments": {"partitions": parts}}}


def _lag(partition: str) -> float | None:
    labels = {"consumer": "c-test", "topic": "payments", "partition": partition}
    return REGISTRY.get_sample_value("consumer_lag_messages", labels)


def test_lags_skip_the_internal_partition_and_unknown_lags() -> None:
    """Partition -1 and a lag of -1 (not known yet) are not lags; real ones are kept per partition."""
    assert lags_of(_stats(p0=5, p1=-1, p2=0)) == {("payments", 0): 5, ("payments", 2): 0}
    assert lags_of({}) == {}


def test_published_lag_moves_and_a_revoked_partition_disappears() -> None:
    """The gauge follows the statistics, and a partition this member lost is removed, not left stale."""
    seen = publish_lags("c-test", lags_of(_stats(p0=40, p1=3)), set())
    assert _lag("0") == 40 and _lag("1") == 3
    seen = publish_lags("c-test", lags_of(_stats(p0=2)), seen)
    assert _lag("0") == 2
    assert _lag("1") is None
    assert seen == {("payments", 0)}
