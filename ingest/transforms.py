"""The Beam steps of ingest: read Kafka offset ranges (Splittable DoFn), classify, join, reward.

``build_pipeline`` adds them to a pipeline for one span, given a ``PipelineSpec`` of plain inputs
(ranges, carried events, finalised ids, windows, limits); outputs are staged as files. The
Kafka read claims each offset with an ``OffsetRestrictionTracker`` (one restriction per
partition range), so a distributed runner can split it (ingest/RUNNERS.md).

Batches, not events, travel between steps: the read emits record batches, classification turns
a batch into one element per *bucket* (``bucket_of(response_id)``: a stable hash into
``BUCKETS`` shards) holding every event of the batch for the response ids of that bucket, and
the shuffle groups by bucket, not by response id. The join then groups a bucket's events by
response id in memory and applies the same per-response-id rules (``join_group``); side outputs
leave as one multi-line element per bundle and kind. This cuts the elements Beam encodes and
shuffles from one per response id and batch to one per bucket and batch, and each element's
events cross the shuffle as one pickled bytes value (``_packed``), not field by field; the rules
and their outputs are unchanged (tests/integration/test_ingest_columnar.py).

Deliberately left out: planning ranges, validating, writing spans and committing offsets
(ingest/pipeline.py), and the join and parse rules themselves (ingest/join.py, ingest/parse.py).
"""

from __future__ import annotations

import json
import os
import pickle
import signal
import zlib
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import apache_beam as beam
import pyarrow as pa
from apache_beam.io.restriction_trackers import OffsetRange, OffsetRestrictionTracker
from apache_beam.metrics import Metrics
from apache_beam.transforms.core import RestrictionProvider
from apache_beam.transforms.window import GlobalWindow
from apache_beam.typehints import Any as AnyHint
from apache_beam.typehints import Tuple
from apache_beam.utils.timestamp import MIN_TIMESTAMP
from apache_beam.utils.windowed_value import WindowedValue

from ingest.config import (
    ParseConfig,
)
from ingest.join import Windows, join_group, next_in_conversation
from ingest.kafka_io import FETCH_SETTINGS, KafkaRecord
from ingest.parse import EventItem, classify
from ingest.rows import reward_table
from ingest.schema import REWARD_SCHEMA, DeadLetter
from rewards.config import RewardConfig

FAILPOINT_ENV = "RATCHET_INGEST_FAILPOINT"
"""Crash-test hook: set to a step name ('mid_read', 'mid_write', 'after_write', 'after_commit',
'mid_publish') and the ingest process SIGKILLs itself there. Unset in normal runs."""

READ_BATCH = 5000
ROWS_PER_TABLE = 4096
BUCKETS = 32
"""Shards of the response-id (and conversation-id) space: the shuffle's keys. More than the
workers of any runner used here, few enough that each batch makes few elements."""


def bucket_of(key: str) -> int:
    """Stable shard of ``key`` (same in every worker process, unlike ``hash``)."""
    return zlib.crc32(key.encode("utf-8")) % BUCKETS


def _by_bucket(pairs: Iterable[tuple[str, Any]]) -> dict[int, list[tuple[str, Any]]]:
    """``(key, value)`` pairs -> ``{bucket: [(key, value), ...]}`` (order kept); a key's
    bucket is hashed once per call (a response id comes with its signals)."""
    out: dict[int, list[tuple[str, Any]]] = {}
    lists: dict[str, list[tuple[str, Any]]] = {}
    for k, v in pairs:
        target = lists.get(k)
        if target is None:
            target = lists[k] = out.setdefault(bucket_of(k), [])
        target.append((k, v))
    return out


def _packed(pairs: Iterable[tuple[str, Any]]) -> Iterator[tuple[int, bytes]]:
    """``(bucket, blob)`` per bucket of ``pairs``: its ``(key, value)`` pairs, in order, pickled
    into one bytes value. What crosses a shuffle: Beam's coders and the runner's grouping then
    copy one bytes value instead of encoding and decoding every field of every event (twice on
    the FnApiRunner: it decodes and re-encodes each element to group it)."""
    for bucket, bucket_pairs in _by_bucket(pairs).items():
        yield bucket, pickle.dumps(bucket_pairs, protocol=pickle.HIGHEST_PROTOCOL)


