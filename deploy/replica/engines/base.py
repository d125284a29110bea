"""The engine plug: what the gateway needs from whatever samples tokens.

An ``Engine`` takes a batch of ``SamplingRequest`` (one sequence each: a prompt and its sampling
parameters) and returns one ``EngineResult`` per request — the text, the token ids as served
(prompt and response), the processed logprobs of the sampled tokens (temperature and top-p
applied), the routed experts if the engine can say, and timings. An optional ``on_delta``
callback receives each new piece of text as it is sampled (streaming); it is called on the
caller's event loop.

Implementations: deploy/replica/engines/torch_engine.py (embedded, batches requests across callers)
and
deploy/replica/engines/vllm_engine.py (an external vLLM OpenAI server). deploy/replica/settings.py
picks one with
a tagged union; deploy/replica/ENGINES.md states the contract an external engine must meet.

Deliberately left out: HTTP shapes (deploy/replica/api.py) and logging
(deploy/replica/completion_log.py).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Literal, Protocol

if TYPE_CHECKING:
    from deploy.replica.tool_calls import ToolFormat

ExpertsSource = Literal["engine", "teacher_forced", "none"]


class EngineInputError(ValueError):
    """The request cannot be served as asked (e.g. the prompt leaves no room): a 400."""

    def __init__(self, message: str, param: str | None = None, code: str | None = None) -> None:
        super().__init__(message)
        self.param, self.code = param, code


class EngineUnavailable(RuntimeError):
    """No model is loaded yet, or the external engine cannot be reached: a 503."""


@dataclass(frozen=True)
class SamplingRequest:
    """One sequence to sample. ``temperature == 0`` is greedy; ``stop`` strings end it early
    (cut before the string), and so does ``stop_after_code_block`` (after the token that closes
    the first fenced code block, ``tasks.humaneval.reply_complete``; nothing cut)."""

    prompt: str
    max_tokens: int
    temperature: float
    top_p: float = 1.0
    seed: int | None = None
    stop: tuple[str, ...] = ()
    stop_after_code_block: bool = False
    templated: bool = False
    """``prompt`` is already rendered through the policy's chat template (a tool request,
    ``Engine.tool_prompt``): it is tokenised as it stands, not wrapped in a user turn again."""


@dataclass
class EngineResult:
    """What was served for one ``SamplingRequest``.

    ``token_ids`` are the sampled ids (the final EOS, or the tokens of a matched stop string,
    included); ``text`` is their decoding without EOS and cut before a stop string.
    ``routed_experts``: (tokens, layers, top_k) for response tokens, ``prompt_routed_experts``:
    (prompt tokens, layers, top_k); both empty when ``routed_experts_source == "none"``.
    """

    text: str
    token_ids: list[int]
    logprobs: list[float]
    prompt_token_ids: list[int]
    finish_reason: Literal["stop", "length"]
    model_version: int
    time_to_first_token_ms: float
    latency_ms: float
    routed_experts: list[list[list[int]]] = field(default_factory=list)
    prompt_routed_experts: list[list[list[int]]] = field(default_factory=list)
    routed_experts_source: ExpertsSource = "engine"
    token_texts: list[str] = field(default_factory=list)
    """Each sampled token's own text (may be a partial character for byte tokens)."""
    ends_with_eos: bool = False
    """The last of ``token_ids`` is an end-of-sequence token: logged for training, but not shown
    to the client as a token nor counted in its usage."""


DeltaCallback = Callable[[int, str], None]
"""``on_delta(index, text)``: request ``index`` of the batch produced ``text`` (may be empty
once, for the first token of a multi-byte character)."""


class Engine(Protocol):
    """Samples completions; ``generate`` is awaited by request handlers, concurrently."""

    def start(self) -> None:
        """Start background work (a batcher thread, an HTTP client)."""

    def close(self) -> None:
        """Stop background work; requests in flight fail with ``EngineUnavailable``."""

    def served_version(self) -> int | None:
        """Registry version that answers now; None while nothing is loaded."""

    def chat_prompt(self, messages: Sequence[tuple[str, str]]) -> str:
        """The prompt a chat of (role, content) messages is served as (the policy's template)."""

    def tool_format(self) -> ToolFormat | None:
        """The tool-call format the served policy's chat template renders tools in
        (deploy/replica/tool_calls.py); None when it renders none (tools are then refused)."""

    def tool_prompt(self, messages: list[dict], tools: list[dict] | None) -> str:
        """``messages`` (chat-template dicts, tool turns included) and ``tools`` (OpenAI's
        definitions; None renders none) through the policy's chat template, the assistant turn
        opened: sample it with ``SamplingRequest(templated=True)``."""

    async def generate(
        self, requests: Sequence[SamplingRequest], on_delta: DeltaCallback | None = None
    ) -> list[EngineResult]:
        """Sample every request; raises EngineInputError / EngineUnavailable."""
        ...
