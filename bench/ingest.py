"""Ingest throughput: the Beam pipeline vs the raw kafka-python consume rate, on one broker.

    python bench/ingest.py --events 100000

Starts a local broker, produces ``--events`` synthetic events (completions, each with its
persistence checkpoints and, with some probability, a follow-up and feedback), then measures in
the same process:

- ``raw_consume_events_per_s``: kafka-python reading every event partition end to end (the
  ceiling: no parsing, no writing);
- ``beam_events_per_s``: the Beam pipeline of one span (DirectRunner: plan the offset ranges,
  read, classify, join, reward, stage Parquet), wall clock;
- ``span_events_per_s``: the whole span, end to end: the pipeline plus the commit (Great
  Expectations, whose import alone costs ~4 s; the span file, the manifest, dead letters,
  offset commit);
- ``ratio`` = beam / raw, and ``peak_rss_mb`` of this process (Beam runs in-process).

Prints the figures and writes ``bench/results/ingest.json``.
"""

from __future__ import annotations

import argparse
import json
import resource
import shutil
import sys
import tempfile
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))


def produce(bootstrap: str, n_events: int) -> tuple[int, float]:
    from ingest.kafka_io import EventProducer
    from ingest.synthetic import stream

    n_completions = max(1, n_events // 6)
    start = datetime.now(UTC) - timedelta(seconds=n_completions * 2.0 + 7200)
    sent = 0
    t = time.perf_counter()
    with EventProducer(bootstrap, linger_ms=20) as p:
        for e in stream(n_completions * 2, start=start, spacing_s=2.0, seed=1):
            if sent >= n_events:
                break
            p.send(e)
            sent += 1
    return sent, time.perf_counter() - t


def raw_consume(bootstrap: str) -> tuple[int, float]:
    from kafka import KafkaConsumer, TopicPartition

    from ingest.kafka_io import FETCH_SETTINGS, high_watermarks
    from ingest.schema import TOPICS

    consumer = KafkaConsumer(
        bootstrap_servers=bootstrap, enable_auto_commit=False, **FETCH_SETTINGS
    )
    ends = {
        TopicPartition(t, p): hw
        for t in TOPICS.values()
        for p, hw in high_watermarks(bootstrap, t).items()
    }
    t0 = time.perf_counter()
    consumer.assign(list(ends))
    for tp in ends:
        consumer.seek(tp, 0)
    n, done = 0, set()
    while len(done) < len(ends):
        for tp, recs in consumer.poll(timeout_ms=500).items():
            n += len(recs)
            if recs[-1].offset + 1 >= ends[tp]:
                done.add(tp)
        done |= {tp for tp, e in ends.items() if e == 0}
    dt = time.perf_counter() - t0
    consumer.close()
    return n, dt


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--events", type=int, default=100_000)
    parser.add_argument("--out", type=Path, default=ROOT / "bench" / "results" / "ingest.json")
    args = parser.parse_args(argv)

    from ingest.config import JoinConfig, KafkaSource, ParseConfig, ValidationConfig
    from ingest.kafka_io import ensure_topics
    from ingest.pipeline import SpanJob
    from rewards.config import RewardConfig
    from runtime.services import Broker

    work = Path(tempfile.mkdtemp(prefix="ratchet-bench-ingest-"))
    broker = Broker.start(work / "broker")
    try:
        ensure_topics(broker.bootstrap)
        sent, produce_s = produce(broker.bootstrap, args.events)
        raw_n, raw_s = raw_consume(broker.bootstrap)
        job = SpanJob(
            source=KafkaSource(bootstrap=broker.bootstrap, group_id="bench"),
            output_root=work / "out",
            reward_config=RewardConfig(),
            join=JoinConfig(),
            parse=ParseConfig(),
            validation=ValidationConfig(),
        )
        phases = {}
        t0 = time.perf_counter()
        for name, step in (("setup", job.setup), ("pipeline", job.run), ("commit", job.commit)):
            t = time.perf_counter()
            out = step()
            phases[name] = round(time.perf_counter() - t, 2)
        span = out
        job.cleanup()
        beam_s = time.perf_counter() - t0
    finally:
        broker.stop()
        shutil.rmtree(work, ignore_errors=True)
    events_in = span.completions_in + span.signals_in + span.dead_letters
    if events_in != sent or raw_n != sent:
        raise RuntimeError(f"sent {sent}, Beam read {events_in}, raw read {raw_n}")
    pipeline_s = phases["setup"] + phases["pipeline"]
    beam_rate, raw_rate = events_in / pipeline_s, raw_n / raw_s
    result = {
        "events": sent,
        "beam_events_per_s": round(beam_rate, 1),
        "raw_consume_events_per_s": round(raw_rate, 1),
        "ratio": round(beam_rate / raw_rate, 3),
        "peak_rss_mb": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1),
        "span_events_per_s": round(events_in / beam_s, 1),
        "span_seconds": round(beam_s, 2),
        "span_phase_seconds": phases,
        "raw_seconds": round(raw_s, 2),
        "produce_events_per_s": round(sent / produce_s, 1),
        "rows": span.rows,
        "pending": span.pending,
        "dead_letters": span.dead_letters,
        "validated": span.validated,
    }
    print(json.dumps(result, indent=1))
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=1) + "\n")
    return result


if __name__ == "__main__":
    main()
