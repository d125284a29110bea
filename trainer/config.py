"""Typed configuration of the RL trainer (no torch, DeepSpeed or Ray imported here).

``TrainerConfig`` composes the objective (tagged union on ``type``: token-level clipped ratio,
sequence-level GSPO, CISPO, filtered imitation of rewarded rows, or token_clip with negatives
scaled down) and the backend (plain torch or DeepSpeed). Components in trainer/ take
plain arguments; only the recipe reads this object. Left out: the model's shape (``MoEConfig`` in
policy/toy/model.py, saved with every checkpoint) and anything about where rows come from.
"""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class TokenClip(_Strict):
    """PPO-style clipped ratio per token; truncated IS. With ``proximal="champion"`` the bound
    holds over the whole update: once pi_theta / pi_champion of a token leaves [1 - eps_low,
    1 + eps_high] in the direction its advantage pushes, that token's gradient is exactly 0 (the
    clipped branch is constant), so no step moves it further that way."""

    type: Literal["token_clip"] = "token_clip"
    clip_eps_low: float = Field(0.2, gt=0.0, lt=1.0, description="Lower clip: ratio >= 1 - eps.")
    clip_eps_high: float = Field(0.28, gt=0.0, le=10.0, description="Upper clip: ratio <= 1 + eps.")


class SequenceGSPO(_Strict):
    """GSPO: one ratio per sequence (geometric mean of token ratios), clipped, band-masked; the
    loss is a mean over sequences (each sequence weighs the same at equal advantage)."""

    type: Literal["sequence_gspo"] = "sequence_gspo"
    clip_eps_low: float = Field(
        3e-4, gt=0.0, lt=1.0, description="Lower clip of the seq ratio (GSPO paper: 3e-4).")
    clip_eps_high: float = Field(
        4e-4, gt=0.0, le=10.0, description="Upper clip of the seq ratio (GSPO paper: 4e-4).")
    band_low: float = Field(
        0.5, gt=0.0, lt=1.0, description="Sequences whose behaviour ratio pi_prox / pi_b "
        "(geometric mean over tokens) is below: masked.")
    band_high: float = Field(
        2.0, gt=1.0, description="Sequences whose behaviour ratio pi_prox / pi_b is above: masked.")


class CISPO(_Strict):
    """CISPO (MiniMax-M1, 2025): the importance weight is clipped and detached, never the
    gradient: surrogate_t = sg(clip(rho_t, 1 - eps_low, 1 + eps_high)) * A_t * log pi_theta(y_t),
    so a token past the clip still gets its gradient, of size at most (1 + eps_high) * |A_t| per
    step. That bounds each step's push, not where the update ends: nothing stops a token's
    probability from rising past (1 + eps_high) x the champion's over many steps. Only the KL
    penalty (``kl_coef``) and ``kl_budget`` bound the update. Token mean."""

    type: Literal["cispo"] = "cispo"
    clip_eps_low: float = Field(
        0.99, gt=0.0, lt=1.0, description="Lower clip of the weight (the paper: no lower bound, "
        "a large eps_low).")
    clip_eps_high: float = Field(
        0.28, gt=0.0, le=10.0, description="Upper clip of the weight: weight <= 1 + eps_high.")


class FilteredImitation(_Strict):
    """Positives only: imitation of the sampled rows rewarded above min_reward, in the trust region.

    Filtered imitation of the policy's own rewarded samples (RAFT, ReST-EM, STaR) on logged rows:
    the token-mean NLL of the sampled rows whose reward is > min_reward, each token
    importance-weighted by w_t * rho_t, where w_t = min(pi_champion / pi_behaviour, is_cap)
    (detached) and rho_t = pi_theta / pi_champion; once rho_t > 1 + clip_eps_high that token
    gets no gradient (PPO's clip for a positive advantage: token_clip's surrogate with advantage
    1), so with ``proximal="champion"`` no token's probability is pushed past 1 + clip_eps_high
    times the champion's over the whole update. Rows at or below min_reward give exactly zero
    gradient and are not in the token mean (no negative term); the KL penalties (kl_coef,
    anchor_kl_coef) act on the imitated tokens only. Needs no per-prompt groups and no baseline:
    a row enters on its own reward, so one answer per request is enough. A span with no sampled
    row above min_reward (and no greedy row to imitate) has no trainable rows."""

    type: Literal["filtered_imitation"] = "filtered_imitation"
    min_reward: float = Field(
        0.0, ge=-100.0, le=100.0, description="A sampled row is imitated when its reward is > "
        "this.")
    clip_eps_low: float = Field(
        0.2, gt=0.0, lt=1.0, description="Lower clip, ratio >= 1 - eps: acts only where a KL "
        "penalty makes a token's advantage negative, and in the greedy rows' term.")
    clip_eps_high: float = Field(
        0.28, gt=0.0, le=10.0, description="The trust region: a token stops being pushed once "
        "pi_theta / pi_champion > 1 + eps (token_clip's default).")


