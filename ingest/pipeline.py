"""The ingest pipeline: Kafka offset ranges -> validated, joined, rewarded Parquet spans.

One call of ``run_span`` makes one span:

1. ``setup``: create missing topics, ``recover`` what an earlier crashed run left (finish its
   after-commit steps, delete un-manifested files), load the carried state of the last span,
   and fix the read ranges: for every topic partition ``[last end or committed, high-water)``.
2. ``run``: a Beam pipeline (DirectRunner unless told otherwise) that reads the ranges with a
   Splittable DoFn (``OffsetRestrictionTracker``, one restriction per partition range),
   classifies every record (good events keyed by response id, dead letters with a reason),
   groups by response id together with the carried events, joins signals in event time against
   the watermark, computes rewards, and stages rows / pending / late / dead letters.
3. ``commit``: validates the rows with Great Expectations (a failing span is quarantined),
   writes the rows as hive-partitioned Parquet and then the manifest (the commit point), then
   publishes dead letters and late signals and commits the Kafka offsets (each marked done in
   the manifest folder, so ``recover`` can finish them after a crash).

Every event's reward is written exactly once in effect: rows are only visible through
manifests, a manifest carries the offsets it covers, and the next span starts where the last
manifest ended. Dead letters and late signals are published at least once (keyed by their
source position, so consumers can deduplicate).

Deliberately left out: the reward maths (rewards/), the join rules (ingest/join.py),
classification (ingest/parse.py) and storage layout (ingest/spans.py).
"""

from __future__ import annotations

import argparse
import json
import os
import signal
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import apache_beam as beam
import pyarrow as pa
import pyarrow.parquet as pq
from apache_beam.io.restriction_trackers import OffsetRange, OffsetRestrictionTracker
from apache_beam.metrics import Metrics
from apache_beam.options.pipeline_options import PipelineOptions
from apache_beam.transforms.core import RestrictionProvider
from apache_beam.transforms.window import GlobalWindow
from apache_beam.utils.timestamp import MIN_TIMESTAMP
from apache_beam.utils.windowed_value import WindowedValue

from ingest.config import (
    FileSource,
    IngestConfig,
    JoinConfig,
    KafkaSource,
    ParseConfig,
    ValidationConfig,
)
from ingest.join import US, Windows, join_group, next_in_conversation
from ingest.kafka_io import FETCH_SETTINGS, KafkaRecord
from ingest.parse import EventItem, classify
from ingest.schema import REWARD_SCHEMA, TOPICS, DeadLetter
from ingest.spans import SpanStore, manifest_record, span_id_for
from rewards.config import RewardConfig
from rewards.monitors import batch_monitors

FAILPOINT_ENV = "RATCHET_INGEST_FAILPOINT"
"""Crash-test hook: set to a step name ('mid_read', 'mid_write', 'after_write',
'after_commit') and the ingest process SIGKILLs itself there. Unset in normal runs."""

READ_BATCH = 2000
ROWS_PER_TABLE = 4096


def failpoint(step: str) -> None:
    """SIGKILL this process if ``RATCHET_INGEST_FAILPOINT`` names ``step`` (crash tests)."""
    if os.environ.get(FAILPOINT_ENV) == step:
        os.kill(os.getpid(), signal.SIGKILL)


@dataclass(frozen=True)
class SpanResult:
    """What one ``run_span`` produced."""

    span_id: str
    path: Path
    """The span's Parquet file (``REWARD_SCHEMA``; under spans/ or, if quarantined, quarantine/)."""
    rows: int
    dead_letters: int
    completions_in: int
    signals_in: int
    validated: bool
    validation_report: dict[str, Any]
    offsets: dict[str, dict[int, tuple[int, int]]]
    manifest: Path | None = None
    """Folder of the span's manifest (manifest.json, carried state, dead letters)."""
    pending: int = 0
    late: int = 0
    duplicates: int = 0
    quarantined: bool = False
    defaulted_share: float = 0.0
    monitors: dict[str, float] = field(default_factory=dict)


