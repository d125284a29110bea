"""The embedded engine: a dynamic batcher over a torch model, in one background thread.

``TorchEngine.generate`` (awaited by request handlers) encodes the prompts, queues one job per
sequence and waits. The batcher thread takes the first queued job, everything else already queued,
and — up to ``max_batch`` — whatever arrives within ``max_wait_ms``; it then prefills the batch
once (left-padded, one KV cache) and decodes it step by step, each row with its own temperature,
top-p, seed, token budget, stop strings and ``stop_after_code_block``, until every row has
finished; a finished row leaves the batch and its KV cache (``StepSession.retain``), so later
steps compute only live rows. Rows that share a temperature and top-p are sampled together. A row
asked to stop after its code block ends on the token that makes ``tasks.humaneval.reply_complete``
true of its text, as the gate's decode (policy/hf_generate.py ``stop_when``) ends it. Each
sampled piece of text goes to the job's ``on_delta`` as it is produced, so a streamed response's
first token is sent when it is sampled (its time-to-first-token is real and includes the wait in
the queue). Requests arriving while a batch decodes wait for the next batch (no continuous
batching).

The model is reached through ``StepModel``, a narrow interface (encode, decode, prefill, step):
``ToyStepModel`` adapts policy/toy's MoETransformer, ``deploy/replica/engines/hf_step.py``'s
``HFStepModel`` a Hugging Face policy (``step_model`` there picks one for any policy).
Log-probabilities are policy/toy/generate.py's ``sampling_logprobs`` — the distribution actually
sampled from, the same function the trainer's rollouts use.

Deliberately left out: continuous batching (joining rows into a running batch), prefix caching,
and anything HTTP.
"""

from __future__ import annotations

import asyncio
import logging
import queue
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Protocol

from deploy.replica.engines.base import (
    DeltaCallback,
    EngineInputError,
    EngineResult,
    EngineUnavailable,
    SamplingRequest,
)
from tasks.humaneval import reply_complete

if TYPE_CHECKING:
    from torch import Tensor

    from deploy.replica.tool_calls import ToolFormat

log = logging.getLogger(__name__)


class StepSession(Protocol):
    """One batch being decoded: the logits to sample from next and where they came from."""

    logits: Tensor
    """(B, V) logits of the next token of every row."""
    last_routes: Tensor | None
    """(B, L, k) experts at the positions whose logits are ``logits``; None for a dense model."""
    prompt_routes: list[list] | None
    """Per row, (prompt tokens, L, k) experts of the prompt positions; None for a dense model."""

    def advance(self, next_ids: Tensor) -> None:
        """Feed one token per row (B,) and compute the next logits."""

    def retain(self, rows: list[int]) -> None:
        """Keep only batch rows ``rows`` (ascending): finished rows leave the batch and its cache;
        ``logits`` and ``last_routes`` keep the retained rows."""


class StepModel(Protocol):
    """What the engine needs from a policy: tokens in, logits (and routing) out."""

    version: int
    max_seq_len: int
    eos_id: int
    eos_ids: tuple[int, ...]
    """Every id that ends a sequence (``eos_id`` is the first of them)."""

    tool_format: ToolFormat | None
    """How the policy's chat template renders tools (None: it renders none)."""

    def encode_prompt(self, prompt: str, *, templated: bool = False) -> list[int]: ...

    def decode(self, ids: Sequence[int]) -> str: ...

    def chat_prompt(self, messages: Sequence[tuple[str, str]]) -> str: ...

    def tool_prompt(self, messages: list[dict], tools: list[dict] | None) -> str: ...

    def open(self, rows: list[list[int]]) -> StepSession:
        """Prefill ``rows`` (prompt ids) as one batch."""
        ...


class _ToySession:
    """Prefill and decode on the model's device; logits and routes come back to the CPU, where
    rows are sampled with their own seeded generators."""

    def __init__(self, model, rows: list[list[int]]) -> None:

        from policy.base import left_pad
        from policy.toy.model import KVCache
        from policy.toy.tokenizer import PAD

        self.model = model
        self.device = model.tok_emb.weight.device
        tokens, mask = left_pad(rows, PAD, self.device)
        self.cache = KVCache.empty(model.config.n_layers)
        out = model(tokens, pad_mask=mask, cache=self.cache)
        self.logits = out.logits[:, -1].float().cpu()
        self.last_routes = out.routed_experts[:, -1].cpu()
        routes = out.routed_experts.cpu()
        width = tokens.shape[1]
        self.prompt_routes = [routes[i, width - len(r) :].tolist() for i, r in enumerate(rows)]

    def retain(self, rows: list[int]) -> None:
        import torch

        idx = torch.tensor(rows, dtype=torch.long, device=self.device)
        c = self.cache
        c.keys = [None if k is None else k[idx] for k in c.keys]
        c.values = [None if v is None else v[idx] for v in c.values]
        c.pad_mask = None if c.pad_mask is None else c.pad_mask[idx]
        self.logits, self.last_routes = self.logits[rows], self.last_routes[rows]

    def advance(self, next_ids: Tensor) -> None:
        import torch

        ids = next_ids.to(self.device).unsqueeze(1)
        ones = torch.ones(len(next_ids), 1, dtype=torch.bool, device=self.device)
        out = self.model(ids, pad_mask=ones, cache=self.cache)
        self.logits = out.logits[:, -1].float().cpu()
        self.last_routes = out.routed_experts[:, -1].cpu()


