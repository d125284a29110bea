"""Progressive rollout of a new champion with automatic rollback.

``RolloutController`` moves the router's canary weight through configured steps (e.g. 10% → 25% →
50% → 100%). Each step has a window in event time, ``[start, start + window_s)``; the step is judged
only once the window is closed twice over: the wall clock has passed its end (no more traffic in
it), and the ingested data is final up to its end (``ProductSource.closed_until()``: every
completion in the window is a reward row, because its expected signals all arrived or its join
windows closed against ingest's watermark; see ``final_until_us``). The judge
(deploy/fleet/judge.py)
compares the canary and stable arms on error rate,
p95 latency (from the router's ledger) and edit persistence and dissatisfied follow-ups (from the
reward rows of each model version). Pass → next step; ``extend`` (too few samples, or in the
judge's ``show`` mode a case not shown yet) → the window grows by another ``window_s`` (at most
``max_extensions`` times, then rollback: "too few samples" or "not shown"); fail → rollback:
weight 0, aliases ``champion`` and ``previous-champion`` back to what they were before the
canary was promoted (compare-and-set, after the optional ``guard``, e.g. a lease check), and the
verdict with the step log
written to the canary model version's tags and description in MLflow.

Deliberately left out: reloading replicas (deploy/fleet/fleet.py), the statistics
(deploy/fleet/judge.py),
running ingest (ingest/).
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Literal, Protocol

from pydantic import BaseModel, ConfigDict, Field, field_validator

from deploy.fleet.judge import ArmSamples, JudgeConfig, MetricVerdict, judge

log = logging.getLogger(__name__)


class RolloutConfig(BaseModel):
    """Steps, windows and judge thresholds of one rollout."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    steps: tuple[float, ...] = Field(
        default=(0.1, 0.25, 0.5, 1.0),
        description="Canary weights in order; strictly increasing, the last one 1.0.",
    )
    window_s: float = Field(
        default=600.0, gt=0.0, description="Event-time length of a step's window (seconds)."
    )
    max_extensions: int = Field(
        default=3, ge=0, description="Times a step may be extended for lack of data."
    )
    judge: JudgeConfig = Field(default_factory=JudgeConfig, description="Judge thresholds.")

    @field_validator("steps")
    @classmethod
    def _check_steps(cls, steps: tuple[float, ...]) -> tuple[float, ...]:
        if len(steps) < 2 or steps[-1] != 1.0:
            raise ValueError(f"steps need a judged weight < 1 and must end at 1.0, got {steps}")
        if any(not 0 < w <= 1 for w in steps) or list(steps) != sorted(set(steps)):
            raise ValueError(f"steps must be strictly increasing in (0, 1], got {steps}")
        return steps


class TrafficSplitter(Protocol):
    def set_canary_weight(self, weight: float) -> None: ...


class ServingSource(Protocol):
    def serving(self, start: datetime, end: datetime) -> dict[str, ArmSamples]: ...


class ProductSource(Protocol):
    def closed_until(self) -> datetime | None: ...

    def product(self, start: datetime, end: datetime, version: int) -> ArmSamples:
        """Finalised completions of ``version`` with event time in [start, end)."""
        ...


_FAR_FUTURE = datetime(9999, 1, 1, tzinfo=UTC)


# -- product data from reward rows ------------------------------------------------------------
class RewardTable:
    """Product metrics of ``model_name`` in a REWARD_SCHEMA table, final up to ``closed_until``."""

    def __init__(self, table, closed_until: datetime | None, *, model_name: str) -> None:
        self.table = table
        self._closed_until = closed_until
        self.model_name = model_name

    def extend(self, rows, closed_until: datetime) -> None:
        """Add newly finalised rows (a REWARD_SCHEMA table) and move ``closed_until``."""
        import pyarrow as pa

        self.table = pa.concat_tables([self.table, rows])
        self._closed_until = closed_until

    def closed_until(self) -> datetime | None:
        return self._closed_until

    def product(self, start: datetime, end: datetime, version: int) -> ArmSamples:
        import pyarrow.compute as pc

        t = self.table
        in_window = pc.and_(pc.greater_equal(t["event_time"], start), pc.less(t["event_time"], end))
        mine = pc.and_(
            pc.equal(t["model_name"], self.model_name), pc.equal(t["model_version"], version)
        )
        mask = pc.and_(in_window, mine)
        rows = t.filter(mask)
        persistence = kept_shares(rows["edit_persistence_600"].to_pylist(),
                                  rows["response_text"].to_pylist())
        dissatisfied = [bool(v) for v in rows["followup_dissatisfied"].to_pylist()]
        return ArmSamples(edit_persistence=persistence, dissatisfied=dissatisfied)