class Asymmetric(_Strict):
    """token_clip with the advantages of negative rows scaled down by negative_scale.

    The advantages of rows below their baseline (A_i = R_i - b_i < 0) are multiplied by
    negative_scale before the KL penalties fold in: positives push at full strength, negatives
    at a quarter or less. Needs no per-prompt groups: b_i is the trainer's baseline
    (``TrainerConfig.baseline``; under ``auto`` a row without a group of >= 2 answers to its
    prompt gets the kind's running mean plus the value head's prediction from its prompt).
    Replaces ``neg_adv_scale``, which must then stay 1."""

    type: Literal["asymmetric"] = "asymmetric"
    negative_scale: float = Field(
        0.25, ge=0.1, le=0.25, description="Factor on negative advantages (A_i < 0).")
    clip_eps_low: float = Field(0.2, gt=0.0, lt=1.0, description="Lower clip: ratio >= 1 - eps.")
    clip_eps_high: float = Field(0.28, gt=0.0, le=10.0, description="Upper clip: ratio <= 1 + "
                                 "eps.")


Objective = Annotated[TokenClip | SequenceGSPO | CISPO | FilteredImitation | Asymmetric,
                      Field(discriminator="type")]


class GreedyRows(_Strict):
    """How rows served at temperature 0 train. They carry no behaviour probability (the policy
    that served them was deterministic), so they never enter the policy-gradient term; they feed
    a filtered imitation loss instead: the clipped surrogate with the champion as behaviour and
    proximal policy (importance weight 1), advantage 1 on rows rewarded above ``min_reward`` and
    0 elsewhere, with the same KL penalties to the champion and the anchor (trainer/rl.py,
    ``greedy_imitation_loss``)."""

    loss: Literal["filtered", "off"] = Field(
        "filtered", description="filtered: imitation of the greedy rows rewarded above "
        "min_reward, inside the champion's trust region. off: greedy rows are counted, not "
        "trained on (a span of greedy rows only then has no trainable rows).")
    min_reward: float = Field(
        0.0, description="A greedy row is imitated when its reward is > this.")
    coef: float = Field(1.0, gt=0.0, le=100.0, description="Weight of the greedy term next to the "
                        "policy-gradient term (each is its own token mean).")


