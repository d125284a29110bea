"""One cycle of the loop: ingest → train → gate → deploy, resumable, one per model at a time.

A cycle holds the model's lease (runtime/lease.py) from start to end, and its progress is a small
durable state machine (ratchet/cycle_state.py) stored beside the spans: a rerun after a crash
resumes the unfinished cycle at its stage, with the same spans and the same candidate. The train
stage takes every validated span that no gated candidate was trained on yet, so a span is
consumed only once a verdict exists for a candidate trained on it. On start, runs that a dead
cycle left RUNNING are marked KILLED (tag ``ratchet.killed_reason``) and a ``candidate`` alias
without a verdict that this cycle will not gate is tagged abandoned and removed. Promotion happens
in the deploy stage, compare-and-set: only if ``champion`` still is the version the candidate was
gated against.

A gate attempt is counted in the state before it starts; one that never finished (its process was
killed, e.g. by the answer being graded, or it raised) is counted by the next run, which re-enters
the same stage. After ``stage_max_deaths`` such attempts (default 3) the cycle records a failing
verdict instead (gate ``completes``, the reasons in its detail and in the version's tag
``gate.died``), and the deploy stage releases ``candidate``: no candidate can wedge the loop.
Train attempts are counted the same way; after ``stage_max_deaths`` of them that raised or were
killed, the cycle is skipped with the count and the reasons (its note, the cycle run's tag
``ratchet.train_failed``) and its spans count as consumed: neither a span nor a champion that
breaks training can wedge the loop.

Each attempt is one MLflow parent run with a nested run per stage; the stages talk only through
typed records: the reward spans (ingest.pipeline.SpanResult, Parquet rows of
ingest.schema.REWARD_SCHEMA), the checkpoint reference (runtime.registry.CheckpointRef) and the
gate verdict (gating.gate.GateVerdict). The fully resolved config is logged into the parent run.

The deploy stage is the canary rollout (deploy/fleet/canary.py) on the fleet the config names
(``fleet.router_url``): weight steps, the statistical judge on delayed product metrics, automatic
rollback, which restores ``champion`` and ``previous-champion``. Its verdict and per-step figures
go into the deploy run (metrics per step, ``canary/step_log.json``), onto the candidate version
(tags + description, beside the gate's record) and onto the gate run (tag ``canary.verdict``).
Without a router (and without a demo ``Fleet``), the stage moves the alias only and says so.
The rollout's outcome is saved before the lifetime audit (gating/audit.py) runs, so a deploy
stage resumed after a crash neither promotes nor rolls out again; it finishes an audit whose
verdict was recorded instead of running it twice, and a version whose audit failed is never
promoted again (``registry.promote`` refuses it).

Deliberately left out: starting services (runtime/services.py, ratchet/demo.py) and traffic
(simulation/simulator.py). A cycle only reads what is already in Kafka.
"""

from __future__ import annotations

import json
import logging
import shutil
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from ratchet.config import RatchetConfig
from ratchet.cycle_state import DIED, CycleState, CycleStore, die_point, pause_point
from runtime import registry

if TYPE_CHECKING:
    from deploy.fleet.canary import RouterTarget
    from deploy.fleet.fleet import Fleet
    from runtime.lease import ModelLease

log = logging.getLogger(__name__)

KILLED_REASON = "ratchet.killed_reason"
ABANDONED = registry.ABANDONED
GATE_DIR = "gate"
"""Folder, under a cycle's workdir, of its gate decisions (and their suite results)."""


