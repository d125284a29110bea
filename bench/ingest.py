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
  ``peak_rss_mb``: the peak resident memory (VmHWM) of the process that ran the span; every span
  runs in a child process of its own, so peaks of repeats never mix (Beam runs in that process
  unless a multi-process runner is named).

Each rate is measured ``--repeats`` times (raw consume, then a span with a fresh consumer group
and output root) and reported as median, min and max; the ratio is taken per repeat. A span
runs in chunks of ``--chunk-events`` (``SpanJob.chunk_events``); ``--compare-chunks N`` runs one
more span in chunks of ``N`` events and checks its rows equal the repeats' rows (sha256 of the
span table). Arguments the script does not know go to Beam (e.g. ``--direct_num_workers=2
--direct_running_mode=multi_processing``). ``--profile FILE`` runs one extra, untimed span under
cProfile and writes the top entries of its pipeline to FILE and of its commit to FILE_commit.

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


def one_span(
    bootstrap: str,
    work: Path,
    i: int,
    beam_args: list[str],
    profile: Path | None,
    chunk_events: int | None = None,
):
    """One span over every event (a fresh group and output root): its phases and result."""
    from ingest.config import IngestConfig, KafkaSource
    from ingest.pipeline import CHUNK_EVENTS, SpanJob

    job = SpanJob.from_config(
        IngestConfig(chunk_events=chunk_events or CHUNK_EVENTS),
        source=KafkaSource(bootstrap=bootstrap, group_id=f"bench-{i}"),
        output_root=work / f"out-{i}", beam_args=beam_args,
    )
    phases = {}
    t0 = time.perf_counter()
    for name, step in (("setup", job.setup), ("pipeline", job.run), ("commit", job.commit)):
        t, cpu = time.perf_counter(), time.process_time()
        if name in ("pipeline", "commit") and profile is not None:
            path = profile if name == "pipeline" else _commit_profile(profile)
            out = _profiled(step, path)
        else:
            out = step()
        phases[name] = round(time.perf_counter() - t, 2)
        phases[f"{name}_cpu"] = round(time.process_time() - cpu, 2)
        phases[f"{name}_peak_rss_mb"] = round(_vm_hwm_kb() / 1024, 1)  # VmHWM so far
    phases["chunks"] = len(list(job.staging.glob("chunk-*")))
    job.cleanup()
    return out, phases, time.perf_counter() - t0


def child_span(argv: list[str]) -> None:
    """``--child-span JSON``: run ``one_span`` here and print its figures as one JSON line
    (with this process's peak RSS and the sha256 of the span's rows)."""
    import hashlib

    import pyarrow.parquet as pq

    a = json.loads(argv[0])
    span, phases, span_s = one_span(
        a["bootstrap"],
        Path(a["work"]),
        a["i"],
        a["beam_args"],
        Path(a["profile"]) if a["profile"] else None,
        a["chunk_events"],
    )
    table = pq.read_table(span.path)
    sink = hashlib.sha256()
    for batch in table.to_batches():
        sink.update(batch.serialize())
    print(
        "RESULT "
        + json.dumps(
            {
                "phases": phases,
                "span_s": span_s,
                "rows": span.rows,
                "pending": span.pending,
                "dead_letters": span.dead_letters,
                "events_in": span.completions_in + span.signals_in + span.dead_letters,
                "validated": span.validated,
                "rows_sha256": sink.hexdigest(),
                "peak_rss_mb": round(_vm_hwm_kb() / 1024, 1),
            }
        ),
        flush=True,
    )


def _vm_hwm_kb() -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1])
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss


def run_child(
    bootstrap: str,
    work: Path,
    i: int,
    beam_args: list[str],
    profile: Path | None,
    chunk_events: int | None,
) -> dict:
    """``one_span`` in a fresh Python process (its own peak RSS); its figures."""
    import subprocess

    arg = json.dumps(
        {
            "bootstrap": bootstrap,
            "work": str(work),
            "i": i,
            "beam_args": beam_args,
            "profile": str(profile) if profile else None,
            "chunk_events": chunk_events,
        }
    )
    proc = subprocess.run(
        [sys.executable, __file__, "--child-span", arg],
        capture_output=True,
        text=True,
        check=False,
        timeout=3600,
    )
    lines = [ln for ln in proc.stdout.splitlines() if ln.startswith("RESULT ")]
    if proc.returncode != 0 or not lines:
        raise RuntimeError(f"span child failed ({proc.returncode}): {proc.stderr[-3000:]}")
    return json.loads(lines[-1][len("RESULT ") :])