class RetainAnchor(_Strict):
    """An anchor where the damage happens: prompts outside the trained families (a JSONL task
    file, e.g. the solved families' retain side; never an evaluation pool). Each step the policy
    samples ``prompts`` of them (``max_new_tokens`` each, no gradient) and the loss adds the
    per-token reverse KL to the champion on those samples, weighted by ``kl_coef``: the term is
    k2 = 1/2 (log pi_theta - log pi_champion)^2 per token (token mean), whose gradient on the
    policy's own samples, (log pi_theta - log pi_champion) * grad log pi_theta, is the per-token
    score-function gradient of KL(pi_theta || pi_champion). Logged per step: ``retain_kl`` (k1,
    the unbiased per-token estimate of that KL on the samples), ``retain_kl_k3`` and the
    coefficient in force (``retain_kl_coef``); the summary adds ``retain_kl_final``, measured
    after the update on the first ``eval_prompts`` prompts with a fixed seed."""

    path: str | None = Field(
        None, description="JSONL task file (fields: prompt) of the retain set. None: off.")
    kl_coef: float = Field(
        1.0, ge=0.0, le=1000.0, description="Weight of the retain KL term (0: the retain KL is "
        "measured and logged, not trained on). The starting value when kl_target adapts it.")
    kl_target: float | None = Field(
        0.02, gt=0.0, description="Budget of the retain KL, nats per token: after a step whose "
        "retain_kl is above it the coefficient doubles, below half of it the coefficient halves "
        "(never below kl_coef, never above 1000 x kl_coef). None: kl_coef stays fixed.")
    prompts: int = Field(4, ge=1, le=256, description="Retain prompts sampled per step.")
    draw: Literal["uniform", "by_group", "by_kl"] = Field(
        "uniform", description="Which prompts a step samples: uniform over the file's lines; "
        "by_group: each value of group_field as often as any other; by_kl: every group once, "
        "then mostly the groups whose measured KL to the champion is highest "
        "(trainer.retain.RetainDraw).")
    group_field: str = Field("family", min_length=1, description="The JSONL field that groups "
                             "retain lines for draw = by_group or by_kl (a line without it: its "
                             "own group).")
    explore: float = Field(0.25, ge=0.0, le=1.0, description="draw = by_kl: the share of visits "
                           "that go to a group at random rather than by its measured KL.")
    max_new_tokens: int = Field(32, ge=1, le=1024, description="Tokens sampled per prompt.")
    temperature: float = Field(1.0, gt=0.0, le=2.0, description="Sampling temperature of the "
                               "retain samples (their log-probs are taken at it).")
    resample_every: int = Field(
        1, ge=0, le=100_000, description="The policy samples fresh retain completions every "
        "this many steps (1: every step, on-policy). 0: the champion samples them once at "
        "setup and every step reuses them (no generation inside the loop: the term is then an "
        "anchor on the champion's own samples rather than the reverse KL).")
    eval_prompts: int = Field(16, ge=0, le=1024, description="Prompts (the file's first) of "
                              "the final retain-KL measurement (0: none).")


class ReplaySet(_Strict):
    """Replay of the champion's own verified answers on prior-distribution prompts: at setup the
    champion answers up to ``prompts`` tasks of a JSONL file greedily, each answer is graded by
    the task's own grader (``tests``: the sandboxed asserts of tasks/jsonl_suite.py; ``cases``:
    the toy checker), and the passing ones become greedy rows with reward 1. A ``share`` of every
    batch is drawn from them; they train through the greedy imitation term inside the champion's
    trust region (``GreedyRows``: a token stops being pushed once pi_theta / pi_champion > 1 +
    clip_eps_high). Counted: ``replay_tasks``, ``replay_verified``; per step ``replay_rows``."""

    path: str | None = Field(None, description="JSONL task file of prior-distribution prompts "
                             "with their checks. None: off.")
    share: float = Field(0.25, ge=0.0, lt=1.0, description="Share of every batch drawn from "
                         "the verified answers (rounded; the rest are traffic rows).")
    prompts: int = Field(32, ge=1, le=4096, description="Tasks answered and graded at setup "
                         "(the file's first).")
    max_new_tokens: int = Field(64, ge=1, le=2048, description="Tokens per greedy answer.")
    timeout_s: float = Field(5.0, gt=0.0, le=120.0, description="Sandbox timeout per answer.")


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


class ValueHead(_Strict):
    """The prompt-conditioned baseline: a head on the policy's mean-pooled prompt hidden state."""

    hidden: int = Field(0, ge=0, le=4096, description="Hidden width of the MLP (0: linear).")
    lr: float = Field(1e-2, gt=0.0, le=1.0, description="Adam learning rate of the head.")
    steps: int = Field(4, ge=1, le=100, description="Regression steps per training batch.")
    folds: int = Field(
        1, ge=1, le=16, description="Cross-fitting: rows are split into this many folds by prompt "
        "(a hash of the prompt), one head per fold; a row's baseline comes from the head of its "
        "fold, which is fitted only on the other folds' rows, so no row's own reward (nor its "
        "prompt's) ever sets its baseline, in any pass. 1: one head, fitted on every row after "
        "predicting its batch (a row's reward enters its baseline from its second pass on).")


