"""The RL recipe: one off-policy update of the champion on logged reward rows.

``RLRecipe(champion_dir, rows, config, current_version=...)`` with ``setup()`` (load the champion
as policy and as frozen reference, turn rows into samples, apply the staleness rule, precompute
reference logprobs), ``train()`` (``config.steps`` optimizer steps; per-step metrics to MLflow
when a run is active), ``save_checkpoint(dir)`` and ``cleanup()``. :func:`run_training` does all
four.

Off-policy by construction: the trust region is around the champion the update starts from
(``TrainerConfig.proximal``: or around each step's own policy), and
the logged behaviour logprobs give each token its truncated importance weight pi_champion /
pi_behaviour (rows served by an older checkpoint get weights != 1); the logged routing is
replayed (``router_replay``); the temperature each row was sampled at is applied to the policy's
logits, and for top-p rows the champion's nucleus truncates and renormalises both pi_prox and
pi_theta (trainer/rl.py). Greedy rows (temperature 0: a deterministic behaviour policy) are kept
out of the policy-gradient term and counted (``rows_greedy``, per step ``greedy_rows``); the
rewarded ones feed a filtered imitation term inside the champion's trust region
(``TrainerConfig.greedy``, ``rows_greedy_imitated``, per step ``greedy_loss``). A set of rows with
nothing to train on raises :class:`NoTrainableRows`.
Baselines: leave-one-out means in natural groups (same prompt, same behaviour version), else a
value head on the prompt's hidden state (trainer/baselines.py), per ``TrainerConfig.baseline``.
Two KL references: the champion (trust region, ``kl_coef``) and a fixed anchor (``anchor_path``
or the one recorded in the champion's metadata, ``anchor_kl_coef``); both KLs are logged per step
as k3 estimates (``kl_theta_ref_k3``, ``kl_theta_anchor_k3``). Broken or malformed completions
stay in the data as negative examples.
Where the damage happens (``TrainerConfig.retain``): each step the policy samples completions of
retain-set prompts and the loss adds the per-token reverse KL to the champion on them
(``trainer.rl.retain_kl_loss``, beta adapted to a budget; ``retain_kl`` per step). Replay
(``TrainerConfig.replay``): a share of every batch is the champion's own answers on
prior-distribution prompts that passed their checks at setup (trainer/replay.py), imitated inside
the trust region. Churn and collateral after the update: ``kl_theta_ref_k3_final`` (traffic) and
``retain_kl_final`` in the summary. ``trainable.scope = "lora"``: adapters (trainer/lora.py)
merged into the weights at save.

The champion, the reference and the anchor are loaded through the Policy plug
(``policy.loader.load_policy``: the toy or a Hugging Face model, by the directory's format); the
value head reads the plug's final hidden states (``return_hidden``), and so does the top-p
nucleus: its truncated log-probs are made from them chunk by chunk over the response positions of
top-p rows (trainer/nucleus.py), so any vocabulary fits (the champion's nucleus is kept per token
as a bit-packed V-wide mask).

Devices: ``config.device`` holds the policy, the reference and each batch (collated on the CPU,
then moved; under a launcher, cuda is the ``LOCAL_RANK`` GPU); weights load in fp32 (master
weights, whatever ``HFPolicyConfig.dtype`` defaults to) and ``config.precision == "bf16"`` runs
every forward pass under bf16 autocast (a DeepSpeed bf16 engine casts the policy to bf16, and the
reference and anchor alike). Reference logprobs are kept on the CPU (one copy per sample) and
moved with their batch.

Left out: the DeepSpeed/Ray backends (trainer/ds_backend.py, trainer/ray_backend.py), reading
Parquet and registering the result in MLflow (the cycle does that).
"""

from __future__ import annotations

import logging
import os
import time
from pathlib import Path

import pyarrow as pa
import torch
from torch import Tensor

from policy.base import Policy, TokenLogprobs
from policy.loader import load_policy
from policy.toy.checkpoint import load_metadata, save_checkpoint
from policy.toy.model import MoETransformer
from runtime.progress import Progress
from trainer import rl
from trainer.baselines import CrossFitValueBaseline, ValueBaseline, prompt_features
from trainer.config import (
    CISPO,
    Asymmetric,
    FilteredImitation,
    SequenceGSPO,
    TokenClip,
    TrainerConfig,
)
from trainer.data import Batch, Sample, collate, rows_to_samples
from trainer.health import moe_health
from trainer.lora import apply_lora, has_lora, merge_lora
from trainer.retain import AdaptiveCoef
from trainer.trainable import select_trainable

log = logging.getLogger("ratchet.trainer")


class NoTrainableRows(ValueError):
    """Every row was dropped (stale, empty) or is greedy with nothing to imitate."""

    def __init__(self, detail: str):
        super().__init__(f"no trainable rows: {detail}")


def resolve_device(name: str) -> torch.device:
    """``auto`` -> cuda when available, else cpu; ``cuda`` without a GPU is a clear error.
    Under a launcher (torchrun, deepspeed) that sets ``LOCAL_RANK``, cuda is that rank's GPU
    and becomes the current device (else every rank lands on GPU 0)."""
    if name == "auto":
        name = "cuda" if torch.cuda.is_available() else "cpu"
    if name == "cuda" and not torch.cuda.is_available():
        raise ValueError("TrainerConfig.device='cuda' but torch sees no CUDA device")
    if name == "cuda" and os.environ.get("LOCAL_RANK") is not None:
        local = int(os.environ["LOCAL_RANK"])
        torch.cuda.set_device(local)
        return torch.device("cuda", local)
    return torch.device(name)


def autocast(device: torch.device, precision: str):  # -> a context manager
    """bf16 autocast on ``device`` when ``precision == "bf16"``, else a no-op context."""
    return torch.autocast(device.type, dtype=torch.bfloat16, enabled=precision == "bf16")