@dataclass
class CycleResult:
    """What one cycle did, for the demo's table and for tests."""

    index: int
    run_id: str
    cycle_id: str = ""
    seq: int = 0
    """The cycle's number in its workdir, as its MLflow run is named (``cycle-0001`` …)."""
    resumed_from: str | None = None
    span_rows: int = 0
    span_ids: list[str] = field(default_factory=list)
    train_rows: int = 0
    """Rows the candidate was trained on: the span's, plus rows carried from rejected cycles."""
    dead_letters: int = 0
    span_validated: bool = False
    detector_agreement: float | None = None
    """Share of follow-ups where ingest's dissatisfied detector agrees with the client's own flag
    (None when no follow-up carried a flag)."""
    champion_version: int | None = None
    candidate_version: int | None = None
    gate_passed: bool = False
    promoted: bool = False
    candidate_pass_rate: float | None = None
    champion_pass_rate: float | None = None
    candidate_tokens: float | None = None
    candidate_score: float | None = None
    gate_ci_low: float | None = None
    """Lower bound of the interval the decision rests on: the exact McNemar test's interval of the
    net share of clusters the candidate answers better, at the primary's one-sided level (above 0
    exactly when that test promotes); the pass-rate change's bootstrap CI when the gate has no
    improvement test or decides on a margin."""
    gate_ci_high: float | None = None
    gate_tasks: int | None = None
    """Tasks in the gate suite behind the pass rates."""
    gate_alpha_k: float | None = None
    """The level this gate decision spent (gating/stats.py alpha spending)."""
    gate_evidence_low: float | None = None
    """The improvement test's lower bound at its level: the figure the promotion hangs on."""
    gate_failed: str | None = None
    """The gates the candidate failed, comma-separated (``none`` when it passed every one)."""
    gate_decision: str | None = None
    """The verdict in one line: which rule decided, with its figures (gating.report)."""
    gate_guards: dict[str, dict[str, float | None]] = field(default_factory=dict)
    """Per regression guard: candidate and champion pass rates and the change's CI."""
    gate_run_id: str | None = None
    train_run_id: str | None = None
    rolled_back: bool = False
    rollout: str | None = None
    """Canary outcome: ``promoted``, ``rolled_back``, or why nothing was rolled out."""
    audit: str | None = None
    """The lifetime audit's one line when this cycle's promotion made one due (gating/audit.py)."""
    skipped: str | None = None
    impact: dict | None = None
    """The champion against the holdback (deploy.fleet.impact.ImpactTable as JSON)."""
    drift: str | None = None
    """The drift alarm's line when the impact table showed the champion surely worse."""
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
        router: RouterTarget | None = None,
    ) -> None:
        """``fleet``: the demo's replicas, reloaded in place (no canary). ``router``: the fleet to
        roll out on; defaults to ``config.fleet.router_url`` with its admin token."""
        self.config = config
        self.tracking_uri = tracking_uri
        self.bootstrap = bootstrap
        self.workdir = workdir
        self.fleet = fleet
        if router is None and config.fleet.router_url:
            from deploy.fleet.canary import RouterTarget

            router = RouterTarget(config.fleet.router_url, config.fleet.admin_token)
        self.router = router
        self.store = CycleStore(workdir / "spans")
        self.lease: ModelLease | None = None
        self.holdback_left_out = 0
        """Rows of the last train stage left out because the holdback served them."""

    def run(self, index: int) -> CycleResult:
        """Resume the unfinished cycle, or start a new one; holds the model's lease throughout."""
        from ratchet.bootstrap import ensure_champion
        from runtime.lease import ModelLease

        lock = self.config.lock
        with ModelLease(
            self.tracking_uri, self.config.model_name,
            ttl_s=lock.ttl_s, wait_s=lock.wait_s, settle_s=lock.settle_s,
        ) as lease:
            self.lease = lease
            try:
                ensure_champion(self.config, tracking_uri=self.tracking_uri, workdir=self.workdir)
                registry.ensure_anchor(self.tracking_uri, self.config.model_name)
                return self._run_locked(index)
            finally:
                self.lease = None

    def _run_locked(self, index: int) -> CycleResult:
        import mlflow

        experiment_id = registry.use_experiment(self.tracking_uri, self.config.experiment)
        self._mark_dead_runs(experiment_id)
        state = self.store.unfinished() or self.store.new()
        resumed = state.stage if state.attempts else None
        state.attempts += 1
        with mlflow.start_run(run_name=f"cycle-{state.seq:04d} running") as parent:
            mlflow.log_dict(json.loads(self.config.model_dump_json()), "config/resolved.json")
            mlflow.log_params(key_params(self.config))
            mlflow.set_tags(self._tags("cycle", state))
            if resumed:
                mlflow.set_tag("ratchet.resumed_from", resumed)
                log.info("resuming %s at stage %s", state.cycle_id, resumed)
            state.runs["cycle"] = parent.info.run_id
            self._save(state)
            result = CycleResult(
                index=index, run_id=parent.info.run_id, cycle_id=state.cycle_id,
                seq=state.seq, resumed_from=resumed,
            )
            try:
                self._advance(state, result)
            finally:
                mlflow.log_dict(asdict(result), "cycle_result.json")
                mlflow.log_metrics({f"seconds_{k}": v for k, v in result.seconds.items()})
                self._record_summary(state, result)
                if result.rollout:  # e.g. "alias only: no fleet configured (fleet.router_url)"
                    mlflow.set_tag("ratchet.rollout", result.rollout)
        _publish_overview(self.tracking_uri, self.config.experiment)
        return result

    @staticmethod
    def _record_summary(state: CycleState, result: CycleResult) -> None:
        """What the runs table and the cross-cycle overview read: sequence number and outcome in
        the run name, versions as tags, gate figures as metrics."""
        import mlflow

        outcome = _outcome(result)
        mlflow.set_tags({
            "ratchet.outcome": outcome, "ratchet.cycle_seq": f"{state.seq:04d}",
            "mlflow.runName": f"cycle-{state.seq:04d} {outcome}",
            "ratchet.champion_version": str(result.champion_version or ""),
            "ratchet.candidate_version": str(result.candidate_version or ""),
        })
        figures = {
            "gate.candidate_pass_rate": result.candidate_pass_rate,
            "gate.champion_pass_rate": result.champion_pass_rate,
            "gate.ci_low": result.gate_ci_low, "gate.ci_high": result.gate_ci_high,
            "span_rows": result.span_rows, "train_rows": result.train_rows,
        }
        mlflow.log_metrics({k: float(v) for k, v in figures.items() if v is not None})

    def _advance(self, state: CycleState, result: CycleResult) -> None:
        ingested_now = state.stage == "started"
        if ingested_now:
            self._timed(result, "ingest", lambda: self._ingest(state, result))
        if ingested_now or state.stage == "ingested":
            self._timed(result, "impact", lambda: self._impact(state, result))
        if state.stage == "ingested":
            self._adopt_registered(state)
        self._settle_orphan_candidate(state)
        self._drop_abandoned_candidate(state)
        if state.stage == "ingested":
            self._timed(result, "train", lambda: self._train_attempt(state, result))
        if state.stage == "trained":
            self._timed(result, "gate", lambda: self._gate(state, result))
        if state.stage == "gated":
            self._timed(result, "deploy", lambda: self._deploy(state))
        _fill(result, state)

    def _timed(self, result: CycleResult, stage: str, fn):
        from runtime.progress import Heartbeat

        start = time.perf_counter()
        try:
            with Heartbeat(f"cycle {result.seq}: {stage}"):
                return fn()
        finally:
            result.seconds[stage] = round(time.perf_counter() - start, 2)
            log.info("stage %s took %.1f s", stage, result.seconds[stage],
                     extra={"terminal": False})  # the cycle's summary line gives them all

    def _guard(self) -> None:
        """Raise ``LeaseLost`` unless this cycle still holds the model's lease with its fencing
        token: called right before every write that matters (runtime/lease.py)."""
        if self.lease is not None:
            self.lease.check()

    def _save(self, state: CycleState) -> None:
        """Save the cycle's state, only while the lease is still ours (a cycle that stalled past
        it must not overwrite what the cycle that took over wrote)."""
        self._guard()
        self.store.save(state)

    def _tags(self, stage: str, state: CycleState) -> dict[str, str]:
        return {
            "ratchet.stage": stage, "ratchet.model": self.config.model_name,
            "ratchet.cycle_id": state.cycle_id,
        }

    # -- recovery ---------------------------------------------------------------------------------

    def _mark_dead_runs(self, experiment_id: str) -> list[str]:
        """Runs of this model left RUNNING: their cycle is dead (we hold the lease) -> KILLED."""
        from mlflow import MlflowClient

        client = MlflowClient(self.tracking_uri)
        running = client.search_runs(
            [experiment_id], filter_string="attributes.status = 'RUNNING'", max_results=1000
        )
        ours = {r.info.run_id for r in running
                if r.data.tags.get("ratchet.model") == self.config.model_name}
        ours |= {r.info.run_id for r in running if r.data.tags.get("mlflow.parentRunId") in ours}
        for run_id in sorted(ours):
            client.set_tag(run_id, KILLED_REASON, "its cycle process died (found RUNNING by the "
                           "next cycle holding the model's lease)")
            client.set_terminated(run_id, status="KILLED")
            log.warning("marked run %s KILLED (left RUNNING by a dead cycle)", run_id)
        return sorted(ours)

    def _adopt_registered(self, state: CycleState) -> None:
        """A train run killed after registering its candidate: take that version, don't retrain."""
        train_run = state.runs.get("train")
        if not train_run:
            return
        found = registry.versions_of_run(self.tracking_uri, self.config.model_name, train_run)
        if not found:
            return
        state.candidate_version = found[-1]
        self._guard()
        registry.set_version_tags(
            self.tracking_uri, self.config.model_name, state.candidate_version,
            self._candidate_tags(state),
        )
        registry.set_alias(self.tracking_uri, self.config.model_name, registry.CANDIDATE,
                           state.candidate_version)
        state.stage = "trained"
        state.stage_failures.pop("train", None)
        self._save(state)
        log.info("adopted v%d registered by killed train run %s", state.candidate_version,
                 train_run)

    def _settle_orphan_candidate(self, state: CycleState) -> None:
        """``candidate`` on a version without a verdict that this cycle won't gate: abandoned."""
        name = self.config.model_name
        version = registry.resolve_alias(self.tracking_uri, name, registry.CANDIDATE)
        if version is None or version == state.candidate_version:
            return
        tags = registry.version_tags(self.tracking_uri, name, version)
        if "gate.verdict" in tags or ABANDONED in tags:
            return
        self._guard()
        registry.set_version_tags(self.tracking_uri, name, version, {
            ABANDONED: f"no verdict; its cycle died before the gate (seen by {state.cycle_id})"
        })
        registry.delete_alias(self.tracking_uri, name, registry.CANDIDATE)
        log.warning("candidate v%d had no verdict: tagged abandoned", version)

    def _drop_abandoned_candidate(self, state: CycleState) -> None:
        """This cycle's own candidate was tagged abandoned by another cycle (this one stalled
        past its lease): never gate or promote it; its spans stay unconsumed for the next."""
        if state.stage not in ("trained", "gated") or state.candidate_version is None:
            return
        tags = registry.version_tags(self.tracking_uri, self.config.model_name,
                                     state.candidate_version)
        if ABANDONED in tags and tags.get("gate.promoted") != "true":
            state.stage = "skipped"
            state.note = f"candidate v{state.candidate_version} was abandoned: {tags[ABANDONED]}"
            self._save(state)
            log.warning("%s", state.note)

    # -- stages -----------------------------------------------------------------------------------

    def _ingest(self, state: CycleState, result: CycleResult) -> None:
        import mlflow

        from ingest.pipeline import run_span

        cfg = self.config.ingest
        with mlflow.start_run(run_name="ingest", nested=True):
            mlflow.set_tags(self._tags("ingest", state))
            span = run_span(
                bootstrap=self.bootstrap, group_id=cfg.group_id,
                output_root=self.workdir / "spans", config=cfg, guard=self._guard,
            )
            mlflow.log_metrics({
                "rows": span.rows, "dead_letters": span.dead_letters,
                "completions_in": span.completions_in, "signals_in": span.signals_in,
                "validated": float(span.validated),
            })
            # what the served replies looked like (cut at the cap, how long), and how many rows
            # the update can learn from, over how many families
            mlflow.log_metrics({name: span.monitors[key] for name, key in (
                ("length_cut_rate", "length_cut_rate"), ("mean_completion_tokens", "mean_length"),
                ("positive_rows", "positive_rows"), ("positive_families", "positive_families"),
            ) if key in span.monitors})
            mlflow.log_dict(span.validation_report, "validation_report.json")
            mlflow.set_tags({"span_id": span.span_id, "span_path": str(span.path)})
            if not span.validated:
                mlflow.set_tag("quarantined", "true")
            pause_point("ingest", self.workdir)
        result.dead_letters, result.span_validated = span.dead_letters, span.validated
        result.span_rows = span.rows
        result.detector_agreement = span.monitors.get("detector_agreement")
        self._choose_spans(state, result, span)

    def _impact(self, state: CycleState, result: CycleResult) -> None:
        """The impact table (deploy/fleet/impact.py) over every span: the champion that served
        them against the holdback. One MLflow run ``impact-<seq>``, ``workdir/impact/``, the
        registered model's description; the drift alarm when the champion is surely worse."""
        import mlflow
        from mlflow import MlflowClient

        from deploy.fleet.impact import format_impact, impact_from_spans, write_impact

        hb, name = self.config.fleet.holdback, self.config.model_name
        champion = registry.resolve_alias(self.tracking_uri, name, registry.CHAMPION)
        anchor = registry.resolve_alias(self.tracking_uri, name, registry.ANCHOR)
        table = impact_from_spans(self.workdir / "spans", model_name=name,
                                  champion_version=champion, anchor_version=anchor,
                                  alpha=hb.alpha, relative_scale=hb.relative_scale)
        text = format_impact(table)
        with mlflow.start_run(run_name=f"impact-{state.seq:04d}", nested=True) as run:
            mlflow.set_tags({**self._tags("impact", state),
                             "impact.champion_version": str(champion),
                             "impact.anchor_version": str(anchor),
                             "impact.drift": ",".join(table.drift) or "none",
                             "impact.split_alarm": ",".join(table.split_alarm) or "none",
                             "mlflow.note.content": f"```\n{text}\n```"})
            figures = {}
            for r in table.rows:
                for key in ("change", "low", "high", "champion", "holdback"):
                    if getattr(r, key) is not None:
                        figures[f"impact.{r.metric}.{key}"] = float(getattr(r, key))
                figures[f"impact.{r.metric}.n_champion"] = float(r.n_champion)
                figures[f"impact.{r.metric}.n_holdback"] = float(r.n_holdback)
            if figures:
                mlflow.log_metrics(figures)
            mlflow.log_dict(table.to_json(), "impact/table.json")
            mlflow.log_text(text, "impact/table.txt")
        write_impact(table, self.workdir / "impact", state.seq)
        result.impact = table.to_json()
        log.info("%s", text, extra={"terminal": False})
        if table.split_alarm:  # one version against itself: nothing to roll back, much to check
            log.warning("impact: both arms serve v%s, yet they differ on %s (A/A alarm: check "
                        "the holdback split)", champion, ", ".join(table.split_alarm))
        self._guard()
        MlflowClient(self.tracking_uri).update_registered_model(
            name, description=f"Live impact, cycle {state.seq} (champion vs holdback):\n\n"
                              f"```\n{text}\n```")
        if table.drift and hb.drift_rollback and champion is not None and anchor is not None:
            from gating.audit import record_drift

            record = record_drift(self.tracking_uri, name, champion, anchor,
                                  ", ".join(table.drift), run.info.run_id, guard=self._guard,
                                  roll_back=self._serve)
            result.drift = record.decision
            if state.stage == "ingested":  # its spans hold the drifted champion's traffic
                state.stage = "skipped"
                result.skipped = state.note = record.decision
            self._save(state)

    def _choose_spans(self, state: CycleState, result: CycleResult, span) -> None:
        """Fix the cycle's spans: every validated span not consumed yet (older ones included)."""
        spans = self.store.unconsumed_spans()
        rows = sum(spans.values())
        if not span.validated:
            state.stage = "skipped"
            state.note = f"span {span.span_id} failed validation (quarantined)"
        elif rows < self.config.min_rows_to_train:
            state.stage = "skipped"
            state.note = f"span has {rows} rows < min_rows_to_train ({len(spans)} unconsumed)"
        else:
            state.span_ids, state.span_rows = sorted(spans), dict(sorted(spans.items()))
            state.champion_version = registry.resolve_alias(
                self.tracking_uri, self.config.model_name, registry.CHAMPION
            )
            if state.champion_version is None:
                raise RuntimeError(f"no '{registry.CHAMPION}' alias on {self.config.model_name}")
            carry = self.config.carry
            if carry.enabled:
                state.carried_rows = self.store.carried_spans(state.champion_version,
                                                              carry.max_rows)
            state.stage = "ingested"
        if state.stage == "skipped":
            result.skipped = state.note
        self._save(state)

    def _candidate_tags(self, state: CycleState) -> dict[str, str]:
        return {
            "ratchet.parent_version": str(state.champion_version),
            "ratchet.span_id": ",".join(state.span_ids),
            "ratchet.span_ids": ",".join(state.span_ids),
            "ratchet.rows": str(state.rows),
            "ratchet.carried_span_ids": ",".join(state.carried_rows),
            "ratchet.train_rows": str(state.train_rows),
            "ratchet.cycle_id": state.cycle_id,
        }

    def _train_attempt(self, state: CycleState, result: CycleResult) -> None:
        """Train, counted as an attempt of the stage; after ``stage_max_deaths`` attempts that
        raised or were killed, skip the cycle with the reasons instead of training again."""
        failures = state.stage_failures.get("train", [])
        if len(failures) < self.config.stage_max_deaths:
            self._attempt(state, "train", lambda: self._train(state))
            return
        import mlflow

        reasons = "; ".join(f"{failures.count(r)}x {r}" for r in dict.fromkeys(failures))
        reason = (f"the train stage failed {len(failures)} times "
                  f"(stage_max_deaths={self.config.stage_max_deaths}): {reasons}")
        log.error("cycle %s skipped: %s", state.cycle_id, reason)
        if mlflow.active_run() is not None:
            mlflow.set_tag("ratchet.train_failed", reason[:4000])  # on the cycle's own run
        state.stage, state.note = "skipped", reason  # its spans count as consumed
        state.stage_failures.pop("train", None)
        result.skipped = reason
        self._save(state)

    def _train(self, state: CycleState) -> None:
        import mlflow

        from ingest.lineage import log_span_input
        from trainer.recipe import NoTrainableRows, run_training

        champion_dir = registry.download_checkpoint(
            self.tracking_uri, self.config.model_name, state.champion_version,
            self.workdir / "checkpoints",
        )
        rows = self._read_rows(state)
        out_dir = self.workdir / "candidates" / state.cycle_id
        with mlflow.start_run(run_name="train", nested=True) as run:
            state.runs["train"] = run.info.run_id
            self._save(state)
            mlflow.set_tags({**self._tags("train", state), "span_id": ",".join(state.span_ids),
                             "span_ids": ",".join(state.span_ids)})
            trainer = trainer_config(self.config, state)
            mlflow.log_params({
                "champion_version": state.champion_version, "rows": state.rows,
                "span_ids": ",".join(state.span_ids)[:6000], "train_rows": rows.num_rows,
                "carried_span_ids": ",".join(state.carried_rows)[:6000],
                "train_steps": trainer.steps, "holdback_rows_left_out": self.holdback_left_out,
            })
            mlflow.log_dict({**state.span_rows, **state.carried_rows}, "span_rows.json")
            for span_id in state.train_span_ids:  # lineage: checkpoint -> span -> offsets -> events
                log_span_input(*self._span_paths(span_id))
            try:
                metrics = run_training(
                    champion_dir, rows, trainer, out_dir, current_version=state.champion_version,
                )
            except NoTrainableRows as e:  # e.g. greedy rows only, with nothing to imitate
                mlflow.set_tag("ratchet.skipped", str(e))
                state.stage, state.note = "skipped", str(e)
                self.store.save(state)  # its spans count as consumed: a rerun moves on
                log.warning("cycle %s skipped: %s", state.cycle_id, e)
                return
            mlflow.log_metrics({k: float(v) for k, v in metrics.items() if _is_number(v)})
            self._guard()
            ref = registry.log_checkpoint(
                out_dir, model_name=self.config.model_name, alias=registry.CANDIDATE,
                tags=self._candidate_tags(state),
            )
            pause_point("train", self.workdir)
        state.candidate_version, state.stage = ref.version, "trained"
        self._save(state)

    def _read_rows(self, state: CycleState):
        import pyarrow as pa
        import pyarrow.parquet as pq

        from ingest.schema import upgrade_reward_table
        from trainer.data import order_by_content

        files = self.store.span_files(state.train_span_ids)
        rows = pa.concat_tables([upgrade_reward_table(pq.read_table(f)) for f in files])
        if rows.num_rows != state.train_rows:
            raise RuntimeError(f"{state.cycle_id}: spans hold {rows.num_rows} rows, the cycle "
                               f"state records {state.train_rows}")
        rows = order_by_content(rows)
        if not self.config.fleet.holdback.train_on_holdback:  # the holdback stays untouched
            from trainer.data import without_holdback

            anchor = registry.resolve_alias(self.tracking_uri, self.config.model_name,
                                            registry.ANCHOR)
            rows, self.holdback_left_out = without_holdback(
                rows, anchor_version=anchor, champion_version=state.champion_version)
            if self.holdback_left_out:
                log.info("left out %d holdback rows (anchor v%s)", self.holdback_left_out, anchor,
                         extra={"terminal": False})
        if self.config.trainer.shuffle_rewards:  # the placebo control
            from trainer.online import shuffle_rewards

            rows = shuffle_rewards(rows, f"placebo/{state.cycle_id}")
        return rows

    def _span_paths(self, span_id: str) -> tuple[Path, Path]:
        from ingest.spans import span_location

        path = span_location(self.store.span_files([span_id]))
        return path, self.store.spans.manifests / span_id

    def _gate(self, state: CycleState, result: CycleResult) -> None:
        from gating.gate import run_gate

        pause_point("gate", self.workdir)
        name, version = self.config.model_name, state.candidate_version
        tags = registry.version_tags(self.tracking_uri, name, version)
        if "gate.verdict" in tags and tags.get("gate.champion_version") == str(
            state.champion_version
        ):  # the verdict was recorded before a crash: don't gate twice
            state.verdict = {"passed": tags["gate.verdict"] == "pass",
                             "run_id": tags.get("gate.run_id"), "failed": tags.get("gate.failed"),
                             "decision": tags.get("gate.decision")}
        else:
            failures = state.stage_failures.get("gate", [])
            if len(failures) >= self.config.stage_max_deaths:
                verdict = self._gate_died(state, failures)
            else:
                verdict = self._attempt(state, "gate", lambda: run_gate(
                    tracking_uri=self.tracking_uri, model_name=name, candidate_version=version,
                    champion_version=state.champion_version, config=self.config.gate,
                    workdir=self.workdir / GATE_DIR, promote=False, guard=self._guard,
                ))
            state.verdict = {"passed": verdict.passed, "run_id": verdict.run_id,
                             "failed": ", ".join(verdict.failed_gates) or "none",
                             "decision": verdict.decision}
            result.gate_tasks = verdict.candidate.n_tasks
            change = next((g for g in verdict.gates if g.name == "pass_rate_change"), None)
            evidence = next((g for g in verdict.gates if g.name == "improvement_evidence"), None)
            decided = evidence if evidence is not None else change
            if decided is not None:
                result.gate_ci_low, result.gate_ci_high = decided.ci_low, decided.ci_high
            if evidence is not None:
                result.gate_evidence_low = evidence.ci_low
            result.gate_alpha_k = verdict.extras.get("alpha_k")
            result.gate_guards = {
                g.name.removeprefix("guard."): {
                    "candidate": verdict.extras.get(f"{g.name}.candidate_pass_rate"),
                    "champion": verdict.extras.get(f"{g.name}.champion_pass_rate"),
                    "ci_low": g.ci_low, "ci_high": g.ci_high, "passed": float(g.passed)}
                for g in verdict.gates if g.name.startswith("guard.")}
            result.candidate_pass_rate = verdict.candidate.pass_rate
            result.candidate_tokens = verdict.candidate.mean_completion_tokens
            result.candidate_score = verdict.candidate.score
            if verdict.champion is not None:
                result.champion_pass_rate = verdict.champion.pass_rate
        result.gate_failed = state.verdict.get("failed")
        result.gate_decision = state.verdict.get("decision")
        state.stage = "gated"
        self._save(state)

    def _attempt(self, state: CycleState, stage: str, fn):
        """Run one attempt of ``stage``, counted in ``state.stage_failures`` before it starts (so
        a process killed inside it is counted by the next run) and cleared once it returns. An
        exception replaces the count's reason with its own and is raised on; a lost lease is
        not the stage's failure."""
        from runtime.lease import LeaseLost

        failures = state.stage_failures.setdefault(stage, [])
        failures.append(DIED)
        self._save(state)
        die_point(stage)
        try:
            out = fn()
        except LeaseLost:
            raise
        except Exception as exc:
            failures[-1] = f"{type(exc).__name__}: {str(exc)[:300]}"
            self._save(state)
            raise
        state.stage_failures.pop(stage, None)
        return out

    def _gate_died(self, state: CycleState, failures: list[str]):
        """The gate stage ended without a verdict ``stage_max_deaths`` times: record a failing
        verdict with the reasons (the deploy stage then releases ``candidate``)."""
        from gating.gate import GateRunner

        reasons = "; ".join(f"{failures.count(r)}x {r}" for r in dict.fromkeys(failures))
        reason = (f"the gate stage ended without a verdict {len(failures)} times "
                  f"(stage_max_deaths={self.config.stage_max_deaths}): {reasons}")
        log.error("candidate v%s: %s", state.candidate_version, reason)
        verdict = GateRunner(
            tracking_uri=self.tracking_uri, model_name=self.config.model_name,
            candidate_version=state.candidate_version, champion_version=state.champion_version,
            config=self.config.gate, workdir=self.workdir / GATE_DIR, promote=False,
            guard=self._guard,
        ).record_died(reason)
        registry.set_version_tags(self.tracking_uri, self.config.model_name,
                                  state.candidate_version, {"gate.died": reason[:4000]})
        import mlflow

        mlflow.set_tag("ratchet.gate_died", reason[:4000])  # on the cycle's own run
        state.note = reason
        state.stage_failures.pop("gate", None)
        return verdict

    def _deploy(self, state: CycleState) -> None:
        """Promote (compare-and-set, under the lease) a passing candidate, then roll it out."""
        import mlflow

        with mlflow.start_run(run_name="deploy", nested=True):
            mlflow.set_tags(self._tags("deploy", state))
            pause_point("deploy", self.workdir)
            if state.verdict and "promoted" in state.verdict:  # rolled out before a crash
                promoted, rollout = state.verdict["promoted"], state.verdict["rollout"]
            else:
                promoted, rollout = False, None
                if state.verdict and state.verdict["passed"]:
                    promoted = self._promote(state)
                if promoted:
                    rollout = self._roll_out(state)
                    promoted = rollout != "rolled_back"
                state.verdict = {**(state.verdict or {}), "promoted": promoted,
                                 "rollout": rollout}
                self._save(state)
            mlflow.log_metrics({"version": state.candidate_version, "promoted": float(promoted)})
            if rollout:
                mlflow.set_tag("ratchet.rollout", rollout)
        self._release_candidate_alias(state)
        if self.config.gate.audit is not None:
            self._audit(state, promoted)
        state.stage = "deployed"
        self._save(state)
        # The registry holds the candidate (MLflow artifacts): the trainer's local copy would
        # otherwise stay, one checkpoint per cycle, for every cycle the loop ever ran.
        shutil.rmtree(self.workdir / "candidates" / state.cycle_id, ignore_errors=True)

    def _audit(self, state: CycleState, promoted: bool) -> None:
        """The lifetime audit, when this promotion makes one due (gating/audit.py): the champion
        against the model's first champion; a failure rolls the champion and the fleet back. An
        audit whose verdict was recorded before a crash is finished, not run again."""
        from gating.audit import audit_due, run_audit, settle_audit, unsettled_audit

        name = self.config.model_name
        recorded = unsettled_audit(self.tracking_uri, name)
        if recorded is not None:
            settle_audit(self.tracking_uri, name, recorded, guard=self._guard,
                         roll_back=self._serve)
            passed, run_id, decision = recorded.passed, recorded.run_id, recorded.decision
            fallback = recorded.fallback
        else:
            plan = audit_due(self.tracking_uri, name, self.config.gate.audit.every) if (
                promoted) else None
            if plan is None:  # no promotion, not due, or settled before a crash
                return
            verdict = run_audit(
                tracking_uri=self.tracking_uri, model_name=name, plan=plan,
                config=self.config.gate, workdir=self.workdir / GATE_DIR, guard=self._guard,
                roll_back=self._serve,
            )
            passed, run_id, decision = verdict.passed, verdict.run_id, verdict.decision
            fallback = plan.fallback
        state.verdict["audit"] = {"passed": passed, "run_id": run_id, "decision": decision,
                                  "rolled_back_to": None if passed else fallback}
        if not passed:
            state.note = decision
        self._save(state)

    def _serve(self, version: int) -> None:
        """Make the fleet serve ``version`` (after the audit moved ``champion`` back)."""
        if self.router is not None:
            from deploy.fleet.canary import reload_replicas

            client = self.router.client()
            client.set_canary_weight(0.0)
            groups = client.groups()
            reload_replicas(groups["stable"] + groups["canary"], version, self.router.admin_token)
        elif self.fleet is not None:
            self.fleet.rolling_reload(version)

    def _release_candidate_alias(self, state: CycleState) -> None:
        """The cycle is decided: ``candidate`` no longer names a version under evaluation (the
        version keeps its verdict tags; a promoted one is ``champion``)."""
        name = self.config.model_name
        if registry.resolve_alias(self.tracking_uri, name, registry.CANDIDATE) == (
            state.candidate_version
        ):
            self._guard()
            registry.delete_alias(self.tracking_uri, name, registry.CANDIDATE)

    def _roll_out(self, state: CycleState) -> str:
        import mlflow

        if self.router is not None:
            return self._canary(state)
        if self.fleet is not None:
            start = time.perf_counter()
            self.fleet.rolling_reload(state.candidate_version)
            mlflow.log_metric("reload_seconds", time.perf_counter() - start)
            return "reloaded (demo fleet, no canary)"
        log.warning("no fleet configured (fleet.router_url): alias moved, nothing rolled out")
        return "alias only: no fleet configured (fleet.router_url)"

    def _canary(self, state: CycleState) -> str:
        import mlflow
        from mlflow import MlflowClient

        from deploy.fleet.canary import run_canary, step_figures
        from ingest.pipeline import run_span

        cfg, name = self.config, self.config.model_name
        ctl = run_canary(
            self.router, config=cfg.rollout, tracking_uri=self.tracking_uri, model_name=name,
            stable_version=state.champion_version, canary_version=state.candidate_version,
            previous_version=state.verdict.get("previous_champion"),
            spans_root=self.workdir / "spans", horizon_s=cfg.ingest.join.horizon_s(),
            ingest_step=lambda: run_span(
                bootstrap=self.bootstrap, group_id=cfg.ingest.group_id,
                output_root=self.workdir / "spans", config=cfg.ingest,
            ),
            timeout_s=cfg.fleet.rollout_timeout_s,
            guard=None if self.lease is None else self.lease.check,
        )
        result = ctl.result()
        for i, row in enumerate(step_figures(result)):
            mlflow.log_metrics({f"canary.{k}": v for k, v in row.items()}, step=i)
        mlflow.log_dict([asdict(r) for r in result.steps], "canary/step_log.json")
        mlflow.log_metric("canary.final_weight", result.final_weight)
        reason = result.steps[-1].reason if result.steps else ""
        mlflow.set_tags({"canary.verdict": result.state, "canary.reason": reason[:4000]})
        if state.verdict.get("run_id"):  # the gate record receives the canary verdict back
            MlflowClient(self.tracking_uri).set_tag(state.verdict["run_id"], "canary.verdict",
                                                    result.state)
        if result.state == "rolled_back":
            state.note = f"canary rolled back: {reason}"
            registry.set_version_tags(self.tracking_uri, name, state.candidate_version, {
                "ratchet.promotion": f"rolled back by the canary to v{state.champion_version}",
                "gate.promoted": "false",
            })
        return result.state

    def _promote(self, state: CycleState) -> bool:
        from mlflow import MlflowClient

        name, version = self.config.model_name, state.candidate_version
        self._guard()
        if "previous_champion" not in state.verdict:  # restored if the canary rolls back
            state.verdict["previous_champion"] = registry.resolve_alias(
                self.tracking_uri, name, registry.PREVIOUS_CHAMPION)
            self._save(state)
        try:
            registry.promote(self.tracking_uri, name, version, expected=state.champion_version)
        except registry.PromotionRefused as e:
            log.error("promotion refused: %s", e)
            registry.set_version_tags(self.tracking_uri, name, version,
                                      {"ratchet.promotion": f"refused: {e}"})
            state.note = f"promotion refused: {e}"
            return False
        registry.set_version_tags(self.tracking_uri, name, version, {
            "ratchet.promotion": f"promoted over v{state.champion_version}",
            "gate.promoted": "true",
        })
        if self.config.gate.audit is not None:
            from gating.audit import note_anchor

            note_anchor(self.tracking_uri, name, state.champion_version)
        if state.verdict.get("run_id"):
            MlflowClient(self.tracking_uri).set_tag(state.verdict["run_id"], "gate.promoted",
                                                    "true")
        return True


