"""One cycle of the loop: ingest → train → gate → deploy, as one MLflow parent run.

Each stage is a nested run; the stages talk only through typed records: the reward span
(ingest.pipeline.SpanResult, Parquet rows of ingest.schema.REWARD_SCHEMA), the checkpoint
reference (runtime.registry.CheckpointRef) and the gate verdict (gating.gate.GateVerdict).
The fully resolved config is logged into the parent run.

Deliberately left out: starting services (runtime/services.py, ratchet/demo.py) and traffic
(deploy/simulator.py). A cycle only reads what is already in Kafka.
"""

from __future__ import annotations

import json
import logging
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from ratchet.config import RatchetConfig
from runtime import registry

if TYPE_CHECKING:
    from deploy.fleet import Fleet

log = logging.getLogger(__name__)


@dataclass
class CycleResult:
    """What one cycle did, for the demo's table and for tests."""

    index: int
    run_id: str
    span_rows: int = 0
    dead_letters: int = 0
    span_validated: bool = False
    champion_version: int | None = None
    candidate_version: int | None = None
    gate_passed: bool = False
    promoted: bool = False
    candidate_pass_rate: float | None = None
    champion_pass_rate: float | None = None
    candidate_tokens: float | None = None
    candidate_score: float | None = None
    gate_ci_low: float | None = None
    """Lower bound of the paired-bootstrap CI of the pass-rate change (candidate - champion)."""
    gate_ci_high: float | None = None
    gate_tasks: int | None = None
    """Tasks in the gate suite behind the pass rates."""
    gate_run_id: str | None = None
    train_run_id: str | None = None
    rolled_back: bool = False
    skipped: str | None = None
    seconds: dict[str, float] = field(default_factory=dict)


