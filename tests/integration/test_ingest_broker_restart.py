"""After a restart of the memory-only broker, ingest reads the recreated topics from offset 0.

The carried state of the last span says "next offset E" per partition, but the restarted broker's
topics start at 0 again and the group's commits are gone. Before the fix, new traffic up to E
records per partition was skipped (here: all of it).
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

pytestmark = [pytest.mark.integration, pytest.mark.slow]


def _produce(bootstrap: str, prefix: str, t0: datetime) -> None:
    from ingest.kafka_io import EventProducer
    from ingest.synthetic import stream

    with EventProducer(bootstrap) as p:
        for e in stream(24, start=t0, spacing_s=30, prefix=prefix):
            p.send(e)


def test_ingest_after_broker_restart_loses_nothing(tmp_path):
    from ingest.kafka_io import ensure_topics
    from ingest.pipeline import run_span
    from ingest.spans import read_spans
    from runtime.services import Broker

    broker = Broker.start(tmp_path / "broker")
    port = broker.port
    t0 = datetime.now(UTC) - timedelta(hours=2)
    try:
        ensure_topics(broker.bootstrap)
        _produce(broker.bootstrap, "before-", t0)
        first = run_span(bootstrap=broker.bootstrap, group_id="g", output_root=tmp_path / "s",
                         drain=True)
        assert first.rows == 24
        broker.stop()
        broker = Broker.start(tmp_path / "broker2", port=port)
        ensure_topics(broker.bootstrap)
        _produce(broker.bootstrap, "after-", t0 + timedelta(minutes=30))  # same offsets again
        second = run_span(bootstrap=broker.bootstrap, group_id="g", output_root=tmp_path / "s",
                          drain=True)
    finally:
        broker.stop()
    ids = read_spans(tmp_path / "s").column("response_id").to_pylist()
    assert second.rows == 24
    assert sorted(ids) == sorted([f"before-{i:08d}" for i in range(24)]
                                 + [f"after-{i:08d}" for i in range(24)])
