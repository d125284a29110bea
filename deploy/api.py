"""Request and response models of the serving API (one place a client can read the contract).

Deliberately left out: the Kafka events a completion and a signal produce (ingest/schema.py).
"""

from __future__ import annotations

from datetime import datetime
from typing import Literal

from pydantic import AwareDatetime, BaseModel, ConfigDict, Field, field_validator, model_validator


class CompletionRequest(BaseModel):
    """``POST /v1/completions``: one prompt, sampling parameters and who is asking."""

    model_config = ConfigDict(extra="forbid")

    prompt: str = Field(min_length=1, max_length=16_384, description="Text the model continues.")
    max_tokens: int = Field(default=32, ge=1, le=4096, description="Most tokens to generate.")
    temperature: float = Field(default=0.7, ge=0.0, le=10.0, description="0 means greedy.")
    top_p: float = Field(default=1.0, gt=0.0, le=1.0, description="Nucleus sampling mass.")
    seed: int | None = Field(
        default=None, ge=0, le=2**63 - 1, description="Sampling seed; None draws one."
    )
    conversation_id: str = Field(
        min_length=1, max_length=128, description="gen_ai.conversation.id; routing sticks to it."
    )
    user_id: str = Field(
        min_length=1, max_length=128, description="Caller's user id; only its hash is logged."
    )
    task_kind: str = Field(
        default="unknown", min_length=1, max_length=64, description="Task family of the prompt."
    )


class UsageOut(BaseModel):
    input_tokens: int = Field(description="Prompt tokens (BOS included).")
    output_tokens: int = Field(description="Generated tokens (EOS included).")


class CompletionResponse(BaseModel):
    """The completion; ``id`` is the response_id every delayed signal refers to."""

    id: str = Field(description="gen_ai.response.id.")
    text: str
    model_version: int = Field(description="Registry version that produced the text.")
    created: datetime = Field(description="Event time of the completion (UTC).")
    usage: UsageOut
    finish_reason: Literal["stop", "length"]
    latency_ms: float = Field(description="Server-side generation latency.")
    replica_id: str = Field(description="Which replica answered.")


class ReloadRequest(BaseModel):
    """``POST /admin/reload``: a version, or an alias to resolve (settings' alias if neither)."""

    model_config = ConfigDict(extra="forbid")

    version: int | None = Field(
        default=None, ge=1, le=2**31 - 1, description="Registry version to serve."
    )
    alias: str | None = Field(default=None, min_length=1, description="Alias to resolve.")


class ReloadResponse(BaseModel):
    version: int = Field(description="Version served now.")
    previous_version: int | None = Field(description="Version served before the reload.")
    load_seconds: float = Field(description="Download + build time of the new version.")


class ReadyResponse(BaseModel):
    ready: bool
    version: int | None = Field(description="Version served, None while loading.")
    replica_id: str
    error: str | None = Field(default=None, description="Last load error, if any.")


# -- signals API (deploy/routes/signals.py) and client keys (deploy/routes/keys.py) --------------


def _no_lone_surrogates(value: str | None) -> str | None:
    if value is not None:
        try:
            value.encode("utf-8")
        except UnicodeEncodeError as exc:
            raise ValueError(f"contains a lone surrogate at index {exc.start}") from None
    return value


class _SignalRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")

    response_id: str = Field(
        min_length=1, max_length=128, description="The ``id`` of the response this is about."
    )
    created: AwareDatetime | None = Field(
        default=None,
        description="When the user acted (with a time zone). Default: when the replica received "
        "it. Must not precede the response and must lie within the replica's "
        "``signal_max_skew_s`` of the receive time.",
    )

    _check_text = field_validator("response_id")(_no_lone_surrogates)


class FeedbackRequest(_SignalRequest):
    """``POST /v1/feedback``: the user accepted or rejected the suggestion."""

    label: Literal["accept", "reject"] = Field(description="Explicit verdict on the suggestion.")
    rating: int | None = Field(default=None, ge=1, le=5, description="Optional 1-5 rating.")
    comment: str | None = Field(default=None, max_length=2000, description="Optional comment.")

    _check_comment = field_validator("comment")(_no_lone_surrogates)


class EditRequest(_SignalRequest):
    """``POST /v1/edits``: the suggestion as it stands in the user's file at a checkpoint.

    Send ``text`` (ratchet scores it: 1 - normalised Levenshtein distance to the served text) or a
    precomputed ``score``, not both.
    """

    window_s: Literal[30, 120, 300, 600] = Field(description="Checkpoint, seconds after serving.")
    text: str | None = Field(
        default=None, max_length=65_536, description="The suggestion's text as it stands now."
    )
    score: float | None = Field(
        default=None,
        ge=0.0,
        le=1.0,
        allow_inf_nan=False,
        description="Precomputed persistence in [0, 1], instead of ``text``.",
    )

    _check_edit_text = field_validator("text")(_no_lone_surrogates)

    @model_validator(mode="after")
    def _one_of_text_or_score(self) -> EditRequest:
        if (self.text is None) == (self.score is None):
            raise ValueError("give exactly one of text, score")
        return self


class FollowupRequest(_SignalRequest):
    """``POST /v1/followups``: the user's next message after the response."""

    text: str = Field(min_length=1, max_length=4096, description="The user's next message.")
    dissatisfied: bool | None = Field(
        default=None,
        description="The client's own flag, optional: ingest's detector decides from the text.",
    )

    _check_followup_text = field_validator("text")(_no_lone_surrogates)


class SignalAccepted(BaseModel):
    """The event written (asynchronously, through the spool) for an accepted signal."""

    event_id: str
    response_id: str
    kind: Literal["feedback", "edit_persistence", "followup"]
    event_time: datetime
    score: float | None = Field(default=None, description="Edit persistence, for edits.")


class ApiKeyCreateRequest(BaseModel):
    """``POST /admin/keys``: a new client key (admin token required)."""

    model_config = ConfigDict(extra="forbid")

    name: str = Field(min_length=1, max_length=128, description="Who the key is for.")


class ApiKeyCreated(BaseModel):
    key_id: str
    name: str
    key: str = Field(description="The key itself: shown once, only its hash is stored.")


class ApiKeyInfo(BaseModel):
    key_id: str
    name: str
    created: datetime
    revoked_at: datetime | None