def _commit_profile(profile: Path) -> Path:
    """Where ``--profile FILE`` puts the commit's profile: ``FILE`` with ``_commit`` added."""
    return profile.with_name(f"{profile.stem}_commit{profile.suffix}")


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
    parser.add_argument(
        "--profile", type=Path, help="cProfile an extra span: pipeline here, commit FILE_commit."
    )
    parser.add_argument("--chunk-events", type=int, help="SpanJob.chunk_events (default its own).")
    parser.add_argument("--compare-chunks", type=int, help="One more span in chunks of N events.")
    parser.add_argument("--note", default="", help="Free text stored with the result.")
    args, beam_args = parser.parse_known_args(argv)

    from ingest.kafka_io import ensure_topics
    from runtime.services import Broker

    work = Path(tempfile.mkdtemp(prefix="ratchet-bench-ingest-"))
    broker = Broker.start(work / "broker")
    runs, compare = [], None
    try:
        ensure_topics(broker.bootstrap)
        sent, produce_s = produce(broker.bootstrap, args.events)
        if args.profile:  # an extra span, not timed: cProfile slows it down
            run_child(broker.bootstrap, work, -1, beam_args, args.profile, args.chunk_events)
        for i in range(args.repeats):
            raw_n, raw_s, raw_cpu = raw_consume(broker.bootstrap)
            span = run_child(broker.bootstrap, work, i, beam_args, None, args.chunk_events)
            shutil.rmtree(work / f"out-{i}", ignore_errors=True)
            runs.append(_figures(span, sent, raw_n, raw_s, raw_cpu))
            print(json.dumps(runs[-1]), flush=True)
        if args.compare_chunks:
            span = run_child(broker.bootstrap, work, 99, beam_args, None, args.compare_chunks)
            compare = {
                "chunk_events": args.compare_chunks,
                "chunks": span["phases"]["chunks"],
                "rows": span["rows"],
                "peak_rss_mb": span["peak_rss_mb"],
                "pipeline_cpu_s": span["phases"]["pipeline_cpu"],
                "rows_equal": all(span["rows_sha256"] == r["rows_sha256"] for r in runs),
            }
            print(json.dumps(compare), flush=True)
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
        "span_ratio",
        "peak_rss_mb",
    )
    result = {
        "events": sent,
        "repeats": args.repeats,
        "beam_args": beam_args,
        "chunk_events": args.chunk_events,
        **{k: _summary([r[k] for r in runs]) for k in keys},
        "same_rows_every_repeat": len({r["rows_sha256"] for r in runs}) == 1,
        "compare_chunks": compare,
        "produce_events_per_s": round(sent / produce_s, 1),
        "load_average_1m": round(os.getloadavg()[0], 2),
        "note": args.note,
        "runs": runs,
    }
    print(json.dumps(result, indent=1))
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=1) + "\n")
    return result


def _figures(span: dict, sent: int, raw_n: int, raw_s: float, raw_cpu: float) -> dict:
    """One repeat's figures from a span child's result and the raw consume before it."""
    phases, events_in = span["phases"], span["events_in"]
    if events_in != sent or raw_n != sent:
        raise RuntimeError(f"sent {sent}, Beam read {events_in}, raw read {raw_n}")
    pipeline_s = phases["setup"] + phases["pipeline"]
    beam_rate, raw_rate = events_in / pipeline_s, raw_n / raw_s
    return {
        "beam_events_per_s": round(beam_rate, 1),
        "raw_consume_events_per_s": round(raw_rate, 1),
        "ratio": round(beam_rate / raw_rate, 3),
        "span_events_per_s": round(events_in / span["span_s"], 1),
        "span_ratio": round(events_in / span["span_s"] / raw_rate, 3),
        "span_phase_seconds": phases,
        "pipeline_cpu_events_per_s": round(events_in / max(phases["pipeline_cpu"], 1e-9), 1),
        "cpu_ratio": round(raw_cpu / max(phases["pipeline_cpu"], 1e-9), 3),
        "raw_seconds": round(raw_s, 2),
        "raw_cpu_seconds": round(raw_cpu, 2),
        "peak_rss_mb": span["peak_rss_mb"],
        "rows": span["rows"],
        "rows_sha256": span["rows_sha256"],
        "pending": span["pending"],
        "dead_letters": span["dead_letters"],
        "validated": span["validated"],
    }


if __name__ == "__main__":
    if sys.argv[1:2] == ["--child-span"]:
        child_span(sys.argv[2:])
    else:
        main()
