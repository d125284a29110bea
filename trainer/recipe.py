"""The RL recipe: one off-policy update of the champion on logged reward rows.

``RLRecipe(champion_dir, rows, config, current_version=...)`` with ``setup()`` (load the champion
as policy and as frozen reference, turn rows into samples, apply the staleness rule, precompute
reference logprobs), ``train()`` (``config.steps`` optimizer steps; per-step metrics to MLflow
when a run is active), ``save_checkpoint(dir)`` and ``cleanup()``. :func:`run_training` does all
four.

Off-policy by construction: the trust region is around the champion the update starts from, and
the logged behaviour logprobs give each token its truncated importance weight pi_champion /
pi_behaviour (rows served by an older checkpoint get weights != 1); the logged routing is
replayed (``router_replay``); the temperature each row was sampled at is applied to the policy's
logits. Broken or malformed completions stay in the data as negative examples.

Devices: ``config.device`` holds the policy, the reference and each batch (collated on the CPU,
then moved); ``config.precision == "bf16"`` runs every forward pass under bf16 autocast. Reference
logprobs are kept on the CPU (one copy per sample) and moved with their batch.

Left out: the DeepSpeed/Ray backends (trainer/ds_backend.py, trainer/ray_backend.py), reading
Parquet and registering the result in MLflow (the cycle does that).
"""

from __future__ import annotations

import copy
import time
from pathlib import Path

import pyarrow as pa
import torch
from torch import Tensor

from policy.toy.checkpoint import load_checkpoint, load_metadata, save_checkpoint
from policy.toy.model import MoETransformer
from runtime.progress import Progress
from trainer import rl
from trainer.config import SequenceGSPO, TokenClip, TrainerConfig
from trainer.data import Batch, Sample, collate, rows_to_samples
from trainer.health import moe_health


def resolve_device(name: str) -> torch.device:
    """``auto`` -> cuda when available, else cpu; ``cuda`` without a GPU is a clear error."""
    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if name == "cuda" and not torch.cuda.is_available():
        raise ValueError("TrainerConfig.device='cuda' but torch sees no CUDA device")
    return torch.device(name)


def autocast(device: torch.device, precision: str):  # -> a context manager
    """bf16 autocast on ``device`` when ``precision == "bf16"``, else a no-op context."""
    return torch.autocast(device.type, dtype=torch.bfloat16, enabled=precision == "bf16")