def kept_shares(scores: list[float | None], texts: list[str]) -> list[float]:
    """The product metric per served answer: its edit persistence, and 0 for an empty or refused
    answer (nothing was inserted, so nothing was kept; clients send no persistence for it). An
    answer with code but no persistence (a client that reports none) is left out."""
    from rewards.answers import answer_kind

    return [score if score is not None else 0.0
            for score, text in zip(scores, texts)
            if score is not None or answer_kind(text) != "code"]


def final_until_us(
    watermark_us: int, horizon_us: int, pending_completions_us: list[int]
) -> int:
    """Event time before which every completion ingest has read is final (its reward row is in).

    Two ways a completion becomes final in ingest's join (ingest/join.py): every expected signal
    arrived (``join.expected_signals``), or its windows closed against the watermark. The
    watermark is where ingest holds its input complete (largest event time seen, never past its
    own clock, less the allowed lateness), so every completion before it has been read; of those,
    the ones still waiting for signals are exactly the completions ingest carries as pending. So
    everything before ``min(watermark, earliest pending completion)`` is final, and at the latest
    everything before ``watermark - horizon`` (all windows closed) is.
    """
    by_watermark = watermark_us - horizon_us
    by_rows = min([watermark_us, *pending_completions_us])
    return max(by_watermark, by_rows)


class RewardSpans:
    """Product metrics from ingest's committed spans under ``output_root`` (ingest/spans.py).

    ``closed_until`` is :func:`final_until_us` of the latest span: its watermark and the event
    times of the completions it carries as pending. A window thus closes as soon as its
    completions have their expected signals, not only once the watermark is ``horizon_s`` past
    it (under compressed time the watermark, bounded by ingest's clock, gets there only
    ``horizon_s`` of wall time later).
    """

    def __init__(self, output_root: Path, *, model_name: str, horizon_s: float) -> None:
        self.output_root = Path(output_root)
        self.model_name = model_name
        self.horizon_s = horizon_s

    def closed_until(self) -> datetime | None:
        from ingest.spans import SpanStore

        store = SpanStore(self.output_root)
        manifests = store.manifests_list()
        if not manifests or manifests[-1].get("watermark_us") is None:
            return None
        state = store.load_state()  # the latest span's carried (pending) events
        pending = [i.event_time_us for _, i in state.pending if i.kind == "completion"]
        if manifests[-1].get("drained"):  # the input ended: only what it carries is open
            final = min(pending, default=int(_FAR_FUTURE.timestamp() * 1e6))
        else:
            final = final_until_us(manifests[-1]["watermark_us"], int(self.horizon_s * 1e6),
                                   pending)
        bounded = min(max(final, 0), int(_FAR_FUTURE.timestamp() * 1e6))  # drained: far future
        return datetime.fromtimestamp(bounded / 1e6, UTC)

    def product(self, start: datetime, end: datetime, version: int) -> ArmSamples:
        from ingest.spans import read_spans

        table = read_spans(self.output_root)
        return RewardTable(table, None, model_name=self.model_name).product(start, end, version)


# -- the controller ---------------------------------------------------------------------------
@dataclass
class StepRecord:
    """One judgement (or the final promotion) of the rollout, for the step log."""

    step: int
    weight: float
    window_start: str
    window_end: str
    extensions: int
    decision: Literal["pass", "fail", "extend", "rollback", "promote"]
    samples: dict[str, dict[str, int]] = field(default_factory=dict)
    metrics: list[dict] = field(default_factory=list)
    reason: str = ""


@dataclass
class RolloutResult:
    state: Literal["promoted", "rolled_back", "running"]
    final_weight: float
    steps: list[StepRecord]