def _unpacked(blobs: Iterable[bytes]) -> Iterator[tuple[str, Any]]:
    """The ``(key, value)`` pairs of a bucket's blobs (``_packed``), blob by blob."""
    for blob in blobs:
        yield from pickle.loads(blob)


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
        while (position := self.consumer.position(tp)) < tracker.current_restriction().stop:
            # no more than the range still holds: kafka-python decodes records lazily, and a
            # chunk's range usually ends inside a fetched batch
            left = tracker.current_restriction().stop - position
            records = self.consumer.poll(timeout_ms=500, max_records=min(left, self.batch))
            records = records.get(tp, [])
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
        with open(path, "rb") as f:  # lines end at b"\n" only, as ``SpanJob._ranges`` counts them
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
    """Record batches -> ``(bucket, blob of [(response_id, item), ...])`` per bucket of the
    batch (``_packed``).

    Tagged outputs: ``dead`` (one list of dead-letter JSON lines per batch), ``conv``
    (``(bucket, blob of [(conversation_id, (response_id, t_us)), ...])``) and ``times``
    (``("topic:partition", the batch's largest event time)``).
    """

    def __init__(self, parse: ParseConfig, now_ms: int) -> None:
        self.limits = {**parse.model_dump(), "now_ms": now_ms}
        self.completions = Metrics.counter("ingest", "completions_in")
        self.signals = Metrics.counter("ingest", "signals_in")
        self.bad = Metrics.counter("ingest", "bad_records")

    def process(self, batch: list[tuple[Any, ...]]) -> Iterator[Any]:
        max_t = None
        n_completion = n_signal = 0
        dead: list[bytes] = []
        events: list[tuple[str, tuple[Any, ...]]] = []
        convs: list[tuple[str, tuple[str, int]]] = []
        for rec in batch:
            got = classify(KafkaRecord(*rec), **self.limits)
            if isinstance(got, DeadLetter):
                dead.append(got.to_json())
                continue
            response_id, item = got
            if item.kind == "completion":
                n_completion += 1
            else:
                n_signal += 1
            t = item.event_time_us
            max_t = t if max_t is None or t > max_t else max_t
            events.append((response_id, tuple(item)))
            if item.conversation_id:
                convs.append((item.conversation_id, (response_id, t)))
        yield from _packed(events)
        for conv in _packed(convs):
            yield beam.pvalue.TaggedOutput("conv", conv)
        if dead:
            yield beam.pvalue.TaggedOutput("dead", dead)
        self.completions.inc(n_completion)
        self.signals.inc(n_signal)
        self.bad.inc(len(dead))
        if max_t is not None:  # a batch comes from one partition
            yield beam.pvalue.TaggedOutput("times", (f"{batch[0][0]}:{batch[0][1]}", max_t))