# --- reading -----------------------------------------------------------------------------------
class _PartitionRangeProvider(RestrictionProvider):
    """One restriction per (topic, partition, start, end) element: ``OffsetRange(start, end)``."""

    def initial_restriction(self, element: tuple[str, int, int, int]) -> OffsetRange:
        return OffsetRange(element[2], element[3])

    def create_tracker(self, restriction: OffsetRange) -> OffsetRestrictionTracker:
        return OffsetRestrictionTracker(restriction)

    def restriction_size(self, element: Any, restriction: OffsetRange) -> int:
        return restriction.size()


class ReadKafkaRanges(beam.DoFn):
    """Splittable DoFn: reads each claimed offset of a partition range, emits record batches.

    Each offset is claimed with ``try_claim`` before it is emitted, so a runner may split the
    range at any point (dynamic work rebalancing). Output: lists of ``KafkaRecord`` tuples.
    """

    def __init__(self, bootstrap: str, batch: int = READ_BATCH) -> None:
        self.bootstrap = bootstrap
        self.batch = batch

    def setup(self) -> None:
        from kafka import KafkaConsumer

        self.consumer = KafkaConsumer(
            bootstrap_servers=self.bootstrap, enable_auto_commit=False, **FETCH_SETTINGS
        )

    def process(
        self,
        element: tuple[str, int, int, int],
        tracker: OffsetRestrictionTracker = beam.DoFn.RestrictionParam(_PartitionRangeProvider()),
    ) -> Iterator[list[tuple[Any, ...]]]:
        from kafka import TopicPartition

        topic, partition = element[0], element[1]
        tp = TopicPartition(topic, partition)
        start = tracker.current_restriction().start
        self.consumer.assign([tp])
        self.consumer.seek(tp, start)
        out: list[tuple[Any, ...]] = []
        empty = 0
        while self.consumer.position(tp) < tracker.current_restriction().stop:
            records = self.consumer.poll(timeout_ms=500).get(tp, [])
            empty = empty + 1 if not records else 0
            if empty > 40:
                raise TimeoutError(f"{topic}[{partition}] stalled at {self.consumer.position(tp)}")
            for r in records:
                if r.offset < start:
                    continue
                if not tracker.try_claim(r.offset):  # split off: the rest is another's
                    if out:
                        yield out
                    return
                out.append((topic, partition, r.offset, r.key, r.value, r.timestamp))
                if len(out) >= self.batch:
                    yield out
                    out = []
            failpoint("mid_read")
        if out:
            yield out

    def teardown(self) -> None:
        self.consumer.close()


class ReadFileRanges(beam.DoFn):
    """Reads lines ``[start, end)`` of a recorded JSONL file; emits record batches."""

    def process(self, element: tuple[str, int, int, int]) -> Iterator[list[tuple[Any, ...]]]:
        path, _, start, end = element
        out: list[tuple[Any, ...]] = []
        with open(path, encoding="utf-8") as f:
            for i, line in enumerate(f):
                if i >= end:
                    break
                if i < start:
                    continue
                d = json.loads(line)
                key = d["key"].encode() if d.get("key") is not None else None
                out.append((d["topic"], 0, i, key, d["value"].encode(), d["timestamp_ms"]))
        yield out


