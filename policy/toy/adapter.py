"""The toy MoE behind the :class:`policy.base.Policy` interface.

A thin wrapper: the forward, router replay, generation and checkpoint are the toy's own
(policy/toy/model.py, generate.py, checkpoint.py), so the numbers equal those of the direct paths.
Left out: nothing of the toy is re-implemented here.
"""

from __future__ import annotations

from pathlib import Path

from torch import Tensor

from policy.base import MoESpec, Sampled, TokenizerInfo, TokenLogprobs, chunked_logprobs
from policy.toy import tokenizer as tok
from policy.toy.model import MoETransformer


class ToyPolicy:
    """:class:`policy.base.Policy` for :class:`MoETransformer` (byte tokenizer, BOS/EOS/PAD)."""

    type = "toy"

    def __init__(self, model: MoETransformer, *, logprob_chunk: int = 256):
        self.module = model
        self.logprob_chunk = logprob_chunk
        c = model.config
        moe = c.ffn == "moe"
        self.moe_spec = MoESpec(
            moe_layers=tuple(range(c.n_layers)) if moe else (), n_layers=c.n_layers,
            n_experts=c.n_experts if moe else 0, top_k=c.top_k if moe else 0,
            gate_norm="softmax_topk_renorm" if moe else "none", family="toy")
        self.tokenizer_info = TokenizerInfo(eos_ids=(tok.EOS,), pad_id=tok.PAD, bos_id=tok.BOS,
                                            vocab_size=c.vocab_size)
        self.max_seq_len = c.max_seq_len

    @property
    def routed_experts_source(self) -> str:
        return "engine" if self.moe_spec.is_moe else "none"

    @classmethod
    def load(cls, directory: Path) -> ToyPolicy:
        from policy.toy.checkpoint import load_checkpoint

        return cls(load_checkpoint(Path(directory)))

    def token_logprobs(
        self, input_ids: Tensor, targets: Tensor, pad_mask: Tensor, temperature: Tensor,
        *, replay_experts: Tensor | None = None, replay_min_ratio: float = 0.1,
        return_logits: bool = False, return_hidden: bool = False,
    ) -> TokenLogprobs:
        seen: dict[str, Tensor] = {}  # the input of lm_head = the final hidden state
        handle = self.module.lm_head.register_forward_pre_hook(
            lambda _m, args: seen.__setitem__("hidden", args[0])) if return_hidden else None
        try:
            out = self.module(input_ids, pad_mask=pad_mask, replay_experts=replay_experts,
                              replay_min_ratio=replay_min_ratio, right_padded=True)
        finally:
            if handle is not None:
                handle.remove()
        logp = chunked_logprobs(out.logits, targets, temperature, chunk=self.logprob_chunk)
        return TokenLogprobs(logp, out.routed_experts, out.router_probs, out.aux_loss,
                             out.lb_loss, out.z_loss, out.replay_replaced,
                             logits=out.logits.float() if return_logits else None,
                             hidden=seen.get("hidden"))

    def encode_prompt(self, prompt: str) -> list[int]:
        from policy.toy.generate import encode_prompt

        return encode_prompt(prompt)

    def decode(self, ids: list[int]) -> str:
        return tok.decode(ids)

    def generate(
        self, prompts: list[list[int]], *, max_new_tokens: int, temperature: float,
        top_p: float = 1.0, seed: int | None = None,
    ) -> list[Sampled]:
        from policy.toy.generate import generate_ids

        gens, prompt_routes = generate_ids(self.module, prompts, max_new_tokens=max_new_tokens,
                                           temperature=temperature, top_p=top_p, seed=seed)
        return [Sampled(g.text, list(p), g.token_ids, g.logprobs, g.routed_experts, pr,
                        g.finish_reason) for g, p, pr in zip(gens, prompts, prompt_routes)]

    def save(self, directory: Path, *, metadata: dict | None = None) -> Path:
        from policy.toy.checkpoint import save_checkpoint

        return save_checkpoint(self.module, Path(directory), metadata=metadata)

    def describe(self) -> dict:
        c = self.module.config
        return {"type": "toy", "model_type": "toy_moe", "params": self.module.num_params(),
                "active_params": self.module.num_params(active=True), "n_layers": c.n_layers,
                "n_experts": self.moe_spec.n_experts, "top_k": self.moe_spec.top_k}