class ToyStepModel:
    """``StepModel`` over policy/toy's MoETransformer and byte tokenizer."""

    def __init__(self, model, version: int) -> None:
        from policy.toy.tokenizer import EOS

        self.model, self.version = model.eval(), version
        self.max_seq_len = model.config.max_seq_len
        self.eos_id = EOS
        self.eos_ids = (EOS,)

    tool_format = None  # the byte-level toy has no chat template

    def encode_prompt(self, prompt: str, *, templated: bool = False) -> list[int]:
        from policy.toy.generate import encode_prompt

        return encode_prompt(prompt)

    def decode(self, ids: Sequence[int]) -> str:
        from policy.toy.tokenizer import decode

        return decode(ids)

    def chat_prompt(self, messages: Sequence[tuple[str, str]]) -> str:
        """The toy's chat template: the messages' contents joined by newlines, roles dropped
        (the byte-level toy was trained on bare prompts; one user message is served verbatim)."""
        return "\n".join(content for _, content in messages)

    def tool_prompt(self, messages: list[dict], tools: list[dict] | None) -> str:
        raise EngineInputError("the toy model has no chat template to render tools", "tools",
                               "unsupported_parameter")

    def open(self, rows: list[list[int]]) -> StepSession:
        return _ToySession(self.model, rows)

    def route(self, ids: list[int]) -> list:
        """Teacher-forced routing of ``ids``: experts per position, (T, L, k)."""
        import torch

        device = self.model.tok_emb.weight.device
        with torch.no_grad():
            out = self.model(torch.tensor([ids], dtype=torch.long, device=device))
        return out.routed_experts[0].cpu().tolist()


@dataclass
class _Job:
    """One sequence waiting for (or in) a batch, and how to hand its result back."""

    request: SamplingRequest
    prompt_ids: list[int]
    index: int
    loop: asyncio.AbstractEventLoop
    future: asyncio.Future
    on_delta: DeltaCallback | None
    arrived: float = field(default_factory=time.perf_counter)


class TorchEngine:
    """Batches sequences across callers; ``model_source()`` gives the model to use per batch."""

    def __init__(
        self,
        model_source: Callable[[], StepModel | None],
        *,
        max_batch: int = 32,
        max_wait_ms: float = 2.0,
    ) -> None:
        self.model_source = model_source
        self.max_batch = max_batch
        self.max_wait_s = max_wait_ms / 1000.0
        self._queue: queue.Queue[_Job] = queue.Queue()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="torch-engine", daemon=True)
        self.batches = 0
        self.sequences = 0

    def start(self) -> None:
        if not self._thread.is_alive() and not self._stop.is_set():
            self._thread.start()

    def close(self) -> None:
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(10)
        while True:
            try:
                job = self._queue.get_nowait()
            except queue.Empty:
                return
            _fail(job, EngineUnavailable("engine stopped"))

    def served_version(self) -> int | None:
        model = self.model_source()
        return None if model is None else model.version

    def chat_prompt(self, messages: Sequence[tuple[str, str]]) -> str:
        model = self.model_source()
        if model is None:
            raise EngineUnavailable("model is loading")
        return model.chat_prompt(messages)

    def tool_format(self) -> ToolFormat | None:
        model = self.model_source()
        if model is None:
            raise EngineUnavailable("model is loading")
        return model.tool_format

    def tool_prompt(self, messages: list[dict], tools: list[dict] | None) -> str:
        model = self.model_source()
        if model is None:
            raise EngineUnavailable("model is loading")
        return model.tool_prompt(messages, tools)

    async def generate(
        self, requests: Sequence[SamplingRequest], on_delta: DeltaCallback | None = None
    ) -> list[EngineResult]:
        model = self.model_source()
        if model is None:
            raise EngineUnavailable("model is loading")
        if not self._thread.is_alive():
            raise EngineUnavailable("engine not running")
        loop = asyncio.get_running_loop()
        jobs = []
        for i, req in enumerate(requests):
            ids = _encode(model, req.prompt, req.templated)
            jobs.append(_Job(req, ids, i, loop, loop.create_future(), on_delta))
        for job in jobs:
            self._queue.put(job)
        return list(await asyncio.gather(*(job.future for job in jobs)))

    # -- batcher thread -----------------------------------------------------------------------
    def _run(self) -> None:
        while not self._stop.is_set():
            batch = self._take()
            if not batch:
                continue
            model = self.model_source()
            if model is None:
                for job in batch:
                    _fail(job, EngineUnavailable("model is loading"))
                continue
            self.batches += 1
            self.sequences += len(batch)
            try:
                _decode_batch(model, batch)  # under torch.inference_mode (see there)
            except Exception as exc:  # noqa: BLE001  every caller gets the error, the thread lives on
                log.exception("batch of %d failed", len(batch))
                for job in batch:
                    _fail(job, exc)

    def _take(self) -> list[_Job]:
        try:
            batch = [self._queue.get(timeout=0.1)]
        except queue.Empty:
            return []
        deadline = time.perf_counter() + self.max_wait_s
        while len(batch) < self.max_batch:
            try:
                batch.append(self._queue.get_nowait())
                continue
            except queue.Empty:
                pass
            left = deadline - time.perf_counter()
            if left <= 0:
                break
            try:
                batch.append(self._queue.get(timeout=left))
            except queue.Empty:
                break
        return batch


