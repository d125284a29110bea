"""The ingest pipeline: Kafka offset ranges -> validated, joined, rewarded Parquet spans.

One call of ``run_span`` makes one span:

1. ``setup``: create missing topics, ``recover`` what an earlier crashed run left (finish its
   after-commit steps, delete un-manifested files), load the carried state of the last span,
   and fix the read ranges: for every topic partition ``[last end or committed, high-water)``.
2. ``run``: a Beam pipeline (in-process FnApiRunner unless told otherwise: ``LOCAL_RUNNER``)
   that reads the ranges with a Splittable DoFn (``OffsetRestrictionTracker``, one restriction
   per partition range), classifies every record (good events keyed by response id, dead
   letters with a reason), groups by response id together with the carried events, joins
   signals in event time against the watermark, computes rewards, and stages rows / pending /
   late / dead letters; the workers sort, check (row-level expectations) and write the rows as
   Parquet parts.
3. ``commit``: merges the parts' reports and runs the span-level expectations with Great
   Expectations on their narrow columns (a failing span is quarantined), renames the parts into
   the span's hive-partitioned folder and then writes the manifest (the commit point), then
   publishes dead letters and late signals and commits the Kafka offsets (each marked done in
   the manifest folder, so ``recover`` can finish them after a crash). A quarantined span's
   offsets are committed too: its rows are kept, and ``ratchet spans release ID`` re-admits it.

Every event's reward is written exactly once in effect: rows are only visible through
manifests, a manifest carries the offsets it covers, and the next span starts where the last
manifest ended. Dead letters and late signals are published once: keyed by their source
position, each confirmed by the broker, and a retry after a crash skips what an earlier
attempt already put on the topic (``_publish``). A dead letter carries a payload prefix with
the payload's size and sha256, so it always fits in a Kafka record.

Deliberately left out: the Beam steps themselves (ingest/transforms.py), the reward maths
(rewards/), the join rules (ingest/join.py), classification (ingest/parse.py) and storage
layout (ingest/spans.py).
"""

from __future__ import annotations

import argparse
import dataclasses
import gc
import json
import logging
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import apache_beam as beam
import pyarrow as pa
import pyarrow.parquet as pq
from apache_beam.options.pipeline_options import PipelineOptions

from ingest.config import (
    FileSource,
    IngestConfig,
    JoinConfig,
    KafkaSource,
    ParseConfig,
    ValidationConfig,
)
from ingest.join import US, Windows
from ingest.parse import EventItem, fit
from ingest.schema import REWARD_SCHEMA, TOPICS, DeadLetter
from ingest.spans import (
    SORT_KEYS,
    SpanStore,
    atomic_write_bytes,
    manifest_record,
    span_id_for,
)
from ingest.transforms import FAILPOINT_ENV, PARTS, PipelineSpec, build_pipeline, failpoint
from rewards.config import RewardConfig
from rewards.monitors import batch_monitors
from runtime import jsonl

log = logging.getLogger(__name__)

CHUNK_EVENTS = 250_000
"""Most events one Beam run of a span reads (``SpanJob.chunk_events``): bounds the run's memory."""

