"""Request and response models of the serving API (one place a client can read the contract).

Deliberately left out: the Kafka event a completion produces (ingest/schema.py ``Completion``).
"""

from __future__ import annotations

from datetime import datetime
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field


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

    version: int | None = Field(default=None, ge=1, description="Registry version to serve.")
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