# --- parse, join, format -----------------------------------------------------------------------
class ClassifyRecords(beam.DoFn):
    """Record batches -> ``(response_id, [item, ...])``; dead letters and event times tagged."""

    def __init__(self, parse: ParseConfig) -> None:
        self.limits = parse.model_dump()
        self.completions = Metrics.counter("ingest", "completions_in")
        self.signals = Metrics.counter("ingest", "signals_in")
        self.bad = Metrics.counter("ingest", "bad_records")

    def process(self, batch: list[tuple[Any, ...]]) -> Iterator[Any]:
        max_t = None
        n_completion = n_signal = n_bad = 0
        by_id: dict[str, list[tuple[Any, ...]]] = {}
        for rec in batch:
            got = classify(KafkaRecord(*rec), **self.limits)
            if isinstance(got, DeadLetter):
                n_bad += 1
                yield beam.pvalue.TaggedOutput("dead", got.to_json())
                continue
            response_id, item = got
            if item.kind == "completion":
                n_completion += 1
            else:
                n_signal += 1
            max_t = item.event_time_us if max_t is None else max(max_t, item.event_time_us)
            by_id.setdefault(response_id, []).append(tuple(item))
            if item.conversation_id:
                conv = (item.conversation_id, (response_id, item.event_time_us))
                yield beam.pvalue.TaggedOutput("conv", conv)
        # one element per response id and batch: a partition's batch often holds all four
        # persistence checkpoints of a completion, so this shrinks the shuffle
        yield from by_id.items()
        self.completions.inc(n_completion)
        self.signals.inc(n_signal)
        self.bad.inc(n_bad)
        if max_t is not None:
            yield beam.pvalue.TaggedOutput("times", max_t)


class JoinSignals(beam.DoFn):
    """Per response id: dedup, join in event time, reward, or carry / late / dead-letter.

    Reward rows leave as Arrow tables of up to ``ROWS_PER_TABLE`` rows (built per bundle), so
    rows never pass through Beam's per-element coders.
    """

    def __init__(
        self,
        windows: Windows,
        reward_config: RewardConfig,
        finalized: dict[str, int],
        drain: bool,
    ) -> None:
        self.windows = windows
        self.reward_config = reward_config
        self.finalized = finalized
        self.drain = drain
        self.duplicates = Metrics.counter("ingest", "duplicates")

    def start_bundle(self) -> None:
        self.rows: list[dict[str, Any]] = []

    def finish_bundle(self) -> Iterator[WindowedValue]:
        if self.rows:
            yield WindowedValue(rows_to_table(self.rows), MIN_TIMESTAMP, [GlobalWindow()])
            self.rows = []

    def process(self, element: tuple[str, Any], watermark: list[int | None]) -> Iterator[Any]:
        response_id, groups = element
        out = join_group(
            response_id,
            (EventItem(*i) for items in groups for i in items),
            watermark_us=int(watermark[1]),  # type: ignore[arg-type]
            finalized=self.finalized,
            windows=self.windows,
            reward_config=self.reward_config,
            drain=self.drain,
        )
        if out.duplicates:
            self.duplicates.inc(out.duplicates)
        if out.row is not None:
            self.rows.append(out.row)
            if len(self.rows) >= ROWS_PER_TABLE:
                yield rows_to_table(self.rows)
                self.rows = []
            yield beam.pvalue.TaggedOutput(
                "finalized", json.dumps([response_id, out.finalized_at_us])
            )
        for item in out.pending:
            yield beam.pvalue.TaggedOutput("pending", json.dumps([response_id, _item_json(item)]))
        for d in out.late:
            yield beam.pvalue.TaggedOutput("late", d.to_json())
        for d in out.dead:
            yield beam.pvalue.TaggedOutput("dead", d.to_json())


def _item_json(item: EventItem) -> dict[str, Any]:
    d = item._asdict()
    d["value"] = item.value.decode("utf-8")
    return d


def rows_to_table(rows: list[dict[str, Any]]) -> pa.Table:
    """Reward rows (dicts, ``event_time`` in µs) -> a ``REWARD_SCHEMA`` table."""
    return pa.Table.from_pylist(rows, schema=REWARD_SCHEMA)


@dataclass(frozen=True)
class PipelineSpec:
    """Plain inputs of one Beam run (what ``SpanJob`` computed in ``setup``)."""

    staging: Path
    ranges: list[tuple[str, int, int, int]]
    source: str
    """'kafka' or 'file'."""
    bootstrap: str | None
    carried: list[tuple[str, EventItem]]
    finalized: dict[str, int]
    prev_max_event_time_us: int | None
    windows: Windows
    allowed_lateness_us: int
    parse: ParseConfig
    reward_config: RewardConfig
    drain: bool


