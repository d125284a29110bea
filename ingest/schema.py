"""The event contract: what the serving fleet and the user simulator write to Kafka, and the
reward rows that ingest writes to Parquet.

Every record here has a pydantic model (for validation, with errors that name the field) and a
pyarrow schema (for the Parquet spans). Field names follow the OpenTelemetry gen_ai semantic
conventions where one exists: ``response_id`` is ``gen_ai.response.id`` (the request id), a
signal has the shape of a ``gen_ai.evaluation.result`` (name, score, label, explanation).

Deliberately left out: anything about how events are joined or rewarded (ingest/pipeline.py,
rewards/), and transport details (ingest/kafka_io.py).
"""

from __future__ import annotations

import json
import re
from datetime import UTC, datetime
from typing import Annotated, ClassVar, Literal

import msgspec
import pyarrow as pa
from pydantic import BaseModel, ConfigDict, Field, TypeAdapter, model_validator

SCHEMA_VERSION = 2
"""2 added what was served as served: prompt token ids, prompt-position routed experts, where the
experts came from, top_p in reward rows, and the follow-up detector's fields. Version-1 events and
spans are still read (``upgrade_reward_table``)."""
READABLE_SCHEMA_VERSIONS = (1, 2)

Arm = Literal["stable", "canary", "holdback"]
"""The fleet router's arms (deploy/fleet/router.py): a completion records the one that served it."""
ARMS: tuple[Arm, ...] = ("stable", "canary", "holdback")


def holdback_mask(rows: pa.Table, *, anchor_version: int | None, champion_version: int | None):
    """Which reward ``rows`` the holdback served: those whose recorded ``arm`` is ``holdback``;
    of rows without an arm (written before the column, or served with no router), those of the
    anchor version while the anchor is not the champion (the version alone cannot tell the arms
    of one version apart). One rule for training (never on them) and the impact table."""
    import pyarrow.compute as pc

    arm = rows["arm"] if "arm" in rows.column_names else pa.nulls(rows.num_rows, pa.string())
    held = pc.equal(pc.fill_null(arm, ""), "holdback")
    if anchor_version is not None and anchor_version != champion_version:
        held = pc.or_(held, pc.and_(pc.is_null(arm),
                                    pc.equal(rows["model_version"], anchor_version)))
    return held

EDIT_WINDOWS_S: tuple[int, ...] = (30, 120, 300, 600)
"""Edit-persistence checkpoints, seconds after the completion (as in Copilot's telemetry)."""

TOPICS = {
    "completion": "ratchet.completions",
    "edit_persistence": "ratchet.signals.edit_persistence",
    "followup": "ratchet.signals.followup",
    "feedback": "ratchet.signals.feedback",
}
DEAD_LETTER_TOPIC = "ratchet.dead_letter"
LATE_TOPIC = "ratchet.late_signals"
"""Signals that arrived after their completion was finalised (counted, kept, not joined)."""


class _Event(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)

    schema_version: Literal[1, 2] = SCHEMA_VERSION
    event_id: str = Field(min_length=1, max_length=128, description="Unique id of this event.")
    response_id: str = Field(
        min_length=1, max_length=128, description="gen_ai.response.id: the request id."
    )
    event_time: datetime = Field(description="When it happened (UTC), in event time.")

    def to_json(self) -> bytes:
        return self.model_dump_json().encode()


class SamplingParams(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)

    temperature: float = Field(ge=0.0, le=10.0)
    top_p: float = Field(gt=0.0, le=1.0)
    max_tokens: int = Field(ge=1, le=4096)
    seed: int | None = None


