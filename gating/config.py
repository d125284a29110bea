"""The gate's typed config: which suite to run and what a candidate must show to be promoted.

Every threshold a gate compares against lives here, with its direction spelled out in the field
description, so the resolved config logged into the gate's MLflow run says exactly what was
required. Importing this module imports pydantic only (no torch, no mlflow).

Deliberately left out: how the gates are computed (gating/gates.py) and how a run is recorded
(gating/gate.py).
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator


class _Config(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class SuiteConfig(_Config):
    """The held-out benchmark the candidate and the champion both run, greedily."""

    kind: Literal["toy", "humaneval", "jsonl"] = Field(
        "toy",
        description="Task family: the toy gate pool (tasks.toy split 'gate'), HumanEval "
        "(sandboxed), or your own tasks from a JSONL file (``path``; tasks/jsonl_suite.py, "
        "graded in the sandbox).",
    )
    path: str | None = Field(
        None, description="jsonl only: the suite file (one task per line, docs/GATE.md)."
    )
    draw: Literal["per_decision", "fixed"] = Field(
        "per_decision",
        description=(
            "per_decision: each gate decision of a model draws its suite afresh from the pool "
            "with seed ``seed + k`` (k = the decision's index, stored on the registered model), "
            "so no two decisions in a row see the same draw and a suite is not reused "
            "adaptively; fixed: always the ``seed`` draw."
        ),
    )
    size: int = Field(
        400, ge=1, le=10_000,
        description="Number of tasks (HumanEval caps at its 164 problems). 400 toy tasks: the "
        "95% paired-bootstrap half-width of a pass-rate change is about 0.014 there "
        "(bench/suite_size.py measured 0.035 at 64 tasks and 0.009 at 1,000), fine enough for "
        "the +0.02 to +0.05 changes a cycle makes; 64 let ties through as noise.",
    )
    seed: int = Field(
        0, ge=0, description="Base seed of the task draw (the draw of decision k is seed + k)."
    )
    max_new_tokens: int = Field(
        32, ge=1, le=1024, description="Completion budget per task (greedy decoding)."
    )

    @model_validator(mode="after")
    def _jsonl_has_path(self) -> SuiteConfig:
        if self.kind == "jsonl" and not self.path:
            raise ValueError("suite.path is required when suite.kind is 'jsonl'")
        return self
    token_penalty: float = Field(
        0.5,
        ge=0.0,
        le=1.0,
        description=(
            "Score of a passed task is 1 - token_penalty * tokens / max_new_tokens, so a correct"
            " but bloated answer scores below a correct tight one; a failed task scores 0."
        ),
    )
    batch_size: int = Field(64, ge=1, le=1024, description="Prompts per generate() call.")
    samples: int = Field(
        0, ge=0, le=64,
        description="Completions per task at ``temperature`` beside the greedy one (0: greedy "
        "only). Each task records the share of its samples that pass; the verdict reports the "
        "pass rate at that temperature for both models and its paired, function-clustered CI "
        "(``sampled.*``): what users served at that temperature get, beside the greedy figures "
        "the gates decide on. Costs ``samples`` more decodes per task and model.")
    temperature: float = Field(
        0.8, gt=0.0, le=2.0,
        description="Sampling temperature of ``samples`` (the gateway's users' usual one).")
    sandbox_timeout_s: float = Field(
        5.0, gt=0.0, le=300.0,
        description="HumanEval and JSONL: wall-clock limit per sandboxed task."
    )
    chat: Literal["auto", "never"] = Field(
        "auto",
        description=(
            "HumanEval and JSONL: 'auto' feeds each task to a policy whose tokenizer has a chat "
            "template as chat turns (HumanEval: one user turn, tasks.humaneval.chat_prompt; "
            "JSONL: the task's messages) and grades the code in its reply; 'never' always feeds "
            "the raw prompt for a raw completion."
        ),
    )


class ChangeThreshold(_Config):
    """Required change of a metric against the champion, in a given direction.

    With ``delta = candidate - champion`` signed so that positive is better (``direction``), the
    gate passes iff ``delta >= min_abs`` and ``delta / |champion| >= min_rel``. Negative values
    tolerate a small regression; zero means "no worse than the champion".
    """

    direction: Literal["increase", "decrease"] = Field(
        "increase", description="Which way is better for this metric."
    )
    min_abs: float = Field(0.0, ge=-1e6, le=1e6, description="Minimum signed absolute change.")
    min_rel: float = Field(
        -1.0, ge=-1.0, le=100.0, description="Minimum signed relative change (-1 disables it)."
    )


class TokenBudget(_Config):
    """How much longer the candidate's answers may get than the champion's (mean tokens).

    Allowed increase = ``max(max_abs_increase, max_rel_increase * champion_mean_tokens)``.
    """

    max_abs_increase: float = Field(
        1.0, ge=0.0, le=1e4, description="Allowed increase of mean completion tokens, in tokens."
    )
    max_rel_increase: float = Field(
        0.10, ge=0.0, le=10.0, description="Allowed increase relative to the champion's mean."
    )


class BootstrapConfig(_Config):
    """Paired bootstrap over tasks for the candidate-minus-champion differences."""

    n_resamples: int = Field(2000, ge=100, le=100_000, description="Bootstrap resamples.")
    confidence: float = Field(
        0.95, gt=0.5, lt=1.0, description="Two-sided confidence level of the percentile CI."
    )
    seed: int = Field(0, ge=0, description="Seed of the resampling (reproducible CIs).")
    cluster: Literal["prompt", "family", "row"] = Field(
        "prompt",
        description=(
            "The independent unit every test, interval and power figure of the gate uses: "
            "'prompt' resamples distinct prompts (the function a task asks for; greedy answers "
            "to a repeated prompt are identical, so its rows are one observation); 'family' "
            "resamples task families (a task's ``family``, its ``kind``): the unit of pools "
            "whose functions of one family flip together under a small weight change, so a "
            "family that flips counts once; 'row' treats rows as independent (understates the "
            "variance when prompts repeat)."
        ),
    )
    max_pass_rate_drop: float = Field(
        0.0,
        ge=0.0,
        le=1.0,
        description=(
            "No significant regression: fails iff the CI's upper bound of the pass-rate"
            " difference is below -max_pass_rate_drop (the candidate is surely worse)."
        ),
    )
    max_token_rise: float = Field(
        0.0,
        ge=0.0,
        le=1e4,
        description=(
            "tokens_non_inferior: absolute margin in tokens; the one-sided upper bound of the"
            " mean-token change must stay below max(this, guardrails.token_rise_rel x the"
            " champion's mean tokens)."
        ),
    )


class ImprovementEvidence(_Config):
    """What counts as evidence that the candidate is better, not a tie that noise promoted.

    Two routes to a win sharing the decision's level (Bonferroni over the routes, so the union is
    a level-``alpha_k`` test): under ``per_decision`` the secondary gets ``shorter_route_share``
    of it and the primary the rest; under lord, pi2 and fixed each gets half.

    - primary: the exact one-sided McNemar test on the discordant clusters rejects at the
      primary's level (and, when ``min_pass_rate_ci_low`` > 0, the one-sided clustered bootstrap
      lower bound at that level is above it);
    - secondary (surely shorter, not worse): an intersection-union test, both at its level:
      the pass-rate lower bound > ``-non_inferiority_margin`` (non-inferiority) and the mean-token
      upper bound < ``-max(min_token_saving, min_token_saving_rel * champion mean tokens)``.

    Suite size: the CI half-width of a paired pass-rate difference is about
    ``z * sd(d) / sqrt(n_prompts)`` with ``d`` in {-1, 0, 1} per distinct prompt (repeats add no
    information under greedy decoding). Two checkpoints one cycle apart that disagree on 15% of
    prompts give ``sd(d)^2 ~ 0.15``; bench/suite_size.py measures it. docs/STATISTICS.md has the
    sizing table.
    """

    min_pass_rate_ci_low: float = Field(
        0.0,
        ge=-1.0,
        le=1.0,
        description=(
            "Primary win: the pass-rate change lower bound must be > this margin (ci_low >"
            " margin). -1 accepts any candidate (tests that need a tie to pass)."
        ),
    )
    non_inferiority_margin: float = Field(
        0.01,
        ge=0.0,
        le=1.0,
        description=(
            "Secondary win: the pass-rate change lower bound must be > -this (non-inferior). "
            "0.01: one task in a hundred, below the +0.02..+0.05 a cycle is meant to add, so a "
            "shorter candidate cannot give back a cycle's gain."
        ),
    )
    min_token_saving: float = Field(
        0.5,
        ge=0.0,
        le=1e4,
        description=(
            "Secondary win: the mean completion-token change upper bound must be < -max(this,"
            " min_token_saving_rel * champion mean tokens). 0.5 tokens: half a token per answer."
        ),
    )
    min_token_saving_rel: float = Field(
        0.05,
        ge=0.0,
        le=1.0,
        description="Secondary win: relative saving required (5% of the champion's mean tokens).",
    )
    shorter_route_share: float = Field(
        0.2,
        ge=0.0,
        le=0.5,
        description=(
            "Share of the decision's level the secondary (shorter answers) route is tested at; "
            "the primary route gets the rest (0.2 of 0.05: primary at 0.04, shorter at 0.01). "
            "0 drops the secondary route. Rules lord, pi2 and fixed split alpha_k in halves."
        ),
    )


class ErrorControlConfig(_Config):
    """The level each gate decision of a model is tested at, spending a lifetime budget.

    The state (decisions taken, promotions, level spent) is stored as tags on the registered
    model, so a resumed or rescheduled loop continues it (gating/stats.py AlphaSpending).
    """

    alpha: float = Field(
        0.05, gt=0.0, lt=1.0,
        description="Level of the improvement test: per decision (rule per_decision, fixed) or "
        "the lifetime budget spent over the model's decisions (lord, pi2).",
    )
    rule: Literal["per_decision", "lord", "pi2", "fixed"] = Field(
        "per_decision",
        description=(
            "per_decision: each decision is its own test at one-sided alpha (the primary route "
            "at alpha minus the shorter route's share); a false promotion is bounded per "
            "decision, as experimentation platforms bound each launch, and a regression is "
            "held back by the guardrails, which need proof of non-inferiority. lord: LORD++ "
            "online FDR over the model's life (alpha_k = gamma_k W0 + earnings from past "
            "promotions, gamma_j = 1/(j(j+1)), W0 = alpha/2); pi2: alpha_k = 6 alpha / (pi^2 "
            "k^2) (family-wise over the life); fixed: alpha every decision, routes at alpha/2 "
            "each (the older per-decision rule)."
        ),
    )


class SequentialConfig(_Config):
    """Two looks at the suite (O'Brien-Fleming): a clear win or loss stops after the first
    ``first_size`` tasks, a borderline candidate gets the whole suite (``suite.size`` tasks).

    Boundaries on the McNemar z of the discordant prompts, for one-sided level alpha_k / 2 (the
    primary route), spent by the Lan-DeMets O'Brien-Fleming function at the first look's share of
    distinct prompts (gating.stats.obrien_fleming_bounds). The look that decides evaluates every
    gate on the tasks seen so far at that look's nominal level.
    """

    first_size: int = Field(
        400, ge=1, le=10_000,
        description="Tasks of the first look (a prefix of the suite's draw; < suite.size).",
    )


class HealthConfig(_Config):
    """Checks on the candidate's weights and routing, independent of task success."""

    min_load_entropy: float = Field(
        0.5,
        ge=0.0,
        le=1.0,
        description=(
            "Expert-collapse floor: the lowest per-layer expert-load entropy on the suite,"
            " normalised by log(n_experts) (1 = uniform, 0 = one expert takes all)."
        ),
    )
    max_kl_to_champion: float = Field(
        1.0,
        ge=0.0,
        le=1e3,
        description=(
            "Ceiling of the mean per-token KL(candidate || champion) in nats on the candidate's"
            " own greedy suite completions."
        ),
    )
    kl_max_tasks: int | None = Field(
        None,
        ge=1,
        le=100_000,
        description=(
            "Measure the KL on the completions of the first this many suite tasks only (None: all)."
            " The KL costs a forward pass of both models over prompt + completion per task, which"
            " for a large model on a CPU rivals the suite itself."
        ),
    )


class HackMonitorConfig(_Config):
    """Reward-hacking monitors: rates that should not jump relative to the champion."""

    max_no_edit_increase: float = Field(
        0.05,
        ge=0.0,
        le=1.0,
        description="Non-inferiority margin of the no-edit rate (empty / question-only answers): "
        "its one-sided upper bound may rise at most this.",
    )
    max_malformed_increase: float = Field(
        0.05, ge=0.0, le=1.0,
        description="Non-inferiority margin of the malformed-answer rate: its one-sided upper "
        "bound may rise at most this."
    )


class OpeConfig(_Config):
    """Off-policy estimate of the candidate's reward on held-out logged champion traffic."""

    spans: list[str] = Field(
        default_factory=list,
        description="Parquet files or directories of reward rows (ingest.schema.REWARD_SCHEMA).",
    )
    max_rows: int = Field(512, ge=1, le=1_000_000, description="Rows used at most (held-out).")
    ratio_clip: float = Field(
        10.0, gt=1.0, le=1e6, description="Clip of the sequence ratio pi_candidate / pi_logged."
    )
    min_ess: float = Field(
        10.0, ge=1.0, le=1e6, description="Below this effective sample size the gate fails."
    )
    max_reward_drop: float = Field(
        0.1,
        ge=0.0,
        le=1e3,
        description="Fails iff the CI's upper bound < the champion's realised reward - this.",
    )


class InfraConfig(_Config):
    """Load the candidate in a real serving process and query it."""

    n_requests: int = Field(20, ge=1, le=10_000, description="Requests sent to the candidate.")
    max_tokens: int = Field(16, ge=1, le=1024, description="max_tokens of each request.")
    p95_budget_ms: float = Field(
        2000.0, gt=0.0, le=600_000.0, description="Largest allowed p95 request latency."
    )
    startup_timeout_s: float = Field(
        120.0, gt=0.0, le=1800.0, description="How long the server may take to become ready."
    )


class GuardSuite(_Config):
    """A suite of what the champion can already do, which the candidate must not have broken:
    catches an update that wins on the target suite by breaking something else.

    Both models run it greedily on a draw per decision (``suite.draw``; a ``size`` at or above the
    pool runs the whole pool, which the presets do). Two guardrails use it, the burden of proof
    on the candidate: ``guard.<name>`` passes iff the candidate is shown non-inferior (the
    one-sided ``guardrails.alpha`` lower bound of the function-clustered pass-rate change lies
    above ``-max_drop``), and its families join the per-family maximum-drop test
    (``guard.families``). ``test = "surely_worse"`` keeps the older rule (fail only if the whole
    two-sided CI lies below ``-max_drop``), which lets an unproven candidate through.
    """

    name: str = Field(
        pattern=r"^[a-z0-9_]{1,40}$", description="Names the gate: guard.<name>.")
    suite: SuiteConfig = Field(description="The guard's suite (a pool of tasks, drawn per "
                               "decision like the target suite).")
    max_drop: float = Field(
        0.03, ge=0.0, le=1.0,
        description="Non-inferiority margin: the candidate must be shown to lose less than this "
        "pass rate (0.03: three tasks in a hundred, below the +0.05 a cycle is meant to add).")
    test: Literal["non_inferior", "surely_worse", "families_only"] = Field(
        "non_inferior",
        description="non_inferior: pass iff the one-sided lower bound > -max_drop (burden on the "
        "candidate); surely_worse: fail iff the two-sided CI's upper bound < -max_drop; "
        "families_only: no pool-wide gate, the suite's families take only the max-drop test "
        "(held-out transfer families, whose pass rate a cycle may move either way).")
    families: bool = Field(
        True, description="Include this suite's task families in the per-family max-drop test.")


class GuardrailConfig(_Config):
    """Levels and margins of the guardrails: tests the candidate must pass to show it did not
    get worse (non-inferiority, one-sided, not corrected across guardrails: each one only blocks).
    """

    alpha: float = Field(
        0.05, gt=0.0, lt=0.5,
        description="One-sided level of each non-inferiority guardrail (guard pools, tokens, "
        "malformed and empty answers).")
    family_alpha: float = Field(
        0.05, gt=0.0, lt=0.5,
        description="Family-wise level of the per-family maximum-drop test over the guard "
        "suites' families (guard.families fails iff its sign-flip p-value <= this).")
    family_permutations: int = Field(
        10_000, ge=100, le=1_000_000, description="Sign flips of the maximum-drop test.")
    token_rise_rel: float = Field(
        0.10, ge=0.0, le=10.0,
        description="tokens_non_inferior: the one-sided upper bound of the mean-token change "
        "must stay below max(bootstrap.max_token_rise, this x the champion's mean tokens).")
    power: float = Field(
        0.8, gt=0.5, lt=1.0,
        description="Power at which the verdict reports the minimum detectable effect.")


class AuditConfig(_Config):
    """The lifetime audit: gates that each compare a candidate with the champion of the day can
    let a model drift by steps too small to block one at a time. Every ``every`` promotions the
    champion is compared with the anchor (the model's first champion) on ``suites``, the burden
    of proof on the champion (each suite non-inferior at its ``max_drop``; with ``families``, the
    per-family maximum-drop test too). A failed audit moves ``champion`` back to the last
    version that passed one (the anchor before any did) and is recorded like a gate verdict.
    """

    every: int = Field(
        3, ge=1, le=1000, description="Promotions between two audits (counted from the last).")
    suites: list[GuardSuite] = Field(
        default_factory=list,
        description="What the champion must still do as well as the anchor. Empty: the gate's "
        "target suite (fixed draw, non-inferior at ``margin``) and the gate's guards (for the "
        "SmolLM2 preset: its gate, guard and transfer pools). Never name the sealed pool: it "
        "would then decide rollbacks and no longer be sealed.")
    margin: float = Field(
        0.03, ge=0.0, le=1.0,
        description="Non-inferiority margin of the target suite when ``suites`` is empty.")


class GateConfig(_Config):
    """Everything the promotion gate needs: the suite and each gate's threshold."""

    suite: SuiteConfig = Field(default_factory=SuiteConfig, description="The benchmark suite.")
    primary_metric: Literal["greedy", "sampled"] = Field(
        "greedy",
        description=(
            "What the primary and the pass-rate gates decide on: 'greedy' (the greedy answer "
            "passed) or 'sampled' (the share of ``suite.samples`` answers at "
            "``suite.temperature`` that passed: what users served at that temperature get; "
            "needs ``suite.samples`` >= 1, and the greedy pass rate becomes a guardrail, "
            "``greedy_pass_rate_no_regression``, failing only when surely worse). Both models "
            "draw their samples with the same seeds (common random numbers)."
        ),
    )
    champion_temperatures: list[float] = Field(
        default_factory=list, max_length=4,
        description=(
            "Temperatures (each in (0, 2]) at which the champion's sampled pass rate is also "
            "measured and recorded (``champion.pass_rate.t<T>``) beside the greedy one and "
            "the suite's temperature, with ``suite.samples`` samples: a candidate that only "
            "learned a lower temperature shows as no better than the champion at its best. "
            "Cached per champion version."
        ),
    )
    min_pass_rate: float = Field(
        0.2, ge=0.0, le=1.0, description="Absolute gate: candidate pass rate must be >= this."
    )
    pass_rate_change: ChangeThreshold = Field(
        default_factory=ChangeThreshold,
        description="Change gate on pass rate vs the champion (skipped without a champion).",
    )
    token_budget: TokenBudget = Field(
        default_factory=TokenBudget,
        description="Budget on mean completion tokens vs the champion (skipped without one).",
    )
    bootstrap: BootstrapConfig = Field(
        default_factory=BootstrapConfig, description="Paired bootstrap CIs and their gates."
    )
    improvement: ImprovementEvidence | None = Field(
        default_factory=ImprovementEvidence,
        description=(
            "Evidence-of-improvement gate vs the champion (a tie fails); None skips it."
        ),
    )
    error_control: ErrorControlConfig = Field(
        default_factory=ErrorControlConfig,
        description="Per-decision level alpha_k of the improvement test across a model's gates.",
    )
    sequential: SequentialConfig | None = Field(
        None,
        description="Two-look sequential gate (first look on a prefix); None: one look.",
    )
    guards: list[GuardSuite] = Field(
        default_factory=list,
        description="Regression guards: suites the candidate must be shown non-inferior on "
        "(skipped without a champion).",
    )
    guardrails: GuardrailConfig = Field(
        default_factory=GuardrailConfig,
        description="Levels and margins of the non-inferiority guardrails.",
    )
    guards_skip_on_fail: bool = Field(
        False,
        description="Run the guard suites only when every other gate passed: a candidate "
        "already rejected cannot be rejected twice, so its verdict is the same without them "
        "(``guards.skipped`` = 1 in its figures). Saves the guards' decoding on most decisions; "
        "the real preset turns it on (its guards hold 535 of its 697 tasks).",
    )
    health: HealthConfig = Field(
        default_factory=HealthConfig, description="Weight and routing health checks."
    )
    hack: HackMonitorConfig = Field(
        default_factory=HackMonitorConfig, description="No-edit and malformed-rate monitors."
    )
    audit: AuditConfig | None = Field(
        default_factory=AuditConfig,
        description="Lifetime audit of the champion against the model's first champion every "
        "few promotions, rolling back on a failure; None turns it off.",
    )
    ope: OpeConfig | None = Field(
        None, description="Off-policy evaluation on logged traffic; None skips it."
    )
    infra: InfraConfig | None = Field(
        None, description="Serving-process check of the candidate; None skips it."
    )
    report_html: bool = Field(True, description="Log the HTML report artifact beside the JSON.")

    @model_validator(mode="after")
    def _first_look_is_a_prefix(self) -> GateConfig:
        if self.sequential is not None and self.sequential.first_size >= self.suite.size:
            raise ValueError(
                f"sequential.first_size ({self.sequential.first_size}) must be below suite.size "
                f"({self.suite.size})")
        return self

    @model_validator(mode="after")
    def _guard_names_unique(self) -> GateConfig:
        names = [g.name for g in self.guards]
        if len(names) != len(set(names)):
            raise ValueError(f"gate.guards names must be unique, got {names}")
        return self

    @model_validator(mode="after")
    def _sampled_primary_samples(self) -> GateConfig:
        if self.primary_metric == "sampled" and self.suite.samples < 1:
            raise ValueError(
                f"gate.primary_metric 'sampled' needs gate.suite.samples >= 1, got "
                f"{self.suite.samples}")
        bad = [t for t in self.champion_temperatures if not 0.0 < t <= 2.0]
        if bad:
            raise ValueError(f"gate.champion_temperatures must lie in (0, 2], got {bad}")
        if self.champion_temperatures and self.suite.samples < 1:
            raise ValueError("gate.champion_temperatures needs gate.suite.samples >= 1")
        return self
