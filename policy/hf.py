"""Hugging Face ``transformers`` causal LMs behind the :class:`policy.base.Policy` interface.

Dense models (Llama, Qwen2/3, SmolLM2 ...) and the MoE families Qwen3-MoE, Qwen2-MoE, OLMoE and
Mixtral. Every MoE block's router (``mlp.gate``) gets a forward hook that records the experts it
chose and, when a replay is set, substitutes the logged experts: the router still computes its
logits, the gate weights are its probabilities at the forced experts with the family's own
normalisation (softmax over all experts, optionally renormalised over the k chosen — equal to
Mixtral's softmax over the top-k logits), so the router gets gradients and a replay of the
router's own choice reproduces its output exactly. A logged expert whose probability is below
``replay_min_ratio`` times the router's k-th largest is implausible and replaced, as in the toy
(policy/toy/model.py). Loading checks the directory first (policy/hf_checks.py) so a bad model
fails with the file and field named. A GGUF is read with ``gguf_file=`` (needs ``gguf`` and
``accelerate``).

A frozen prefix (:class:`FrozenPrefix`): when the first K decoder layers of two models are the
same frozen weights (a champion and a policy that trains only its top layers), one forward can
keep the hidden states entering layer K and the routing of those layers (``capture_prefix=K``)
and the other resumes from them (``prefix=``) instead of recomputing the K layers: the
trainer's forward passes then cost the top layers only.

Left out: shared-expert gating of Qwen2-MoE is left to the model (it has no routing to replay),
expert parallelism, quantised training, hub downloads.
"""

from __future__ import annotations

import json
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

import torch
from torch import Tensor

from policy.base import (
    MoESpec,
    Sampled,
    TokenizerInfo,
    TokenLogprobs,
    chunked_logprobs,
    fp32_logits,
)
from policy.config import HFPolicyConfig, PolicyLoadError
from policy.hf_checks import MOE_FAMILIES

METADATA = "metadata.json"


@dataclass
class _RouteState:
    """Per-forward routing bookkeeping shared by the router hooks."""

    replay: Tensor | None = None  # (N, L, k) long, -1 = router
    min_ratio: float = 0.1
    idx: list[Tensor] = field(default_factory=list)  # L x (N, k)
    logits: list[Tensor] = field(default_factory=list)  # L x (N, E)
    replaced: int = 0

    def reset(self, replay: Tensor | None = None, min_ratio: float = 0.1) -> None:
        self.replay, self.min_ratio = replay, min_ratio
        self.idx, self.logits, self.replaced = [], [], 0


@dataclass
class FrozenPrefix:
    """A forward's state after its first ``layers`` decoder layers, for a model whose first
    ``layers`` layers (and embeddings) are the same frozen weights to resume from.

    hidden: (B, T, D) the hidden states entering decoder layer ``layers``; idx / logits: per MoE
    router among those layers, in layer order, the experts chosen (B*T, k) and the router logits
    (B*T, E) (empty for a dense model). :meth:`rows` cuts it into one prefix per row (its first
    ``n`` positions, right padding dropped) and :meth:`collate` pads such rows back into a batch;
    the padding's values never reach a real token (attention masks it, routing is per token)."""

    layers: int
    hidden: Tensor
    idx: list[Tensor] = field(default_factory=list)
    logits: list[Tensor] = field(default_factory=list)

    def rows(self, lengths: list[int]) -> list[FrozenPrefix]:
        """One prefix per row, each of its first ``lengths[i]`` positions, detached, on the CPU."""
        b, t = self.hidden.shape[:2]
        idx = [x.view(b, t, -1) for x in self.idx]
        logits = [x.view(b, t, -1) for x in self.logits]
        return [FrozenPrefix(self.layers, self.hidden[i, :n].detach().cpu(),
                             [x[i, :n].cpu() for x in idx], [x[i, :n].detach().cpu()
                                                             for x in logits])
                for i, n in enumerate(lengths)]

    @staticmethod
    def collate(rows: list[FrozenPrefix], width: int, device=None) -> FrozenPrefix:
        """Rows (from :meth:`rows`) right-padded with zeros to ``width`` positions: (B, width,
        D) hidden states and (B*width, .) routing, on ``device``."""
        def pad(parts: list[Tensor]) -> Tensor:
            out = parts[0].new_zeros((len(parts), width, *parts[0].shape[1:]))
            for i, part in enumerate(parts):
                out[i, :part.shape[0]] = part
            return out.to(device)

        first = rows[0]
        if any(r.layers != first.layers for r in rows):
            raise ValueError("rows of a frozen prefix must share its number of layers")
        n_routers = len(first.idx)
        return FrozenPrefix(
            first.layers, pad([r.hidden for r in rows]),
            [pad([r.idx[j] for r in rows]).flatten(0, 1) for j in range(n_routers)],
            [pad([r.logits[j] for r in rows]).flatten(0, 1) for j in range(n_routers)])


