"""Request and response models of the serving API (one place a client can read the contract).

The public API is OpenAI's: ``POST /v1/completions``, ``POST /v1/chat/completions`` and
``GET /v1/models`` (and ``/v1/models/{id}``) take and return OpenAI's shapes, so the official
clients work unchanged. Every request parameter is honoured or refused: a parameter OpenAI defines
that ratchet does not implement (``UNSUPPORTED_AT_DEFAULT``: ``response_format``, ``suffix``,
``echo``, ``best_of``, ``logit_bias``, penalties, ...) is accepted only at its default
value, whose behaviour is ratchet's; any other value, and any parameter OpenAI does not define, is
a 400 with code ``unsupported_parameter`` naming it. A supported parameter with a value ratchet
cannot honour (top-k logprobs, logprobs while streaming, a forced tool call) is a 400
``unsupported_value``. Chat ``tools`` are honoured where the served policy's chat template renders
them (deploy/replica/tool_calls.py) and refused where it does not. What ratchet adds:

- the conversation id: header ``X-Conversation-Id``, else ``metadata.conversation_id``, else the
  legacy top-level ``conversation_id``; a request without one gets a generated id, returned in the
  ``X-Conversation-Id`` response header;
- ``metadata.task_kind`` (else the legacy ``task_kind``, else ``"unknown"``);
- ``stop_after_code_block`` (a top-level boolean; OpenAI's clients send it as
  ``extra_body={"stop_after_code_block": True}``): each choice ends once its first fenced code
  block is closed, the closing fence included, with ``finish_reason`` ``"stop"``. A ``stop``
  string cannot say this (it would cut at the opening fence, or drop the closing one). The rule is
  ``tasks.humaneval.reply_complete``, the one the gate decodes its suites with, so a reply is
  served exactly as the gate would have decoded it;
- response ids: a response's ``id`` is the id every signal refers to when it has one choice; with
  ``n > 1`` (or several prompts) each choice is logged as its own completion whose id is
  ``choice_response_id(id, index)`` = ``f"{id}-{index}"``, also sent in the
  ``X-Ratchet-Response-Ids`` header (comma-separated, in choice order);
- ``system_fingerprint`` is ``ratchet-v{version}``, the registry version that answered;
- headers ``X-Ratchet-Replica`` (which replica answered) and ``X-Ratchet-Created`` (the exact
  event time of the completion, ISO 8601; ``created`` in the body is whole seconds).

Sampling bounds are tighter than OpenAI's where the sampler would otherwise produce NaN:
``temperature`` is 0 (greedy) or at least ``MIN_TEMPERATURE``, ``top_p`` at least ``MIN_TOP_P``.
Non-finite numbers anywhere in a body, strings or object keys that are not valid Unicode (lone
surrogates), nesting deeper than ``MAX_JSON_DEPTH`` and more than ``MAX_JSON_NODES`` values are
refused with a 400 naming the field (``json_problem``); so is a history tool call whose
``arguments`` decode to any of these (deploy/replica/tool_calls.py).

The signals API (``/v1/feedback``, ``/v1/edits``, ``/v1/followups``) and the client keys'
admin routes have their models at the end of this module.

Deliberately left out: the Kafka events a completion or a signal produces (ingest/schema.py),
JSON mode (refused: nothing constrains the output to JSON), forced tool calls, images and audio,
``best_of``, ``echo``, ``suffix``, top-k logprobs.
"""

from __future__ import annotations

import math
from datetime import datetime
from typing import Annotated, Any, Literal

from pydantic import (
    AfterValidator,
    AwareDatetime,
    BaseModel,
    ConfigDict,
    Field,
    field_validator,
    model_validator,
)
from pydantic_core import PydanticCustomError

MIN_TEMPERATURE = 1e-3
"""Below this (and above 0) logits / T overflow float32 and sampling yields NaN."""
MIN_TOP_P = 1e-6
"""Below this the nucleus threshold rounds to 0 in float32 and every token is dropped."""