def build_pipeline(p: beam.Pipeline, spec: PipelineSpec) -> None:
    """Add the ingest steps to ``p``; outputs land in ``spec.staging``."""
    read = ReadKafkaRanges(spec.bootstrap) if spec.source == "kafka" else ReadFileRanges()
    batches = p | "PartitionRanges" >> beam.Create(spec.ranges) | "ReadRanges" >> beam.ParDo(read)
    parsed = batches | "Classify" >> beam.ParDo(ClassifyRecords(spec.parse)).with_outputs(
        "dead", "times", "conv", main="events"
    )
    carried = p | "CarriedEvents" >> beam.Create([(k, [tuple(i)]) for k, i in spec.carried])
    carried_conv = p | "CarriedConversations" >> beam.Create(
        [(i.conversation_id, (k, i.event_time_us)) for k, i in spec.carried if i.conversation_id]
    )
    next_markers = (
        (parsed.conv, carried_conv)
        | "WithCarriedConversations" >> beam.Flatten()
        | "GroupByConversation" >> beam.GroupByKey()
        | "NextInConversation" >> beam.FlatMap(_next_markers)
    )
    prev = spec.prev_max_event_time_us
    watermark = parsed.times | "Watermark" >> beam.CombineGlobally(
        _WatermarkFn(prev, spec.allowed_lateness_us, spec.drain)
    )
    joined = (
        (parsed.events, carried, next_markers)
        | "WithCarried" >> beam.Flatten()
        | "GroupByResponseId" >> beam.GroupByKey()
        | "JoinSignals"
        >> beam.ParDo(
            JoinSignals(spec.windows, spec.reward_config, spec.finalized, spec.drain),
            watermark=beam.pvalue.AsSingleton(watermark),
        ).with_outputs("pending", "late", "dead", "finalized", main="rows")
    )
    _ = joined.rows | "WriteRows" >> beam.io.WriteToParquetBatched(
        str(spec.staging / "rows"),
        schema=REWARD_SCHEMA,
        num_shards=1,
        shard_name_template="",
        file_name_suffix=".parquet",
    )
    side = [
        pcoll | f"Tag_{label}" >> beam.Map(_tag_line, name)
        for label, name, pcoll in (
            ("parse_dead", "dead", parsed.dead),
            ("join_dead", "dead", joined.dead),
            ("pending", "pending", joined.pending),
            ("late", "late", joined.late),
            ("finalized", "finalized", joined.finalized),
            ("watermark", "watermark", watermark | "WatermarkJson" >> beam.Map(json.dumps)),
        )
    ]
    _ = (
        side
        | "AllSideOutputs" >> beam.Flatten()
        | "WriteSideOutputs"
        >> beam.io.WriteToText(
            str(spec.staging / "side"),
            file_name_suffix=".tsv",
            num_shards=1,
            shard_name_template="",
            coder=_Utf8Coder(),
        )
    )


def _next_markers(element: tuple[str, Any]) -> Iterator[tuple[str, list[tuple[Any, ...]]]]:
    """``(response_id, [marker])`` for each completion of a conversation that has a next one."""
    _, entries = element
    for response_id, marker in next_in_conversation(entries):
        yield response_id, [tuple(marker)]


def _tag_line(payload: str | bytes, name: str) -> bytes:
    """``name<TAB>payload``: the side outputs share one staged file."""
    body = payload if isinstance(payload, bytes) else payload.encode("utf-8")
    return name.encode() + b"\t" + body


class _Utf8Coder(beam.coders.Coder):
    """Writes str or bytes lines as UTF-8."""

    def encode(self, value: str | bytes) -> bytes:
        return value if isinstance(value, bytes) else value.encode("utf-8")

    def decode(self, encoded: bytes) -> str:
        return encoded.decode("utf-8")

    def is_deterministic(self) -> bool:
        return True