def policy_logprobs(model: MoETransformer, batch: Batch, *, replay: bool,
                    replay_min_ratio: float) -> tuple[Tensor, object]:
    """log pi(targets) (B, T) at each row's sampling temperature, and the model output.
    Batches are right-padded (trainer/data.py), so attention needs no explicit mask."""
    out = model(batch.tokens, pad_mask=batch.pad_mask, right_padded=True,
                replay_experts=batch.replay if replay else None, replay_min_ratio=replay_min_ratio)
    logits = out.logits.float() / batch.temperature.view(-1, 1, 1)
    logp = torch.log_softmax(logits, -1).gather(-1, batch.targets.unsqueeze(-1)).squeeze(-1)
    return logp, out


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
    """Off-policy RL on reward rows; see the module docstring."""

    def __init__(self, champion_dir: Path, rows: pa.Table, config: TrainerConfig, *,
                 current_version: int | None = None):
        self.champion_dir = Path(champion_dir)
        self.rows = rows
        self.config = config
        self.current_version = current_version
        self.counts: dict[str, float] = {}
        self.history: list[dict[str, float]] = []

    # -- setup ----------------------------------------------------------------------------
    def setup(self) -> None:
        torch.manual_seed(self.config.seed)
        self.device = resolve_device(self.config.device)
        self.policy = load_checkpoint(self.champion_dir).to(self.device)
        self.policy.set_expert_impl(self.config.expert_impl)
        self.policy.train()
        self.reference = copy.deepcopy(self.policy).eval().requires_grad_(False)
        self._setup_samples()
        self._setup_reference_logprobs()
        self._setup_optimizer()
        self.baseline = rl.RunningBaseline(self.config.baseline_momentum)
        self.gen = torch.Generator().manual_seed(self.config.seed)

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
        self.opt = torch.optim.AdamW(self.policy.parameters(), lr=cfg.lr,
                                     weight_decay=cfg.weight_decay)

    def _all_reduce_grads(self) -> None:
        """Average gradients over data-parallel ranks (plain torch backend under Ray/torchrun)."""
        for p in self.policy.parameters():
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
        c = self.policy.config
        samples, truncated = rows_to_samples(self.rows, vocab_size=c.vocab_size,
                                             max_seq_len=c.max_seq_len)
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
        self.samples = [s for s in samples if s.weight > 0 and s.response_ids]
        if not self.samples:
            raise ValueError(f"no trainable rows: {len(samples)} rows, {stale} beyond "
                             f"max_staleness={cfg.max_staleness} of version {self.current_version}")
        self.counts = {
            "rows_total": len(samples), "rows_used": len(self.samples),
            "rows_stale": stale, "rows_stale_dropped": stale if cfg.staleness_mode == "drop" else 0,
            "rows_truncated": truncated,
            "rows_empty": sum(1 for s in samples if not s.response_ids),
            "rows_without_routing": sum(1 for s in self.samples if not s.routes),
            "reward_mean": sum(s.reward for s in self.samples) / len(self.samples),
        }
        self._setup_advantage_groups()

    def _setup_advantage_groups(self) -> None:
        rewards = torch.tensor([s.reward for s in self.samples])
        b, has = rl.group_baseline([s.group for s in self.samples], rewards)
        mode = self.config.baseline
        self.group_b = b
        self.use_group = has if mode == "auto" else torch.full_like(has, mode == "group_mean")
        self.counts["rows_group_baseline"] = int(self.use_group.sum())

    @torch.no_grad()
    def _setup_reference_logprobs(self) -> None:
        """log pi_ref per response token, under the same routing rule as the policy's forward."""
        c = self.policy.config
        self.logp_ref: list[Tensor] = []
        for start in range(0, len(self.samples), 128):
            chunk = self.samples[start:start + 128]
            batch = collate(chunk, n_layers=c.n_layers, top_k=c.top_k)
            with autocast(self.device, self.config.precision):
                logp, _ = policy_logprobs(self.reference, batch.to(self.device),
                                          replay=self.config.router_replay,
                                          replay_min_ratio=self.config.replay_min_ratio)
            logp = logp.cpu()
            for i in range(len(chunk)):
                self.logp_ref.append(logp[i][batch.resp_mask[i]].clone())

    # -- train ----------------------------------------------------------------------------
    def train(self) -> dict[str, float]:
        """Run ``config.steps`` steps; returns counts plus the last step's metrics."""
        mlflow = _active_mlflow()
        if mlflow is not None:
            mlflow.log_metrics({f"data/{k}": float(v) for k, v in self.counts.items()}, step=0)
        order: list[int] = []
        t0 = time.perf_counter()
        progress = Progress("training", total=self.config.steps, unit="step",
                            bar=False if self.rank else None)
        for step in range(self.config.steps):
            progress.update()
            if len(order) < self.config.batch_size:
                order += torch.randperm(len(self.samples), generator=self.gen).tolist()
            idx, order = order[: self.config.batch_size], order[self.config.batch_size:]
            idx = idx[self.rank::self.world_size]  # data parallel: each rank its share
            metrics = self.train_step(idx, measure_mismatch=self._mismatch_due(step))
            self.history.append(metrics)
            if mlflow is not None:
                mlflow.log_metrics(metrics, step=step)
        progress.close()
        summary = {**self.counts, **self.history[-1], "train_seconds": time.perf_counter() - t0}
        return {k: float(v) for k, v in summary.items()}

    def _mismatch_due(self, step: int) -> bool:
        every = self.config.mismatch_every
        return every > 0 and step % every == 0

    def train_step(self, idx: list[int], *, measure_mismatch: bool = False) -> dict[str, float]:
        cfg, mcfg = self.config, self.policy.config
        samples: list[Sample] = [self.samples[i] for i in idx]
        batch = collate(samples, n_layers=mcfg.n_layers, top_k=mcfg.top_k)
        logp_ref = self._ref_batch(idx, batch)
        adv = self._advantages(idx, batch)
        batch, logp_ref, adv = (batch.to(self.device), logp_ref.to(self.device),
                                adv.to(self.device))
        with autocast(self.device, cfg.precision):
            logp, out = policy_logprobs(self.policy, batch, replay=cfg.router_replay,
                                        replay_min_ratio=cfg.replay_min_ratio)
        loss, metrics = self._objective(logp, batch, adv, logp_ref)
        grad_norm = self._backward_step(loss + out.aux_loss)
        if out.router_probs:  # DeepSpeed MoE layers do not expose their routing
            metrics.update(moe_health(out.routed_experts, batch.pad_mask, mcfg.n_experts,
                                      mcfg.capacity_factor, out.z_loss, out.lb_loss))
        metrics.update(loss=float(loss.detach()), aux_loss=float(out.aux_loss.detach()),
                       grad_norm=float(grad_norm),
                       reward_mean=float(batch.rewards.mean()), adv_mean=float(adv.mean()),
                       adv_abs_mean=float(adv.abs().mean()),
                       replay_replaced=int(out.replay_replaced),
                       response_tokens_mean=float(batch.resp_mask.sum(1).float().mean()))
        metrics["mismatch_kl_replay"] = float(rl.masked_mean((batch.logp_b - logp).detach(),
                                                             batch.resp_mask))
        if measure_mismatch:
            metrics["mismatch_kl_no_replay"] = self._mismatch_without_replay(batch)
        return metrics

    def _ref_batch(self, idx: list[int], batch: Batch) -> Tensor:
        ref = torch.zeros_like(batch.logp_b)
        for row, i in enumerate(idx):
            ref[row][batch.resp_mask[row]] = self.logp_ref[i]
        return ref

    def _advantages(self, idx: list[int], batch: Batch) -> Tensor:
        """A = R - b: group mean where the prompt has >= 2 samples, else per-kind running mean."""
        running = self.baseline.baseline(batch.kinds, batch.rewards)
        use_group = self.use_group[idx]
        b = torch.where(use_group, self.group_b[idx], running)
        adv = batch.rewards - b
        return rl.normalize_std(adv) if self.config.adv_std_norm else adv

    def _objective(self, logp: Tensor, batch: Batch, adv: Tensor,
                   logp_ref: Tensor) -> tuple[Tensor, dict[str, float]]:
        cfg, obj = self.config, self.config.objective
        # The proximal policy is the champion this update starts from (= the reference).
        logp_b = batch.logp_b if cfg.off_policy_correction else logp_ref
        common = dict(logp_ref=logp_ref, kl_coef=cfg.kl_coef, row_weight=batch.weights,
                      is_cap=cfg.is_cap, eps_low=obj.clip_eps_low, eps_high=obj.clip_eps_high,
                      logp_prox=logp_ref)
        if isinstance(obj, TokenClip):
            return rl.token_clip_loss(logp, logp_b, adv, batch.resp_mask, **common)
        if isinstance(obj, SequenceGSPO):
            return rl.gspo_loss(logp, logp_b, adv, batch.resp_mask, band_low=obj.band_low,
                                band_high=obj.band_high, **common)
        raise ValueError(f"unknown objective {obj!r}")

    @torch.no_grad()
    def _mismatch_without_replay(self, batch: Batch) -> float:
        with autocast(self.device, self.config.precision):
            logp, _ = policy_logprobs(self.policy, batch, replay=False, replay_min_ratio=0.0)
        return float(rl.masked_mean(batch.logp_b - logp, batch.resp_mask))

    # -- save / cleanup -------------------------------------------------------------------
    def save_checkpoint(self, directory: Path) -> Path:
        meta = {
            "parent": str(self.champion_dir), "parent_version": self.current_version,
            "trainer_config": self.config.model_dump(mode="json"), "counts": self.counts,
            "steps": len(self.history),
        }
        model = self.policy
        if self.ds is not None:  # gather experts (every rank takes part), rank 0 writes
            model = MoETransformer(self.policy.config)
            model.load_state_dict(self.ds.state_dict())
        if self.rank != 0:
            return Path(directory)
        return save_checkpoint(model, Path(directory), metadata=meta)

    def cleanup(self) -> None:
        for name in ("policy", "reference", "opt", "samples", "logp_ref"):
            self.__dict__.pop(name, None)


def _active_mlflow():  # -> the mlflow module when a run is active, else None
    import mlflow

    return mlflow if mlflow.active_run() is not None else None


def run_training(champion_dir: Path, rows: pa.Table, config: TrainerConfig, out_dir: Path, *,
                 current_version: int | None = None) -> dict[str, float]:
    """setup -> train -> save_checkpoint(out_dir) -> cleanup; returns the train metrics."""
    recipe = RLRecipe(champion_dir, rows, config, current_version=current_version)
    try:
        recipe.setup()
        metrics = recipe.train()
        recipe.save_checkpoint(out_dir)
    finally:
        recipe.cleanup()
    return metrics