__all__ = ["FAILPOINT_ENV", "SpanJob", "SpanResult", "run", "run_config", "run_span"]


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
        chunk_events: int = CHUNK_EVENTS,
        guard: Callable[[], None] | None = None,
    ) -> None:
        """``guard`` is called right before the span's manifest is committed; it raises to stop
        a caller that lost its right to write (a cycle's lease): nothing is committed then."""
        self.guard = guard or (lambda: None)
        self.source = source
        self.chunk_events = chunk_events
        self.store = SpanStore(output_root)
        self.reward_config = reward_config
        self.join = join
        self.parse = parse
        self.validation = validation
        self.drain = drain
        self.beam_args = local_runner_args(beam_args)

    # setup ------------------------------------------------------------------------------------

    @classmethod
    def from_config(
        cls,
        config: IngestConfig,
        *,
        source: KafkaSource | FileSource,
        output_root: Path,
        reward_config: RewardConfig | None = None,
        drain: bool | None = None,
        beam_args: list[str] | None = None,
        guard: Callable[[], None] | None = None,
    ) -> SpanJob:
        """A job judged by ``config`` (windows, limits, validation, rewards, drain, chunking);
        ``reward_config`` and ``drain``, when given, override it."""
        return cls(
            guard=guard,
            source=source,
            output_root=Path(output_root),
            reward_config=reward_config or config.rewards,
            join=config.join,
            parse=config.parse,
            validation=config.validation,
            drain=config.drain if drain is None else drain,
            beam_args=beam_args,
            chunk_events=config.chunk_events,
        )
    def setup(self) -> None:
        self.store.root.mkdir(parents=True, exist_ok=True)
        if isinstance(self.source, KafkaSource):
            from ingest.kafka_io import ensure_topics

            ensure_topics(self.source.bootstrap, self.source.partitions)
        self.recover()
        self.now_ms = int(time.time() * 1000)
        self.state = self.store.load_state()
        self.span_id = span_id_for(self.state.seq + 1)
        self.offsets = self._ranges()

    def recover(self) -> None:
        """Finish after-commit steps of committed spans; delete files of uncommitted ones.

        A span whose carried files no longer parse (its unfinished steps read them; the last
        span's pending events seed the next span) is quarantined with the reason instead
        (``SpanStore.quarantine_unreadable``), so one poison record cannot stop every later run.
        """
        dirs = self.store.manifest_dirs()
        for d in dirs:
            done = self.store.has_mark(d.name, "published") and self.store.has_mark(
                d.name, "committed"
            )
            if not done or d == dirs[-1]:
                problems = self.store.unreadable(d.name)
                if problems:
                    log.error("span %s quarantined at recovery: %s", d.name, problems)
                    self.store.quarantine_unreadable(d.name, problems)
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
                carried = self.state.ends.get(topic, {}).get(p, 0)
                if carried and p not in committed[topic]:
                    # setup() re-committed every manifest's offsets, so a group without a commit
                    # here lost it: a memory-only broker restarted and the topic was recreated.
                    log.warning("%s[%d]: no committed offset (broker restarted?): from 0", topic, p)
                    carried = 0
                start = max(committed[topic].get(p, 0), carried)
                out[topic][p] = (start if start <= hw else 0, hw)  # topic recreated: start over
        return out

    # run --------------------------------------------------------------------------------------
    def run(self) -> None:
        """The Beam pipeline, once per chunk of the span's offset ranges (``chunk_ranges``).

        Each chunk starts from the state the previous one left (pending events, finalised ids,
        largest event time), as a span starts from the last span's; only the last chunk may
        finalise a completion before all its windows close, so the rows equal one pass over the
        span (ingest/RUNNERS.md, "Bounded state"). Every chunk stages into its own folder;
        ``commit`` reads them all.
        """
        self.staging = self.store.staging_dir(self.span_id)
        chunks = chunk_ranges(self._range_list(), self.chunk_events)
        carried, finalized = self.state.pending, dict(self.state.finalized)
        max_t, partition_max = self.state.max_event_time_us, {}
        self.metrics: dict[str, int] = {}
        for i, ranges in enumerate(chunks):
            last = i == len(chunks) - 1
            spec = self._spec(ranges, self.staging / f"chunk-{i:04d}", carried, finalized, max_t)
            if not last:
                later = self._held_partitions(chunks[i + 1 :])
                spec = dataclasses.replace(
                    spec,
                    drain=False,
                    early=False,
                    hold_partitions=frozenset(later),
                    partition_max=partition_max,
                )
            for name, n in self._run_beam(spec).items():
                self.metrics[name] = self.metrics.get(name, 0) + n
            if not last:  # before the next chunk (the commit reads no rows)
                _release_memory()
                staged = _Staged(spec.staging)
                carried = staged.pending()
                finalized.update(staged.finalized())
                max_t = staged.watermark(max_t)[0]
                partition_max = staged.partition_max()

    def _held_partitions(self, later: list[list[tuple[str, int, int, int]]]) -> set[str]:
        """The ``topic:partition`` keys that later chunks still read (``_WatermarkFn.hold``).

        A recorded file is ONE partition whose records carry their own topics: its largest
        event time read so far is the chunk's own, so nothing is held beyond the usual
        watermark (holding on its path, a key no record has, would hold every completion of
        the span until the last chunk: state growing with the span)."""
        if isinstance(self.source, FileSource):
            return set()
        return {f"{t}:{p}" for chunk in later for t, p, _, _ in chunk}

    def _run_beam(self, spec: PipelineSpec) -> dict[str, int]:
        p = beam.Pipeline(options=PipelineOptions(self.beam_args))
        build_pipeline(p, spec)
        with _fewer_gc_passes(), _brief_state_sampling():
            result = p.run()
            result.wait_until_finish()
        return _counters(result)

    def _range_list(self) -> list[tuple[str, int, int, int]]:
        """The span's ranges as ``(topic or file path, partition, start, end)``."""
        if isinstance(self.source, FileSource):
            return [(str(self.source.path), 0, s, e) for s, e in self.offsets["file"].values()]
        ranges = ((t, p, s, e) for t, parts in self.offsets.items() for p, (s, e) in parts.items())
        return [r for r in ranges if r[3] > r[2]]

    def _spec(
        self,
        ranges: list[tuple[str, int, int, int]] | None = None,
        staging: Path | None = None,
        carried: list[tuple[str, EventItem]] | None = None,
        finalized: dict[str, int] | None = None,
        prev_max_event_time_us: int | None = None,
    ) -> PipelineSpec:
        """The Beam inputs of one chunk (default: the whole span from the carried state)."""
        whole = ranges is None
        return PipelineSpec(
            staging=staging or self.staging,
            ranges=self._range_list() if ranges is None else ranges,
            source=self.source.type,
            bootstrap=None if isinstance(self.source, FileSource) else self.source.bootstrap,
            carried=self.state.pending if carried is None else carried,
            finalized=self.state.finalized if finalized is None else finalized,
            prev_max_event_time_us=(
                self.state.max_event_time_us if whole else prev_max_event_time_us
            ),
            windows=Windows.from_seconds(
                self.join.edit_persistence_window_s,
                self.join.followup_window_s,
                self.join.feedback_window_s,
                grace=(
                    self.join.edit_persistence_grace_s,
                    self.join.followup_grace_s,
                    self.join.feedback_grace_s,
                ),
            ),
            allowed_lateness_us=int(self.join.allowed_lateness_s * US),
            parse=self.parse,
            reward_config=self.reward_config,
            drain=self.drain,
            now_ms=self.now_ms,
            expected_signals=tuple(self.join.expected_signals),
            open_at_drain=self.join.open_at_drain,
            row_checks={
                "reward_bounds": self.reward_config.bounds(),
                "max_completion_tokens": self.validation.max_completion_tokens,
                "max_latency_ms": self.validation.max_latency_ms,
            },
        )

    # commit -----------------------------------------------------------------------------------
    def commit(self) -> SpanResult:
        """Merge the parts' reports, run the span-level checks, move the parts into place,
        commit the manifest, publish, commit offsets. The driver never reads a row: the workers
        sorted, checked (row-level expectations) and wrote each part (``WriteParts``); here only
        their reports and ``narrow`` columns are merged for the span-level checks and the
        monitors (ingest/validate.py), and the parts are renamed into the span's folder."""
        staged = _Staged(self.staging)
        checker = self._validator()
        parts = []
        for part in staged.parts():
            checker.add_checked(part, pq.read_table(part["narrow_path"]))
            parts.append(part["path"])
        ok, report = checker.finish(**self._span_checks(checker.rows))
        dead, late, pending = staged.dead_letters(), staged.late(), staged.pending()
        stats = batch_monitors(
            checker.narrow_rows, dead_letters=len(dead), expected_signals=self.join.expected_signals
        )
        files = self.store.move_parts(self.span_id, parts, quarantined=not ok)
        rel = str(Path(files[0]).parent)
        failpoint("mid_write")
        max_t, watermark = staged.watermark(self.state.max_event_time_us)
        counts = {
            "rows": checker.rows,
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
            files=files,
            status="ok" if ok else "quarantined",
            counts=counts,
            max_event_time_us=max_t,
            watermark_us=watermark,
            stats=stats,
            validation=report,
            drained=self.drain,
        )
        finalized = self._finalized(staged.finalized(), max_t)
        self.guard()
        path = self.store.commit_manifest(manifest, pending, finalized, late, dead)
        failpoint("after_write")
        self._publish(self.span_id)
        self._commit_offsets(self.span_id)
        failpoint("after_commit")
        return self._result(rel, path, ok, report, counts, stats)

    def _validator(self) -> Any:
        from ingest.validate import SpanValidator

        return SpanValidator(
            reward_bounds=self.reward_config.bounds(),
            max_completion_tokens=self.validation.max_completion_tokens,
            max_latency_ms=self.validation.max_latency_ms,
        )

    def _span_checks(self, rows: int) -> dict[str, Any]:
        """The span-level checks' settings (``SpanValidator.finish``) for a span of ``rows``."""
        from ingest.validate import drift_bounds

        v = self.validation
        drift = drift_bounds(
            self.state.stats,
            rows=rows,
            max_reward_mean_drift=v.max_reward_mean_drift,
            max_reward_std_drift=v.max_reward_std_drift,
            max_length_drift_ratio=v.max_length_drift_ratio,
            min_rows_for_drift=v.min_rows_for_drift,
        )
        return {
            "min_join_share": v.min_join_share,
            "min_current_version_share": v.min_current_version_share,
            "drift": drift,
        }

    def _result(
        self,
        rel: str,
        manifest: Path,
        ok: bool,
        report: dict[str, Any],
        counts: dict[str, int],
        stats: dict[str, float],
    ) -> SpanResult:
        return SpanResult(
            span_id=self.span_id,
            path=self.store.root / rel,
            rows=counts["rows"],
            dead_letters=counts["dead_letters"],
            completions_in=counts["completions_in"],
            signals_in=counts["signals_in"],
            validated=ok,
            validation_report=report,
            offsets=self.offsets,
            manifest=manifest,
            pending=counts["pending"],
            late=counts["late"],
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
        """Send the span's dead letters and late signals to Kafka (once marked, never again).

        Idempotent across retries: the first attempt records where the two topics ended; a retry
        skips every letter already on them since then (same key and value). Every send is
        confirmed before the span is marked published.
        """
        if self.store.has_mark(span_id, "published"):
            return
        letters = {n: self.store.dead_letters(span_id, n) for n in ("dead_letters", "late")}
        if isinstance(self.source, KafkaSource) and any(letters.values()):
            # (nothing to send: no connection to the broker, ~1.3 s of metadata round trips)
            from ingest.kafka_io import EventProducer
            from ingest.schema import DEAD_LETTER_TOPIC, LATE_TOPIC

            topics = {"dead_letters": DEAD_LETTER_TOPIC, "late": LATE_TOPIC}
            sent = self._already_published(span_id, list(topics.values()))
            with EventProducer(self.source.bootstrap) as producer:
                futures = []
                for name, topic in topics.items():
                    for d in letters[name]:
                        key = f"{d.topic}:{d.partition}:{d.offset}".encode()
                        value = fit(d).to_json()
                        if (topic, key, value) in sent:
                            continue
                        futures.append(producer.send_raw(topic, key, value))
                        if len(futures) == 1:
                            producer.flush()
                            failpoint("mid_publish")
                producer.flush()
                for f in futures:
                    f.get(timeout=60)  # raises if the broker refused one
        self.store.mark(span_id, "published")

    def _already_published(self, span_id: str, topics: list[str]) -> set[tuple[str, bytes, bytes]]:
        """``(topic, key, value)`` sent since this span's first publish attempt began."""
        from ingest.kafka_io import high_watermarks, read_range

        marks_path = self.store.manifests / span_id / "publish_from.json"
        if not marks_path.exists():
            marks = {t: high_watermarks(self.source.bootstrap, t) for t in topics}
            atomic_write_bytes(marks_path, json.dumps(marks).encode())
            return set()
        marks = json.loads(marks_path.read_text())
        sent = set()
        for topic in topics:
            since = {int(p): o for p, o in marks.get(topic, {}).items()}
            for p, end in high_watermarks(self.source.bootstrap, topic).items():
                start = since.get(p, 0)
                for _, key, value, _ in read_range(self.source.bootstrap, topic, p, start, end):
                    sent.add((topic, key, value))
        return sent

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
    """Reads what the Beam runs of a span wrote into the staging folder: one ``chunk-NNNN``
    folder per chunk (or the folder itself). Rows, dead letters, late signals and finalised ids
    are every chunk's; pending events and the watermark are the last chunk's."""

    def __init__(self, staging: Path) -> None:
        self.dir = staging
        self.dirs = sorted(d for d in staging.glob("chunk-*") if d.is_dir()) or [staging]
        self.side: dict[str, list[str]] = {}
        self.by_dir: dict[Path, dict[str, list[str]]] = {}
        for d in self.dirs:
            path = d / "side.tsv"
            if not path.exists():
                continue
            last = d == self.dirs[-1]
            for line in jsonl.read_lines(path):
                name, _, body = line.partition("\t")
                if name == "part":
                    self.by_dir.setdefault(d, {}).setdefault(name, []).append(body)
                elif last or name not in ("pending", "watermark"):
                    self.side.setdefault(name, []).append(body)

    def rows(self) -> pa.Table:
        """Every part's rows as one table sorted by ``SORT_KEYS`` (for tests and tools)."""
        paths = [p["path"] for p in self.parts()]
        if not paths:
            return REWARD_SCHEMA.empty_table()
        table = pa.concat_tables(pq.read_table(p, schema=REWARD_SCHEMA) for p in paths)
        return table.sort_by(SORT_KEYS)

    def parts(self) -> list[dict[str, Any]]:
        """The parts the workers wrote (``WriteParts``): each one's report with ``path`` and
        ``narrow_path`` added, in chunk order, then by name (so the same on every run)."""
        out = []
        for d in self.dirs:
            lines = [json.loads(ln) for ln in self.side_of(d).get("part", [])]
            for p in sorted(lines, key=lambda p: p["part"]):
                folder = d / PARTS
                out.append({**p, "path": folder / p["part"], "narrow_path": folder / p["narrow"]})
        return out

    def side_of(self, d: Path) -> dict[str, list[str]]:
        """One chunk folder's side lines by kind."""
        return self.by_dir.get(d, {})

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
        max_t, wm = json.loads(lines[0])[:2]
        return max_t, wm

    def partition_max(self) -> dict[str, int]:
        """Largest event time per ``topic:partition`` so far (``_WatermarkFn``)."""
        lines = self.side.get("watermark")
        return json.loads(lines[0])[2] if lines else {}


@contextmanager
def _fewer_gc_passes(gen0: int = 50_000) -> Iterator[None]:
    """Raise the young-generation GC threshold while an in-process Beam run lasts (restored
    after). A span makes millions of short-lived tuples and bytes; at the default threshold
    (700) the collector's passes over Beam's long-lived objects cost ~20% of the run."""
    old = gc.get_threshold()
    gc.set_threshold(gen0, old[1], old[2])
    gc.freeze()
    try:
        yield
    finally:
        gc.unfreeze()
        gc.set_threshold(*old)


@contextmanager
def _brief_state_sampling(period_ms: int = 10) -> Iterator[None]:
    """Beam's state sampler (a thread per bundle that samples which step runs) sleeps up to
    200 ms between samples, and every bundle's end joins it: the runner idled ~0.1 s per
    bundle, ~0.4 s of wall clock per 100k events. Its period is a default argument, not an
    option; it is shortened while a Beam run lasts (restored after), and left alone if the
    constructor's defaults are not the ones of Beam 2.77. The sampler's CPU is negligible
    either way (100 wake-ups a second)."""
    from apache_beam.runners.worker import statesampler

    init = statesampler.StateSampler.__init__
    old = init.__defaults__
    if old != (statesampler.DEFAULT_SAMPLING_PERIOD_MS,):
        yield
        return
    init.__defaults__ = (period_ms,)
    try:
        yield
    finally:
        init.__defaults__ = old


def _release_memory() -> None:
    """Hand what a finished Beam run freed back to the OS before the next chunk: collect its
    cycles, release Arrow's pooled buffers, and trim glibc's heap (where there is one). Without
    it the process kept ~35 MB more per chunk after each run (600k events in 6 chunks: 482 vs
    308 MB after the last run, peak 673 vs 624 MB; ingest/RUNNERS.md)."""
    import ctypes

    gc.collect()
    pa.default_memory_pool().release_unused()
    try:
        ctypes.CDLL("libc.so.6").malloc_trim(0)
    except (OSError, AttributeError):  # not glibc
        pass


LOCAL_RUNNER = "--runner=FnApiRunner"
"""Beam's in-process runner. ``DirectRunner`` in Beam 2.77 is a switch that first tries Prism,
which downloads its binary from GitHub on every run (then falls back to this one); naming the
runner the switch would land on does the same work with no network call."""


UNSUPPORTED_RUNNERS = {
    "DaskRunner": "Beam 2.77's DaskRunner cannot run this pipeline: its ParDo drops output tags "
    "(with_outputs: dead letters, times and conversations all land in the main output), drops "
    "what finish_bundle emits (the reward-row tables), does not expand a Splittable DoFn (the "
    "Kafka read), computes only the last sink of a pipeline with two, and has no metrics "
    "(ingest/RUNNERS.md)",
}
"""Runners known not to run this pipeline, and why (checked here; a run would be wrong, not
slow)."""


def local_runner_args(beam_args: list[str] | None) -> list[str]:
    """Beam arguments with the runner made explicit: none or ``DirectRunner`` -> ``FnApiRunner``
    (same in-process execution, no Prism download); any other runner is kept, unless it is one
    of ``UNSUPPORTED_RUNNERS`` (``ValueError`` with the reason)."""
    args = [a for a in beam_args or [] if a not in ("--runner=DirectRunner", "--runner=direct")]
    for a in args:
        name = a.partition("=")[2].rsplit(".", 1)[-1] if a.startswith("--runner=") else ""
        if name in UNSUPPORTED_RUNNERS:
            raise ValueError(UNSUPPORTED_RUNNERS[name])
    if not any(a.startswith("--runner") for a in args):
        args.append(LOCAL_RUNNER)
    return args


def chunk_ranges(
    ranges: list[tuple[str, int, int, int]], chunk_events: int
) -> list[list[tuple[str, int, int, int]]]:
    """Cut a span's ``(topic, partition, start, end)`` ranges into chunks of about
    ``chunk_events`` events: chunk ``i`` of ``k`` takes the ``i``-th ``1/k`` of every range, so
    each chunk is a slice of the span across all partitions (one chunk if the span is small)."""
    total = sum(e - s for _, _, s, e in ranges)
    k = max(1, -(-total // chunk_events))
    if k == 1:
        return [ranges]
    return [
        [
            (t, p, s + (e - s) * i // k, s + (e - s) * (i + 1) // k)
            for t, p, s, e in ranges
            if (e - s) * (i + 1) // k > (e - s) * i // k
        ]
        for i in range(k)
    ]


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
    guard: Callable[[], None] | None = None,
) -> SpanResult:
    """Ingest everything new on the event topics for ``group_id`` into one span.

    ``config`` gives join windows, parse limits, validation bounds, rewards and ``drain``
    (defaults: ``IngestConfig()``); ``reward_config`` and ``drain``, when given, override it.
    ``drain=True`` (end of stream) finalises every carried completion whose persistence window
    has closed or whose checkpoints all came, without waiting for its other windows (one whose
    persistence window is still open stays pending unless ``join.open_at_drain`` is
    ``"neutral"``); otherwise completions whose join windows are still open are carried.
    """
    cfg = config or IngestConfig()
    source = KafkaSource(bootstrap=bootstrap, group_id=group_id, partitions=cfg.partitions)
    return run_job(SpanJob.from_config(cfg, source=source, output_root=output_root,
                                       reward_config=reward_config, drain=drain,
                                       beam_args=beam_args, guard=guard))


def run_job(job: SpanJob) -> SpanResult:
    """Set up, run, commit and clean up one ``SpanJob``."""
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
    return run_job(SpanJob.from_config(config, source=config.source,
                                       output_root=config.output_root, beam_args=beam_args))


def run(argv: list[str] | None = None) -> SpanResult:
    """Command line: ``python -m ingest.pipeline (--config FILE | --bootstrap B --output-root D)``.

    Unknown arguments are passed to Beam (default ``--runner=FnApiRunner``; ``DirectRunner`` is
    mapped to it, see ``LOCAL_RUNNER``).
    """
    parser = argparse.ArgumentParser(prog="ingest", description=__doc__.splitlines()[0])
    parser.add_argument("--config", type=Path, help="IngestConfig as JSON.")
    parser.add_argument("--bootstrap", help="Kafka bootstrap (when no --config).")
    parser.add_argument("--group-id", default="ratchet-ingest")
    parser.add_argument("--output-root", type=Path)
    parser.add_argument("--drain", action="store_true",
                        help="End of stream: finalise every pending completion whose persistence "
                        "window has closed (join.open_at_drain decides the others).")
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