def _encode(model: StepModel, prompt: str, templated: bool = False) -> list[int]:
    try:
        ids = model.encode_prompt(prompt, templated=templated)
    except UnicodeError as exc:
        raise EngineInputError(f"prompt is not valid Unicode text: {exc}", "prompt") from exc
    if len(ids) >= model.max_seq_len:
        raise EngineInputError(
            f"prompt of {len(ids)} tokens leaves no room under the model's context of "
            f"{model.max_seq_len} tokens",
            "prompt",
            "context_length_exceeded",
        )
    return ids


def _resolve(job: _Job, result: EngineResult) -> None:
    def done() -> None:
        if not job.future.done():
            job.future.set_result(result)

    job.loop.call_soon_threadsafe(done)


def _fail(job: _Job, exc: BaseException) -> None:
    def done() -> None:
        if not job.future.done():
            job.future.set_exception(exc)

    job.loop.call_soon_threadsafe(done)


@dataclass
class _Row:
    """Decoding state of one row of a batch."""

    job: _Job
    budget: int
    generator: object
    ids: list[int] = field(default_factory=list)
    logprobs: list[float] = field(default_factory=list)
    routes: list = field(default_factory=list)
    text: str = ""
    sent: int = 0
    finish: str | None = None
    first_token_at: float | None = None


def _decode_batch(model: StepModel, batch: list[_Job]) -> None:
    """Decode the batch in as few sub-batches as fit the context (see ``_fit``)."""
    import torch

    with torch.inference_mode():
        for part in _fit(model, batch):
            _decode_rows(model, part)


def _fit(model: StepModel, batch: list[_Job]) -> list[list[_Job]]:
    """Split ``batch`` so that in each part the padded prompt width plus the longest token
    budget fits the context: left padding makes every row as long as the longest prompt, and a
    short prompt with a large budget next to a long prompt would otherwise overflow it."""
    parts: list[list[_Job]] = []
    width = budget = 0
    for job in sorted(batch, key=lambda j: len(j.prompt_ids)):
        want = min(job.request.max_tokens, model.max_seq_len - len(job.prompt_ids))
        w, b = max(width, len(job.prompt_ids)), max(budget, want)
        if parts and w + b <= model.max_seq_len:
            parts[-1].append(job)
            width, budget = w, b
        else:
            parts.append([job])
            width, budget = len(job.prompt_ids), want
    return parts


def _decode_rows(model: StepModel, batch: list[_Job]) -> None:
    """Decode one part; a finished row leaves the session's batch (``StepSession.retain``), so
    each step computes only the rows still decoding."""
    import torch

    rows = [_new_row(model, job) for job in batch]
    session = model.open([job.prompt_ids for job in batch])
    prompt_routes = session.prompt_routes
    live = list(range(len(rows)))  # row index of each session batch row
    while True:
        ids, lps = _sample(session.logits, [rows[i] for i in live])
        routes = session.last_routes.tolist() if session.last_routes is not None else None
        now = time.perf_counter()
        for b, i in enumerate(live):
            _append(model, rows[i], ids[b], lps[b], None if routes is None else routes[b], now)
        keep = [b for b, i in enumerate(live) if rows[i].finish is None]
        if not keep:
            break
        if len(keep) < len(live):
            session.retain(keep)
            live, ids = [live[b] for b in keep], [ids[b] for b in keep]
        session.advance(torch.tensor(ids, dtype=torch.long))
    done = time.perf_counter()
    for i, row in enumerate(rows):
        _resolve(row.job, _result(model, row, prompt_routes[i] if prompt_routes else [], done))


