"""The torch engine's ``StepModel`` over a Hugging Face policy, and the one factory for any policy.

``HFStepModel`` prefills a left-padded batch with one ``transformers`` ``DynamicCache`` (attention
mask and position ids so that padding changes nothing) and decodes one token per row per step,
keeping only the last position's logits. The routed experts come from the policy's router hooks
(policy/hf.py): every prompt position's from the prefill, and at each step those of the position
whose logits are sampled. Prompt ids, EOS ids (the tokenizer's and the generation config's) and the
pad id are the policy's own (``Policy.encode_prompt``, ``TokenizerInfo``). A lock serialises the
policy's forwards: the router hooks keep per-forward state, and the vLLM engine's teacher-forced
``route`` may run beside the batcher.

``step_model(policy, version)`` picks ``ToyStepModel`` (policy/toy, its own KV cache) or
``HFStepModel``. Left out: a chunked top-p over very large vocabularies (the engine samples from the
full (B, V) logits on the CPU), and chat templates with several turns (see ``chat_prompt``).
"""

from __future__ import annotations

import threading
from collections.abc import Sequence
from typing import TYPE_CHECKING

from deploy.replica.engines.base import EngineInputError

if TYPE_CHECKING:
    from torch import Tensor

    from policy.base import Policy


class _HFSession:
    """One batch decoded with a KV cache; logits and routes come back to the CPU."""

    def __init__(self, step: HFStepModel, rows: list[list[int]]) -> None:
        from transformers import DynamicCache

        from policy.base import left_pad

        self.step, policy = step, step.policy
        self.device = next(policy.module.parameters()).device
        tokens, self.mask = left_pad(rows, policy.tokenizer_info.pad_id, self.device)
        self.positions = (self.mask.long().cumsum(1) - 1).clamp(min=0)
        self.cache = DynamicCache(config=policy.module.config)
        routes = self._forward(tokens)
        width = tokens.shape[1]
        self.prompt_routes = None if routes is None else [
            routes[i, width - len(r):].tolist() for i, r in enumerate(rows)]

    def _forward(self, tokens: Tensor) -> Tensor | None:
        """Run ``tokens`` through the model; sets ``logits`` and ``last_routes``, returns the
        routes of every fed position (B, t, L, k), or None for a dense policy."""
        policy = self.step.policy
        with self.step.lock:
            policy._state.reset()
            try:
                out = policy.module(input_ids=tokens, attention_mask=self.mask.long(),
                                    position_ids=self.positions, past_key_values=self.cache,
                                    use_cache=True, logits_to_keep=1)
                routed = policy._routed_ids(*tokens.shape) if policy.moe_spec.is_moe else None
            finally:
                policy._state.reset()
        self.logits = out.logits[:, -1].float().cpu()
        if not policy.moe_spec.is_moe:
            self.last_routes = None
            return None
        routed = routed.cpu()
        self.last_routes = routed[:, -1]
        return routed

    def retain(self, rows: list[int]) -> None:
        """Keep only batch rows ``rows`` (in that order): the KV cache, mask and positions drop
        the others, so later steps compute only the rows still decoding."""
        import torch

        idx = torch.tensor(rows, dtype=torch.long, device=self.device)
        self.cache.batch_select_indices(idx)
        self.mask, self.positions = self.mask[idx], self.positions[idx]
        self.logits = self.logits[rows]
        if self.last_routes is not None:
            self.last_routes = self.last_routes[rows]

    def advance(self, next_ids: Tensor) -> None:
        import torch

        ids = next_ids.to(self.device).unsqueeze(1)
        self.mask = torch.cat([self.mask, torch.ones_like(self.mask[:, :1])], dim=1)
        self.positions = self.positions[:, -1:] + 1
        self._forward(ids)


class HFStepModel:
    """``StepModel`` over a :class:`policy.hf.HFPolicy`; see the module docstring."""

    def __init__(self, policy: Policy, version: int) -> None:
        self.policy, self.version = policy, version
        policy.module.eval()
        info = policy.tokenizer_info
        self.max_seq_len = policy.max_seq_len
        self.eos_ids = tuple(info.eos_ids)
        self.eos_id = self.eos_ids[0]
        self.lock = threading.Lock()
        from deploy.replica.tool_calls import template_tool_format

        self.tool_format = template_tool_format(getattr(policy, "tokenizer", None))

    def encode_prompt(self, prompt: str, *, templated: bool = False) -> list[int]:
        """The policy's ids for ``prompt``; a ``templated`` prompt (already rendered through the
        chat template) is tokenised as it stands, no special tokens added, as
        ``apply_chat_template(..., tokenize=True)`` would."""
        if templated:
            return list(self.policy.tokenizer(prompt, add_special_tokens=False)["input_ids"])
        return self.policy.encode_prompt(prompt)

    def decode(self, ids: Sequence[int]) -> str:
        return self.policy.decode(list(ids))

    def chat_prompt(self, messages: Sequence[tuple[str, str]]) -> str:
        """The messages' contents joined by newlines, roles dropped: a policy configured with
        ``chat_template`` wraps the prompt as one user turn when it encodes it (policy/hf.py), so
        a single user message is served exactly as the policy's template says."""
        return "\n".join(content for _, content in messages)

    def tool_prompt(self, messages: list[dict], tools: list[dict] | None) -> str:
        """The whole conversation, roles and tool turns kept, and ``tools`` through the policy's
        chat template with the assistant turn opened (only when ``tool_format`` is set)."""
        if self.tool_format is None:
            raise EngineInputError("this model's chat template does not render tools", "tools",
                                   "unsupported_parameter")
        return self.policy.tokenizer.apply_chat_template(
            messages, tools=tools, tokenize=False, add_generation_prompt=True)

    def open(self, rows: list[list[int]]) -> _HFSession:
        return _HFSession(self, rows)

    def route(self, ids: list[int]) -> list | None:
        """Teacher-forced routing of ``ids``: experts per position (T, L, k); None if dense."""
        import torch

        if not self.policy.moe_spec.is_moe:
            return None
        device = next(self.policy.module.parameters()).device
        seq = torch.tensor([ids], dtype=torch.long, device=device)
        with self.lock, torch.no_grad():
            out = self.policy.token_logprobs(seq, seq, torch.ones_like(seq, dtype=torch.bool),
                                             torch.ones(1, device=device))
        return out.routed_experts[0].cpu().tolist()


def step_model(policy: Policy, version: int):
    """The ``StepModel`` the torch engine decodes ``policy`` with."""
    if policy.type == "toy":
        from deploy.replica.engines.torch_engine import ToyStepModel

        return ToyStepModel(policy.module, version)
    return HFStepModel(policy, version)