def policy_logprobs(policy: Policy, batch: Batch, *, replay: bool, replay_min_ratio: float,
                    return_logits: bool = False, return_hidden: bool = False,
                    capture_prefix: int = 0, prefix=None) -> tuple[Tensor, TokenLogprobs]:
    """log pi(targets) (B, T) at each row's sampling temperature, and the policy's output
    (routed experts, router probs, aux losses; logits / final hidden states when asked) —
    through the Policy plug, toy or HF. Batches are right-padded (trainer/data.py).
    ``capture_prefix`` / ``prefix``: a frozen prefix (HF policies: policy.hf.FrozenPrefix)."""
    extra = {}
    if capture_prefix:
        extra["capture_prefix"] = capture_prefix
    if prefix is not None:
        extra["prefix"] = prefix
    out = policy.token_logprobs(batch.tokens, batch.targets, batch.pad_mask, batch.temperature,
                                replay_experts=batch.replay if replay else None,
                                replay_min_ratio=replay_min_ratio, return_logits=return_logits,
                                return_hidden=return_hidden, **extra)
    return out.logprobs, out


def staleness_weights(versions: list[int], current_version: int, max_staleness: int,
                      mode: str, decay: float) -> tuple[list[float], int]:
    """Per-row weight (0 = dropped) and the number of rows beyond ``max_staleness`` versions."""
    weights, stale = [], 0
    for v in versions:
        lag = current_version - v
        if lag <= max_staleness:
            weights.append(1.0)
            continue
        stale += 1
        weights.append(0.0 if mode == "drop" else decay ** (lag - max_staleness))
    return weights, stale