def choice_response_id(response_id: str, index: int, n_choices: int) -> str:
    """The id a signal names for choice ``index`` of a response with ``n_choices`` choices."""
    return response_id if n_choices == 1 else f"{response_id}-{index}"


def _unicode(value: str) -> str:
    try:
        value.encode("utf-8")
    except UnicodeEncodeError as exc:
        raise ValueError(f"not valid Unicode text (lone surrogate at {exc.start})") from None
    return value


Text = Annotated[str, AfterValidator(_unicode)]
PromptText = Annotated[str, Field(min_length=1), AfterValidator(_unicode)]


_ANY_BOOL = (None, True, False)
UNSUPPORTED_AT_DEFAULT: dict[str, tuple[Any, ...]] = {
    "suffix": (None,),
    "echo": (None, False),
    "best_of": (None, 1),
    "presence_penalty": (None, 0),
    "frequency_penalty": (None, 0),
    "logit_bias": (None, {}),
    "tools": (None, []),
    "tool_choice": (None, "none", "auto"),
    "parallel_tool_calls": _ANY_BOOL,
    "functions": (None, []),
    "function_call": (None, "none", "auto"),
    "response_format": (None, {"type": "text"}),
    "store": (None, False),
    "service_tier": (None, "auto", "default"),
    "modalities": (None, ["text"]),
    "audio": (None,),
    "prediction": (None,),
    "reasoning_effort": (None,),
    "web_search_options": (None,),
    "verbosity": (None,),
}
"""OpenAI request parameters ratchet does not implement, with the values it honours anyway: each
one's default, whose behaviour ratchet's equals (``tool_choice: "auto"`` without tools calls no
tool). Any other value is refused (400 ``unsupported_parameter``)."""


def _unsupported(param: str, message: str, code: str = "unsupported_parameter"):
    return PydanticCustomError(code, "{where}: " + message, {"where": param})


MAX_JSON_DEPTH = 48
"""Deepest nesting a request body may have (``tools.0.function.parameters`` is already 4 deep):
templates and encoders recurse over it, and a few hundred levels exhaust Python's stack."""
MAX_JSON_NODES = 20_000
"""Most values (objects, arrays, strings, numbers) a body may hold: bounds the walk and render."""
MAX_ARGUMENTS_CHARS = 32_768
"""Longest ``arguments`` string of a tool call in the history."""


def json_problem(value: Any, path: str = "", *, max_depth: int = MAX_JSON_DEPTH,
                 max_nodes: int = MAX_JSON_NODES) -> tuple[str, str, str] | None:
    """The first thing in ``value`` (decoded JSON) that no strict JSON encoder and no chat template
    may be handed: ``(path, code, message)``, or None. Checked, without recursion: nesting deeper
    than ``max_depth``, more than ``max_nodes`` values, NaN or Infinity, and a string or object key
    that is not valid Unicode (a lone surrogate). ``path`` is the dotted field name."""
    found = _first_problem(value, path, max_depth, max_nodes)
    if found is None:
        return None
    where, code, message = found
    return (where if len(where) <= 160 else where[:160] + "..."), code, message


def _first_problem(value: Any, path: str, max_depth: int, max_nodes: int
                   ) -> tuple[str, str, str] | None:
    stack: list[tuple[Any, str, int]] = [(value, path, 0)]
    nodes = 0
    while stack:
        item, where, depth = stack.pop()
        nodes += 1
        if nodes > max_nodes:  # named by the field under ``path`` that holds it: to be shortened
            top = where[len(path):].lstrip(".").split(".", 1)[0]
            return ".".join(p for p in (path, top) if p) or "body", "too_large", (
                f"more than {max_nodes} JSON values")
        if isinstance(item, float) and not math.isfinite(item):
            return where, "non_finite_number", "NaN and Infinity are not valid JSON numbers"
        if isinstance(item, str):
            if not _valid_unicode(item):
                return where, "invalid_unicode", "not valid Unicode text (a lone surrogate)"
            continue
        if isinstance(item, dict):
            pairs = list(item.items())
        elif isinstance(item, list):
            pairs = list(enumerate(item))
        else:
            continue
        if depth >= max_depth:
            return where, "too_deep", f"nested deeper than {max_depth} levels"
        for key, child in reversed(pairs):  # reversed: the first problem in document order
            if isinstance(key, str) and not _valid_unicode(key):
                return (where or "body"), "invalid_unicode", (
                    "an object key is not valid Unicode text (a lone surrogate)")
            stack.append((child, f"{where}.{key}" if where else str(key), depth + 1))
    return None


