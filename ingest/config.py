"""Typed configuration of the ingest stage.

``IngestConfig`` composes: the event source (a tagged union: a Kafka consumer group or a
recorded JSONL file), the output root, parsing limits (what is dead-lettered), the join windows
and allowed lateness, the Great Expectations bounds per span, and the reward config.

Importing this module imports only pydantic (no Beam, no Great Expectations, no kafka).
Deliberately left out: how the pipeline uses these (ingest/pipeline.py).
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from rewards.config import RewardConfig


class KafkaSource(BaseModel):
    """Read every event topic from the offsets committed for ``group_id`` to the high-water mark."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    type: Literal["kafka"] = "kafka"
    bootstrap: str = Field(min_length=3, description="Kafka bootstrap servers, 'host:port'.")
    group_id: str = Field(
        "ratchet-ingest", min_length=1, description="Consumer group whose offsets mark progress."
    )
    partitions: int = Field(4, ge=1, le=256, description="Partitions of topics created by ingest.")


class FileSource(BaseModel):
    """Read recorded records from a JSONL file: ``{"topic", "key", "value", "timestamp_ms"}``."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    type: Literal["file"] = "file"
    path: Path = Field(description="JSONL file of recorded Kafka records.")


Source = Annotated[KafkaSource | FileSource, Field(discriminator="type")]


class ParseConfig(BaseModel):
    """Limits beyond the event schema; a violation dead-letters the event with a reason."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    max_event_bytes: int = Field(
        1_048_576, ge=1024, le=64 * 1_048_576, description="Larger payloads are 'too_large'."
    )
    max_future_skew_s: float = Field(
        300.0,
        ge=0.0,
        description="Event time later than ingest's own clock (or than the record timestamp) by "
        "more: 'future_timestamp'. No event can move the watermark further ahead of the clock.",
    )
    max_age_s: float = Field(
        7 * 86400.0,
        gt=0.0,
        description="Event time older than the record timestamp by more: stale.",
    )
    max_latency_ms: float = Field(
        600_000.0,
        gt=0.0,
        description="A completion's latency_ms or time_to_first_token_ms above this: "
        "'out_of_range' (per event, so one bad row never fails a whole span).",
    )
    min_logprob: float = Field(
        -1e4,
        lt=0.0,
        description="A response logprob below this (finite, but lost in float32): 'out_of_range'.",
    )


SignalKind = Literal["edit_persistence", "followup", "feedback"]


class JoinConfig(BaseModel):
    """Join windows per signal kind, in event time after the completion, and allowed lateness.

    A signal joins if its event time is at most the completion's time + window + grace. The
    watermark is the largest event time seen (never beyond ingest's clock) less
    ``allowed_lateness_s``. A completion is final once each expected signal has arrived or its
    window has closed against the watermark, and every other window has closed (or all of them
    when ``expected_signals`` lists every kind).
    """

    model_config = ConfigDict(extra="forbid", frozen=True)

    edit_persistence_window_s: float = Field(
        600.0, ge=600.0, description="Window for persistence checkpoints (the last one is 600 s)."
    )
    followup_window_s: float = Field(900.0, gt=0.0, description="Window for a follow-up.")
    feedback_window_s: float = Field(1800.0, gt=0.0, description="Window for explicit feedback.")
    edit_persistence_grace_s: float = Field(
        60.0,
        ge=0.0,
        description="Grace after the persistence window: the last checkpoint is due exactly at "
        "the window's end, and a checkpoint measured a moment late still joins.",
    )
    followup_grace_s: float = Field(0.0, ge=0.0, description="Grace after the follow-up window.")
    feedback_grace_s: float = Field(0.0, ge=0.0, description="Grace after the feedback window.")
    expected_signals: tuple[SignalKind, ...] = Field(
        ("edit_persistence",),
        description="Signals every completion is expected to get (persistence: all checkpoints). "
        "Once these have arrived the completion is final; others that have not come by then "
        "take their default, and arrive late if at all.",
    )
    allowed_lateness_s: float = Field(
        60.0, ge=0.0, description="How far behind the largest event time the watermark trails."
    )
    open_at_drain: Literal["pending", "neutral"] = Field(
        "pending",
        description="What a drain (end of a recording or replay) does with a completion whose "
        "persistence window is still open against the watermark: 'pending' keeps it for the "
        "next span (its checkpoints can still come); 'neutral' finalises it now, and a missing "
        "checkpoint then means nothing (never a rejection): the row is left out of training "
        "unless feedback or the checkpoints that came score it.",
    )
    finalized_retention_s: float = Field(
        86400.0,
        gt=0.0,
        description="How long finalised response ids are remembered to recognise late signals.",
    )

    def horizon_s(self) -> float:
        """The longest window: a signal whose completion has not come by then is unknown."""
        return max(
            self.edit_persistence_window_s + self.edit_persistence_grace_s,
            self.followup_window_s + self.followup_grace_s,
            self.feedback_window_s + self.feedback_grace_s,
        )