class RolloutController:
    """Drive one rollout of ``canary_version`` against ``stable_version``; see the module doc."""

    def __init__(
        self,
        *,
        config: RolloutConfig,
        splitter: TrafficSplitter,
        serving: ServingSource,
        product: ProductSource,
        tracking_uri: str,
        model_name: str,
        stable_version: int,
        canary_version: int,
        clock: Callable[[], datetime] | None = None,
        previous_version: int | None | object = ...,
        guard: Callable[[], None] | None = None,
    ) -> None:
        """``previous_version``: what ``previous-champion`` was before the canary's promotion
        (restored on rollback; left as is when not given). ``guard`` runs before any alias move
        (a lease check that raises when the lease is lost)."""
        self.config = config
        self.splitter, self.serving_source, self.product_source = splitter, serving, product
        self.tracking_uri, self.model_name = tracking_uri, model_name
        self.stable_version, self.canary_version = stable_version, canary_version
        self.clock = clock or (lambda: datetime.now(UTC))
        self.previous_version, self.guard = previous_version, guard
        self.state: Literal["pending", "running", "promoted", "rolled_back"] = "pending"
        self.step = 0
        self.extensions = 0
        self.window_start: datetime | None = None
        self.window_end: datetime | None = None
        self.log: list[StepRecord] = []

    @property
    def weight(self) -> float:
        return 0.0 if self.state == "rolled_back" else self.config.steps[self.step]

    def start(self) -> None:
        self.state = "running"
        self._enter_step(0)

    def _enter_step(self, step: int) -> None:
        self.step, self.extensions = step, 0
        self.splitter.set_canary_weight(self.config.steps[step])
        self.window_start = self.clock()
        self.window_end = self.window_start + timedelta(seconds=self.config.window_s)
        log.info(
            "rollout step %d: canary weight %.2f until %s",
            step,
            self.config.steps[step],
            self.window_end.isoformat(),
        )

    def window_closed(self) -> bool:
        closed = self.product_source.closed_until()
        return self.clock() >= self.window_end and closed is not None and closed >= self.window_end

    def tick(self) -> StepRecord | None:
        """Judge the current step if its window is closed; returns the record it added."""
        if self.state != "running" or not self.window_closed():
            return None
        stable, canary = self._samples()
        verdict = judge(stable, canary, self.config.judge)
        reason = "; ".join(verdict.reasons)
        if verdict.decision == "pass" and self.config.judge.mode == "show":
            better = ", ".join(verdict.superior)
            reason = "shown within every margin" + (f"; superior on {better}" if better else "")
        record = self._record(verdict.decision, stable, canary, verdict.metrics, reason)
        if verdict.decision == "fail":
            self._rollback(record)
        elif verdict.decision == "extend":
            self._extend(record, verdict.unshown)
        elif self.config.steps[self.step + 1] >= 1.0:
            self._promote(record)
        else:
            self._enter_step(self.step + 1)
        return record

    def run(self, *, poll_s: float = 1.0, timeout_s: float | None = None) -> RolloutResult:
        """``start()`` if needed, then ``tick()`` until promoted or rolled back (or timeout)."""
        if self.state == "pending":
            self.start()
        deadline = None if timeout_s is None else time.monotonic() + timeout_s
        while self.state == "running":
            if deadline is not None and time.monotonic() > deadline:
                break
            if self.tick() is None:
                time.sleep(poll_s)
        return self.result()

    def abort(self, reason: str) -> None:
        """Roll back a running rollout now (e.g. it ran past its time limit)."""
        if self.state != "running":
            return
        record = self._record("fail", ArmSamples(), ArmSamples(), [], reason)
        self._rollback(record)

    def result(self) -> RolloutResult:
        state = self.state if self.state != "pending" else "running"
        return RolloutResult(state, self.weight, list(self.log))

    # -- outcomes -------------------------------------------------------------------------------
    def _samples(self) -> tuple[ArmSamples, ArmSamples]:
        start, end = self.window_start, self.window_end
        serving = self.serving_source.serving(start, end)
        out = []
        for arm, version in (("stable", self.stable_version), ("canary", self.canary_version)):
            s, p = serving[arm], self.product_source.product(start, end, version)
            out.append(
                ArmSamples(s.requests, s.errors, s.latencies_ms, p.edit_persistence, p.dissatisfied)
            )
        return out[0], out[1]

    def _record(
        self,
        decision,
        stable: ArmSamples,
        canary: ArmSamples,
        metrics: list[MetricVerdict],
        reason: str,
    ) -> StepRecord:
        def counts(a: ArmSamples) -> dict[str, int]:
            return {
                "requests": a.requests,
                "errors": a.errors,
                "finalised": len(a.dissatisfied),
                "with_persistence": len(a.edit_persistence),
            }

        record = StepRecord(
            self.step,
            self.config.steps[self.step],
            self.window_start.isoformat(),
            self.window_end.isoformat(),
            self.extensions,
            decision,
            {"stable": counts(stable), "canary": counts(canary)},
            [asdict(m) for m in metrics],
            reason,
        )
        self.log.append(record)
        return record

    def _extend(self, record: StepRecord, unshown: list[str]) -> None:
        if self.extensions >= self.config.max_extensions:
            record.reason = (
                f"not shown after {self.extensions} extensions: {'; '.join(unshown)}" if unshown
                else f"too few samples after {self.extensions} extensions")
            self._rollback(record)
            return
        self.extensions += 1
        self.window_end += timedelta(seconds=self.config.window_s)
        log.info(
            "rollout step %d: too few samples, window extended to %s",
            self.step,
            self.window_end.isoformat(),
        )

    def _rollback(self, record: StepRecord) -> None:
        from runtime import registry

        self.splitter.set_canary_weight(0.0)
        if self.guard is not None:
            self.guard()
        if self.previous_version is ...:
            registry.set_alias(
                self.tracking_uri, self.model_name, registry.CHAMPION, self.stable_version
            )
        else:
            registry.roll_back(
                self.tracking_uri, self.model_name, canary=self.canary_version,
                stable=self.stable_version, previous=self.previous_version,
            )
        self.state = "rolled_back"
        self.log.append(
            StepRecord(
                self.step,
                0.0,
                record.window_start,
                record.window_end,
                self.extensions,
                "rollback",
                reason=record.reason,
            )
        )
        log.warning(
            "rollout of v%d rolled back at step %d: %s",
            self.canary_version,
            self.step,
            record.reason,
        )
        self._write_verdict("rolled_back", record.reason)

    def _promote(self, record: StepRecord) -> None:
        from runtime import registry

        promoted_because = "every judged step passed" + (
            f" ({record.reason})" if record.reason else "")

        self.step += 1
        self.splitter.set_canary_weight(1.0)
        if self.guard is not None:
            self.guard()
        if registry.resolve_alias(self.tracking_uri, self.model_name, registry.CHAMPION) != (
            self.canary_version
        ):
            registry.promote(
                self.tracking_uri, self.model_name, self.canary_version,
                expected=self.stable_version,
            )
        self.state = "promoted"
        self.log.append(
            StepRecord(
                self.step,
                1.0,
                record.window_start,
                record.window_end,
                0,
                "promote",
                reason=promoted_because,
            )
        )
        self._write_verdict("promoted", promoted_because)

    def _write_verdict(self, verdict: str, reason: str) -> None:
        """Tags and description on the canary version, beside the gate's record."""
        from mlflow import MlflowClient

        from runtime import registry

        client = MlflowClient(tracking_uri=self.tracking_uri, registry_uri=self.tracking_uri)
        old = client.get_model_version(self.model_name, str(self.canary_version)).description
        summary = (
            f"Rollout {verdict} at weight {self.weight:.2f} vs stable v{self.stable_version}"
            f" ({self.clock().isoformat()}): {reason or 'ok'}"
        )
        steps = [
            {
                "step": r.step,
                "weight": r.weight,
                "decision": r.decision,
                "samples": r.samples,
                "p": {m["name"]: m["p_value"] for m in r.metrics},
            }
            for r in self.log
        ]
        registry.set_version_tags(
            self.tracking_uri,
            self.model_name,
            self.canary_version,
            {
                "ratchet.rollout.verdict": verdict,
                "ratchet.rollout.final_weight": f"{self.weight:.2f}",
                "ratchet.rollout.stable_version": str(self.stable_version),
                "ratchet.rollout.reason": (reason or "ok")[:4000],
                "ratchet.rollout.steps": json.dumps(steps)[:4900],
            },
            description=f"{old}\n\n{summary}" if old else summary,
        )