class RLRecipe:
    """Off-policy RL on reward rows; see the module docstring.

    ``ref_cache``: a dict the caller keeps across recipes in one process (e.g. the arms and seeds
    of bench/learning.py, which start from the same checkpoint): reference logprobs are stored
    there per (checkpoint directory, routing rule, precision, device) and per sample, and reused
    instead of recomputed. The checkpoint directories must not change while it is kept."""

    def __init__(self, champion_dir: Path, rows: pa.Table, config: TrainerConfig, *,
                 current_version: int | None = None, ref_cache: dict | None = None):
        self.champion_dir = Path(champion_dir)
        self.ref_cache = ref_cache
        self.rows = rows
        self.config = config
        self.current_version = current_version
        self.counts: dict[str, float] = {}
        self.history: list[dict[str, float]] = []

    # -- setup ----------------------------------------------------------------------------
    def setup(self) -> None:
        torch.manual_seed(self.config.seed)
        self.device = resolve_device(self.config.device)
        # The Policy plug (toy or HF, by the directory's format); .module is the torch model.
        self.plug = load_policy(self.champion_dir, dtype="float32")  # fp32 master weights
        backend = self.config.backend
        if backend.type == "deepspeed" and self.plug.type != "toy":
            raise ValueError(f"backend.type='deepspeed' trains the toy policy only; "
                             f"{self.champion_dir} is a '{self.plug.type}' policy")
        if backend.type == "deepspeed" and backend.ep_size > 1 and self.config.router_replay:
            raise ValueError("router_replay=True needs backend.ep_size=1: DeepSpeed's MoE "
                             "layers (ep_size > 1) have no forced-routing input; set "
                             "router_replay=false to train without replay")
        self.policy = self._on_device(self.plug.module).train()
        t = self.config.trainable
        if t.scope == "lora":
            self.param_counts = apply_lora(self.policy, rank=t.lora_rank, alpha=t.lora_alpha,
                                           targets=t.lora_targets, seed=self.config.seed)
        else:
            self.param_counts = select_trainable(self.policy, scope=t.scope,
                                                 top_layers=t.top_layers,
                                                 train_embeddings=t.train_embeddings)
        self.prefix_layers = self._frozen_prefix_layers()
        self.ref_plug = self._frozen(self.champion_dir)  # a copy with its own routing hooks
        self.reference = self.ref_plug.module
        self._setup_samples()
        self._setup_replay()
        self._setup_reference_logprobs()
        self._setup_anchor()
        self._setup_optimizer()
        self._setup_retain()
        self.baseline = rl.RunningBaseline(self.config.baseline_momentum,
                                           all_kinds=[s.kind for s in self.samples])
        # built on first use (needs the hidden size)
        self.value: ValueBaseline | CrossFitValueBaseline | None = None
        self.gen = torch.Generator().manual_seed(self.config.seed)

    def _on_device(self, module):
        """``module`` on the configured device (bf16 weights under a DeepSpeed bf16 engine, which
        casts the policy: the reference and the anchor then match it, and the ratio is 1 at
        step 0); the toy also gets its expert implementation."""
        backend = self.config.backend
        ds_bf16 = backend.type == "deepspeed" and backend.bf16
        module = module.to(self.device)
        if ds_bf16:
            module = module.to(torch.bfloat16)
        if isinstance(module, MoETransformer):
            module.set_expert_impl(self.config.expert_impl)
        return module

    def _frozen(self, directory: Path) -> Policy:
        """A frozen copy (eval, no gradients) of the policy in ``directory``, on the device."""
        plug = load_policy(directory, dtype="float32")
        self._on_device(plug.module).eval().requires_grad_(False)
        return plug

    def _frozen_prefix_layers(self) -> int:
        """K, when the policy is a Hugging Face model whose embeddings and first K decoder layers
        are frozen, K >= 1 and ``config.frozen_prefix`` is on: the reference (the same champion
        weights) computes those layers once per row and the policy resumes from its state. Else
        0 (the toy, LoRA, DeepSpeed, or nothing frozen)."""
        if not self.config.frozen_prefix or self.plug.type != "hf" \
                or self.config.backend.type != "torch":
            return 0
        model = self.policy.base_model
        if model.get_input_embeddings().weight.requires_grad:
            return 0
        k = next((i for i, layer in enumerate(model.layers)
                  if any(p.requires_grad for p in layer.parameters())), 0)
        if k == 0:  # the first layer trains, or none does: nothing to resume
            return 0
        # a frozen layer in train mode must still compute what the reference (eval) did
        dropout = float(getattr(self.policy.config, "attention_dropout", 0.0) or 0.0) > 0 or any(
            isinstance(m, torch.nn.Dropout) and m.p > 0 for m in model.layers[:k].modules())
        return 0 if dropout else k

    def _prefix_batch(self, idx: list[int], width: int):  # -> FrozenPrefix | None
        """The kept frozen-prefix states of samples ``idx``, as a batch ``width`` wide."""
        if not self.prefix_layers:
            return None
        from policy.hf import FrozenPrefix

        return FrozenPrefix.collate([self.prefix[i] for i in idx], width, device=self.device)

    def _setup_optimizer(self) -> None:
        cfg, backend = self.config, self.config.backend
        self.ds = None
        self.rank, self.world_size = 0, 1
        if backend.type == "deepspeed":
            from trainer.ds_backend import DeepSpeedTrainer

            self.ds = DeepSpeedTrainer(
                self.policy, zero_stage=backend.zero_stage, ep_size=backend.ep_size,
                bf16=backend.bf16, batch_size=cfg.batch_size, lr=cfg.lr,
                weight_decay=cfg.weight_decay, grad_clip=cfg.grad_clip)
            self.rank, self.world_size = self.ds.rank, self.ds.world_size
            self.opt = None
            return
        if torch.distributed.is_available() and torch.distributed.is_initialized():
            self.rank = torch.distributed.get_rank()  # e.g. a Ray Train worker
            self.world_size = torch.distributed.get_world_size()
        self.opt = torch.optim.AdamW([p for p in self.policy.parameters() if p.requires_grad],
                                     lr=cfg.lr, weight_decay=cfg.weight_decay)

    def _all_reduce_grads(self) -> None:
        """Average gradients over data-parallel ranks (plain torch backend under Ray/torchrun)."""
        for p in self.policy.parameters():
            if not p.requires_grad:
                continue
            if p.grad is None:
                p.grad = torch.zeros_like(p)
            torch.distributed.all_reduce(p.grad)
            p.grad /= self.world_size

    def _backward_step(self, loss: Tensor) -> float:
        """Backward, clip, optimizer step; returns the global gradient norm before clipping."""
        if self.ds is not None:
            return self.ds.backward_step(loss)
        self.opt.zero_grad(set_to_none=True)
        loss.backward()
        if self.world_size > 1:
            self._all_reduce_grads()
        norm = torch.nn.utils.clip_grad_norm_(self.policy.parameters(), self.config.grad_clip)
        self.opt.step()
        return float(norm)

    def _setup_samples(self) -> None:
        samples, truncated = rows_to_samples(
            self.rows, vocab_size=self.plug.tokenizer_info.vocab_size,
            max_seq_len=self.plug.max_seq_len, encode_prompt=self.plug.encode_prompt)
        if self.current_version is None:
            meta = load_metadata(self.champion_dir).get("model_version")
            self.current_version = int(meta) if meta is not None else max(
                (s.version for s in samples), default=0)
        cfg = self.config
        weights, stale = staleness_weights([s.version for s in samples], self.current_version,
                                           cfg.max_staleness, cfg.staleness_mode,
                                           cfg.staleness_decay)
        for s, w in zip(samples, weights):
            s.weight = w
        self.samples = [s for s in samples if s.weight > 0 and s.response_ids and s.trainable]
        greedy = [s for s in self.samples if s.temperature <= 0]
        imitated = sum(1 for s in greedy if self._imitated(s))
        if not any(self._policy_gradient_row(s) for s in self.samples) and not imitated:
            raise NoTrainableRows(
                f"{len(samples)} rows, {stale} beyond max_staleness={cfg.max_staleness} of "
                f"version {self.current_version}, {sum(s.temperature <= 0 for s in samples)} "
                f"greedy (temperature 0) of which {imitated} to imitate (greedy.loss="
                f"{cfg.greedy.loss!r}, reward > {cfg.greedy.min_reward})"
                + self._objective_filter_note())
        self.counts = {
            "rows_total": len(samples), "rows_used": len(self.samples),
            "rows_stale": stale, "rows_stale_dropped": stale if cfg.staleness_mode == "drop" else 0,
            "rows_truncated": truncated,
            "rows_empty": sum(1 for s in samples if not s.response_ids),
            "rows_left_out": sum(1 for s in samples if not s.trainable),
            "rows_without_routing": sum(1 for s in self.samples if not s.routes),
            "rows_greedy": len(greedy), "rows_greedy_imitated": imitated,
            "rows_top_p": sum(1 for s in self.samples if s.top_p < 1 and s.temperature > 0),
            "reward_mean": sum(s.reward for s in self.samples) / len(self.samples),
        }
        self.counts.update(self.param_counts)
        self._setup_advantage_groups()

    def _setup_advantage_groups(self) -> None:
        """Natural groups: sampled rows with the same prompt and the same behaviour version."""
        sampled = [s for s in self.samples if s.temperature > 0]
        rewards = torch.tensor([s.reward for s in sampled])
        groups = [f"v{s.version}/{s.group}" for s in sampled]
        mode = self.config.baseline
        fn = rl.group_baseline if mode == "group_mean" else rl.loo_baseline
        b, has = fn(groups, rewards)
        if mode == "group_mean":
            has = torch.ones_like(has)
        elif mode in ("value_head", "kind_running_mean"):
            has = torch.zeros_like(has)
        pos = {id(s): i for i, s in enumerate(sampled)}
        self.group_b = torch.zeros(len(self.samples))
        self.use_group = torch.zeros(len(self.samples), dtype=torch.bool)
        for i, s in enumerate(self.samples):
            if id(s) in pos:
                self.group_b[i], self.use_group[i] = b[pos[id(s)]], has[pos[id(s)]]
        self.counts["rows_group_baseline"] = int(self.use_group.sum())
        zero_var = rl.zero_variance_groups(groups, rewards)
        self.zero_var = torch.zeros(len(self.samples), dtype=torch.bool)
        for i, s in enumerate(self.samples):
            if id(s) in pos:
                self.zero_var[i] = zero_var[pos[id(s)]]
        self.counts["rows_zero_variance_group"] = int(self.zero_var.sum())

    def _setup_replay(self) -> None:
        """The champion's verified answers (``TrainerConfig.replay``), appended to the samples
        after the traffic rows (indices ``n_traffic`` on); no group baseline for them (they are
        greedy rows: imitated, not advantaged)."""
        cfg = self.config.replay
        self.n_traffic = len(self.samples)
        if cfg.path is None:
            return
        from trainer.replay import verified_answers

        with torch.no_grad():
            replay, tried = verified_answers(
                self.ref_plug, cfg.path, n=cfg.prompts, max_new_tokens=cfg.max_new_tokens,
                timeout_s=cfg.timeout_s, version=self.current_version)
        self.samples += replay
        pad = len(replay)
        self.group_b = torch.cat([self.group_b, torch.zeros(pad)])
        self.use_group = torch.cat([self.use_group, torch.zeros(pad, dtype=torch.bool)])
        self.zero_var = torch.cat([self.zero_var, torch.zeros(pad, dtype=torch.bool)])
        self.counts.update(replay_tasks=tried, replay_verified=pad)
        log.info("replay: %d of %d prior-distribution answers of the champion verified",
                 pad, tried)

    def _setup_retain(self) -> None:
        """The retain prompts (``TrainerConfig.retain``), encoded once; the coefficient; and,
        with ``resample_every == 0``, the champion's completions every step reuses."""
        cfg = self.config.retain
        self.retain_ids: list[list[int]] = []
        self.retain_samples: list[tuple[int, Sample]] = []
        self.retain_coef = AdaptiveCoef(cfg.kl_coef, cfg.kl_target)
        if cfg.path is None:
            return
        from trainer.retain import RetainDraw, load_groups, load_prompts

        self.retain_ids = [self.plug.encode_prompt(p) for p in load_prompts(cfg.path)]
        self.retain_draw = RetainDraw(load_groups(cfg.path, cfg.group_field), cfg.draw,
                                      torch.Generator().manual_seed(self.config.seed + 7919),
                                      explore=cfg.explore)
        self.counts["retain_groups"] = len(self.retain_draw.keys)
        self.counts["retain_prompts"] = len(self.retain_ids)
        if cfg.resample_every == 0:
            self.retain_pool = self._retain_draw_samples(
                self.ref_plug, min(len(self.retain_ids), 8 * cfg.prompts), seed=self.config.seed)

    def _retain_draw_samples(self, plug: Policy, n: int, *, seed: int) -> list[tuple[int, Sample]]:
        """``plug``'s completions of ``n`` prompts of the draw, each with its retain index."""
        picks = self.retain_draw.pick(n)
        samples = self._retain_sample(plug, [self.retain_ids[i] for i in picks], seed=seed)
        return [(picks[int(s.group.rsplit("/", 1)[1])], s) for s in samples]

    def _retain_sample(self, plug: Policy, prompt_ids: list[list[int]], *,
                       seed: int) -> list[Sample]:
        from trainer.retain import sample_completions

        cfg = self.config.retain
        return sample_completions(plug, prompt_ids, max_new_tokens=cfg.max_new_tokens,
                                  temperature=cfg.temperature, seed=seed)

    def _retain_term(self, step: int) -> tuple[Tensor | None, dict[str, float]]:
        """coef * k2 on the retain samples of this step (``trainer.rl.retain_kl_loss``), and its
        metrics; (None, {}) when the retain set is off. Each sample's KL goes to the draw
        (``RetainDraw.observe``)."""
        cfg = self.config.retain
        if not self.retain_ids:
            return None, {}
        if cfg.resample_every == 0:
            start = (step * cfg.prompts) % len(self.retain_pool)
            self.retain_samples = (self.retain_pool + self.retain_pool)[start:start + cfg.prompts]
        elif step % cfg.resample_every == 0 or not self.retain_samples:
            self.retain_samples = self._retain_draw_samples(
                self.plug, cfg.prompts, seed=self.config.seed * 100_003 + step)
        if not self.retain_samples:
            return None, {}
        loss, metrics, row_kl = self._retain_kl([s for _, s in self.retain_samples], grad=True)
        for (index, _), kl in zip(self.retain_samples, row_kl):
            self.retain_draw.observe(index, kl)
        metrics["retain_kl_coef"] = self.retain_coef.value
        return self.retain_coef.value * loss, metrics

    def _retain_kl(self, samples: list[Sample], *, grad: bool,
                   ) -> tuple[Tensor, dict[str, float], list[float]]:
        """k2 loss and KL metrics of the policy against the champion on ``samples`` (the router
        decides for both: no routing is logged for them), and each sample's KL (its token mean
        of k1)."""
        batch = self._collate(samples).to(self.device)
        with torch.no_grad(), autocast(self.device, self.config.precision):
            logp_ref, ref = policy_logprobs(self.ref_plug, batch, replay=False,
                                            replay_min_ratio=0.0,
                                            capture_prefix=self.prefix_layers)
        with torch.set_grad_enabled(grad), autocast(self.device, self.config.precision):
            logp, _ = policy_logprobs(self.plug, batch, replay=False, replay_min_ratio=0.0,
                                      prefix=ref.prefix)
        loss, metrics = rl.retain_kl_loss(logp.float(), logp_ref.float(), batch.resp_mask)
        with torch.no_grad():
            mask = batch.resp_mask.float()
            k1 = ((logp.float() - logp_ref.float()) * mask).sum(1) / mask.sum(1).clamp(min=1.0)
        return loss, metrics, k1.tolist()

    @torch.no_grad()
    def retain_kl_now(self, n_prompts: int, *, seed: int) -> dict[str, float]:
        """The policy's retain KL to the champion now, on its own completions of the retain
        file's first ``n_prompts`` prompts sampled with ``seed`` ({} when the set is off)."""
        if not self.retain_ids or n_prompts == 0:
            return {}
        samples = self._retain_sample(self.plug, self.retain_ids[:n_prompts], seed=seed)
        if not samples:
            return {}
        _, m, _ = self._retain_kl(samples, grad=False)
        return {"retain_kl": m["retain_kl"], "retain_kl_k3": m["retain_kl_k3"]}

    @torch.no_grad()
    def traffic_kl_now(self, n_rows: int = 64) -> float:
        """KL(pi_theta || pi_champion) now (k3, weighted to the behaviour policy as
        ``kl_theta_ref_k3``) on the first ``n_rows`` sampled traffic rows."""
        idx = [i for i in range(self.n_traffic) if self.samples[i].temperature > 0][:n_rows]
        if not idx:
            return 0.0
        cpu_batch = self._collate([self.samples[i] for i in idx])
        batch = cpu_batch.to(self.device)
        with autocast(self.device, self.config.precision):
            logp, _ = policy_logprobs(self.plug, batch, replay=self.config.router_replay,
                                      replay_min_ratio=self.config.replay_min_ratio,
                                      prefix=self._prefix_batch(idx, batch.tokens.shape[1]))
        logp_ref = self._ref_batch(idx, cpu_batch, self.logp_ref).to(self.device)
        mask = batch.resp_mask & torch.stack([self._inside_row(i, cpu_batch, r)
                                              for r, i in enumerate(idx)]).to(self.device)
        return float(rl.kl_k3_weighted(logp.float(), logp_ref, batch.logp_b, mask))

    def _inside_row(self, i: int, batch: Batch, row: int) -> Tensor:
        inside = torch.ones_like(batch.resp_mask[row])
        inside[batch.resp_mask[row]] = self.inside[i]
        return inside

    def _policy_gradient_row(self, s: Sample) -> bool:
        """A sampled row the objective can learn from: every one, except under
        filtered_imitation, which learns only from those rewarded above its threshold."""
        obj = self.config.objective
        if isinstance(obj, FilteredImitation):
            return s.temperature > 0 and s.reward > obj.min_reward
        return s.temperature > 0

    def _objective_filter_note(self) -> str:
        obj = self.config.objective
        if not isinstance(obj, FilteredImitation):
            return ""
        return (f", and no sampled row with reward > {obj.min_reward} for objective "
                f"filtered_imitation")

    def _imitated(self, s: Sample) -> bool:
        """A greedy row that the greedy loss imitates (``TrainerConfig.greedy``)."""
        g = self.config.greedy
        return s.temperature <= 0 and g.loss == "filtered" and s.reward > g.min_reward

    @torch.no_grad()
    def _setup_reference_logprobs(self) -> None:
        """log pi_ref per response token, under the same routing rule as the policy's forward,
        and for top-p rows the champion's nucleus per token (pi_prox's: see trainer/rl.py), the
        logprob renormalised over it, and whether the logged token lies inside it. When every
        sample is in ``ref_cache`` (same champion, routing rule and precision) nothing is
        recomputed; otherwise all are, and stored there."""
        scope = self.ref_cache.setdefault(self._cache_scope(), {}) if self.ref_cache is not None \
            else {}
        keys = [_sample_key(s) for s in self.samples]
        cached = all(k in scope for k in keys)
        if cached:
            self.logp_ref = [scope[k][0] for k in keys]
            self.nucleus = [scope[k][1] for k in keys]
            self.inside = [scope[k][2] for k in keys]
            self.prefix = [scope[k][3] for k in keys]
        else:
            self.nucleus: list[Tensor | None] = []
            self.inside: list[Tensor] = []
            self.prefix: list = []  # per sample: its FrozenPrefix row (prefix_layers > 0)
            self.logp_ref = self._logprobs_of(self.ref_plug, setting_nucleus=True)
            self.prefix += [None] * (len(keys) - len(self.prefix))
            scope.update(zip(keys, zip(self.logp_ref, self.nucleus, self.inside, self.prefix)))
        self.counts["tokens_outside_nucleus"] = int(sum(int((~x).sum()) for x in self.inside))
        self.counts["rows_reference_cached"] = len(keys) if cached else 0
        self.counts["frozen_prefix_layers"] = self.prefix_layers

    def _cache_scope(self) -> tuple:
        cfg = self.config
        return (str(self.champion_dir.resolve()), cfg.router_replay, cfg.replay_min_ratio,
                cfg.precision, str(self.device), cfg.expert_impl, self.prefix_layers)

    @torch.no_grad()
    def _logprobs_of(self, plug: Policy, *, setting_nucleus: bool = False) -> list[Tensor]:
        out_logp: list[Tensor] = []
        for start in range(0, len(self.samples), 128):
            chunk = self.samples[start:start + 128]
            batch = self._collate(chunk)
            top_p = bool(self.counts["rows_top_p"])  # hidden states only where a nucleus is needed
            dev_batch = batch.to(self.device)
            capture = self.prefix_layers if setting_nucleus else 0  # the reference's pass
            with autocast(self.device, self.config.precision):
                logp, out = policy_logprobs(plug, dev_batch, replay=self.config.router_replay,
                                            replay_min_ratio=self.config.replay_min_ratio,
                                            return_hidden=top_p, capture_prefix=capture)
            if capture:
                self.prefix += out.prefix.rows(batch.pad_mask.sum(1).tolist())
            inside = torch.ones_like(batch.resp_mask)
            if setting_nucleus and not top_p:
                self.nucleus += [None] * len(chunk)
            if top_p:
                logp, inside = self._truncated(plug, dev_batch, out.hidden, logp.float(),
                                               list(range(start, start + len(chunk))),
                                               setting_nucleus=setting_nucleus)
            logp, inside = logp.float().cpu(), inside.cpu()
            for i in range(len(chunk)):
                out_logp.append(logp[i][batch.resp_mask[i]].clone())
                if setting_nucleus:
                    self.inside.append(inside[i][batch.resp_mask[i]].clone())
        return out_logp

    def _truncated(self, plug: Policy, batch: Batch, hidden: Tensor, logp: Tensor,
                   idx: list[int], *, setting_nucleus: bool = False) -> tuple[Tensor, Tensor]:
        """(logp, inside), (B, T): at the response positions of top-p rows, log pi renormalised
        over the champion's nucleus (trainer/nucleus.py, chunked over positions; with
        ``setting_nucleus`` the nucleus is computed from ``plug`` and kept per sample);
        elsewhere ``logp`` as given and ``inside`` True."""
        from policy.base import output_head
        from trainer.nucleus import nucleus_logprobs

        truncated = [s.top_p < 1 and s.temperature > 0 for s in (self.samples[i] for i in idx)]
        if setting_nucleus:
            self.nucleus += [None] * len(idx)
        inside = torch.ones_like(batch.resp_mask)
        where = batch.resp_mask & torch.tensor(truncated, device=logp.device).unsqueeze(1)
        if not where.any():
            return logp, inside
        rows, cols = where.nonzero(as_tuple=True)  # row-major: each row's positions in order
        args = (hidden[rows, cols], output_head(plug), batch.targets[rows, cols],
                batch.temperature[rows])
        if setting_nucleus:
            lp, ins, packed = nucleus_logprobs(*args, top_p=batch.top_p[rows])
            for r, part in zip(rows.unique_consecutive().tolist(),
                               packed.split(where.sum(1)[where.any(1)].tolist())):
                self.nucleus[len(self.nucleus) - len(idx) + r] = part.cpu()
        else:
            packed = torch.cat([self.nucleus[idx[r]] for r in rows.unique_consecutive().tolist()])
            lp, ins, _ = nucleus_logprobs(*args, packed=packed.to(logp.device))
        return logp.index_put((rows, cols), lp.to(logp.dtype)), inside.index_put((rows, cols), ins)

    def _setup_anchor(self) -> None:
        """The fixed anchor: config.anchor_path, else the champion's recorded anchor, else the
        champion itself (then its logprobs are the reference's)."""
        cfg_path = self.config.anchor_path
        recorded = load_metadata(self.champion_dir).get("anchor")
        path = Path(cfg_path) if cfg_path else Path(recorded) if recorded else None
        if path is not None and not path.exists():
            if cfg_path:
                raise FileNotFoundError(f"anchor_path {cfg_path} does not exist")
            path = None  # a recorded anchor that is not on this machine
        same = path is None or path.resolve() == self.champion_dir.resolve()
        self.anchor_dir = self.champion_dir if same else path
        self.logp_anchor = self.logp_ref if same else self._logprobs_of(self._frozen(path))
        self.counts["anchor_is_champion"] = int(same)

    # -- train ----------------------------------------------------------------------------
    def train(self) -> dict[str, float]:
        """Run ``config.steps`` steps; returns counts plus the last step's metrics."""
        mlflow = _active_mlflow()
        if mlflow is not None:
            mlflow.log_metrics({f"data/{k}": float(v) for k, v in self.counts.items()}, step=0)
        order: list[int] = []
        replay_order: list[int] = []
        n_replay = min(round(self.config.replay.share * self.config.batch_size),
                       self.config.batch_size - 1) if len(self.samples) > self.n_traffic else 0
        n_rows = self.config.batch_size - n_replay
        replay_gen = torch.Generator().manual_seed(self.config.seed + 104729)
        t0 = time.perf_counter()
        progress = Progress("training", total=self.config.steps, unit="step",
                            bar=False if self.rank else None)
        try:
            for step in range(self.config.steps):
                progress.update()
                if len(order) < n_rows:
                    order += torch.randperm(self.n_traffic, generator=self.gen).tolist()
                idx, order = order[:n_rows], order[n_rows:]
                if n_replay:  # a share of the batch: the champion's verified answers
                    while len(replay_order) < n_replay:
                        replay_order += [self.n_traffic + i for i in torch.randperm(
                            len(self.samples) - self.n_traffic, generator=replay_gen).tolist()]
                    idx, replay_order = idx + replay_order[:n_replay], replay_order[n_replay:]
                idx = idx[self.rank::self.world_size]  # data parallel: each rank its share
                metrics = self.train_step(idx, measure_mismatch=self._mismatch_due(step),
                                          step=step)
                if "retain_kl" in metrics:
                    self.retain_coef.update(metrics["retain_kl"])
                self.history.append(metrics)
                if mlflow is not None:
                    mlflow.log_metrics(metrics, step=step)
                if self._over_kl_budget(metrics):
                    break
        finally:
            progress.close()  # its heartbeat stops with the step, even a failed one
        summary = {**self.counts, **self.history[-1], "train_seconds": time.perf_counter() - t0,
                   "steps_done": len(self.history),
                   "kl_budget_stopped": float(len(self.history) < self.config.steps)}
        summary.update(self._final_kls())
        return {k: float(v) for k, v in summary.items()}

    def _final_kls(self) -> dict[str, float]:
        """Churn and collateral of the finished update: the KL to the champion on traffic
        (``kl_theta_ref_k3_final``, first 64 sampled rows) and on the retain set
        (``retain_kl_final``, ``retain_kl_k3_final``: first ``retain.eval_prompts`` prompts,
        seed fixed); measured after the last step, unlike the per-step metrics."""
        self.policy.eval()
        try:
            out = {"kl_theta_ref_k3_final": self.traffic_kl_now()}
            retain = self.retain_kl_now(self.config.retain.eval_prompts, seed=self.config.seed)
            out.update({f"{k}_final": v for k, v in retain.items()})
        finally:
            self.policy.train()
        return out

    def _over_kl_budget(self, metrics: dict[str, float]) -> bool:
        """Whether the KL to the champion measured on this step's batch (k3, nats per token, the
        policy as it entered the step) passed ``kl_budget``: the update stops before the next."""
        budget = self.config.kl_budget
        kl = metrics.get("kl_theta_ref_k3")
        if budget is None or kl is None or kl <= budget:
            return False
        log.info("training: KL to the champion %.4f > budget %.4f after %d of %d steps: stopping",
                 kl, budget, len(self.history), self.config.steps)
        return True

    def _mismatch_due(self, step: int) -> bool:
        every = self.config.mismatch_every
        return every > 0 and step % every == 0

    def train_step(self, idx: list[int], *, measure_mismatch: bool = False,
                   step: int = 0) -> dict[str, float]:
        cfg, spec = self.config, self.plug.moe_spec
        samples: list[Sample] = [self.samples[i] for i in idx]
        batch = self._collate(samples)
        cpu_batch, dev = batch, self.device
        top_p = any(self.nucleus[i] is not None for i in idx)
        batch = batch.to(dev)
        logp_ref = self._ref_batch(idx, cpu_batch, self.logp_ref).to(dev)
        logp_anchor = self._ref_batch(idx, cpu_batch, self.logp_anchor).to(dev)
        with autocast(dev, cfg.precision):
            logp, out = policy_logprobs(self.plug, batch, replay=cfg.router_replay,
                                        replay_min_ratio=cfg.replay_min_ratio,
                                        return_hidden=top_p or cfg.baseline in ("value_head",
                                                                                "auto"),
                                        prefix=self._prefix_batch(idx, batch.tokens.shape[1]))
        inside = batch.resp_mask
        if top_p:  # pi_theta renormalised over the champion's nucleus
            logp, inside = self._truncated(self.plug, batch, out.hidden, logp.float(), idx)
            inside = inside & batch.resp_mask
        adv, base_metrics = self._advantages(idx, cpu_batch, out.hidden)
        adv = adv.to(dev)
        pg_mask = batch.resp_mask & inside & ~batch.greedy.unsqueeze(1)
        if cfg.drop_zero_variance_groups:
            pg_mask &= ~self.zero_var[idx].to(dev).unsqueeze(1)
        loss, metrics = self._objective(logp, batch, adv, logp_ref, pg_mask, logp_anchor)
        metrics.update(base_metrics)
        loss = loss + self._extra_terms(logp, batch, logp_ref, logp_anchor, inside, metrics)
        metrics["greedy_rows"] = float(rl.dist_sum(batch.greedy.sum()))
        metrics["replay_rows"] = float(sum(i >= self.n_traffic for i in idx))
        retain, retain_metrics = self._retain_term(step)
        if retain is not None:
            loss = loss + retain
            metrics.update(retain_metrics)
        grad_norm = self._backward_step(loss + out.aux_loss)
        if out.router_probs:  # DeepSpeed MoE layers do not expose their routing
            capacity = getattr(getattr(self.policy, "config", None), "capacity_factor", 1.25)
            metrics.update(moe_health(out.routed_experts, batch.pad_mask, spec.n_experts,
                                      capacity, out.z_loss, out.lb_loss))
        metrics.update(loss=float(loss.detach()), aux_loss=float(out.aux_loss.detach()),
                       grad_norm=float(grad_norm),
                       reward_mean=float(batch.rewards.mean()), adv_mean=float(adv.mean()),
                       adv_abs_mean=float(adv.abs().mean()),
                       replay_replaced=int(out.replay_replaced),
                       response_tokens_mean=float(batch.resp_mask.sum(1).float().mean()))
        metrics["mismatch_kl_replay"] = float(rl.masked_mean((batch.logp_b - logp).detach(),
                                                             batch.resp_mask & inside))
        if measure_mismatch:
            metrics["mismatch_kl_no_replay"] = self._mismatch_without_replay(batch)
        return metrics

    def _extra_terms(self, logp: Tensor, batch: Batch, logp_ref: Tensor, logp_anchor: Tensor,
                     inside: Tensor, metrics: dict[str, float]) -> Tensor:
        """The greedy rows' imitation term and the NLL anchor (``TrainerConfig.greedy``,
        ``nll_coef``), each its own token mean; 0 when off."""
        cfg = self.config
        extra = torch.zeros((), device=logp.device)
        if cfg.greedy.loss == "filtered":
            greedy_mask = batch.resp_mask & inside & batch.greedy.unsqueeze(1)
            imitate = batch.greedy & (batch.rewards > cfg.greedy.min_reward)
            g = rl.greedy_imitation_loss(
                logp, logp_ref, imitate, greedy_mask, eps_low=cfg.objective.clip_eps_low,
                eps_high=cfg.objective.clip_eps_high, kl_coef=cfg.kl_coef,
                logp_anchor=logp_anchor, anchor_kl_coef=cfg.anchor_kl_coef,
                row_weight=batch.weights)
            extra = extra + cfg.greedy.coef * g
            metrics["greedy_loss"] = float(g.detach())
        if cfg.nll_coef > 0:
            rewarded = ~batch.greedy & (batch.rewards > cfg.nll_min_reward)
            nll = rl.nll_anchor_loss(logp, batch.resp_mask & inside, rewarded)
            extra = extra + cfg.nll_coef * nll
            metrics["nll_anchor"] = float(nll.detach())
        return extra

    def _collate(self, samples: list[Sample]) -> Batch:
        spec = self.plug.moe_spec
        return collate(samples, n_layers=spec.n_moe_layers, top_k=spec.top_k,
                       pad_id=self.plug.tokenizer_info.pad_id)

    def _ref_batch(self, idx: list[int], batch: Batch, per_sample: list[Tensor]) -> Tensor:
        ref = torch.zeros_like(batch.logp_b)
        for row, i in enumerate(idx):
            ref[row][batch.resp_mask[row]] = per_sample[i]
        return ref

    def _advantages(self, idx: list[int], batch: Batch,
                    hidden: Tensor | None) -> tuple[Tensor, dict[str, float]]:
        """A = R - b (see ``TrainerConfig.baseline``); greedy rows' advantages are unused."""
        sampled = ~batch.greedy
        # collective under data parallelism: every rank calls it, even with no sampled row
        running = self.baseline.baseline([k for k, g in zip(batch.kinds, sampled.tolist()) if g],
                                         batch.rewards[sampled])
        b = torch.zeros_like(batch.rewards)
        b[sampled] = running
        metrics: dict[str, float] = {}
        use_group = self.use_group[idx]
        if self._wants_value_head(use_group, sampled) and hidden is not None:
            value_b, metrics = self._value_baseline(batch, hidden, b, sampled)
            b = torch.where(use_group, b, value_b)
        b = torch.where(use_group, self.group_b[idx], b)
        adv = batch.rewards - b
        adv = rl.normalize_std(adv) if self.config.adv_std_norm else adv
        if self.config.neg_adv_scale != 1.0:
            adv = rl.scale_negatives(adv, self.config.neg_adv_scale)
        return adv, metrics

    def _wants_value_head(self, use_group: Tensor, sampled: Tensor) -> bool:
        """Decided on counts summed over ranks, so every rank takes part in the head's fit."""
        mode = self.config.baseline
        if mode not in ("value_head", "auto"):
            return False
        need = sampled if mode == "value_head" else ~use_group & sampled
        return float(rl.dist_sum(need.sum().float())) > 0

    def _value_baseline(self, batch: Batch, hidden: Tensor, running: Tensor,
                        sampled: Tensor) -> tuple[Tensor, dict[str, float]]:
        """b = running kind mean + V(prompt), then V regressed on R - running (sampled rows)."""
        feats = prompt_features(hidden.detach().float().cpu(), batch.prompt_mask)
        vh = self.config.value_head
        if self.value is None:
            self.value = (ValueBaseline(feats.shape[1], hidden=vh.hidden, lr=vh.lr,
                                        steps=vh.steps, seed=self.config.seed) if vh.folds == 1
                          else CrossFitValueBaseline(feats.shape[1], folds=vh.folds,
                                                     hidden=vh.hidden, lr=vh.lr, steps=vh.steps,
                                                     seed=self.config.seed))
        if vh.folds == 1:
            b = running + self.value.predict(feats)
            loss = self.value.fit(feats, batch.rewards - running, weight=sampled.float())
        else:
            fold = self.value.folds_of(batch.groups)
            b = running + self.value.predict(feats, fold)
            loss = self.value.fit(feats, batch.rewards - running, fold, weight=sampled.float())
        return b, {"value_loss": loss}

    def _objective(self, logp: Tensor, batch: Batch, adv: Tensor, logp_ref: Tensor,
                   mask: Tensor, logp_anchor: Tensor) -> tuple[Tensor, dict[str, float]]:
        cfg, obj = self.config, self.config.objective
        # The proximal policy: the champion this update starts from (= the reference), or the
        # policy of this step (config.proximal).
        logp_prox = logp_ref if cfg.proximal == "champion" else logp.detach()
        logp_b = batch.logp_b if cfg.off_policy_correction else logp_ref
        common = dict(logp_ref=logp_ref, kl_coef=cfg.kl_coef, row_weight=batch.weights,
                      is_cap=cfg.is_cap, eps_low=obj.clip_eps_low, eps_high=obj.clip_eps_high,
                      logp_prox=logp_prox, dual_clip_c=cfg.dual_clip_c, logp_anchor=logp_anchor,
                      anchor_kl_coef=cfg.anchor_kl_coef)
        if isinstance(obj, TokenClip):
            return rl.token_clip_loss(logp, logp_b, adv, mask, **common)
        if isinstance(obj, FilteredImitation):  # positives only: rewards, not advantages
            return rl.filtered_imitation_loss(logp, logp_b, batch.rewards.to(logp.device), mask,
                                              min_reward=obj.min_reward, **common)
        if isinstance(obj, Asymmetric):
            return rl.asymmetric_loss(logp, logp_b, adv, mask,
                                      negative_scale=obj.negative_scale, **common)
        if isinstance(obj, CISPO):
            return rl.cispo_loss(logp, logp_b, adv, mask, **common)
        if isinstance(obj, SequenceGSPO):
            return rl.gspo_loss(logp, logp_b, adv, mask, band_low=obj.band_low,
                                band_high=obj.band_high, **common)
        raise ValueError(f"unknown objective {obj!r}")

    @torch.no_grad()
    def _mismatch_without_replay(self, batch: Batch) -> float:
        with autocast(self.device, self.config.precision):
            logp, _ = policy_logprobs(self.plug, batch, replay=False, replay_min_ratio=0.0)
        return float(rl.masked_mean(batch.logp_b - logp, batch.resp_mask))

    # -- save / cleanup -------------------------------------------------------------------
    def save_checkpoint(self, directory: Path) -> Path:
        meta = {
            "parent": str(self.champion_dir), "parent_version": self.current_version,
            "anchor": str(self.anchor_dir.resolve()),
            "trainer_config": self.config.model_dump(mode="json"), "counts": self.counts,
            "steps": len(self.history),
        }
        if self.ds is not None:  # gather experts (every rank takes part), rank 0 writes
            model = MoETransformer(self.policy.config)
            model.load_state_dict(self.ds.state_dict())
            path = (save_checkpoint(model, Path(directory), metadata=meta) if self.rank == 0
                    else Path(directory))
            torch.distributed.barrier()  # ranks leave together, not while rank 0 still writes
            return path
        if self.rank != 0:
            return Path(directory)
        if has_lora(self.policy):  # the adapters go into the weights: a plain checkpoint
            meta["lora_merged"] = merge_lora(self.policy)
        return self.plug.save(Path(directory), metadata=meta)  # the policy's own format

    def cleanup(self) -> None:
        """Drop the run's tensors; a DeepSpeed engine is closed (see DeepSpeedTrainer.close)."""
        ds = self.__dict__.pop("ds", None)
        if ds is not None:
            ds.close()
        for name in ("policy", "reference", "plug", "ref_plug", "opt", "samples", "logp_ref",
                     "logp_anchor", "value", "nucleus", "inside", "retain_samples",
                     "retain_pool", "prefix"):
            self.__dict__.pop(name, None)


