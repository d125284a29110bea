"""The gate record: what a suite run and a gate verdict look like, in one place.

These are the typed records the gate writes into MLflow (``verdict.json``) and that the cycle,
``ratchet gates show`` and the HTML report read back. Pure pydantic: no torch, no mlflow.

Deliberately left out: computing any of these (gating/suite.py, gating/gates.py) and rendering
them (gating/report.py).
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field

PASS = "pass"
FAIL = "fail"


class TaskOutcome(BaseModel):
    """One task of a suite run: was the greedy answer right, and how long was it."""

    model_config = ConfigDict(frozen=True)

    task_id: str
    kind: str
    prompt_key: str = Field(
        "", description="Hash of the prompt text: the cluster of the paired statistics (rows of "
        "one prompt are one observation). Empty: the task id stands in.")
    passed: bool
    malformed: bool
    no_edit: bool
    completion_tokens: int = Field(ge=0, description="Generated tokens, EOS included.")
    score: float = Field(ge=0.0, le=1.0, description="Length-aware score (0 when failed).")
    finish_reason: str = "stop"
    answer: str = Field("", description="The answer text (first 200 characters).")
    detail: str = ""
    token_ids: list[int] = Field(default_factory=list, description="Generated ids (with EOS).")
    sampled_pass: float | None = Field(
        None, ge=0.0, le=1.0, description="Share of the task's samples at the suite's "
        "temperature that passed (None: greedy only, ``suite.samples = 0``).")


class SuiteSummary(BaseModel):
    """Aggregates of a suite run (what the cycle and the report show)."""

    model_config = ConfigDict(frozen=True)

    n_tasks: int
    pass_rate: float
    mean_completion_tokens: float
    score: float
    malformed_rate: float
    no_edit_rate: float
    load_entropy: float | None = Field(
        None, description="Lowest per-layer normalised expert-load entropy (None: no routing)."
    )


class SuiteResult(BaseModel):
    """Per-task outcomes of one model on one suite, plus its expert-load counts."""

    tasks: list[TaskOutcome]
    expert_load: list[list[int]] = Field(
        default_factory=list, description="Tokens routed to each expert: (layers, n_experts)."
    )
    seconds: float = 0.0

    def _mean(self, values: list[float]) -> float:
        return sum(values) / len(values) if values else 0.0

    @property
    def clusters(self) -> list[str]:
        """Cluster key of each task (its prompt hash, or its id when none was recorded)."""
        return [t.prompt_key or t.task_id for t in self.tasks]

    @property
    def families(self) -> list[str]:
        """Family of each task (its ``kind``): the independent unit of a pool whose functions of
        one family flip together."""
        return [t.kind for t in self.tasks]

    def cluster_keys(self, unit: str) -> list[str]:
        """Cluster key of each task for an independence ``unit``: ``prompt`` (:attr:`clusters`),
        ``family`` (:attr:`families`) or ``row`` (each task its own)."""
        if unit == "prompt":
            return self.clusters
        if unit == "family":
            return self.families
        if unit == "row":
            return [str(i) for i in range(len(self.tasks))]
        raise ValueError(f"unknown independence unit {unit!r} (prompt, family or row)")

    def primary_values(self, metric: str) -> list[float]:
        """Per task, the value the gate's primary decides on: ``greedy`` (1.0 when the greedy
        answer passed) or ``sampled`` (the share of samples at the serving temperature that
        passed)."""
        if metric == "greedy":
            return [float(t.passed) for t in self.tasks]
        if metric == "sampled":
            if any(t.sampled_pass is None for t in self.tasks):
                raise ValueError("primary metric 'sampled' needs suite.samples >= 1: a task "
                                 "has no sampled pass")
            return [float(t.sampled_pass) for t in self.tasks]  # type: ignore[arg-type]
        raise ValueError(f"unknown primary metric {metric!r} (greedy or sampled)")

    @property
    def pass_rate(self) -> float:
        return self._mean([float(t.passed) for t in self.tasks])

    @property
    def sampled_pass_rate(self) -> float | None:
        """Pass rate at the suite's sampling temperature (None when it sampled nothing)."""
        shares = [t.sampled_pass for t in self.tasks]
        if not shares or any(x is None for x in shares):
            return None
        return self._mean(shares)

    @property
    def mean_completion_tokens(self) -> float:
        return self._mean([float(t.completion_tokens) for t in self.tasks])

    @property
    def score(self) -> float:
        return self._mean([t.score for t in self.tasks])

    @property
    def malformed_rate(self) -> float:
        return self._mean([float(t.malformed) for t in self.tasks])

    @property
    def no_edit_rate(self) -> float:
        return self._mean([float(t.no_edit) for t in self.tasks])

    @property
    def load_entropy(self) -> float | None:
        from gating.stats import normalised_load_entropy

        return normalised_load_entropy(self.expert_load) if self.expert_load else None

    def summary(self) -> SuiteSummary:
        return SuiteSummary(
            n_tasks=len(self.tasks),
            pass_rate=self.pass_rate,
            mean_completion_tokens=self.mean_completion_tokens,
            score=self.score,
            malformed_rate=self.malformed_rate,
            no_edit_rate=self.no_edit_rate,
            load_entropy=self.load_entropy,
        )


class GateResult(BaseModel):
    """One gate: the measured value, the threshold it was held to, and the verdict."""

    model_config = ConfigDict(frozen=True)

    name: str
    value: float | None = Field(description="Measured value (None when it could not be measured).")
    threshold: float | None
    passed: bool
    ci_low: float | None = None
    ci_high: float | None = None
    comparator: str = Field(">=", description="How value is compared with threshold.")
    detail: str = ""
    reason: str = Field("", description="Why it passed or failed, in words and figures (the "
                        "verdict's decision line quotes the gate that decided).")


class GateVerdict(BaseModel):
    """The whole gate: passed iff every gate passed."""

    passed: bool
    run_id: str
    model_name: str = ""
    candidate_version: int = 0
    champion_version: int | None = None
    gates: list[GateResult]
    candidate: SuiteSummary
    champion: SuiteSummary | None = None
    promoted: bool = False
    extras: dict[str, float] = Field(
        default_factory=dict, description="Supporting figures (e.g. OPE effective sample size)."
    )
    decision: str = Field("", description="The verdict in one line: which rule decided, with "
                          "its figures (gating.report.decision_line).")

    @property
    def failed_gates(self) -> list[str]:
        return [g.name for g in self.gates if not g.passed]