def _valid_unicode(text: str) -> bool:
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


class _OpenAIRequest(BaseModel):
    """Fields shared by both endpoints (OpenAI's names and meanings)."""

    # extra keys are kept to be checked (``_refuse_unsupported``); the schema says none are taken
    model_config = ConfigDict(extra="allow", json_schema_extra={"additionalProperties": False})

    model: str | None = Field(
        default=None,
        max_length=256,
        description="The served model's id (``GET /v1/models``); another id is a 404 "
        "``model_not_found``. Omitted: the served model.",
    )
    max_tokens: int | None = Field(
        default=None,
        ge=1,
        description="Most tokens to generate (default 16 for completions, the replica's "
        "default_max_tokens for chat); above the replica's max_tokens_limit is a 400 "
        "``invalid_value``.",
    )
    temperature: float = Field(
        default=1.0, ge=0.0, le=10.0, description="0 means greedy; else at least 1e-3."
    )
    top_p: float = Field(default=1.0, ge=MIN_TOP_P, le=1.0, description="Nucleus sampling mass.")
    n: int = Field(default=1, ge=1, le=16, description="Choices to sample per prompt.")
    seed: int | None = Field(
        default=None,
        ge=0,
        le=2**63 - 1,
        description="Sampling seed; choice i uses seed + i. None draws one.",
    )
    stop: Text | Annotated[list[Text], Field(max_length=4)] | None = Field(
        default=None, description="Up to 4 strings that end a choice (not included in its text)."
    )
    stop_after_code_block: bool = Field(
        default=False,
        description="ratchet extension: end each choice once its first fenced code block is "
        "closed (the closing fence included; finish_reason 'stop'), by the rule the gate "
        "decodes with (tasks.humaneval.reply_complete). What an IDE that inserts a chat "
        "reply's code sends: the prose a model writes after its block is never shown.",
    )
    user: Text | None = Field(
        default=None, max_length=256, description="End-user id; only its hash is logged."
    )
    stream: bool = Field(default=False, description="Send server-sent events as tokens arrive.")
    stream_options: dict[str, Any] | None = Field(
        default=None, description="``include_usage``: a last chunk with usage."
    )
    metadata: dict[str, Text] | None = Field(
        default=None,
        description="ratchet reads ``conversation_id`` and ``task_kind`` from here.",
    )
    conversation_id: Text | None = Field(
        default=None, min_length=1, max_length=128, description="Legacy: use the header."
    )
    user_id: Text | None = Field(
        default=None, min_length=1, max_length=128, description="Legacy: use ``user``."
    )
    task_kind: Text | None = Field(
        default=None, min_length=1, max_length=64, description="Legacy: use metadata.task_kind."
    )

    @model_validator(mode="before")
    @classmethod
    def _strict_json(cls, data: Any) -> Any:
        """Before any field is read: no NaN/Infinity, no lone surrogate (in a value or a key), no
        nesting deeper than ``MAX_JSON_DEPTH`` and no more than ``MAX_JSON_NODES`` values
        anywhere in the body (``tools``, ``tool_choice``, history ``tool_calls`` included)."""
        found = json_problem(data)
        if found:
            where, code, message = found
            raise PydanticCustomError(code, "{where}: " + message, {"where": where})
        return data

    @model_validator(mode="after")
    def _refuse_unsupported(self):
        for key, value in (self.model_extra or {}).items():
            allowed = UNSUPPORTED_AT_DEFAULT.get(key)
            if allowed is None:
                raise _unsupported(key, "not a parameter this server knows")
            if not any(_same(value, a) for a in allowed):
                raise _unsupported(
                    key, f"not supported by this server; only {_defaults(allowed)} is accepted"
                )
        return self

    @field_validator("temperature")
    @classmethod
    def _temperature(cls, value: float) -> float:
        if 0.0 < value < MIN_TEMPERATURE:
            raise ValueError(f"must be 0 (greedy) or at least {MIN_TEMPERATURE}, got {value}")
        return value

    def stop_strings(self) -> tuple[str, ...]:
        if self.stop is None:
            return ()
        return tuple(s for s in ([self.stop] if isinstance(self.stop, str) else self.stop) if s)

    def meta(self, key: str) -> str | None:
        return (self.metadata or {}).get(key) or getattr(self, key, None)

    def include_usage(self) -> bool:
        return bool((self.stream_options or {}).get("include_usage"))