class _WatermarkFn(beam.CombineFn):
    """Largest event time (this span's and the carried one), and the watermark it implies.

    Output: ``[max_event_time_us, watermark_us]`` where watermark = max - allowed lateness, or
    a far-future value when draining. With no events at all, both come from the carried max.
    """

    def __init__(self, prev_max: int | None, lateness_us: int, drain: bool) -> None:
        self.prev_max = prev_max
        self.lateness_us = lateness_us
        self.drain = drain

    def create_accumulator(self) -> int | None:
        return self.prev_max

    def add_input(self, acc: int | None, t: int) -> int:
        return t if acc is None else max(acc, t)

    def merge_accumulators(self, accs: Any) -> int | None:
        vals = [a for a in accs if a is not None]
        return max(vals) if vals else None

    def extract_output(self, acc: int | None) -> list[int | None]:
        if self.drain:
            return [acc, 2**62]
        return [acc, -(2**62) if acc is None else acc - self.lateness_us]


# --- the job -----------------------------------------------------------------------------------
class SpanJob:
    """Makes one span: ``setup`` -> ``run`` -> ``commit`` -> ``cleanup`` (see module docstring)."""

    def __init__(
        self,
        *,
        source: KafkaSource | FileSource,
        output_root: Path,
        reward_config: RewardConfig,
        join: JoinConfig,
        parse: ParseConfig,
        validation: ValidationConfig,
        drain: bool = False,
        beam_args: list[str] | None = None,
    ) -> None:
        self.source = source
        self.store = SpanStore(output_root)
        self.reward_config = reward_config
        self.join = join
        self.parse = parse
        self.validation = validation
        self.drain = drain
        self.beam_args = beam_args or ["--runner=DirectRunner"]

    # setup ------------------------------------------------------------------------------------
    def setup(self) -> None:
        self.store.root.mkdir(parents=True, exist_ok=True)
        if isinstance(self.source, KafkaSource):
            from ingest.kafka_io import ensure_topics

            ensure_topics(self.source.bootstrap, self.source.partitions)
        self.recover()
        self.state = self.store.load_state()
        self.span_id = span_id_for(self.state.seq + 1)
        self.offsets = self._ranges()

    def recover(self) -> None:
        """Finish after-commit steps of committed spans; delete files of uncommitted ones."""
        for d in self.store.manifest_dirs():
            self._publish(d.name)
            self._commit_offsets(d.name)
        self.store.remove_orphans()

    def _ranges(self) -> dict[str, dict[int, tuple[int, int]]]:
        if isinstance(self.source, FileSource):
            with open(self.source.path, "rb") as f:
                n = sum(1 for _ in f)
            start = self.state.ends.get("file", {}).get(0, 0)
            return {"file": {0: (min(start, n), n)}}
        from ingest.kafka_io import committed_offsets, high_watermarks

        committed = committed_offsets(self.source.bootstrap, self.source.group_id, TOPICS.values())
        out: dict[str, dict[int, tuple[int, int]]] = {}
        for topic in TOPICS.values():
            out[topic] = {}
            for p, hw in high_watermarks(self.source.bootstrap, topic).items():
                start = max(committed[topic].get(p, 0), self.state.ends.get(topic, {}).get(p, 0))
                out[topic][p] = (start if start <= hw else 0, hw)  # topic recreated: start over
        return out

    # run --------------------------------------------------------------------------------------
    def run(self) -> None:
        self.staging = self.store.staging_dir(self.span_id)
        spec = self._spec()
        options = PipelineOptions(self.beam_args)
        p = beam.Pipeline(options=options)
        build_pipeline(p, spec)
        result = p.run()
        result.wait_until_finish()
        self.metrics = _counters(result)

    def _spec(self) -> PipelineSpec:
        if isinstance(self.source, FileSource):
            ranges = [(str(self.source.path), 0, s, e) for s, e in self.offsets["file"].values()]
            bootstrap = None
        else:
            ranges = [
                (t, p, s, e)
                for t, parts in self.offsets.items()
                for p, (s, e) in parts.items()
                if e > s
            ]
            bootstrap = self.source.bootstrap
        return PipelineSpec(
            staging=self.staging,
            ranges=ranges,
            source=self.source.type,
            bootstrap=bootstrap,
            carried=self.state.pending,
            finalized=self.state.finalized,
            prev_max_event_time_us=self.state.max_event_time_us,
            windows=Windows.from_seconds(
                self.join.edit_persistence_window_s,
                self.join.followup_window_s,
                self.join.feedback_window_s,
            ),
            allowed_lateness_us=int(self.join.allowed_lateness_s * US),
            parse=self.parse,
            reward_config=self.reward_config,
            drain=self.drain,
        )

    # commit -----------------------------------------------------------------------------------
    def commit(self) -> SpanResult:
        from ingest.validate import drift_bounds, validate_span

        staged = _Staged(self.staging)
        table = staged.rows()
        v = self.validation
        ok, report = validate_span(
            table,
            reward_bounds=self.reward_config.bounds(),
            max_completion_tokens=v.max_completion_tokens,
            max_latency_ms=v.max_latency_ms,
            min_join_share=v.min_join_share,
            min_current_version_share=v.min_current_version_share,
            drift=drift_bounds(
                self.state.stats,
                rows=table.num_rows,
                max_reward_mean_drift=v.max_reward_mean_drift,
                max_reward_std_drift=v.max_reward_std_drift,
                max_length_drift_ratio=v.max_length_drift_ratio,
                min_rows_for_drift=v.min_rows_for_drift,
            ),
        )
        dead, late, pending = staged.dead_letters(), staged.late(), staged.pending()
        stats = batch_monitors(table, dead_letters=len(dead))
        rel = self.store.write_rows(self.span_id, table, quarantined=not ok)
        failpoint("mid_write")
        max_t, watermark = staged.watermark(self.state.max_event_time_us)
        finalized = self._finalized(staged.finalized(), max_t)
        counts = {
            "rows": table.num_rows,
            "dead_letters": len(dead),
            "late": len(late),
            "pending": len(pending),
            "duplicates": self.metrics.get("duplicates", 0),
            "completions_in": self.metrics.get("completions_in", 0),
            "signals_in": self.metrics.get("signals_in", 0),
        }
        manifest = manifest_record(
            span_id=self.span_id,
            seq=self.state.seq + 1,
            source=self._source_record(),
            offsets=self.offsets,
            files=[rel],
            status="ok" if ok else "quarantined",
            counts=counts,
            max_event_time_us=max_t,
            watermark_us=watermark,
            stats=stats,
            validation=report,
        )
        path = self.store.commit_manifest(manifest, pending, finalized, late, dead)
        failpoint("after_write")
        self._publish(self.span_id)
        self._commit_offsets(self.span_id)
        failpoint("after_commit")
        return SpanResult(
            span_id=self.span_id,
            path=self.store.root / rel,
            rows=table.num_rows,
            dead_letters=len(dead),
            completions_in=counts["completions_in"],
            signals_in=counts["signals_in"],
            validated=ok,
            validation_report=report,
            offsets=self.offsets,
            manifest=path,
            pending=len(pending),
            late=len(late),
            duplicates=counts["duplicates"],
            quarantined=not ok,
            defaulted_share=stats["defaulted_share"],
            monitors=stats,
        )

    def _finalized(self, new: dict[str, int], max_event_time_us: int | None) -> dict[str, int]:
        """Finalised ids to remember: the new ones, and old ones within the retention.

        Retention counts from the largest event time seen (not the watermark, which a drain
        pushes to the far future).
        """
        keep_after = (max_event_time_us or 0) - int(self.join.finalized_retention_s * US)
        merged = {k: t for k, t in self.state.finalized.items() if t >= keep_after}
        merged.update(new)
        return merged

    def _source_record(self) -> dict[str, Any]:
        if isinstance(self.source, FileSource):
            return {"type": "file", "path": str(self.source.path)}
        return {
            "type": "kafka",
            "bootstrap": self.source.bootstrap,
            "group_id": self.source.group_id,
        }

    def _publish(self, span_id: str) -> None:
        """Send the span's dead letters and late signals to Kafka (once marked, never again)."""
        if self.store.has_mark(span_id, "published"):
            return
        if isinstance(self.source, KafkaSource):
            from ingest.kafka_io import EventProducer
            from ingest.schema import DEAD_LETTER_TOPIC, LATE_TOPIC

            with EventProducer(self.source.bootstrap) as producer:
                for name, topic in (("dead_letters", DEAD_LETTER_TOPIC), ("late", LATE_TOPIC)):
                    for d in self.store.dead_letters(span_id, name):
                        key = f"{d.topic}:{d.partition}:{d.offset}".encode()
                        producer.send_raw(topic, key, d.to_json())
        self.store.mark(span_id, "published")

    def _commit_offsets(self, span_id: str) -> None:
        if self.store.has_mark(span_id, "committed"):
            return
        if isinstance(self.source, KafkaSource):
            from ingest.kafka_io import commit_offsets

            m = json.loads((self.store.manifests / span_id / "manifest.json").read_text())
            ends = {
                t: {int(p): r[1] for p, r in parts.items()} for t, parts in m["offsets"].items()
            }
            commit_offsets(self.source.bootstrap, self.source.group_id, ends)
        self.store.mark(span_id, "committed")

    def cleanup(self) -> None:
        import shutil

        if hasattr(self, "staging"):
            shutil.rmtree(self.staging, ignore_errors=True)


