"""The Beam steps of ingest: read Kafka offset ranges (Splittable DoFn), classify, join, reward.

``build_pipeline`` adds them to a pipeline for one span, given a ``PipelineSpec`` of plain inputs
(ranges, carried events, finalised ids, windows, limits); outputs are staged as files. The
Kafka read claims each offset with an ``OffsetRestrictionTracker`` (one restriction per
partition range), so a distributed runner can split it (ingest/RUNNERS.md).

Deliberately left out: planning ranges, validating, writing spans and committing offsets
(ingest/pipeline.py), and the join and parse rules themselves (ingest/join.py, ingest/parse.py).
"""

from __future__ import annotations

import json
import os
import signal
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import apache_beam as beam
import pyarrow as pa
from apache_beam.io.restriction_trackers import OffsetRange, OffsetRestrictionTracker
from apache_beam.metrics import Metrics
from apache_beam.transforms.core import RestrictionProvider
from apache_beam.transforms.window import GlobalWindow
from apache_beam.utils.timestamp import MIN_TIMESTAMP
from apache_beam.utils.windowed_value import WindowedValue

from ingest.config import (
    ParseConfig,
)
from ingest.join import Windows, join_group, next_in_conversation
from ingest.kafka_io import FETCH_SETTINGS, KafkaRecord
from ingest.parse import EventItem, classify
from ingest.schema import REWARD_SCHEMA, DeadLetter
from rewards.config import RewardConfig

FAILPOINT_ENV = "RATCHET_INGEST_FAILPOINT"
"""Crash-test hook: set to a step name ('mid_read', 'mid_write', 'after_write', 'after_commit',
'mid_publish') and the ingest process SIGKILLs itself there. Unset in normal runs."""

READ_BATCH = 2000
ROWS_PER_TABLE = 4096


def failpoint(step: str) -> None:
    """SIGKILL this process if ``RATCHET_INGEST_FAILPOINT`` names ``step`` (crash tests)."""
    if os.environ.get(FAILPOINT_ENV) == step:
        os.kill(os.getpid(), signal.SIGKILL)


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

    def __init__(self, parse: ParseConfig, now_ms: int) -> None:
        self.limits = {**parse.model_dump(), "now_ms": now_ms}
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
        expected: tuple[str, ...],
    ) -> None:
        self.windows = windows
        self.reward_config = reward_config
        self.finalized = finalized
        self.drain = drain
        self.expected = expected
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
            expected=self.expected,
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
    now_ms: int
    """Ingest's own clock for this span: bounds event times and the watermark."""
    expected_signals: tuple[str, ...]


def build_pipeline(p: beam.Pipeline, spec: PipelineSpec) -> None:
    """Add the ingest steps to ``p``; outputs land in ``spec.staging``."""
    read = ReadKafkaRanges(spec.bootstrap) if spec.source == "kafka" else ReadFileRanges()
    batches = p | "PartitionRanges" >> beam.Create(spec.ranges) | "ReadRanges" >> beam.ParDo(read)
    classify = ClassifyRecords(spec.parse, spec.now_ms)
    parsed = batches | "Classify" >> beam.ParDo(classify).with_outputs(
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
        _WatermarkFn(prev, spec.allowed_lateness_us, spec.drain, spec.now_ms * 1000)
    )
    joined = (
        (parsed.events, carried, next_markers)
        | "WithCarried" >> beam.Flatten()
        | "GroupByResponseId" >> beam.GroupByKey()
        | "JoinSignals"
        >> beam.ParDo(
            JoinSignals(
                spec.windows, spec.reward_config, spec.finalized, spec.drain, spec.expected_signals
            ),
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
    The max never passes ``now_us`` (ingest's clock), whatever a record claims.
    """

    def __init__(self, prev_max: int | None, lateness_us: int, drain: bool, now_us: int) -> None:
        self.prev_max = prev_max
        self.lateness_us = lateness_us
        self.drain = drain
        self.now_us = now_us

    def create_accumulator(self) -> int | None:
        return self.prev_max

    def add_input(self, acc: int | None, t: int) -> int:
        return t if acc is None else max(acc, t)

    def merge_accumulators(self, accs: Any) -> int | None:
        vals = [a for a in accs if a is not None]
        return max(vals) if vals else None

    def extract_output(self, acc: int | None) -> list[int | None]:
        acc = None if acc is None else min(acc, self.now_us)
        if self.drain:
            return [acc, 2**62]
        return [acc, -(2**62) if acc is None else acc - self.lateness_us]