def _same(value: Any, allowed: Any) -> bool:
    """JSON equality: ``0 == 0.0``, but ``false`` is not ``0`` and ``null`` only ``null``."""
    if allowed is None or isinstance(allowed, bool) or isinstance(value, bool):
        return value is allowed
    return value == allowed


def _defaults(allowed: tuple[Any, ...]) -> str:
    import json

    return " or ".join(json.dumps(a) for a in allowed)


class CompletionRequest(_OpenAIRequest):
    """``POST /v1/completions``: one prompt (or a list of prompts) to continue."""

    prompt: PromptText | Annotated[list[PromptText], Field(min_length=1, max_length=16)] = Field(
        description="Text to continue; a list samples each (n choices per prompt).",
    )
    logprobs: int | None = Field(
        default=None,
        ge=0,
        le=5,
        description="0: return the sampled tokens' logprobs. 1-5 (top-k alternatives) are a 400 "
        "``unsupported_value``: the engines return only the sampled token's; so is any value "
        "with stream=true.",
    )

    @model_validator(mode="after")
    def _logprobs_served(self):
        if self.logprobs is not None and self.logprobs > 0:
            raise _unsupported(
                "logprobs", "top-k alternatives are not available; use 0 for the sampled "
                "tokens' logprobs", "unsupported_value",
            )
        if self.logprobs is not None and self.stream:
            raise _unsupported(
                "logprobs", "not available while streaming; use stream=false",
                "unsupported_value",
            )
        return self

    def prompts(self) -> list[str]:
        return [self.prompt] if isinstance(self.prompt, str) else list(self.prompt)


class TextPart(BaseModel):
    model_config = ConfigDict(extra="ignore")

    type: Literal["text"] = "text"
    text: Text


class ChatMessage(BaseModel):
    """One message; ``content`` is a string or a list of text parts. Other OpenAI message fields
    (``tool_calls``, ``tool_call_id``, ``refusal``, ...) are kept aside: an assistant turn's
    ``tool_calls`` and a tool turn's ``tool_call_id`` reach a chat template that renders tools
    (elsewhere ``tool_calls`` is a 400); ``function_call`` is refused."""

    model_config = ConfigDict(extra="allow", json_schema_extra={"additionalProperties": False})

    role: Literal["system", "developer", "user", "assistant", "tool"]
    content: Text | list[TextPart] | None = None
    name: Text | None = None

    def text(self) -> str:
        if self.content is None:
            return ""
        if isinstance(self.content, str):
            return self.content
        return "".join(part.text for part in self.content)