def _new_row(model: StepModel, job: _Job) -> _Row:
    import torch

    req = job.request
    gen = torch.Generator().manual_seed(req.seed) if req.seed is not None else None
    budget = min(req.max_tokens, model.max_seq_len - len(job.prompt_ids))
    return _Row(job, budget, gen)


def _sample(logits: Tensor, rows: list[_Row]) -> tuple[list[int], list[float]]:
    """One token per row of ``logits`` (B, V) and its processed logprob; rows sharing a
    temperature and top-p are processed together, greedy ones with one argmax."""
    import torch

    from policy.toy.generate import sampling_logprobs

    ids, lps = [0] * len(rows), [0.0] * len(rows)
    groups: dict[tuple[float, float], list[int]] = {}
    for i, row in enumerate(rows):
        req = row.job.request
        groups.setdefault((req.temperature, req.top_p), []).append(i)
    for (temperature, top_p), members in groups.items():
        logp = sampling_logprobs(logits[members], temperature, top_p)
        if temperature == 0.0:
            toks = logp.argmax(-1)
        else:
            toks = torch.cat([torch.multinomial(row_logp.exp(), 1, generator=rows[i].generator)
                              for row_logp, i in zip(logp, members)])
        chosen = logp.gather(1, toks.unsqueeze(1)).squeeze(1)
        for i, tok, lp in zip(members, toks.tolist(), chosen.tolist()):
            ids[i], lps[i] = tok, lp
    return ids, lps


def _append(model, row: _Row, tok: int, lp: float, route: list | None, now: float) -> None:
    """Record one sampled token; finish the row on EOS, a stop string, a closed code block
    (``stop_after_code_block``: the rule and order of the gate's decode, policy/hf_generate.py)
    or its budget."""
    if row.first_token_at is None:
        row.first_token_at = now
    row.ids.append(tok)
    row.logprobs.append(min(lp, 0.0))
    if route is not None:
        row.routes.append(route)
    if tok in model.eos_ids:
        row.finish = "stop"
    else:
        row.text = model.decode(row.ids)
        cut = _stop_at(row.text, row.job.request.stop)
        if cut is not None:
            row.text, row.finish = row.text[:cut], "stop"
        elif row.job.request.stop_after_code_block and reply_complete(row.text):
            row.finish = "stop"
        elif len(row.ids) >= row.budget:
            row.finish = "length"
    _emit(row)


def _stop_at(text: str, stops: tuple[str, ...]) -> int | None:
    hits = [text.find(s) for s in stops if s and s in text]
    return min(hits) if hits else None


def _emit(row: _Row) -> None:
    """Send the text that can no longer change: hold back a partial character and anything that
    could still be the start of a stop string."""
    job = row.job
    if job.on_delta is None:
        return
    end = len(row.text)
    if row.finish is None:
        if row.text.endswith("\ufffd"):
            end -= 1
        hold = max((len(s) - 1 for s in job.request.stop), default=0)
        end = max(row.sent, end - hold)
    if end > row.sent or (row.finish is None and len(row.ids) == 1):
        piece, row.sent = row.text[row.sent : end], max(row.sent, end)
        job.loop.call_soon_threadsafe(job.on_delta, job.index, piece)


def _result(model: StepModel, row: _Row, prompt_routes: list, done: float) -> EngineResult:
    job = row.job
    return EngineResult(
        text=row.text,
        token_ids=row.ids,
        logprobs=row.logprobs,
        prompt_token_ids=job.prompt_ids,
        finish_reason=row.finish or "length",
        model_version=model.version,
        time_to_first_token_ms=((row.first_token_at or done) - job.arrived) * 1000.0,
        latency_ms=(done - job.arrived) * 1000.0,
        routed_experts=row.routes,
        prompt_routed_experts=prompt_routes if row.routes else [],
        routed_experts_source="engine" if row.routes else "none",
        token_texts=[model.decode([t]) for t in row.ids],
        ends_with_eos=bool(row.ids) and row.ids[-1] in model.eos_ids,
    )