class Trainable(_Strict):
    """Which parameters an update trains (trainer/trainable.py)."""

    scope: Literal["all", "top_layers", "lora"] = Field(
        "all", description="lora: every weight frozen; low-rank adapters (trainer/lora.py) on "
        "the weights matching lora_targets train and are merged into the weights at save, so "
        "the checkpoint is a plain model. all: every parameter. top_layers: the last "
        "`top_layers` decoder "
        "layers (attention, norms, MLP or experts and router) and the final norm; embeddings and "
        "the output head frozen unless train_embeddings. The CPU regime for real models: on a "
        "random-init SmolLM2 shape the top 8 of 30 layers train 2.4x as many tokens per "
        "CPU-second as all of them, dense (172 vs 73) and upcycled to 4 experts (101 vs 42; "
        "bench/results/train_cpu.json, 2026-11-25).")
    top_layers: int = Field(8, ge=1, le=1024, description="N for scope top_layers.")
    train_embeddings: bool = Field(
        False, description="top_layers: also train the token/position embeddings and the output "
        "head (a tied head follows its embeddings).")
    lora_rank: int = Field(8, ge=1, le=1024, description="r of the LoRA adapters.")
    lora_alpha: float = Field(16.0, gt=0.0, le=4096.0, description="alpha: the adapters' "
                              "update is scaled by alpha / r.")
    lora_targets: tuple[str, ...] = Field(
        ("*self_attn.*_proj.weight", "*.mlp.experts.*", "*.mlp.gate.weight",
         "blocks.*.qkv.weight", "blocks.*.proj.weight", "blocks.*.ffn.w_in",
         "blocks.*.ffn.w_out", "blocks.*.ffn.router.weight"),
        description="fnmatch patterns of parameter names that get adapters: attention, experts "
        "and routers of HF MoE families (2-D and per-expert 3-D weights) and of the toy.")