class _Staged:
    """Reads what the Beam pipeline wrote into the staging folder."""

    def __init__(self, staging: Path) -> None:
        self.dir = staging
        self.side: dict[str, list[str]] = {}
        path = staging / "side.tsv"
        if path.exists():
            for line in path.read_text(encoding="utf-8").splitlines():
                name, _, body = line.partition("\t")
                self.side.setdefault(name, []).append(body)

    def rows(self) -> pa.Table:
        path = self.dir / "rows.parquet"
        if not path.exists():
            return REWARD_SCHEMA.empty_table()
        table = pq.read_table(path, schema=REWARD_SCHEMA)
        return table.sort_by([("event_time", "ascending"), ("response_id", "ascending")])

    def _letters(self, name: str) -> list[DeadLetter]:
        return sorted(
            (DeadLetter.model_validate_json(ln) for ln in self.side.get(name, [])),
            key=lambda d: (d.topic, d.partition, d.offset),
        )

    def dead_letters(self) -> list[DeadLetter]:
        return self._letters("dead")

    def late(self) -> list[DeadLetter]:
        return self._letters("late")

    def pending(self) -> list[tuple[str, EventItem]]:
        out = []
        for ln in self.side.get("pending", []):
            response_id, d = json.loads(ln)
            d["value"] = d["value"].encode("utf-8")
            out.append((response_id, EventItem(**d)))
        return sorted(out, key=lambda x: (x[1].topic, x[1].partition, x[1].offset))

    def finalized(self) -> dict[str, int]:
        return dict(json.loads(ln) for ln in self.side.get("finalized", []))

    def watermark(self, prev_max: int | None) -> tuple[int | None, int | None]:
        lines = self.side.get("watermark")
        if not lines:
            return prev_max, None
        max_t, wm = json.loads(lines[0])
        return max_t, wm