def trainer_config(config: RatchetConfig, state: CycleState):
    """The trainer's config for a cycle; with carry's ``scale_steps`` the steps grow with the
    carried rows, so each row gets the passes a cycle without carry gives it."""
    trainer = config.trainer
    if not (config.carry.scale_steps and state.carried_rows and state.rows):
        return trainer
    steps = round(trainer.steps * state.train_rows / state.rows)
    return trainer.model_copy(update={"steps": steps})


def _fill(result: CycleResult, state: CycleState) -> None:
    result.span_ids = list(state.span_ids)
    if state.span_ids:
        result.span_rows, result.train_rows = state.rows, state.train_rows
    result.champion_version = state.champion_version
    result.candidate_version = state.candidate_version
    result.train_run_id = state.runs.get("train")
    if state.verdict:
        result.gate_run_id = state.verdict.get("run_id")
        result.gate_decision = state.verdict.get("decision")
        result.gate_passed = bool(state.verdict.get("passed"))
        result.promoted = bool(state.verdict.get("promoted"))
        result.rollout = state.verdict.get("rollout")
        result.rolled_back = result.rollout == "rolled_back"
        result.audit = (state.verdict.get("audit") or {}).get("decision")
    if state.stage == "skipped":
        result.skipped = state.note


def _outcome(result: CycleResult) -> str:
    if result.skipped:
        return "skipped"
    if result.rolled_back:
        return "rolled back"
    return "promoted" if result.promoted else "rejected"


def key_params(config: RatchetConfig) -> dict[str, str]:
    """The resolved config's key fields as run parameters, so two cycles compare in the UI."""
    t, g = config.trainer, config.gate
    return {
        "model_name": config.model_name, "trainer.steps": str(t.steps), "trainer.lr": str(t.lr),
        "trainer.batch_size": str(t.batch_size), "trainer.objective": t.objective.type,
        "trainer.kl_coef": str(t.kl_coef), "trainer.baseline": str(t.baseline),
        "gate.suite.size": str(g.suite.size), "gate.ci_level": str(g.bootstrap.confidence),
        "min_rows_to_train": str(config.min_rows_to_train),
        "ingest.drain": str(config.ingest.drain),
    }


def _publish_overview(tracking_uri: str, experiment: str) -> None:
    """Re-render the cross-cycle page; a failure here never fails the cycle."""
    from mlflow.exceptions import MlflowException

    from ratchet.history import publish

    try:
        publish(tracking_uri, experiment)
    except (MlflowException, OSError) as e:  # the overview is a view: log and go on
        log.warning("could not publish the cross-cycle overview: %s", e)


def _is_number(value: object) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)