class TrainerConfig(_Strict):
    """One off-policy RL update of the champion on logged reward rows."""

    lr: float = Field(
        1e-4, gt=0.0, le=1.0,
        description="AdamW learning rate (constant). Measured on the toy fixture (120 steps x 64 "
        "rows, about one pass over 8,000 logged rows; tuning sets only: held-out draw "
        "generate_tasks(300, 7, 'heldout') and the logged prompts, bench/results/"
        "learning_tuning.md): 1e-4 gave +0.033 / +0.023 held-out and +0.031 / +0.027 logged "
        "(seeds 0, 1); 2e-4 +0.047 held-out but +0.013 logged and longer answers.",
    )
    steps: int = Field(20, ge=1, le=100_000, description="Optimizer steps.")
    batch_size: int = Field(64, ge=1, le=65_536, description="Rows per optimizer step.")
    seed: int = Field(0, ge=0, description="Seeds batch order and torch.")
    shuffle_rewards: bool = Field(
        False, description="The placebo control: the reward column is permuted across the "
        "cycle's rows (seeded by the cycle) before training, so the update sees the traffic but "
        "not which answers users liked. A gate that promotes such candidates lets noise through; "
        "never on in production.")
    objective: Objective = Field(
        default_factory=TokenClip, description="Policy-loss objective. token_clip measured "
        "ahead of sequence_gspo on the logged prompts of the toy fixture (+0.031 / +0.027 vs "
        "+0.016 at the paper's clip and +0.027 / +0.010 at 3e-3/4e-3; learning_tuning.md).")
    proximal: Literal["champion", "current"] = Field(
        "champion", description="pi_prox, the centre of the clip. champion: the champion this "
        "update starts from, for every step (one trust region around it for the whole update: "
        "under token_clip a token's probability stops being pushed up once it is 1 + "
        "clip_eps_high times the champion's; cispo clips only the weight, so there it keeps "
        "being pushed and only kl_coef / kl_budget bound it). "
        "current: the policy at each step, detached (every batch gets one optimizer step, so "
        "the clip holds within the step and the KL penalties to the champion and the anchor are "
        "what bounds the update); the importance weight is then min(pi_theta / pi_b, C). Measured "
        "on the lazy champion's held-out draw: current is no better at lr 1e-4 (+0.033 vs "
        "+0.029) and falls apart at 2e-4 (-0.018 vs +0.037; learning_tuning.md).")
    is_cap: float = Field(
        2.0, ge=1.0, description="C: behaviour importance weights pi_prox/pi_behaviour truncated "
        "at C."
    )
    dual_clip_c: float = Field(
        3.0, gt=1.0, description="c of dual-clip PPO (Ye et al. 2020): for A < 0 the ratio "
        "pi_theta/pi_prox counts at most c. Separate from is_cap."
    )
    kl_coef: float = Field(
        0.02, ge=0.0, description="beta: weight of the k1 KL penalty to the trust-region "
        "reference (the previous champion, the one this update starts from)."
    )
    kl_budget: float | None = Field(
        None, gt=0.0, description="Early stop: once the KL to the champion measured on a step's "
        "batch (kl_theta_ref_k3, nats per token) passes this, the update ends after that step "
        "(summary: steps_done, kl_budget_stopped). None: always run `steps`.")
    anchor_kl_coef: float = Field(
        0.01, ge=0.0, description="Weight of the k1 KL penalty to the fixed anchor, which keeps "
        "many cycles from drifting."
    )
    anchor_path: str | None = Field(
        None, description="Checkpoint directory of the anchor. None: the anchor recorded in the "
        "champion's metadata (set by the first update, carried by every candidate), or the "
        "champion itself when it has none (it is then the first champion)."
    )
    baseline: Literal["auto", "loo_group", "group_mean", "value_head", "kind_running_mean"] = (
        Field("auto", description="auto: leave-one-out mean of the row's group (same prompt, "
              "same behaviour version) where it has >= 2 rows, else the value head. loo_group: "
              "leave-one-out where grouped, else the kind's running mean. group_mean: the "
              "group's mean including the row itself, everywhere. value_head: the value head "
              "everywhere. kind_running_mean: the kind's running mean everywhere. The value head "
              "predicts the residual over the kind's running mean."))
    value_head: ValueHead = Field(default_factory=ValueHead, description="The value head.")
    baseline_momentum: float = Field(
        0.9, ge=0.0, lt=1.0, description="EMA momentum of the per-kind running mean."
    )
    adv_std_norm: bool = Field(False, description="Divide advantages by their std (off: Dr. GRPO).")
    neg_adv_scale: float = Field(
        1.0, ge=0.0, le=1.0, description="Asymmetric advantages: negative advantages are "
        "multiplied by this (1: symmetric; 0: only rewarded-above-baseline rows push).")
    drop_zero_variance_groups: bool = Field(
        False, description="Leave rows whose natural group (>= 2 sampled rows, same prompt and "
        "behaviour version) has one reward for every row out of the token mean: their advantage "
        "is 0, so they only dilute the others' gradient.")
    nll_coef: float = Field(
        0.0, ge=0.0, le=100.0, description="Weight of an NLL anchor: the token-mean negative "
        "log-likelihood of the sampled rows rewarded above nll_min_reward, added to the loss.")
    nll_min_reward: float = Field(0.0, description="A sampled row enters the NLL anchor when its "
                                  "reward is > this.")
    trainable: Trainable = Field(default_factory=Trainable, description="Which parameters "
                                 "train.")
    greedy: GreedyRows = Field(default_factory=GreedyRows, description="Rows served at "
                               "temperature 0.")
    retain: RetainAnchor = Field(default_factory=RetainAnchor, description="The retain-set "
                                 "KL anchor (off without a path).")
    replay: ReplaySet = Field(default_factory=ReplaySet, description="Replay of the champion's "
                              "verified answers (off without a path).")
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
    frozen_prefix: bool = Field(
        True, description="Hugging Face policy with its first K decoder layers and embeddings "
        "frozen (scope top_layers): the reference's forward keeps the state entering layer K, "
        "and the policy's forward passes resume there instead of recomputing the frozen layers "
        "(the same numbers, fewer FLOPs: policy.hf.FrozenPrefix). Then the per-step "
        "replay_replaced counts the trained layers' replaced routes only."
    )

    @model_validator(mode="after")
    def _check(self) -> TrainerConfig:
        eps_high = self.objective.clip_eps_high
        if self.dual_clip_c < 1.0 + eps_high:
            raise ValueError(f"dual_clip_c={self.dual_clip_c} must be >= 1 + "
                             f"clip_eps_high={eps_high}")
        if self.replay.path is not None and self.greedy.loss != "filtered":
            raise ValueError("replay.path trains through the greedy imitation term: needs "
                             f"greedy.loss='filtered', got {self.greedy.loss!r}")
        if self.objective.type == "asymmetric" and self.neg_adv_scale != 1.0:
            raise ValueError(f"objective asymmetric scales negative advantages itself "
                             f"(negative_scale={self.objective.negative_scale}): neg_adv_scale="
                             f"{self.neg_adv_scale} must be 1")
        if self.trainable.scope == "lora" and self.backend.type != "torch":
            raise ValueError("trainable.scope='lora' needs backend.type='torch'")
        return self