class _Passthrough(torch.nn.Module):
    """Stands in for a frozen decoder layer whose output a prefix already holds: returns its
    input (no compute), or, as the last such layer, the prefix's hidden states."""

    def __init__(self, hidden: Tensor | None = None):
        super().__init__()
        self.hidden = hidden

    def forward(self, hidden_states: Tensor, *args, **kwargs) -> Tensor:
        return hidden_states if self.hidden is None else self.hidden


def _gate_norm(config) -> str:
    norm = MOE_FAMILIES[config.model_type]
    if norm == "softmax_topk" and getattr(config, "norm_topk_prob", False):
        return "softmax_topk_renorm"
    return norm


def _find_routers(model) -> list[tuple[int, torch.nn.Module]]:
    """(decoder layer index, router) for every MoE block, in layer order."""
    base = model.base_model
    layers = getattr(base, "layers", None) or getattr(base, "h", None) or []
    out = []
    for i, layer in enumerate(layers):
        gate = getattr(getattr(layer, "mlp", None), "gate", None)
        if gate is not None and hasattr(gate, "top_k") and hasattr(gate, "num_experts"):
            out.append((i, gate))
    return out


class HFPolicy:
    """:class:`policy.base.Policy` for a ``transformers`` causal LM; see the module docstring."""

    type = "hf"

    def __init__(self, model, tokenizer, *, source_dir: Path | None = None,
                 logprob_chunk: int = 256, chat_template: bool = False):
        self.module = model
        self.tokenizer = tokenizer
        self.source_dir = source_dir
        self.logprob_chunk = logprob_chunk
        self.chat_template = chat_template
        config = model.config
        self.max_seq_len = int(getattr(config, "max_position_embeddings", 2048))
        self._routers = _find_routers(model)
        self._state = _RouteState()
        self.moe_spec = self._spec()
        self.tokenizer_info = self._tokenizer_info()
        self.aux_coef = float(getattr(config, "router_aux_loss_coef", 0.0) or 0.0)
        self.z_coef = float(getattr(config, "router_z_loss_coef", 0.0) or 0.0)
        for pos, (_, router) in enumerate(self._routers):
            router.register_forward_hook(self._hook(pos))

    # -- construction -----------------------------------------------------------------------
    @classmethod
    def from_config(cls, cfg: HFPolicyConfig, *, workdir: Path | None = None) -> HFPolicy:
        path = cfg.path
        if cfg.build is not None:
            from policy.tiny import materialize

            root = Path(workdir) if workdir else Path(tempfile.mkdtemp(prefix="ratchet-hf-"))
            path = materialize(cfg.build, root / f"tiny-{cfg.build.family}")
        gguf_file = cfg.gguf_file
        if cfg.package is not None:
            from policy.config import packaged_file

            found = packaged_file(cfg.package, cfg.gguf_file)
            path, gguf_file = found.parent, found.name
        policy = cls.load(path, gguf_file=gguf_file, dtype=cfg.dtype,
                          logprob_chunk=cfg.logprob_chunk)
        if cfg.upcycle is not None:
            from policy.upcycle import upcycle_model

            u = cfg.upcycle
            moe = upcycle_model(policy.module, u.experts, u.top_k, router_std=u.router_std,
                                seed=u.seed)
            moe.generation_config = policy.module.generation_config  # its EOS ids
            policy = cls(moe.eval(), policy.tokenizer, source_dir=path,
                         logprob_chunk=cfg.logprob_chunk)
        policy.chat_template = policy.chat_template or cfg.chat_template
        return policy

    @classmethod
    def load(cls, directory: Path, *, gguf_file: str | None = None, dtype: str = "auto",
             logprob_chunk: int = 256) -> HFPolicy:
        """Check, then load model and tokenizer from ``directory`` (HF dir or GGUF file);
        ``dtype`` as :attr:`HFPolicyConfig.dtype` ("auto": bf16 with CUDA, else fp32)."""
        from policy import hf_checks
        from policy.config import resolve_dtype

        directory = Path(directory)
        dtype = resolve_dtype(dtype)
        if gguf_file is not None:
            model, tokenizer = hf_checks.load_gguf(directory, gguf_file, getattr(torch, dtype))
        else:
            hf_checks.check_dir(directory)
            model, tokenizer = hf_checks.load_dir(directory, getattr(torch, dtype))
        hf_checks.check_tokenizer(tokenizer, directory)
        meta = directory / METADATA
        chat = bool(json.loads(meta.read_text()).get("chat_template", False)) \
            if meta.is_file() else False
        return cls(model.eval(), tokenizer, source_dir=directory, logprob_chunk=logprob_chunk,
                   chat_template=chat)

    def _spec(self) -> MoESpec:
        c = self.module.config
        n_layers = int(c.num_hidden_layers)
        if not self._routers:
            return MoESpec((), n_layers, 0, 0, "none", c.model_type)
        if c.model_type not in MOE_FAMILIES:
            raise PolicyLoadError(f"config.json: model_type '{c.model_type}' has routers but is "
                                  f"not a supported MoE family ({sorted(MOE_FAMILIES)})")
        router = self._routers[0][1]
        return MoESpec(tuple(i for i, _ in self._routers), n_layers, int(router.num_experts),
                       int(router.top_k), _gate_norm(c), c.model_type)

    def _tokenizer_info(self) -> TokenizerInfo:
        t = self.tokenizer
        eos = {int(t.eos_token_id)}
        gen_eos = getattr(getattr(self.module, "generation_config", None), "eos_token_id", None)
        for e in (gen_eos if isinstance(gen_eos, list) else [gen_eos]):
            if e is not None:
                eos.add(int(e))
        pad = t.pad_token_id if t.pad_token_id is not None else t.eos_token_id
        return TokenizerInfo(tuple(sorted(eos)), int(pad), t.bos_token_id,
                             int(self.module.config.vocab_size))

    @property
    def routed_experts_source(self) -> str:
        return "engine" if self.moe_spec.is_moe else "none"

    # -- routing ----------------------------------------------------------------------------
    def _hook(self, pos: int):
        from policy.toy.model import _plausible_routing

        renorm = self.moe_spec.gate_norm in ("softmax_topk_renorm", "topk_softmax")
        keep_float = self.moe_spec.gate_norm == "topk_softmax"  # Mixtral returns fp32 gates

        def hook(module, args, output):
            logits, scores, idx = output
            st = self._state
            if st.replay is not None:
                probs = torch.softmax(logits, dim=-1, dtype=torch.float)
                top_vals, _ = torch.topk(probs, module.top_k, dim=-1)
                idx, replaced = _plausible_routing(st.replay[:, pos], probs, top_vals,
                                                   st.min_ratio)
                st.replaced += replaced
                scores = probs.gather(1, idx)
                if renorm:
                    scores = scores / scores.sum(dim=-1, keepdim=True)
                if not keep_float:
                    scores = scores.to(logits.dtype)
            st.idx.append(idx)
            st.logits.append(logits)
            return logits, scores, idx

        return hook

    def _routing(self, b: int, t: int) -> tuple[Tensor, list[Tensor]]:
        """Recorded experts (B, t, L, k) and router probs L x (B, t, E) of the last forward."""
        st, spec = self._state, self.moe_spec
        if not st.idx:
            device = self.module.get_output_embeddings().weight.device
            return torch.zeros(b, t, 0, 0, dtype=torch.long, device=device), []
        routed = torch.stack([i.view(b, t, -1) for i in st.idx], dim=2).long()
        probs = [lg.float().softmax(-1).view(b, t, -1) for lg in st.logits]
        assert routed.shape[2:] == (spec.n_moe_layers, spec.top_k)
        return routed, probs

    def _routed_ids(self, b: int, t: int) -> Tensor:
        """Recorded experts (B, t, L, k) of the last forward, without the router softmax the
        trainer's :meth:`_routing` also computes (decoding needs only the ids)."""
        return torch.stack([i.view(b, t, -1) for i in self._state.idx], dim=2).long()

    def _aux(self, real: Tensor) -> tuple[Tensor, Tensor, Tensor]:
        """(weighted aux, load-balance, z-loss) over real tokens, as the toy computes them."""
        st, spec = self._state, self.moe_spec
        zero = torch.zeros((), device=real.device)
        if not st.idx:
            return zero, zero, zero
        w = real.reshape(-1).float()
        n = w.sum().clamp(min=1)
        lb, zl = [], []
        for idx, logits in zip(st.idx, st.logits):
            probs = logits.float().softmax(-1)
            f = (torch.nn.functional.one_hot(idx, spec.n_experts).float().sum(1) * w[:, None])
            f = f.sum(0) / (n * spec.top_k)
            p = (probs * w[:, None]).sum(0) / n
            lb.append(spec.n_experts * (f * p).sum())
            zl.append((torch.logsumexp(logits.float(), -1).square() * w).sum() / n)
        lb_loss, z_loss = torch.stack(lb).mean(), torch.stack(zl).mean()
        return self.aux_coef * lb_loss + self.z_coef * z_loss, lb_loss, z_loss

    # -- the Policy interface ---------------------------------------------------------------
    def token_logprobs(
        self, input_ids: Tensor, targets: Tensor, pad_mask: Tensor, temperature: Tensor,
        *, replay_experts: Tensor | None = None, replay_min_ratio: float = 0.1,
        return_logits: bool = False, return_hidden: bool = False,
        capture_prefix: int = 0, prefix: FrozenPrefix | None = None,
    ) -> TokenLogprobs:
        """:meth:`policy.base.Policy.token_logprobs`, plus a frozen prefix (module docstring):
        ``capture_prefix=K`` keeps the state after the first K decoder layers in the output's
        ``prefix``; ``prefix`` resumes from such a state (taken from a model whose first
        ``prefix.layers`` layers are these weights, on the same rows and routing replay)."""
        b, t = input_ids.shape
        replay, spec = None, self.moe_spec
        if replay_experts is not None and spec.is_moe:
            if tuple(replay_experts.shape) != (b, t, spec.n_moe_layers, spec.top_k):
                raise ValueError(f"replay_experts has shape {list(replay_experts.shape)}, "
                                 f"expected {[b, t, spec.n_moe_layers, spec.top_k]}")
            replay = replay_experts.reshape(b * t, spec.n_moe_layers, spec.top_k)
        self._state.reset(replay, replay_min_ratio)
        layers = self.module.base_model.layers
        kept: dict[str, Tensor] = {}
        handle = layers[capture_prefix - 1].register_forward_hook(
            lambda module, args, output: kept.update(
                hidden=output[0] if isinstance(output, tuple) else output)) \
            if capture_prefix else None
        if prefix is not None:  # the first prefix.layers layers pass the prefix's state on
            if tuple(prefix.hidden.shape[:2]) != (b, t):
                raise ValueError(f"prefix hidden states have shape "
                                 f"{list(prefix.hidden.shape)}, expected [{b}, {t}, ...]")
            self._state.idx, self._state.logits = list(prefix.idx), list(prefix.logits)
            k = prefix.layers
            self.module.base_model.layers = torch.nn.ModuleList(
                [_Passthrough() for _ in range(k - 1)] + [_Passthrough(prefix.hidden)]
                + list(layers[k:]))
        try:
            hidden = self.module.base_model(input_ids=input_ids, attention_mask=pad_mask.long(),
                                            use_cache=False).last_hidden_state
            head = self.module.get_output_embeddings()
            logp = chunked_logprobs(hidden, targets, temperature, head=head,
                                    chunk=self.logprob_chunk)
            routed, probs = self._routing(b, t)
            aux, lb, zl = self._aux(pad_mask)
            logits = fp32_logits(head, hidden) if return_logits else None  # B*T*V: small vocabs
            kept_prefix = None
            if capture_prefix:
                n = sum(1 for i, _ in self._routers if i < capture_prefix)
                kept_prefix = FrozenPrefix(capture_prefix, kept["hidden"], self._state.idx[:n],
                                           self._state.logits[:n])
            return TokenLogprobs(logp, routed, probs, aux, lb, zl, self._state.replaced,
                                 logits=logits, hidden=hidden if return_hidden else None,
                                 prefix=kept_prefix)
        finally:
            self._state.reset()
            self.module.base_model.layers = layers
            if handle is not None:
                handle.remove()

    @property
    def has_chat_template(self) -> bool:
        """Whether the tokenizer has a chat template (an instruct model)."""
        return bool(getattr(self.tokenizer, "chat_template", None))

    def encode_chat(self, prompt: str) -> list[int]:
        """``prompt`` as one user turn through the chat template, the assistant turn opened."""
        out = self.tokenizer.apply_chat_template(
            [{"role": "user", "content": prompt}], add_generation_prompt=True, tokenize=True)
        return list(out["input_ids"] if hasattr(out, "keys") else out)

    def encode_prompt(self, prompt: str) -> list[int]:
        if self.chat_template and self.has_chat_template:
            return self.encode_chat(prompt)
        return list(self.tokenizer(prompt)["input_ids"])

    def decode(self, ids: list[int]) -> str:
        return self.tokenizer.decode(ids, skip_special_tokens=True)

    @torch.inference_mode()
    def generate(
        self, prompts: list[list[int]], *, max_new_tokens: int, temperature: float,
        top_p: float = 1.0, seed: int | None = None, stop_when=None, per_row: bool = False,
    ) -> list[Sampled]:
        """See :meth:`policy.base.Policy.generate`; ``stop_when(text) -> bool`` ends a row once
        its decoded text satisfies it (finish_reason 'stop', no EOS appended); ``per_row``: each
        row samples from its own seeded stream (:mod:`policy.hf_generate`)."""
        from policy.hf_generate import decode_loop

        if temperature < 0 or not 0 < top_p <= 1:
            raise ValueError(f"need temperature >= 0 and 0 < top_p <= 1, got {temperature}, "
                             f"{top_p}")
        if not prompts:
            return []
        steps = min(max_new_tokens, self.max_seq_len - max(len(p) for p in prompts))
        if steps < 1:
            raise ValueError(f"prompt of {max(len(p) for p in prompts)} tokens leaves no room "
                             f"under max_position_embeddings={self.max_seq_len}")
        was_training = self.module.training
        self.module.eval()
        try:
            return decode_loop(self, prompts, steps, temperature, top_p, seed, stop_when,
                               per_row)
        finally:
            self.module.train(was_training)

    def save(self, directory: Path, *, metadata: dict | None = None) -> Path:
        directory = Path(directory)
        directory.mkdir(parents=True, exist_ok=True)
        self.module.save_pretrained(directory)
        self.tokenizer.save_pretrained(directory)
        # the chat-template setting travels with the checkpoint, so the replicas, the gate and
        # the trainer that load it encode prompts as the policy was configured to
        meta = {**(metadata or {}), "chat_template": self.chat_template}
        (directory / METADATA).write_text(json.dumps(meta, indent=2, sort_keys=True))
        return directory

    def describe(self) -> dict:
        s = self.moe_spec
        return {"type": "hf", "model_type": self.module.config.model_type,
                "params": sum(p.numel() for p in self.module.parameters()),
                "n_layers": s.n_layers, "moe_layers": list(s.moe_layers),
                "n_experts": s.n_experts, "top_k": s.top_k, "gate_norm": s.gate_norm}
