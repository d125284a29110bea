"""The policy plug: the small interface the loop needs from a model, whatever model it is.

A :class:`Policy` computes forward log-probs of given tokens (chunked fp32 log-softmax, so a large
vocabulary fits), reports the experts each token was routed to in each MoE layer, can be forced to
use logged experts (router replay, with a plausibility threshold), describes its MoE shape
(:class:`MoESpec`), saves and loads itself in its own checkpoint format, knows its tokenizer
(:class:`TokenizerInfo`), and samples completions (:class:`Sampled`) with the logprobs of the
distribution actually sampled and the routed experts of prompt and response positions.

Implementations: ``policy.toy.adapter.ToyPolicy`` (the toy MoE) and ``policy.hf.HFPolicy``
(Hugging Face causal LMs). Left out: anything about training (optimizers, losses live in trainer/)
and serving (deploy/). Shapes: B batch, T positions, L MoE layers, k experts per token, E experts.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Literal, Protocol, runtime_checkable

if TYPE_CHECKING:
    import torch
    from torch import Tensor, nn

GateNorm = Literal["softmax_topk", "softmax_topk_renorm", "topk_softmax", "none"]
"""How a family turns router logits into gate weights:
``softmax_topk``: softmax over all experts, keep the top-k probabilities (Qwen3-MoE/OLMoE with
``norm_topk_prob=False``); ``softmax_topk_renorm``: the same, renormalised to sum to 1 (Qwen3-MoE
``norm_topk_prob=True``, the toy); ``topk_softmax``: softmax over the top-k logits (Mixtral; equal
to ``softmax_topk_renorm``); ``none``: a dense model."""


@dataclass(frozen=True)
class MoESpec:
    """The MoE shape of a policy. ``moe_layers``: decoder-layer indices that are MoE, in order
    (position l in routed_experts' L axis is layer ``moe_layers[l]``); empty for a dense model."""

    moe_layers: tuple[int, ...]
    n_layers: int
    n_experts: int
    top_k: int
    gate_norm: GateNorm
    family: str

    @property
    def is_moe(self) -> bool:
        return bool(self.moe_layers)

    @property
    def n_moe_layers(self) -> int:
        return len(self.moe_layers)


@dataclass(frozen=True)
class TokenizerInfo:
    """Special ids of a policy's tokenizer (``bos_id`` is None when prompts get no BOS)."""

    eos_ids: tuple[int, ...]
    pad_id: int
    bos_id: int | None
    vocab_size: int


@dataclass
class TokenLogprobs:
    """What :meth:`Policy.token_logprobs` returns.

    logprobs: (B, T) float32, log pi(targets) at each row's temperature. routed_experts:
    (B, T, L, k) long, the experts actually used (L = 0 for a dense model). router_probs: L tensors
    (B, T, E) float32. aux_loss: scalar, weighted (load balance + z-loss, the model's own
    coefficients); lb_loss / z_loss: unweighted. replay_replaced: replayed choices replaced by the
    plausibility check. logits: (B, T, V) float32 at temperature 1, only when asked for
    (``return_logits``; costs B*T*V memory, and with gradients on the full logits stay alive for
    backward: meant for small vocabularies, e.g. a top-p nucleus). hidden: (B, T, D) final hidden
    states (the input of the output head), only with ``return_hidden``. prefix: the state after
    the first K decoder layers, only from a policy asked to keep it (``policy.hf.FrozenPrefix``).
    """

    logprobs: Tensor
    routed_experts: Tensor
    router_probs: list[Tensor]
    aux_loss: Tensor
    lb_loss: Tensor
    z_loss: Tensor
    replay_replaced: int = 0
    logits: Tensor | None = None
    hidden: Tensor | None = None
    prefix: object | None = None


@dataclass
class Sampled:
    """One sampled completion. ``token_ids`` includes the final EOS when ``finish_reason`` is
    'stop'. ``logprobs``: per token, under the distribution sampled (temperature, top-p).
    ``routed_experts``: (tokens, L, k), the routing at the position whose logits were sampled;
    ``prompt_routed_experts``: (prompt tokens, L, k); both empty lists for a dense model."""

    text: str
    prompt_token_ids: list[int]
    token_ids: list[int]
    logprobs: list[float]
    routed_experts: list[list[list[int]]]
    prompt_routed_experts: list[list[list[int]]]
    finish_reason: Literal["stop", "length"]
    extra: dict = field(default_factory=dict)


@runtime_checkable
class Policy(Protocol):
    """What the loop needs from a model; see the module docstring."""

    type: str
    module: nn.Module
    moe_spec: MoESpec
    tokenizer_info: TokenizerInfo
    max_seq_len: int

    @property
    def routed_experts_source(self) -> str:
        """What a completion sampled by :meth:`generate` records: "engine" (MoE) or "none"."""
        ...

    def token_logprobs(
        self, input_ids: Tensor, targets: Tensor, pad_mask: Tensor, temperature: Tensor,
        *, replay_experts: Tensor | None = None, replay_min_ratio: float = 0.1,
        return_logits: bool = False, return_hidden: bool = False,
    ) -> TokenLogprobs:
        """input_ids, targets (B, T) long; pad_mask (B, T) bool (True on real tokens, right
        padding); temperature (B,); replay_experts (B, T, L, k) long, -1 = the router decides;
        ``return_logits`` / ``return_hidden`` fill :class:`TokenLogprobs`' ``logits`` (B*T*V
        memory) / ``hidden``."""
        ...

    def encode_prompt(self, prompt: str) -> list[int]:
        """The ids a prompt is fed as (BOS and chat formatting included when the model has them)."""
        ...

    def decode(self, ids: list[int]) -> str:
        """Text of ``ids``, special tokens dropped."""
        ...

    def generate(
        self, prompts: list[list[int]], *, max_new_tokens: int, temperature: float,
        top_p: float = 1.0, seed: int | None = None,
    ) -> list[Sampled]:
        """Sample a continuation of each prompt (token ids); greedy when temperature == 0."""
        ...

    def save(self, directory: Path, *, metadata: dict | None = None) -> Path:
        """Write the checkpoint in the model's own format; returns the directory."""
        ...

    def describe(self) -> dict:
        """A small JSON-able summary (type, model_type, parameters, MoE shape) for records."""
        ...


def chunked_logprobs(hidden_or_logits: Tensor, targets: Tensor, temperature: Tensor, *,
                     head: nn.Module | None = None, chunk: int = 256) -> Tensor:
    """log softmax(head(h) / T)[targets] in fp32, ``chunk`` positions at a time: (B, T).

    ``head`` None means the input already holds logits (B, T, V). With a head and gradients on,
    each chunk is recomputed in backward (activation checkpointing), so the (B, T, V) logits are
    never all alive at once.
    """
    import torch
    from torch.utils.checkpoint import checkpoint

    temp = temperature.to(hidden_or_logits.device, torch.float32).view(-1, 1, 1)

    def piece(x: Tensor, y: Tensor) -> Tensor:
        logits = (x.float() if head is None else fp32_logits(head, x)) / temp
        return torch.log_softmax(logits, -1).gather(-1, y.unsqueeze(-1)).squeeze(-1)

    out = []
    grad = torch.is_grad_enabled() and hidden_or_logits.requires_grad and head is not None
    for s in range(0, targets.shape[1], chunk):
        x, y = hidden_or_logits[:, s:s + chunk], targets[:, s:s + chunk]
        out.append(checkpoint(piece, x, y, use_reentrant=False) if grad else piece(x, y))
    return torch.cat(out, dim=1)


def fp32_logits(head: nn.Module, hidden: Tensor) -> Tensor:
    """``head(hidden)`` computed in fp32 (..., V), whatever the autocast or the weights' dtype.

    A bf16 projection rounds each logit to bf16 (8 bits of mantissa: 0.06 at a logit of 10)
    before the fp32 log-softmax, which puts 0.01-0.1 nats of noise per token into log-probs and
    so into importance weights against served logprobs. Here the hidden state is upcast and the
    matmul runs with autocast off; bf16 weights are upcast per call (a V x D copy: the training
    path keeps fp32 master weights, where it is free). The head is called as a module, so its
    hooks see the (upcast) hidden state, and gradients reach its weights in their own dtype.
    """
    import contextlib

    import torch
    from torch.func import functional_call

    kind = hidden.device.type
    off = torch.autocast(kind, enabled=False) if kind in ("cpu", "cuda") \
        else contextlib.nullcontext()
    params = {n: p.float() if p.is_floating_point() else p
              for n, p in (*head.named_parameters(), *head.named_buffers())}
    with off:
        return functional_call(head, params, (hidden.float(),)).float()


def teacher_forced_routes(policy: Policy, prompt_ids: list[int], response_ids: list[int],
                          ) -> tuple[list, list]:
    """(prompt routes (P, L, k), response routes (R, L, k)) by one forward over prompt + response,
    for engines that sample without returning routed experts (``routed_experts_source =
    "teacher_forced"``). Response token j's routes are those of the position that predicted it
    (P - 1 + j), as when sampling; both lists are empty for a dense policy."""
    import torch

    if not policy.moe_spec.is_moe or not prompt_ids:
        return [], []
    seq = torch.tensor([prompt_ids + response_ids], device=next(policy.module.parameters()).device)
    with torch.no_grad():
        out = policy.token_logprobs(seq, seq, torch.ones_like(seq, dtype=torch.bool),
                                    torch.ones(1, device=seq.device))
    routes = out.routed_experts[0].tolist()
    p, r = len(prompt_ids), len(response_ids)
    return routes[:p], routes[p - 1:p - 1 + r]


def output_head(policy: Policy) -> nn.Module:
    """The module mapping final hidden states to logits (the input of ``return_hidden``)."""
    get = getattr(policy.module, "get_output_embeddings", None)
    return get() if get is not None else policy.module.lm_head


__all__ = ["GateNorm", "MoESpec", "Policy", "Sampled", "TokenLogprobs", "TokenizerInfo",
           "chunked_logprobs", "fp32_logits", "output_head", "teacher_forced_routes"]


def left_pad(rows: list[list[int]], pad_id: int,
             device: torch.device | str | None = None) -> tuple[Tensor, Tensor]:
    """Left-padded ``(B, W)`` token ids and the mask of real tokens, for batched decoding."""
    import torch

    width = max(len(r) for r in rows)
    tokens = torch.full((len(rows), width), pad_id, dtype=torch.long)
    mask = torch.zeros(len(rows), width, dtype=torch.bool)
    for i, r in enumerate(rows):
        tokens[i, width - len(r):] = torch.tensor(r, dtype=torch.long)
        mask[i, width - len(r):] = True
    return tokens.to(device), mask.to(device)