class FunctionDefinition(BaseModel):
    """OpenAI's ``tools[i].function``."""

    model_config = ConfigDict(extra="forbid")

    name: str = Field(pattern=r"^[A-Za-z0-9_-]{1,64}$", description="The function's name.")
    description: Text | None = Field(default=None, max_length=4096)
    parameters: dict[str, Any] | None = Field(
        default=None, description="JSON Schema of the arguments (rendered, not enforced)."
    )
    strict: bool | None = Field(
        default=None, description="false or omitted: the arguments are not schema-checked."
    )

    @field_validator("strict")
    @classmethod
    def _not_strict(cls, value: bool | None) -> bool | None:
        if value:
            raise PydanticCustomError(
                "unsupported_value", "schema-conforming arguments cannot be guaranteed (no "
                "engine here constrains decoding); omit strict or set it to false")
        return value


class ToolDefinition(BaseModel):
    """OpenAI's ``tools[i]``: only ``function`` tools."""

    model_config = ConfigDict(extra="forbid")

    type: Literal["function"] = "function"
    function: FunctionDefinition


class NamedToolChoice(BaseModel):
    """``{"type": "function", "function": {"name": ...}}``: refused (a call cannot be forced)."""

    model_config = ConfigDict(extra="forbid")

    type: Literal["function"] = "function"
    function: dict[str, Any]


class ChatCompletionRequest(_OpenAIRequest):
    """``POST /v1/chat/completions``: a conversation, turned into a prompt by the policy."""

    messages: list[ChatMessage] = Field(min_length=1, max_length=256)
    max_completion_tokens: int | None = Field(
        default=None,
        ge=1,
        description="OpenAI's newer name for max_tokens (wins if both).",
    )
    logprobs: bool = Field(
        default=False,
        description="Return the sampled tokens' logprobs; with stream=true a 400 "
        "``unsupported_value``.",
    )
    top_logprobs: int | None = Field(
        default=None,
        ge=0,
        le=20,
        description="0 (or omitted) only: top-k alternatives are a 400 ``unsupported_value``.",
    )

    tools: list[ToolDefinition] | None = Field(
        default=None,
        max_length=64,
        description="Functions the model may call. Rendered through the served policy's chat "
        "template when it renders tools (Qwen3's does); otherwise a 400 "
        "``unsupported_parameter``. Calls come back as ``message.tool_calls`` with "
        "``finish_reason`` ``tool_calls``.",
    )
    tool_choice: Literal["none", "auto", "required"] | NamedToolChoice | None = Field(
        default=None,
        description="``auto`` (the default with tools) lets the model choose; ``none`` renders "
        "no tools. ``required`` and a named function are a 400 ``unsupported_value``: no "
        "engine here constrains decoding, so a call cannot be forced.",
    )
    parallel_tool_calls: bool | None = Field(
        default=None, description="false: at most the first call of a reply is returned."
    )

    @model_validator(mode="after")
    def _no_function_call_turns(self):
        for i, message in enumerate(self.messages):
            if (message.model_extra or {}).get("function_call"):
                raise _unsupported(
                    f"messages.{i}.function_call", "the deprecated function_call turn is not "
                    "supported; send tool_calls"
                )
        return self

    @model_validator(mode="after")
    def _tool_choice_served(self):
        if self.tool_choice == "required" or isinstance(self.tool_choice, NamedToolChoice):
            raise _unsupported(
                "tool_choice", "a tool call cannot be forced (no engine here constrains "
                "decoding); use \"auto\" or \"none\"", "unsupported_value",
            )
        return self

    def renders_tools(self) -> bool:
        """Tools go into the prompt: some were given and ``tool_choice`` is not ``none``."""
        return bool(self.tools) and self.tool_choice != "none"

    def tool_names(self) -> frozenset[str]:
        return frozenset(t.function.name for t in self.tools or ())

    def history_tool_calls(self) -> int | None:
        """The index of the first message that carries ``tool_calls``, if any."""
        for i, message in enumerate(self.messages):
            if (message.model_extra or {}).get("tool_calls"):
                return i
        return None

    @model_validator(mode="after")
    def _logprobs_served(self):
        if self.top_logprobs:
            raise _unsupported(
                "top_logprobs", "top-k alternatives are not available; use 0",
                "unsupported_value",
            )
        if self.logprobs and self.stream:
            raise _unsupported(
                "logprobs", "not available while streaming; use stream=false",
                "unsupported_value",
            )
        return self