def _counters(result: Any) -> dict[str, int]:
    from apache_beam.metrics.metric import MetricsFilter

    out: dict[str, int] = {}
    for c in result.metrics().query(MetricsFilter().with_namespace("ingest"))["counters"]:
        out[c.key.metric.name] = out.get(c.key.metric.name, 0) + int(c.committed or 0)
    return out


def run_span(
    *,
    bootstrap: str,
    group_id: str,
    output_root: Path,
    reward_config: RewardConfig | None = None,
    config: IngestConfig | None = None,
    drain: bool | None = None,
    beam_args: list[str] | None = None,
) -> SpanResult:
    """Ingest everything new on the event topics for ``group_id`` into one span.

    ``config`` gives join windows, parse limits, validation bounds, rewards and ``drain``
    (defaults: ``IngestConfig()``); ``reward_config`` and ``drain``, when given, override it.
    ``drain=True`` finalises every carried completion now (end of stream); otherwise completions
    whose join windows are still open are carried to the next span.
    """
    cfg = config or IngestConfig()
    source = KafkaSource(bootstrap=bootstrap, group_id=group_id, partitions=cfg.partitions)
    return run_job(
        source=source,
        output_root=Path(output_root),
        reward_config=reward_config or cfg.rewards,
        join=cfg.join,
        parse=cfg.parse,
        validation=cfg.validation,
        drain=cfg.drain if drain is None else drain,
        beam_args=beam_args,
    )


