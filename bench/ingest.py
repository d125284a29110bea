"""Ingest throughput: events per core, a whole span end to end, one and two workers, the fixed
cost of a run; and the raw kafka-python consume rate beside them, on one broker.

    python bench/ingest.py --events 100000
    python bench/ingest.py --events 1000000 --repeats 1 --out bench/results/ingest_1m.json

Starts a local broker, produces ``--events`` synthetic events (completions, each with its
persistence checkpoints and, with some probability, a follow-up and feedback), then measures:

- ``pipeline_events_per_s_per_core``: events per CPU second of the Beam pipeline (read, parse
  and validate, detect, join, rows, and the workers' part writing), the CPU of the span's
  process and of its worker processes together;
- ``span_events_per_s``: the whole span end to end, commit included (setup, pipeline, commit);
- ``span_events_per_s_2_workers``: the same with two worker processes
  (``--direct_num_workers=2 --direct_running_mode=multi_processing``; ``--two-workers N``
  spans, default ``--repeats``), and ``two_workers_speedup`` = its median / the one-worker one;
- ``fixed_cost_s``: the cost of one run that has (almost) nothing to do, in a process that has
  already imported everything: the larger of an empty Kafka span (run after each span, same
  group: nothing new to read) and a tiny span of 12 recorded events; ``fixed_cost`` also holds
  a fresh process's cold figures (imports, first tiny span);
- ``goals``: whether each of the goals (pipeline >= 50k events/s per core, span >= 25k
  events/s at 1M events, two workers >= 1.6x one, fixed cost <= 2 s) was reached;
- ``date``, ``commit``, ``machine`` and the load (``load1_start``, ``load1``).

The secondary figures, as before:

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
        t, cpu, children = time.perf_counter(), time.process_time(), _children_cpu()
        if name in ("pipeline", "commit") and profile is not None:
            path = profile if name == "pipeline" else _commit_profile(profile)
            out = _profiled(step, path)
        else:
            out = step()
        phases[name] = round(time.perf_counter() - t, 2)
        phases[f"{name}_cpu"] = round(time.process_time() - cpu, 2)
        # worker processes of a multi-process runner (ended and reaped by the end of the run)
        phases[f"{name}_workers_cpu"] = round(_children_cpu() - children, 2)
        phases[f"{name}_peak_rss_mb"] = round(_vm_hwm_kb() / 1024, 1)  # VmHWM so far
    phases["chunks"] = len(list(job.staging.glob("chunk-*")))
    job.cleanup()
    span_s = time.perf_counter() - t0
    # the fixed cost of one run: the next span of the same group reads nothing new
    empty = SpanJob.from_config(
        IngestConfig(chunk_events=chunk_events or CHUNK_EVENTS),
        source=KafkaSource(bootstrap=bootstrap, group_id=f"bench-{i}"),
        output_root=work / f"out-{i}", beam_args=beam_args,
    )
    t, cpu = time.perf_counter(), time.process_time()
    empty.setup()
    empty.run()
    got = empty.commit()
    empty.cleanup()
    phases["empty_span_s"] = round(time.perf_counter() - t, 3)
    phases["empty_span_cpu"] = round(time.process_time() - cpu, 3)
    assert got.rows == 0 and got.completions_in + got.signals_in == 0
    return out, phases, span_s


def _children_cpu() -> float:
    t = os.times()
    return t.children_user + t.children_system


def child_span(argv: list[str]) -> None:
    """``--child-span JSON``: run ``one_span`` here and print its figures as one JSON line
    (with this process's peak RSS and the sha256 of the span's rows)."""
    import hashlib

    import pyarrow.parquet as pq

    a = json.loads(argv[0])
    timers = _phase_timers() if a.get("phases") else None
    span, phases, span_s = one_span(
        a["bootstrap"],
        Path(a["work"]),
        a["i"],
        a["beam_args"],
        Path(a["profile"]) if a["profile"] else None,
        a["chunk_events"],
    )
    table = pq.read_table(span.path).sort_by([("response_id", "ascending")]).combine_chunks()
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
                "phase_cpu_s_per_100k": (
                    _per_100k(timers, phases, span.completions_in + span.signals_in
                              + span.dead_letters) if timers is not None else None
                ),
            }
        ),
        flush=True,
    )


PHASE_STEPS = {
    "read": ("ingest.transforms", "ReadKafkaRanges", "process"),
    "parse_and_validate": ("ingest.transforms", "ClassifyRecords", "process"),
    "join": ("ingest.transforms", None, "join_group"),
    "detect": ("ingest.join", None, "followup_columns"),
    "rows_with_detect": ("ingest.transforms", None, "reward_table"),
    "parts": ("ingest.transforms", "WriteParts", "_flush"),
}
"""Where each phase's CPU is taken: (module, class or None, function); generators are timed
step by step. ``rows`` = ``rows_with_detect`` - ``detect``; ``beam`` = the pipeline's CPU
less the phases (building and starting the run, the shuffle, coders, sinks)."""


def _phase_timers() -> dict[str, float]:
    """Wrap each of ``PHASE_STEPS`` with a CPU timer (in this process); the running totals."""
    import functools
    import importlib
    import inspect

    totals: dict[str, float] = {}
    for name, (module, cls, attr) in PHASE_STEPS.items():
        owner = importlib.import_module(module)
        owner = getattr(owner, cls) if cls else owner
        f = getattr(owner, attr)
        if inspect.isgeneratorfunction(f):
            def timed(*a, _f=f, _name=name, **k):
                it = _f(*a, **k)
                while True:
                    t = time.process_time()
                    try:
                        x = next(it)
                    except StopIteration:
                        totals[_name] = totals.get(_name, 0.0) + time.process_time() - t
                        return
                    totals[_name] = totals.get(_name, 0.0) + time.process_time() - t
                    yield x
        else:
            def timed(*a, _f=f, _name=name, **k):
                t = time.process_time()
                try:
                    return _f(*a, **k)
                finally:
                    totals[_name] = totals.get(_name, 0.0) + time.process_time() - t
        setattr(owner, attr, functools.wraps(f)(timed))
    return totals


def _per_100k(totals: dict[str, float], phases: dict, events: int) -> dict[str, float]:
    scale = 100_000 / max(events, 1)
    out = {k: totals.get(k, 0.0) for k in PHASE_STEPS}
    out["rows"] = out.pop("rows_with_detect") - out["detect"]
    out["beam"] = phases["pipeline_cpu"] - sum(out.values())
    out["setup_driver"] = phases["setup_cpu"]
    out["commit_driver"] = phases["commit_cpu"]
    return {k: round(v * scale, 3) for k, v in out.items()}


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
    phases: bool = False,
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
            "phases": phases,
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


TWO_WORKERS = ["--direct_num_workers=2", "--direct_running_mode=multi_processing"]

TINY_EVENTS = 12


def fixed_cost_child() -> dict:
    """A tiny span (``TINY_EVENTS`` recorded events, the same steps as a Kafka span but the
    read) in a fresh Python process: the cold run (from the interpreter's start, imports
    included) and three warm runs after it in the same process."""
    import subprocess

    t = time.perf_counter()
    proc = subprocess.run(
        [sys.executable, __file__, "--fixed-cost"], capture_output=True, text=True, check=False,
        timeout=900,
    )
    wall = time.perf_counter() - t
    lines = [ln for ln in proc.stdout.splitlines() if ln.startswith("RESULT ")]
    if proc.returncode != 0 or not lines:
        raise RuntimeError(f"fixed-cost child failed ({proc.returncode}): {proc.stderr[-3000:]}")
    got = json.loads(lines[-1][len("RESULT ") :])
    got["cold_process_wall_s"] = round(wall, 2)  # interpreter start to exit, seen from outside
    return got


def fixed_cost_run() -> None:
    """``--fixed-cost``: the child of ``fixed_cost_child``."""
    t0, cpu0 = time.perf_counter(), time.process_time()
    from ingest.config import FileSource, IngestConfig
    from ingest.pipeline import SpanJob
    from ingest.synthetic import append_records, stream

    imports = (time.perf_counter() - t0, time.process_time() - cpu0)
    work = Path(tempfile.mkdtemp(prefix="ratchet-bench-fixed-"))
    try:
        start = datetime.now(UTC) - timedelta(hours=1)
        append_records(work / "events.jsonl",
                       list(stream(TINY_EVENTS, start=start, spacing_s=2.0, seed=1))[:TINY_EVENTS])
        runs = []
        for i in range(4):
            t, cpu = time.perf_counter(), time.process_time()
            job = SpanJob.from_config(IngestConfig(), source=FileSource(path=work / "events.jsonl"),
                                      output_root=work / f"out-{i}")
            job.setup()
            job.run()
            span = job.commit()
            job.cleanup()
            assert span.rows > 0
            runs.append((time.perf_counter() - t, time.process_time() - cpu))
    finally:
        shutil.rmtree(work, ignore_errors=True)
    result = {
        "cold_imports_s": round(imports[0], 2),
        "cold_imports_cpu_s": round(imports[1], 2),
        "cold_tiny_span_s": round(runs[0][0], 2),
        "cold_tiny_span_cpu_s": round(runs[0][1], 2),
        "cold_total_s": round(imports[0] + runs[0][0], 2),
        "warm_tiny_span_s": _summary([r[0] for r in runs[1:]]),
        "warm_tiny_span_cpu_s": _summary([r[1] for r in runs[1:]]),
    }
    print("RESULT " + json.dumps(result), flush=True)


def _git_commit() -> str:
    import subprocess

    out = subprocess.run(["git", "-C", str(ROOT), "rev-parse", "--short", "HEAD"],
                         capture_output=True, text=True, check=False)
    return out.stdout.strip()


def _machine() -> str:
    import platform

    model = next((ln.split(":", 1)[1].strip() for ln in
                  Path("/proc/cpuinfo").read_text().splitlines()
                  if ln.startswith("model name")), platform.processor())
    return f"{os.cpu_count()}-core CPU box ({model}), Python {platform.python_version()}"


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
    parser.add_argument(
        "--phases", action="store_true",
        help="One more span with CPU timers around each step: CPU-s per 100k events per phase.",
    )
    parser.add_argument(
        "--two-workers", type=int, default=None, metavar="N",
        help="N more spans on two worker processes (multi_processing); default --repeats.",
    )
    args, beam_args = parser.parse_known_args(argv)
    two_repeats = args.repeats if args.two_workers is None else args.two_workers

    from ingest.kafka_io import ensure_topics
    from runtime.services import Broker

    load_start = round(os.getloadavg()[0], 2)
    work = Path(tempfile.mkdtemp(prefix="ratchet-bench-ingest-"))
    broker = Broker.start(work / "broker")
    runs, two, compare = [], [], None
    try:
        ensure_topics(broker.bootstrap)
        sent, produce_s = produce(broker.bootstrap, args.events)
        if args.profile:  # an extra span, not timed: cProfile slows it down
            run_child(broker.bootstrap, work, -1, beam_args, args.profile, args.chunk_events)
        for i in range(max(args.repeats, two_repeats)):  # one worker, then two, interleaved
            if i < args.repeats:
                raw_n, raw_s, raw_cpu = raw_consume(broker.bootstrap)
                span = run_child(broker.bootstrap, work, i, beam_args, None, args.chunk_events)
                shutil.rmtree(work / f"out-{i}", ignore_errors=True)
                runs.append(_figures(span, sent, raw_n, raw_s, raw_cpu))
                print(json.dumps(runs[-1]), flush=True)
            if i < two_repeats:
                raw_n, raw_s, raw_cpu = raw_consume(broker.bootstrap)
                span = run_child(broker.bootstrap, work, 100 + i, [*beam_args, *TWO_WORKERS],
                                 None, args.chunk_events)
                shutil.rmtree(work / f"out-{100 + i}", ignore_errors=True)
                two.append(_figures(span, sent, raw_n, raw_s, raw_cpu))
                print(json.dumps({"two_workers": two[-1]}), flush=True)
        fixed = fixed_cost_child()
        print(json.dumps({"fixed_cost": fixed}), flush=True)
        phases = None
        if args.phases:  # an extra span, not timed: the timers cost a little
            span = run_child(broker.bootstrap, work, 200, beam_args, None, args.chunk_events,
                             phases=True)
            phases = span["phase_cpu_s_per_100k"]
            print(json.dumps({"phase_cpu_s_per_100k": phases}), flush=True)
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
        "pipeline_events_per_s_per_core",
        "span_events_per_s",
        "beam_events_per_s",
        "raw_consume_events_per_s",
        "ratio",
        "pipeline_cpu_events_per_s",
        "cpu_ratio",
        "span_ratio",
        "commit_s",
        "peak_rss_mb",
    )
    empty = [r["span_phase_seconds"]["empty_span_s"] for r in runs]
    empty_two = [r["span_phase_seconds"]["empty_span_s"] for r in two]
    result = {
        "date": datetime.now(UTC).isoformat(timespec="seconds"),
        "commit": _git_commit(),
        "machine": _machine(),
        "load1_start": load_start,
        "load1": round(os.getloadavg()[0], 2),
        "events": sent,
        "repeats": args.repeats,
        "beam_args": beam_args,
        "chunk_events": args.chunk_events,
        **{k: _summary([r[k] for r in runs]) for k in keys},
        "span_events_per_s_2_workers": (
            _summary([r["span_events_per_s"] for r in two]) if two else None
        ),
        "pipeline_events_per_s_per_core_2_workers": (
            _summary([r["pipeline_events_per_s_per_core"] for r in two]) if two else None
        ),
        "two_workers_speedup": (
            round(statistics.median([r["span_events_per_s"] for r in two])
                  / statistics.median([r["span_events_per_s"] for r in runs]), 3)
            if two and runs else None
        ),
        "fixed_cost_s": max(statistics.median(empty), fixed["warm_tiny_span_s"]["median"]),
        "fixed_cost": {
            "empty_kafka_span_s": _summary(empty),
            "empty_kafka_span_2_workers_s": _summary(empty_two) if two else None,
            **fixed,
        },
        "phase_cpu_s_per_100k": phases,
        "same_rows_every_repeat": len({r["rows_sha256"] for r in runs + two}) == 1,
        "compare_chunks": compare,
        "produce_events_per_s": round(sent / produce_s, 1),
        "load_average_1m": round(os.getloadavg()[0], 2),
        "note": args.note,
        "runs": runs,
        "runs_2_workers": two,
    }
    result["goals"] = {
        "pipeline_events_per_s_per_core >= 50000":
            result["pipeline_events_per_s_per_core"]["median"] >= 50_000,
        "span_events_per_s >= 25000 at 1M events": (
            result["span_events_per_s"]["median"] >= 25_000 if sent >= 1_000_000 else None
        ),
        "span_events_per_s_2_workers >= 1.6 x span_events_per_s": (
            result["two_workers_speedup"] >= 1.6 if two else None
        ),
        "fixed_cost_s <= 2": result["fixed_cost_s"] <= 2.0,
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
    pipeline_cpu = phases["pipeline_cpu"] + phases["pipeline_workers_cpu"]
    return {
        "pipeline_events_per_s_per_core": round(events_in / max(pipeline_cpu, 1e-9), 1),
        "commit_s": phases["commit"],
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
    elif sys.argv[1:2] == ["--fixed-cost"]:
        fixed_cost_run()
    else:
        main()