class Usage(BaseModel):
    prompt_tokens: int
    completion_tokens: int
    total_tokens: int


class CompletionLogprobs(BaseModel):
    tokens: list[str]
    token_logprobs: list[float]
    top_logprobs: list[dict[str, float]] | None = None
    text_offset: list[int]


class CompletionChoice(BaseModel):
    index: int
    text: str
    logprobs: CompletionLogprobs | None = None
    finish_reason: Literal["stop", "length"] | None


class CompletionResponse(BaseModel):
    """OpenAI's ``text_completion`` object."""

    id: str = Field(description="The response id signals refer to (see choice_response_id).")
    object: Literal["text_completion"] = "text_completion"
    created: int = Field(description="Unix seconds.")
    model: str
    system_fingerprint: str = Field(description="ratchet-v{registry version}.")
    choices: list[CompletionChoice]
    usage: Usage | None = None


class ChatTokenLogprob(BaseModel):
    token: str
    logprob: float
    bytes: list[int] | None = None
    top_logprobs: list[dict[str, Any]] = Field(default_factory=list)


class ChatLogprobs(BaseModel):
    content: list[ChatTokenLogprob] | None


class FunctionCall(BaseModel):
    name: str
    arguments: str = Field(description="The arguments as a JSON object, encoded as a string.")


class ToolCall(BaseModel):
    id: str
    type: Literal["function"] = "function"
    function: FunctionCall


class AssistantMessage(BaseModel):
    role: Literal["assistant"] = "assistant"
    content: str | None
    tool_calls: list[ToolCall] | None = Field(
        default=None, description="Calls the model wrote (a request with tools only)."
    )


class ChatChoice(BaseModel):
    index: int
    message: AssistantMessage
    logprobs: ChatLogprobs | None = None
    finish_reason: Literal["stop", "length", "tool_calls"] | None


class ChatCompletionResponse(BaseModel):
    """OpenAI's ``chat.completion`` object."""

    id: str
    object: Literal["chat.completion"] = "chat.completion"
    created: int
    model: str
    system_fingerprint: str
    choices: list[ChatChoice]
    usage: Usage


class ModelCard(BaseModel):
    id: str = Field(description="Registered model name.")
    object: Literal["model"] = "model"
    created: int = Field(description="Unix seconds when this replica loaded the served version "
                         "(when the replica started, while loading).")
    owned_by: str = "ratchet"
    version: int | None = Field(description="Registry version served (None while loading).")


class ModelList(BaseModel):
    object: Literal["list"] = "list"
    data: list[ModelCard]


class ErrorBody(BaseModel):
    message: str
    type: str
    param: str | None = None
    code: str | None = None


class ErrorResponse(BaseModel):
    """OpenAI's error shape; ``param`` names the offending field."""

    error: ErrorBody


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


# -- signals API (routes/signals.py) and client keys (routes/keys.py) ---------------------------


RESPONSE_KNOWN_HEADER = "X-Ratchet-Response-Known"
"""Set (to ``1``) on a signal's answer once the replica has found the response for the caller's
key: a 202, and a 409, 422 or 503 given after that lookup. A router looking for the replica that
served a response (deploy/fleet/router.py) takes this header, or a 2xx, as proof; a 401 or a
validation 422 comes before the lookup and proves nothing."""


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
    org: str | None = Field(
        default=None,
        min_length=1,
        max_length=128,
        description="Organisation: keys of one organisation may send signals about each "
        "other's responses. None: only about the key's own.",
    )


class ApiKeyCreated(BaseModel):
    key_id: str
    name: str
    org: str | None = None
    key: str = Field(description="The key itself: shown once, only its hash is stored.")


class ApiKeyInfo(BaseModel):
    key_id: str
    name: str
    org: str | None = None
    created: datetime
    revoked_at: datetime | None