class Usage(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    input_tokens: int = Field(ge=0, description="gen_ai.usage.input_tokens")
    output_tokens: int = Field(ge=0, description="gen_ai.usage.output_tokens")


class Completion(_Event):
    """One served completion: everything the trainer needs to learn off-policy from it."""

    kind: Literal["completion"] = "completion"
    conversation_id: str = Field(min_length=1, max_length=128, description="gen_ai.conversation.id")
    user_hash: str = Field(min_length=1, max_length=128, description="Hashed user id, never raw.")
    client_id: str | None = Field(
        default=None, max_length=128,
        description="Which client (editor plugin, telemetry importer) the suggestion was served "
        "to: the key of its declaration in ``RewardConfig.clients`` (optional; without it the "
        "client declares nothing).",
    )
    arm: Arm | None = Field(
        default=None,
        description="The fleet router's arm that served the request (stable, canary or holdback: "
        "deploy/fleet/router.py); None where no router chose (a lone replica, an importer). "
        "Lets the holdback comparison tell its users from the champion's even when both arms "
        "serve one version.",
    )
    model_name: str = Field(min_length=1, description="gen_ai.request.model: registry name.")
    model_version: int = Field(ge=1, description="Registry version of the behaviour policy.")
    task_kind: str = Field(description="Task family of the prompt, for per-task baselines.")
    prompt: str
    prompt_token_ids: list[int] = Field(
        default_factory=list,
        description="The prompt as served, token ids (v2). Empty in v1 events: the trainer then "
        "re-tokenises ``prompt``; with it, nothing is re-tokenised.",
    )
    response_text: str
    response_token_ids: list[int]
    response_logprobs: list[float] = Field(
        description="Logprob of each sampled token under the distribution actually sampled "
        "(temperature and top-p applied, renormalised): vLLM's processed_logprobs."
    )
    sampling: SamplingParams
    routed_experts: list[list[list[int]]] = Field(
        description="Expert ids chosen per response token, per MoE layer: (tokens, layers, top_k)."
    )
    prompt_routed_experts: list[list[list[int]]] = Field(
        default_factory=list,
        description="Expert ids per prompt position, per MoE layer (v2; empty when not captured).",
    )
    routed_experts_source: Literal["engine", "teacher_forced", "none"] = Field(
        default="engine",
        description="How routed experts were obtained: returned by the engine that sampled, "
        "recomputed by a teacher-forced router pass, or not at all (dense policy).",
    )
    time_to_first_token_ms: float = Field(ge=0.0)
    latency_ms: float = Field(ge=0.0)
    finish_reason: Literal["stop", "length", "error"]
    usage: Usage

    @model_validator(mode="after")
    def _check_lengths(self) -> Completion:
        n = len(self.response_token_ids)
        if len(self.response_logprobs) != n:
            raise ValueError(
                f"response_logprobs has {len(self.response_logprobs)} entries, "
                f"response_token_ids has {n}"
            )
        if self.routed_experts and len(self.routed_experts) != n:
            raise ValueError(f"routed_experts has {len(self.routed_experts)} tokens, expected {n}")
        n_prompt = len(self.prompt_token_ids)
        if self.prompt_routed_experts and len(self.prompt_routed_experts) != n_prompt:
            raise ValueError(
                f"prompt_routed_experts has {len(self.prompt_routed_experts)} positions, "
                f"prompt_token_ids has {n_prompt}"
            )
        bad = [lp for lp in self.response_logprobs if not lp <= 0.0]
        if bad:
            raise ValueError(f"response_logprobs must be <= 0, got {bad[0]}")
        return self


class EditPersistence(_Event):
    """gen_ai.evaluation.result named ``edit_persistence``: share of the suggestion still there."""

    kind: Literal["edit_persistence"] = "edit_persistence"
    window_s: Literal[30, 120, 300, 600]
    score: float = Field(ge=0.0, le=1.0, description="1 - normalised edit distance.")


class Followup(_Event):
    """The user's next message in the conversation after the completion."""

    kind: Literal["followup"] = "followup"
    text: str = Field(max_length=4096)
    dissatisfied: bool | None = Field(
        default=None,
        description="The producer's own flag, optional (v2). Ingest's detector decides from the "
        "text; this flag is only compared with it, never trusted.",
    )


class Feedback(_Event):
    """Explicit accept / reject of the suggestion."""

    kind: Literal["feedback"] = "feedback"
    label: Literal["accept", "reject"]
    rating: int | None = Field(
        default=None, ge=1, le=5, description="Optional 1-5 rating from the signals API (v2)."
    )
    comment: str | None = Field(
        default=None, max_length=2000, description="Optional comment from the signals API (v2)."
    )


Signal = Annotated[EditPersistence | Followup | Feedback, Field(discriminator="kind")]
Event = Annotated[
    Completion | EditPersistence | Followup | Feedback, Field(discriminator="kind")
]
EVENT_ADAPTER: TypeAdapter[Completion | EditPersistence | Followup | Feedback] = TypeAdapter(Event)


# --- hot-path decoding ---------------------------------------------------------------------------
# The same contract as msgspec Structs: compiled decoding and validation of well-formed events.
# A record these refuse goes through the pydantic models above, which name the field and value;
# ``fast_event`` only ever accepts what pydantic accepts, with the same values
# (tests/unit/ingest/test_ingest_event_structs.py runs both over good and bad events).
_Id = Annotated[str, msgspec.Meta(min_length=1, max_length=128)]


class _FastSampling(msgspec.Struct, forbid_unknown_fields=True):
    temperature: Annotated[float, msgspec.Meta(ge=0.0, le=10.0)]
    top_p: Annotated[float, msgspec.Meta(gt=0.0, le=1.0)]
    max_tokens: Annotated[int, msgspec.Meta(ge=1, le=4096)]
    seed: int | None = None


class _FastUsage(msgspec.Struct, forbid_unknown_fields=True):
    input_tokens: Annotated[int, msgspec.Meta(ge=0)]
    output_tokens: Annotated[int, msgspec.Meta(ge=0)]


class _FastCompletion(
    msgspec.Struct, forbid_unknown_fields=True, tag_field="kind", tag="completion"
):
    kind: ClassVar[str] = "completion"
    event_id: _Id
    response_id: _Id
    event_time: datetime
    conversation_id: _Id
    user_hash: _Id
    model_name: Annotated[str, msgspec.Meta(min_length=1)]
    model_version: Annotated[int, msgspec.Meta(ge=1)]
    task_kind: str
    prompt: str
    response_text: str
    response_token_ids: list[int]
    response_logprobs: list[float]
    sampling: _FastSampling
    routed_experts: list[list[list[int]]]
    time_to_first_token_ms: Annotated[float, msgspec.Meta(ge=0.0)]
    latency_ms: Annotated[float, msgspec.Meta(ge=0.0)]
    finish_reason: Literal["stop", "length", "error"]
    usage: _FastUsage
    schema_version: Literal[1, 2] = SCHEMA_VERSION
    client_id: Annotated[str, msgspec.Meta(max_length=128)] | None = None
    arm: Arm | None = None
    prompt_token_ids: list[int] = msgspec.field(default_factory=list)
    prompt_routed_experts: list[list[list[int]]] = msgspec.field(default_factory=list)
    routed_experts_source: Literal["engine", "teacher_forced", "none"] = "engine"

    def well_formed(self) -> bool:
        """``Completion._check_lengths`` holds (else pydantic names what does not)."""
        n = len(self.response_token_ids)
        lps = self.response_logprobs
        return (
            len(lps) == n
            and (not self.routed_experts or len(self.routed_experts) == n)
            and (
                not self.prompt_routed_experts
                or len(self.prompt_routed_experts) == len(self.prompt_token_ids)
            )
            and (not lps or max(lps) <= 0.0)
        )


class _FastSignal(msgspec.Struct, forbid_unknown_fields=True):
    """A signal event: what msgspec decodes is well formed (no cross-field rule to check)."""

    def well_formed(self) -> bool:
        return True


class _FastEditPersistence(_FastSignal, tag_field="kind", tag="edit_persistence"):
    kind: ClassVar[str] = "edit_persistence"
    event_id: _Id
    response_id: _Id
    event_time: datetime
    window_s: Literal[30, 120, 300, 600]
    score: Annotated[float, msgspec.Meta(ge=0.0, le=1.0)]
    schema_version: Literal[1, 2] = SCHEMA_VERSION


class _FastFollowup(_FastSignal, tag_field="kind", tag="followup"):
    kind: ClassVar[str] = "followup"
    event_id: _Id
    response_id: _Id
    event_time: datetime
    text: Annotated[str, msgspec.Meta(max_length=4096)]
    dissatisfied: bool | None = None
    schema_version: Literal[1, 2] = SCHEMA_VERSION


class _FastFeedback(_FastSignal, tag_field="kind", tag="feedback"):
    kind: ClassVar[str] = "feedback"
    event_id: _Id
    response_id: _Id
    event_time: datetime
    label: Literal["accept", "reject"]
    rating: Annotated[int, msgspec.Meta(ge=1, le=5)] | None = None
    comment: Annotated[str, msgspec.Meta(max_length=2000)] | None = None
    schema_version: Literal[1, 2] = SCHEMA_VERSION


FastEvent = _FastCompletion | _FastEditPersistence | _FastFollowup | _FastFeedback
_FAST_DECODER = msgspec.json.Decoder(FastEvent)
_SUB_MICROSECOND = re.compile(rb":[0-9][0-9]\.[0-9]{7}")
"""A time with more than 6 fractional digits: msgspec rounds it to the microsecond, pydantic
truncates; such a record is left to pydantic."""


def fast_event(raw: bytes) -> FastEvent | None:
    """The event in ``raw`` decoded and validated by msgspec, or ``None`` when msgspec refuses
    it or a cross-field rule fails (then ``EVENT_ADAPTER`` decides, and names why). An accepted
    event has the attributes of its pydantic model, with the same values."""
    if _SUB_MICROSECOND.search(raw):
        return None
    try:
        event = _FAST_DECODER.decode(raw)
    except (msgspec.MsgspecError, UnicodeDecodeError):  # invalid UTF-8 raises the latter
        return None
    return event if event.well_formed() else None


def parse_event(raw: bytes) -> Completion | EditPersistence | Followup | Feedback:
    """Parse one Kafka value. Raises ``ValueError`` (pydantic's ValidationError is one)."""
    return EVENT_ADAPTER.validate_json(raw)


def now() -> datetime:
    return datetime.now(UTC)


class DeadLetter(BaseModel):
    """What the dead-letter topic carries: the raw payload, where it came from and why."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    reason: str = Field(description="Short machine-readable reason, e.g. 'schema_violation'.")
    detail: str = Field(description="Human-readable detail naming the field and value.")
    topic: str
    partition: int
    offset: int
    payload: str = Field(
        description="The raw value's prefix (at most ingest.parse.PAYLOAD_PREFIX_CHARS), decoded "
        "with replacement characters."
    )
    payload_bytes: int | None = Field(None, ge=0, description="Size of the raw value in bytes.")
    payload_sha256: str | None = Field(None, description="sha256 of the raw value (hex).")
    payload_truncated: bool = Field(False, description="``payload`` is a prefix of the value.")

    def to_json(self) -> bytes:
        return json.dumps(self.model_dump()).encode()


# Reward rows: one per finalised completion, the trainer's input.
REWARD_SCHEMA = pa.schema(
    [
        pa.field("schema_version", pa.int32(), nullable=False),
        pa.field("response_id", pa.string(), nullable=False),
        pa.field("conversation_id", pa.string(), nullable=False),
        pa.field("event_time", pa.timestamp("us", tz="UTC"), nullable=False),
        pa.field("model_name", pa.string(), nullable=False),
        pa.field("model_version", pa.int64(), nullable=False),
        pa.field("task_kind", pa.string(), nullable=False),
        pa.field("prompt", pa.string(), nullable=False),
        pa.field("response_text", pa.string(), nullable=False),
        pa.field("response_token_ids", pa.list_(pa.int32()), nullable=False),
        pa.field("response_logprobs", pa.list_(pa.float32()), nullable=False),
        pa.field("routed_experts", pa.list_(pa.list_(pa.list_(pa.int16()))), nullable=False),
        pa.field("temperature", pa.float32(), nullable=False),
        # v2: what was served as served (null in upgraded v1 rows).
        pa.field("prompt_token_ids", pa.list_(pa.int32())),
        pa.field("prompt_routed_experts", pa.list_(pa.list_(pa.list_(pa.int16())))),
        pa.field("routed_experts_source", pa.string()),
        pa.field("top_p", pa.float32()),
        pa.field("finish_reason", pa.string(), nullable=False),
        pa.field("completion_tokens", pa.int32(), nullable=False),
        pa.field("latency_ms", pa.float32(), nullable=False),
        # Joined signals; null means the signal never arrived (missing is not zero).
        pa.field("edit_persistence_30", pa.float32()),
        pa.field("edit_persistence_120", pa.float32()),
        pa.field("edit_persistence_300", pa.float32()),
        pa.field("edit_persistence_600", pa.float32()),
        pa.field("followup_dissatisfied", pa.bool_()),
        pa.field("feedback_accept", pa.bool_()),
        # v2: the follow-up detector (ingest decides ``followup_dissatisfied`` from the text).
        pa.field("followup_text", pa.string()),
        pa.field("followup_flag", pa.bool_()),
        pa.field("dissatisfied_score", pa.float32()),
        pa.field("detector_version", pa.string()),
        # Which client, and what it declared it reports (decides what a missing signal means)
        pa.field("client_id", pa.string()),
        pa.field("client_reports_persistence", pa.bool_()),
        # The router's arm that served it (null: no router chose), for the holdback comparison
        pa.field("arm", pa.string()),
        # Rewards
        pa.field("reward", pa.float32(), nullable=False),
        pa.field("reward_components", pa.map_(pa.string(), pa.float32()), nullable=False),
        pa.field("defaulted_signals", pa.list_(pa.string()), nullable=False),
        # Whether the trainer uses the row (false: nothing is known of its persistence,
        # rewards.signals.is_trainable); null in rows written before the column existed: true.
        pa.field("trainable", pa.bool_()),
    ],
    metadata={b"ratchet.schema_version": str(SCHEMA_VERSION).encode()},
)


def upgrade_reward_table(table: pa.Table) -> pa.Table:
    """A reward table of any readable version as ``REWARD_SCHEMA``: v1 spans gain the v2 columns
    as nulls (missing is not zero). Raises ``ValueError`` for an unknown version or a column
    ``REWARD_SCHEMA`` does not know."""
    unknown = set(table.column_names) - set(REWARD_SCHEMA.names)
    if unknown:
        raise ValueError(f"reward table has columns REWARD_SCHEMA does not know: {sorted(unknown)}")
    if table.num_rows and "schema_version" in table.column_names:
        versions = set(table.column("schema_version").to_pylist())
        if not versions <= set(READABLE_SCHEMA_VERSIONS):
            raise ValueError(f"reward table has schema_version {sorted(versions)}, "
                             f"readable: {READABLE_SCHEMA_VERSIONS}")
    columns = []
    for field in REWARD_SCHEMA:
        if field.name in table.column_names:
            columns.append(table.column(field.name).cast(field.type))
        elif field.nullable:
            columns.append(pa.nulls(table.num_rows, field.type))
        else:
            raise ValueError(f"reward table lacks required column {field.name!r}")
    return pa.Table.from_arrays(columns, schema=REWARD_SCHEMA)