class Cycle:
    """Runs cycles against one broker, one MLflow server and (optionally) one fleet."""

    def __init__(
        self,
        config: RatchetConfig,
        *,
        tracking_uri: str,
        bootstrap: str,
        workdir: Path,
        fleet: Fleet | None = None,
    ) -> None:
        self.config = config
        self.tracking_uri = tracking_uri
        self.bootstrap = bootstrap
        self.workdir = workdir
        self.fleet = fleet

    def run(self, index: int) -> CycleResult:
        import mlflow

        mlflow.set_tracking_uri(self.tracking_uri)
        mlflow.set_experiment(self.config.experiment)
        with mlflow.start_run(run_name=f"cycle-{index}") as parent:
            mlflow.log_dict(json.loads(self.config.model_dump_json()), "config/resolved.json")
            mlflow.set_tag("ratchet.stage", "cycle")
            result = CycleResult(index=index, run_id=parent.info.run_id)
            try:
                self._run_stages(result)
            finally:
                mlflow.log_dict(asdict(result), "cycle_result.json")
                mlflow.log_metrics({f"seconds_{k}": v for k, v in result.seconds.items()})
                mlflow.set_tag("ratchet.outcome", _outcome(result))
        return result

    def _run_stages(self, result: CycleResult) -> None:
        span = self._timed(result, "ingest", self._ingest)
        result.span_rows, result.dead_letters = span.rows, span.dead_letters
        result.span_validated = span.validated
        if not span.validated:
            result.skipped = f"span {span.span_id} failed validation (quarantined)"
            return
        if span.rows < self.config.min_rows_to_train:
            result.skipped = f"span has {span.rows} rows < min_rows_to_train"
            return
        result.champion_version = registry.resolve_alias(
            self.tracking_uri, self.config.model_name, registry.CHAMPION
        )
        if result.champion_version is None:
            raise RuntimeError(f"no '{registry.CHAMPION}' alias on {self.config.model_name}")
        candidate = self._timed(result, "train", lambda: self._train(span, result))
        result.candidate_version = candidate.version
        verdict = self._timed(result, "gate", lambda: self._gate(candidate, result))
        result.gate_passed, result.promoted = verdict.passed, verdict.promoted
        if verdict.promoted and self.fleet is not None:
            self._timed(result, "deploy", lambda: self._deploy(candidate))

    def _timed(self, result: CycleResult, stage: str, fn):
        start = time.perf_counter()
        try:
            return fn()
        finally:
            result.seconds[stage] = round(time.perf_counter() - start, 2)
            log.info("stage %s took %.1f s", stage, result.seconds[stage])

    # -- stages ---------------------------------------------------------------------------

    def _ingest(self):
        import mlflow

        from ingest.pipeline import run_span

        cfg = self.config.ingest
        with mlflow.start_run(run_name="ingest", nested=True):
            mlflow.set_tag("ratchet.stage", "ingest")
            span = run_span(
                bootstrap=self.bootstrap,
                group_id=cfg.group_id,
                output_root=self.workdir / "spans",
                config=cfg,
            )
            mlflow.log_metrics(
                {
                    "rows": span.rows,
                    "dead_letters": span.dead_letters,
                    "completions_in": span.completions_in,
                    "signals_in": span.signals_in,
                    "validated": float(span.validated),
                }
            )
            mlflow.log_dict(span.validation_report, "validation_report.json")
            mlflow.set_tag("span_id", span.span_id)
            mlflow.set_tag("span_path", str(span.path))
            if not span.validated:
                mlflow.set_tag("quarantined", "true")
        return span

    def _train(self, span, result: CycleResult) -> registry.CheckpointRef:
        import mlflow
        import pyarrow.parquet as pq

        from ingest.lineage import log_span_input
        from trainer.recipe import run_training

        champion_dir = registry.download_checkpoint(
            self.tracking_uri, self.config.model_name, result.champion_version,
            self.workdir / "checkpoints",
        )
        rows = pq.read_table(span.path)
        out_dir = self.workdir / "candidates" / f"cycle-{result.index}"
        with mlflow.start_run(run_name="train", nested=True) as run:
            result.train_run_id = run.info.run_id
            mlflow.set_tag("ratchet.stage", "train")
            mlflow.log_params({"champion_version": result.champion_version, "rows": rows.num_rows})
            mlflow.set_tag("span_id", span.span_id)
            if span.manifest is not None:  # lineage: checkpoint -> span -> offsets -> events
                log_span_input(span.path, span.manifest)
            metrics = run_training(
                champion_dir, rows, self.config.trainer, out_dir,
                current_version=result.champion_version,
            )
            mlflow.log_metrics({k: float(v) for k, v in metrics.items() if _is_number(v)})
            return registry.log_checkpoint(
                out_dir,
                model_name=self.config.model_name,
                alias=registry.CANDIDATE,
                tags={
                    "ratchet.parent_version": str(result.champion_version),
                    "ratchet.span_id": span.span_id,
                },
            )

    def _gate(self, candidate: registry.CheckpointRef, result: CycleResult):
        from gating.gate import run_gate

        verdict = run_gate(
            tracking_uri=self.tracking_uri,
            model_name=self.config.model_name,
            candidate_version=candidate.version,
            champion_version=result.champion_version,
            config=self.config.gate,
            workdir=self.workdir / "gate",
        )
        result.gate_run_id = verdict.run_id
        result.gate_tasks = verdict.candidate.n_tasks
        change = next((g for g in verdict.gates if g.name == "pass_rate_change"), None)
        if change is not None:
            result.gate_ci_low, result.gate_ci_high = change.ci_low, change.ci_high
        result.candidate_pass_rate = verdict.candidate.pass_rate
        result.candidate_tokens = verdict.candidate.mean_completion_tokens
        result.candidate_score = verdict.candidate.score
        if verdict.champion is not None:
            result.champion_pass_rate = verdict.champion.pass_rate
        return verdict

    def _deploy(self, candidate: registry.CheckpointRef) -> None:
        import mlflow

        with mlflow.start_run(run_name="deploy", nested=True):
            mlflow.set_tag("ratchet.stage", "deploy")
            start = time.perf_counter()
            self.fleet.rolling_reload(candidate.version)
            mlflow.log_metrics(
                {"reload_seconds": time.perf_counter() - start, "version": candidate.version}
            )


def _outcome(result: CycleResult) -> str:
    if result.skipped:
        return "skipped"
    return "promoted" if result.promoted else "rejected"


def _is_number(value: object) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)