class JoinSignals(beam.DoFn):
    """Per bucket: group events by response id, then per response id dedup, join in event time,
    reward, or carry / late / dead-letter (``join_group``).

    Reward rows leave as Arrow tables of up to ``ROWS_PER_TABLE`` rows, built column-wise per
    bundle (``reward_table``), so rows never pass through Beam's per-element coders; side
    outputs leave as one list of JSON lines per kind and bundle.
    """

    SIDE = ("pending", "late", "dead", "finalized")

    def __init__(
        self,
        windows: Windows,
        reward_config: RewardConfig,
        finalized: dict[str, int],
        drain: bool,
        expected: tuple[str, ...],
        early: bool = True,
        open_at_drain: str = "pending",
    ) -> None:
        self.windows = windows
        self.reward_config = reward_config
        # membership is all the join needs; one bytes blob pickles fast (the DoFn is pickled
        # with the graph, and a span's later chunks carry every id its earlier ones finalised)
        self.finalized_blob = zlib.compress("\n".join(finalized).encode("utf-8"), 1)
        self.drain = drain
        self.expected = expected
        self.early = early
        self.open_at_drain = open_at_drain
        self.duplicates = Metrics.counter("ingest", "duplicates")

    def setup(self) -> None:
        text = zlib.decompress(self.finalized_blob).decode("utf-8")
        self.finalized = frozenset(text.split("\n")) if text else frozenset()

    def start_bundle(self) -> None:
        self.rows: list[tuple[str, EventItem, list[EventItem]]] = []
        self.side: dict[str, list[str | bytes]] = {k: [] for k in self.SIDE}

    def finish_bundle(self) -> Iterator[WindowedValue]:
        if self.rows:
            table = reward_table(self.rows, self.reward_config)
            yield WindowedValue(table, MIN_TIMESTAMP, [GlobalWindow()])
            self.rows = []
        for name, lines in self.side.items():
            if lines:
                value = WindowedValue(lines, MIN_TIMESTAMP, [GlobalWindow()])
                yield beam.pvalue.TaggedOutput(name, value)  # type: ignore[misc]
        self.side = {k: [] for k in self.SIDE}

    def process(self, element: tuple[int, Any], watermark: list[int | None]) -> Iterator[Any]:
        _, blobs = element
        by_id: dict[str, list[tuple[Any, ...]]] = {}
        for response_id, item in _unpacked(blobs):
            by_id.setdefault(response_id, []).append(item)
        for response_id in sorted(by_id):
            self._join(response_id, by_id[response_id], int(watermark[1]))  # type: ignore[arg-type]
            if len(self.rows) >= ROWS_PER_TABLE:
                yield reward_table(self.rows, self.reward_config)
                self.rows = []

    def _join(self, response_id: str, items: list[tuple[Any, ...]], watermark_us: int) -> None:
        out = join_group(
            response_id,
            (EventItem(*i) for i in items),
            watermark_us=watermark_us,
            finalized=self.finalized,
            windows=self.windows,
            reward_config=self.reward_config,
            drain=self.drain,
            expected=self.expected,
            early=self.early,
            build_row=False,
            open_at_drain=self.open_at_drain,
        )
        if out.duplicates:
            self.duplicates.inc(out.duplicates)
        side = self.side
        if out.final is not None:
            self.rows.append((response_id, *out.final))
            side["finalized"].append(json.dumps([response_id, out.finalized_at_us]))
        for item in out.pending:
            side["pending"].append(json.dumps([response_id, _item_json(item)]))
        side["late"].extend(d.to_json() for d in out.late)
        side["dead"].extend(d.to_json() for d in out.dead)


PARTS = "parts"
"""Folder of a chunk's staging where ``WriteParts`` puts its parts."""
PART_ROWS = 131_072
"""Most rows of one part (``WriteParts``): bounds what a worker holds to sort and check."""


class WriteParts(beam.DoFn):
    """Reward-row tables -> sorted, checked Parquet parts, written by the worker that made them.

    A bundle's rows (up to ``PART_ROWS`` at a time) are sorted by ``SORT_KEYS``, checked with
    the row-level expectations (``ingest.validate.check_part``), and written as one part
    (temp file, fsync, rename) with its ``narrow`` rows next to it (``part-ID.narrow.parquet``).
    Output: one JSON line per part, ``{"part", "narrow", "rows", "evaluated", "failed"}``; the
    commit takes exactly the parts these lines name (a retried bundle's files are not named).
    """

    def __init__(self, folder: Path, row_checks: dict[str, Any]) -> None:
        self.folder = folder
        self.row_checks = row_checks

    def start_bundle(self) -> None:
        self.tables: list[pa.Table] = []
        self.held = 0

    def process(self, table: pa.Table) -> Iterator[list[str]]:
        self.tables.append(table)
        self.held += table.num_rows
        if self.held >= PART_ROWS:
            yield self._flush()

    def finish_bundle(self) -> Iterator[WindowedValue]:
        if self.held:
            yield WindowedValue(self._flush(), MIN_TIMESTAMP, [GlobalWindow()])

    def _flush(self) -> list[str]:
        import uuid

        from ingest.spans import SORT_KEYS, write_parquet_atomic
        from ingest.validate import check_part, narrow

        table = pa.concat_tables(self.tables).sort_by(SORT_KEYS)
        self.tables, self.held = [], 0
        name = f"part-{uuid.uuid4().hex}"
        checked = check_part(table, **self.row_checks)
        write_parquet_atomic(table, self.folder / f"{name}.parquet")
        write_parquet_atomic(narrow(table), self.folder / f"{name}.narrow.parquet")
        line = {"part": f"{name}.parquet", "narrow": f"{name}.narrow.parquet",
                "rows": table.num_rows, **checked}
        return [json.dumps(line, default=str)]


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
    open_at_drain: str = "pending"
    """What a drain does with a completion whose persistence window is still open
    (``JoinConfig.open_at_drain``)."""
    early: bool = True
    """False in a chunk of a span that is not its last: completions are finalised only once
    every window has closed (``join_group``), so later chunks can still add their signals."""
    hold_partitions: frozenset[str] = frozenset()
    """A chunk that is not the span's last: the ``topic:partition`` keys later chunks still read
    (they hold the watermark back: ``_WatermarkFn``)."""
    partition_max: dict[str, int] = field(default_factory=dict)
    """Largest event time per ``topic:partition`` read by the span's earlier chunks."""
    row_checks: dict[str, Any] = field(default_factory=dict)
    """Limits of the row-level expectations (``ingest.validate.check_part``), checked by the
    workers that write the parts."""