def _sample_key(s: Sample) -> tuple:
    """Everything about a sample that its reference forward depends on."""
    return (tuple(s.prompt_ids), tuple(s.response_ids), str(s.routes), str(s.prompt_routes),
            s.temperature, s.top_p)


def _active_mlflow():  # -> the mlflow module when a run is active, else None
    try:
        import mlflow
    except ImportError:  # a machine without it (the GPU check's image): no run can be active
        return None

    return mlflow if mlflow.active_run() is not None else None


TRAIN_ROWS = "train_rows.parquet"
"""The rows a checkpoint was trained on, saved beside its weights by :func:`run_training`: with
its metadata (parent, parent version, trainer config) they train it again from its parent, the
same weights on the same kind of machine and thread count."""


def run_training(champion_dir: Path, rows: pa.Table, config: TrainerConfig, out_dir: Path, *,
                 current_version: int | None = None,
                 ref_cache: dict | None = None) -> dict[str, float]:
    """setup -> train -> save_checkpoint(out_dir) (the rows beside it, :data:`TRAIN_ROWS`) ->
    cleanup; returns the train metrics. ``ref_cache``: see :class:`RLRecipe`."""
    import pyarrow.parquet as pq

    recipe = RLRecipe(champion_dir, rows, config, current_version=current_version,
                      ref_cache=ref_cache)
    try:
        recipe.setup()
        metrics = recipe.train()
        recipe.save_checkpoint(out_dir)
        if recipe.rank == 0:
            pq.write_table(rows, Path(out_dir) / TRAIN_ROWS)
    finally:
        recipe.cleanup()
    return metrics