class ValidationConfig(BaseModel):
    """Bounds of the Great Expectations suite run on every span."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    max_completion_tokens: int = Field(4096, ge=1, description="Upper bound of completion_tokens.")
    max_latency_ms: float = Field(600_000.0, gt=0.0, description="Upper bound of latency_ms.")
    min_join_share: dict[str, float] = Field(
        default_factory=lambda: {"edit_persistence": 0.0, "followup": 0.0, "feedback": 0.0},
        description="Smallest share of rows with each signal joined.",
    )
    min_current_version_share: float = Field(
        0.0, ge=0.0, le=1.0, description="Smallest share of rows from the newest behaviour version."
    )
    max_reward_mean_drift: float = Field(
        1.0, ge=0.0, description="Largest change of the reward mean vs the previous span."
    )
    max_reward_std_drift: float = Field(
        1.0, ge=0.0, description="Largest change of the reward std vs the previous span."
    )
    max_length_drift_ratio: float = Field(
        3.0, ge=1.0, description="Largest ratio of mean completion length vs the previous span."
    )
    min_rows_for_drift: int = Field(
        20, ge=1, description="Drift checks run only when both spans have this many rows."
    )


class IngestConfig(BaseModel):
    """One ingest run: where events come from, where spans go, and how they are judged.

    Inside a cycle, the cycle supplies the broker and the output root and uses ``group_id``;
    ``source`` and ``output_root`` are for standalone runs (``python -m ingest.pipeline``).
    """

    model_config = ConfigDict(extra="forbid", frozen=True)

    source: Source | None = Field(
        None, description="Standalone runs: Kafka consumer group or recorded file."
    )
    group_id: str = Field(
        "ratchet-ingest", min_length=1, description="Consumer group when the caller gives Kafka."
    )
    partitions: int = Field(4, ge=1, le=256, description="Partitions of topics ingest creates.")
    output_root: Path | None = Field(
        None, description="Standalone runs: root of spans, manifests, pending state, quarantine."
    )
    parse: ParseConfig = Field(default_factory=ParseConfig, description="Dead-letter limits.")
    join: JoinConfig = Field(default_factory=JoinConfig, description="Join windows and lateness.")
    validation: ValidationConfig = Field(
        default_factory=ValidationConfig, description="Great Expectations bounds."
    )
    rewards: RewardConfig = Field(default_factory=RewardConfig, description="Reward config.")
    drain: bool = Field(
        False, description="End of stream (a recording, a replay, demos): finalise now every "
        "pending completion whose persistence window has closed or whose checkpoints all came, "
        "without waiting for its other windows; one whose persistence window is still open "
        "follows ``join.open_at_drain``."
    )
    chunk_events: int = Field(
        250_000,
        ge=1,
        description="Most events one Beam run reads: a bigger span runs as several chunks, one "
        "after another, carrying the join's state (bounds memory; same rows as one pass unless a "
        "record is over the longest window + lateness out of order: ingest/RUNNERS.md).",
    )

    @model_validator(mode="after")
    def _check(self) -> IngestConfig:
        unknown = set(self.validation.min_join_share) - {"edit_persistence", "followup", "feedback"}
        if unknown:
            raise ValueError(f"validation.min_join_share has unknown signals {sorted(unknown)}")
        return self