def build_pipeline(p: beam.Pipeline, spec: PipelineSpec) -> None:
    """Add the ingest steps to ``p``; outputs land in ``spec.staging``."""
    read = ReadKafkaRanges(spec.bootstrap) if spec.source == "kafka" else ReadFileRanges()
    ranges = beam.Create(spec.ranges).with_output_types(Tuple[str, int, int, int])
    batches = p | "PartitionRanges" >> ranges | "ReadRanges" >> beam.ParDo(read)
    classify = ClassifyRecords(spec.parse, spec.now_ms)
    parsed = batches | "Classify" >> beam.ParDo(classify).with_outputs(
        "dead", "times", "conv", main="events"
    )
    carried = _create_pickled(
        p, "CarriedEvents", sorted(_packed((k, tuple(i)) for k, i in spec.carried))
    )
    convs = ((i.conversation_id, (k, i.event_time_us)) for k, i in spec.carried)
    carried_conv = _create_pickled(
        p, "CarriedConversations", sorted(_packed(c for c in convs if c[0]))
    )
    next_markers = (
        (parsed.conv, carried_conv)
        | "WithCarriedConversations" >> beam.Flatten()
        | "GroupByConversationBucket" >> beam.GroupByKey()
        | "NextInConversation" >> beam.FlatMap(_next_markers)
    )
    prev = spec.prev_max_event_time_us
    watermark = parsed.times | "Watermark" >> beam.CombineGlobally(
        _WatermarkFn(
            prev,
            spec.allowed_lateness_us,
            spec.now_ms * 1000,
            spec.hold_partitions,
            spec.partition_max,
        )
    )
    joined = (
        (parsed.events, carried, next_markers)
        | "WithCarried" >> beam.Flatten()
        | "GroupByResponseIdBucket" >> beam.GroupByKey()
        | "JoinSignals"
        >> beam.ParDo(
            JoinSignals(
                spec.windows,
                spec.reward_config,
                spec.finalized,
                spec.drain,
                spec.expected_signals,
                spec.early,
                spec.open_at_drain,
            ),
            watermark=beam.pvalue.AsSingleton(watermark),
        ).with_outputs("pending", "late", "dead", "finalized", main="rows")
    )
    parts = joined.rows | "WriteParts" >> beam.ParDo(
        WriteParts(spec.staging / PARTS, spec.row_checks)
    )
    side = [
        pcoll | f"Tag_{label}" >> beam.Map(_tag_lines, name)
        for label, name, pcoll in (
            ("parse_dead", "dead", parsed.dead),
            ("join_dead", "dead", joined.dead),
            ("pending", "pending", joined.pending),
            ("late", "late", joined.late),
            ("finalized", "finalized", joined.finalized),
            ("watermark", "watermark", watermark | "WatermarkJson" >> beam.Map(_json_line)),
            ("parts", "part", parts),
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


def _create_pickled(p: beam.Pipeline, label: str, values: list[Any]) -> beam.PCollection:
    """``beam.Create(values)`` as one pickled element unpacked by a FlatMap: ``Create`` infers
    a type by walking every value (seconds for a chunk's carried events) before any type hint
    applies."""
    blob = pickle.dumps(values, protocol=pickle.HIGHEST_PROTOCOL)
    return (
        p
        | label >> beam.Create([blob])
        | f"{label}Unpack" >> beam.FlatMap(pickle.loads).with_output_types(Tuple[int, AnyHint])
    )


def _next_markers(element: tuple[int, Any]) -> Iterator[tuple[int, bytes]]:
    """Per conversation bucket: ``(bucket, blob of [(response_id, marker), ...])`` (``_packed``)
    for each completion of a conversation that has a next one (``next_in_conversation``)."""
    _, blobs = element
    by_conv: dict[str, list[tuple[str, int]]] = {}
    for conversation_id, entry in _unpacked(blobs):
        by_conv.setdefault(conversation_id, []).append(entry)
    markers = (
        (response_id, tuple(marker))
        for conversation_id in sorted(by_conv)
        for response_id, marker in next_in_conversation(by_conv[conversation_id])
    )
    yield from _packed(markers)


def _json_line(value: Any) -> list[str]:
    return [json.dumps(value)]


def _tag_lines(payloads: list[str | bytes], name: str) -> bytes:
    """``name<TAB>payload`` lines joined into one element: the side outputs share one staged
    file, and a JSON payload never holds a raw newline."""
    tag = name.encode() + b"\t"
    return b"\n".join(
        tag + (body if isinstance(body, bytes) else body.encode("utf-8")) for body in payloads
    )


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

    Input: ``("topic:partition", batch's largest event time)``. Output: ``[max_event_time_us,
    watermark_us, {"topic:partition": largest event time}]`` where watermark = max - allowed
    lateness, draining or not (a drain finalises what the watermark has not closed, except a
    persistence window still open: ``join_group``). With no events at all, both come from the
    carried max. The max never passes ``now_us`` (ingest's clock), whatever a record claims.

    ``hold`` (a chunk of a span that is not its last: the partitions that later chunks still
    read) holds the watermark at the slowest of them: no later than the largest event time read
    so far from each (``prev_partitions`` carries those of earlier chunks), less the lateness.
    So a partition whose slice of the span ends earlier in time than another's does not see its
    completions finalised, or its signals dead-lettered, before it has been read that far.
    """

    def __init__(
        self,
        prev_max: int | None,
        lateness_us: int,
        now_us: int,
        hold: frozenset[str] = frozenset(),
        prev_partitions: dict[str, int] | None = None,
    ) -> None:
        self.prev_max = prev_max
        self.lateness_us = lateness_us
        self.now_us = now_us
        self.hold = hold
        self.prev_partitions = dict(prev_partitions or {})

    def create_accumulator(self) -> tuple[int | None, dict[str, int]]:
        return self.prev_max, dict(self.prev_partitions)

    def add_input(self, acc: Any, item: tuple[str, int]) -> tuple[int | None, dict[str, int]]:
        top, parts = acc
        key, t = item
        parts[key] = t if key not in parts else max(parts[key], t)
        return (t if top is None else max(top, t)), parts

    def merge_accumulators(self, accs: Any) -> tuple[int | None, dict[str, int]]:
        accs = list(accs)
        tops = [a[0] for a in accs if a[0] is not None]
        parts: dict[str, int] = {}
        for _, p in accs:
            for k, t in p.items():
                parts[k] = t if k not in parts else max(parts[k], t)
        return (max(tops) if tops else None), parts

    def extract_output(self, acc: Any) -> list[Any]:
        top, parts = acc
        top = None if top is None else min(top, self.now_us)
        parts = {k: min(t, self.now_us) for k, t in sorted(parts.items())}
        wm = -(2**62) if top is None else top - self.lateness_us
        if self.hold:
            wm = min(wm, min(parts.get(k, -(2**62)) for k in self.hold) - self.lateness_us)
        return [top, max(wm, -(2**62)), parts]
