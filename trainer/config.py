"""Typed configuration of the RL trainer (no torch, DeepSpeed or Ray imported here).

``TrainerConfig`` composes the objective (tagged union on ``type``: token-level clipped ratio or
sequence-level GSPO) and the backend (plain torch or DeepSpeed). Components in trainer/ take
plain arguments; only the recipe reads this object. Left out: the model's shape (``MoEConfig`` in
policy/toy/model.py, saved with every checkpoint) and anything about where rows come from.
"""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class TokenClip(_Strict):
    """PPO-style clipped ratio per token against the logged behaviour logprobs; truncated IS."""

    type: Literal["token_clip"] = "token_clip"
    clip_eps_low: float = Field(0.2, gt=0.0, lt=1.0, description="Lower clip: ratio >= 1 - eps.")
    clip_eps_high: float = Field(0.28, gt=0.0, le=10.0, description="Upper clip: ratio <= 1 + eps.")


class SequenceGSPO(_Strict):
    """GSPO: one ratio per sequence (geometric mean of token ratios), clipped, band-masked."""

    type: Literal["sequence_gspo"] = "sequence_gspo"
    clip_eps_low: float = Field(3e-3, gt=0.0, lt=1.0, description="Lower clip of the seq ratio.")
    clip_eps_high: float = Field(4e-3, gt=0.0, le=10.0, description="Upper clip of the seq ratio.")
    band_low: float = Field(0.5, gt=0.0, lt=1.0, description="Sequences with ratio below: masked.")
    band_high: float = Field(2.0, gt=1.0, description="Sequences with ratio above: masked.")


Objective = Annotated[TokenClip | SequenceGSPO, Field(discriminator="type")]


class TorchBackend(_Strict):
    """Single-process plain torch (the CPU toy path)."""

    type: Literal["torch"] = "torch"


class DeepSpeedBackend(_Strict):
    """``deepspeed.initialize`` with ZeRO and DeepSpeed MoE layers (expert parallelism)."""

    type: Literal["deepspeed"] = "deepspeed"
    zero_stage: Literal[0, 1, 2] = Field(1, description="ZeRO stage (optimizer/grad sharding).")
    ep_size: int = Field(1, ge=1, description="Expert-parallel group size; divides the world size.")
    bf16: bool = Field(False, description="bf16 mixed precision (GPU path); fp32 on CPU.")


Backend = Annotated[TorchBackend | DeepSpeedBackend, Field(discriminator="type")]


class TrainerConfig(_Strict):
    """One off-policy RL update of the champion on logged reward rows."""

    lr: float = Field(
        1e-4, gt=0.0, le=1.0,
        description="AdamW learning rate (constant). On the toy fixture 1e-4 x 120 steps (about "
        "one pass over 8,000 logged rows) raises the held-out greedy pass rate "
        "(bench/learning.py); 2e-4 and above lower it.",
    )
    steps: int = Field(20, ge=1, le=100_000, description="Optimizer steps.")
    batch_size: int = Field(64, ge=1, le=65_536, description="Rows per optimizer step.")
    seed: int = Field(0, ge=0, description="Seeds batch order and torch.")
    objective: Objective = Field(default_factory=TokenClip, description="Policy-loss objective.")
    is_cap: float = Field(
        2.0, ge=1.0, description="C: importance weights pi_theta/pi_behaviour truncated at C."
    )
    kl_coef: float = Field(
        0.02, ge=0.0, description="beta: weight of the k1 KL penalty to the reference (champion)."
    )
    baseline: Literal["auto", "group_mean", "kind_running_mean"] = Field(
        "auto", description="auto: group mean where a prompt has >= 2 samples, else the running "
        "mean of the task kind."
    )
    baseline_momentum: float = Field(
        0.9, ge=0.0, lt=1.0, description="EMA momentum of the per-kind running mean."
    )
    adv_std_norm: bool = Field(False, description="Divide advantages by their std (off: Dr. GRPO).")
    max_staleness: int = Field(
        4, ge=0, description="Rows whose behaviour version is more than this many checkpoint "
        "versions behind current_version are dropped or down-weighted."
    )
    staleness_mode: Literal["drop", "downweight"] = Field(
        "drop", description="What happens to rows beyond max_staleness."
    )
    staleness_decay: float = Field(
        0.5, gt=0.0, le=1.0, description="downweight: weight = decay ** (versions past the limit)."
    )
    off_policy_correction: bool = Field(
        True, description="Weight each token by pi_prox / pi_behaviour (truncated at is_cap) "
        "using the logged logprobs. Off: the logged rows are treated as if the champion had "
        "sampled them (an ablation; wrong for stale rows)."
    )
    router_replay: bool = Field(True, description="Force the logged routing in the forward pass.")
    replay_min_ratio: float = Field(
        0.1, ge=0.0, le=1.0, description="A replayed expert whose gate prob is below this times "
        "the router's k-th best prob is replaced by the router's choice."
    )
    grad_clip: float = Field(1.0, gt=0.0, description="Max global gradient norm.")
    weight_decay: float = Field(0.0, ge=0.0, le=1.0, description="AdamW weight decay.")
    mismatch_every: int = Field(
        10, ge=0, description="Every this many steps also measure the train-serve mismatch "
        "without replay (0: never)."
    )
    backend: Backend = Field(default_factory=TorchBackend, description="Training backend.")
    device: Literal["auto", "cpu", "cuda"] = Field(
        "auto", description="Where the policy, the reference and every batch live: auto = cuda "
        "when available, else cpu; cuda without a GPU is an error at setup."
    )
    precision: Literal["fp32", "bf16"] = Field(
        "fp32", description="bf16: forward passes under bf16 autocast (weights and optimizer "
        "state stay fp32; log-softmax in fp32). The GPU setting; fp32 is exact on CPU."
    )
    expert_impl: Literal["auto", "grouped", "loop"] = Field(
        "auto", description="MoE expert compute: grouped GEMM (one kernel per weight, no host "
        "sync), per-expert loop, or auto = grouped for bf16 on cuda, else the loop (same outputs)."
    )

    @model_validator(mode="after")
    def _check(self) -> TrainerConfig:
        eps_high = self.objective.clip_eps_high
        if self.objective.type == "token_clip" and self.is_cap < 1.0 + eps_high:
            raise ValueError(f"is_cap={self.is_cap} must be >= 1 + clip_eps_high={eps_high}")
        return self
