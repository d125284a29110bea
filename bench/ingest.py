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
- ``pipeline_cpu_events_per_s``: events per CPU second of this process in the pipeline phase
  (less sensitive to other load than wall clock; with a multi-process runner the workers' CPU
  is not in it); ``cpu_ratio`` = raw consume CPU seconds / pipeline CPU seconds;
- ``ratio`` = beam / raw (and ``span_ratio`` = span / raw) from the same repeat, and
  ``peak_rss_mb`` of this process (Beam runs in-process unless a multi-process runner is named).

Each rate is measured ``--repeats`` times (raw consume, then a span with a fresh consumer group
and output root) and reported as median, min and max; the ratio is taken per repeat. Arguments
the script does not know go to Beam (e.g. ``--direct_num_workers=2
--direct_running_mode=multi_processing``). ``--profile FILE`` runs one extra, untimed span under
cProfile and writes its top entries.

Prints the figures and writes ``bench/results/ingest.json`` (or ``--out``).
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import statistics
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


def raw_consume(bootstrap: str) -> tuple[int, float, float]:
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
    t0, cpu0 = time.perf_counter(), time.process_time()
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
    dt, cpu = time.perf_counter() - t0, time.process_time() - cpu0
    consumer.close()
    return n, dt, cpu


def one_span(bootstrap: str, work: Path, i: int, beam_args: list[str], profile: Path | None):
    """One span over every event (a fresh group and output root): its phases and result."""
    from ingest.config import JoinConfig, KafkaSource, ParseConfig, ValidationConfig
    from ingest.pipeline import SpanJob
    from rewards.config import RewardConfig

    job = SpanJob(
        source=KafkaSource(bootstrap=bootstrap, group_id=f"bench-{i}"),
        output_root=work / f"out-{i}",
        reward_config=RewardConfig(),
        join=JoinConfig(),
        parse=ParseConfig(),
        validation=ValidationConfig(),
        beam_args=beam_args,
    )
    phases = {}
    t0 = time.perf_counter()
    for name, step in (("setup", job.setup), ("pipeline", job.run), ("commit", job.commit)):
        t, cpu = time.perf_counter(), time.process_time()
        if name == "pipeline" and profile is not None:
            out = _profiled(step, profile)
        else:
            out = step()
        phases[name] = round(time.perf_counter() - t, 2)
        phases[f"{name}_cpu"] = round(time.process_time() - cpu, 2)
    job.cleanup()
    return out, phases, time.perf_counter() - t0


def _profiled(step, path: Path):
    """Run ``step`` under cProfile; write the top 25 entries (cumulative and own time)."""
    import cProfile
    import io
    import pstats

    prof = cProfile.Profile(time.process_time)  # CPU time: robust to a loaded machine
    out = prof.runcall(step)
    buf = io.StringIO()
    stats = pstats.Stats(prof, stream=buf)
    stats.sort_stats("tottime").print_stats(25)
    stats.sort_stats("cumulative").print_stats(25)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(buf.getvalue())
    return out


def _summary(values: list[float]) -> dict[str, float]:
    """Median, min and max of repeated measurements."""
    return {
        "median": round(statistics.median(values), 3),
        "min": round(min(values), 3),
        "max": round(max(values), 3),
    }


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--events", type=int, default=100_000)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--out", type=Path, default=ROOT / "bench" / "results" / "ingest.json")
    parser.add_argument("--profile", type=Path, help="cProfile an extra span's pipeline here.")
    parser.add_argument("--note", default="", help="Free text stored with the result.")
    args, beam_args = parser.parse_known_args(argv)

    from ingest.kafka_io import ensure_topics
    from runtime.services import Broker

    work = Path(tempfile.mkdtemp(prefix="ratchet-bench-ingest-"))
    broker = Broker.start(work / "broker")
    runs = []
    try:
        ensure_topics(broker.bootstrap)
        sent, produce_s = produce(broker.bootstrap, args.events)
        if args.profile:  # an extra span, not timed: cProfile slows it down
            one_span(broker.bootstrap, work, -1, beam_args, args.profile)
        for i in range(args.repeats):
            raw_n, raw_s, raw_cpu = raw_consume(broker.bootstrap)
            span, phases, span_s = one_span(broker.bootstrap, work, i, beam_args, None)
            events_in = span.completions_in + span.signals_in + span.dead_letters
            if events_in != sent or raw_n != sent:
                raise RuntimeError(f"sent {sent}, Beam read {events_in}, raw read {raw_n}")
            pipeline_s = phases["setup"] + phases["pipeline"]
            beam_rate, raw_rate = events_in / pipeline_s, raw_n / raw_s
            runs.append(
                {
                    "beam_events_per_s": round(beam_rate, 1),
                    "raw_consume_events_per_s": round(raw_rate, 1),
                    "ratio": round(beam_rate / raw_rate, 3),
                    "span_events_per_s": round(events_in / span_s, 1),
                    "span_ratio": round(events_in / span_s / raw_rate, 3),
                    "span_phase_seconds": phases,
                    "pipeline_cpu_events_per_s": round(
                        events_in / max(phases["pipeline_cpu"], 1e-9), 1
                    ),
                    "cpu_ratio": round(raw_cpu / max(phases["pipeline_cpu"], 1e-9), 3),
                    "raw_seconds": round(raw_s, 2),
                    "raw_cpu_seconds": round(raw_cpu, 2),
                    "rows": span.rows,
                    "pending": span.pending,
                    "dead_letters": span.dead_letters,
                    "validated": span.validated,
                }
            )
            print(json.dumps(runs[-1]), flush=True)
    finally:
        broker.stop()
        shutil.rmtree(work, ignore_errors=True)
    keys = (
        "beam_events_per_s",
        "raw_consume_events_per_s",
        "ratio",
        "span_events_per_s",
        "pipeline_cpu_events_per_s",
        "cpu_ratio",
    )
    result = {
        "events": sent,
        "repeats": args.repeats,
        "beam_args": beam_args,
        **{k: _summary([r[k] for r in runs]) for k in (*keys, "span_ratio")},
        "peak_rss_mb": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1),
        "produce_events_per_s": round(sent / produce_s, 1),
        "load_average_1m": round(os.getloadavg()[0], 2),
        "note": args.note,
        "runs": runs,
    }
    print(json.dumps(result, indent=1))
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=1) + "\n")
    return result


if __name__ == "__main__":
    main()