def run_job(**kwargs: Any) -> SpanResult:
    """Run one ``SpanJob`` (keyword arguments as its constructor)."""
    job = SpanJob(**kwargs)
    job.setup()
    try:
        job.run()
        return job.commit()
    finally:
        job.cleanup()


def run_config(config: IngestConfig, beam_args: list[str] | None = None) -> SpanResult:
    """Run one span as described by an ``IngestConfig`` (``source`` and ``output_root`` set)."""
    if config.source is None or config.output_root is None:
        raise ValueError("IngestConfig.source and IngestConfig.output_root must be set here")
    return run_job(
        source=config.source,
        output_root=config.output_root,
        reward_config=config.rewards,
        join=config.join,
        parse=config.parse,
        validation=config.validation,
        drain=config.drain,
        beam_args=beam_args,
    )


def run(argv: list[str] | None = None) -> SpanResult:
    """Command line: ``python -m ingest.pipeline (--config FILE | --bootstrap B --output-root D)``.

    Unknown arguments are passed to Beam (default ``--runner=DirectRunner``).
    """
    parser = argparse.ArgumentParser(prog="ingest", description=__doc__.splitlines()[0])
    parser.add_argument("--config", type=Path, help="IngestConfig as JSON.")
    parser.add_argument("--bootstrap", help="Kafka bootstrap (when no --config).")
    parser.add_argument("--group-id", default="ratchet-ingest")
    parser.add_argument("--output-root", type=Path)
    parser.add_argument("--drain", action="store_true", help="Finalise every pending completion.")
    args, beam_args = parser.parse_known_args(argv)
    if args.config:
        config = IngestConfig.model_validate_json(args.config.read_text())
    elif args.bootstrap and args.output_root:
        config = IngestConfig(
            source=KafkaSource(bootstrap=args.bootstrap, group_id=args.group_id),
            output_root=args.output_root,
            drain=args.drain,
        )
    else:
        parser.error("give --config, or --bootstrap and --output-root")
    if not any(a.startswith("--runner") for a in beam_args):
        beam_args.append("--runner=DirectRunner")
    result = run_config(config, beam_args)
    print(json.dumps(_summary(result)))
    return result


def _summary(r: SpanResult) -> dict[str, Any]:
    return {
        "span_id": r.span_id,
        "rows": r.rows,
        "dead_letters": r.dead_letters,
        "completions_in": r.completions_in,
        "signals_in": r.signals_in,
        "pending": r.pending,
        "late": r.late,
        "duplicates": r.duplicates,
        "validated": r.validated,
        "quarantined": r.quarantined,
        "defaulted_share": r.defaulted_share,
    }


if __name__ == "__main__":
    run()
