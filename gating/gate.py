"""The promotion gate: benchmark a candidate against the champion and record the verdict.

:func:`run_gate` downloads both checkpoints from the registry, loads each through the policy plug
(``policy.loader.load_policy``: the toy or a Hugging Face directory, whichever the checkpoint
is; a candidate that does not load fails the ``loads`` gate), runs the held-out suite on each,
measures health (finite weights, expert-load entropy, KL to the champion), evaluates every gate
(gating/gates.py) and records ONE MLflow run — nested under the caller's active run if there is
one — holding each gate as a metric plus a pass/fail tag, the CIs as metrics, the resolved config
as params and an artifact, and the verdict as JSON, text and HTML. The candidate model version
gets the verdict in its tags and description, linked to that run. Only a pass moves ``champion``
(the old one becomes ``previous-champion``).

Deliberately left out: the gate arithmetic (gating/gates.py), rendering (gating/report.py) and
the optional off-policy / serving checks (gating/ope.py, gating/infra.py), which this module
only calls when the config asks for them.
"""

from __future__ import annotations

import hashlib
import json
import logging
import math
import shutil
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

from gating.config import GateConfig, SuiteConfig
from gating.gates import HealthFigures, evaluate_gates, power_figures, sampled_figures
from gating.hack_monitors import hack_figures
from gating.records import FAIL, PASS, GateResult, GateVerdict, SuiteResult
from gating.report import decision_line, format_table, render_html
from gating.stats import AlphaSpending
from gating.suite import draw_seed
from runtime import registry

if TYPE_CHECKING:
    from policy.base import Policy

log = logging.getLogger(__name__)

EXPERIMENT = "ratchet-gate"
"""Experiment of a gate run started outside any active run."""
SUITE_CACHE = "suite-cache"
"""Folder, under a gate's workdir, of its suite results, one file per suite cache key
(:func:`suite_cache_key`): the same file is the same computation wherever it was made."""


def _flatten(d: dict, prefix: str = "") -> dict[str, str]:
    out: dict[str, str] = {}
    for k, v in d.items():
        key = f"{prefix}{k}"
        if isinstance(v, dict):
            out.update(_flatten(v, f"{key}."))
        else:
            out[key] = json.dumps(v) if isinstance(v, list) else str(v)
    return out


class GateRunner:
    """One gate run: ``setup`` (download, load), ``run`` (suite, gates, record), ``cleanup``."""

    def __init__(
        self,
        *,
        tracking_uri: str,
        model_name: str,
        candidate_version: int,
        champion_version: int | None,
        config: GateConfig,
        workdir: Path,
        promote: bool = True,
        guard: Callable[[], None] | None = None,
    ) -> None:
        self.promote = promote
        self.guard = guard or (lambda: None)
        self.load_error: str | None = None
        self.tracking_uri = tracking_uri
        self.model_name = model_name
        self.started_ms = int(time.time() * 1000)
        """When the gate began (download included): the gate run's start time in MLflow."""
        self.candidate_version = candidate_version
        self.champion_version = champion_version
        self.config = config
        self.workdir = Path(workdir)
        self.candidate: Policy | None = None
        self.champion: Policy | None = None
        self.candidate_dir: Path | None = None
        self.champion_dir: Path | None = None
        self._downloads: Path | None = None
        self.setup_seconds: dict[str, float] = {}
        self.spending: AlphaSpending | None = None
        """The model's alpha-spending state (read in setup; None without a champion)."""

    # -- setup -----------------------------------------------------------------------------------
    def setup(self) -> None:
        from policy.loader import load_policy

        clock = _Clock()
        self.workdir.mkdir(parents=True, exist_ok=True)
        self._downloads = Path(tempfile.mkdtemp(prefix="checkpoints-", dir=self.workdir))
        try:
            self.candidate_dir = self._download(self.candidate_version)
            self.candidate = load_policy(self.candidate_dir)
        except Exception as e:  # a broken or missing artefact is a failing verdict, not a crash
            self.load_error = f"{type(e).__name__}: {str(e)[:500]}"
            log.warning("candidate v%d does not load: %s", self.candidate_version, self.load_error)
        if self.champion_version is not None:
            self.champion_dir = self._download(self.champion_version)
            self.champion = load_policy(self.champion_dir)
            ec = self.config.error_control
            self.spending = AlphaSpending.from_tags(
                registry.model_tags(self.tracking_uri, self.model_name), alpha=ec.alpha,
                rule=ec.rule)
        clock.lap("seconds.setup")
        self.setup_seconds = clock.laps

    def _download(self, version: int) -> Path:
        # A fresh folder per run: registry.download_checkpoint reuses a folder by name and
        # version, which would serve stale weights after the registry is re-created.
        return registry.download_checkpoint(
            self.tracking_uri, self.model_name, version, self._downloads
        )

    # -- run -------------------------------------------------------------------------------------
    def run(self) -> GateVerdict:
        from gating.health import count_nonfinite

        if self.load_error is not None:
            return self._record_load_failure()
        if self.candidate is None:
            raise RuntimeError("GateRunner.run() called before setup()")
        clock = _Clock()
        tasks, checker = self._suite()
        alpha_k = None if self.spending is None else self.spending.level()
        extras = {**self.setup_seconds, "suite.decision": float(self.decision),
                  "suite.seed": float(draw_seed(self.config.suite, self.decision))}
        if self.config.sequential is not None and self.champion is not None and alpha_k:
            tasks, cand, champ, alpha_k = self._two_looks(tasks, checker, alpha_k, extras)
        else:
            cand = self._cached_suite(self.candidate_dir, self.candidate, tasks, checker)
            champ = None
            if self.champion is not None:
                champ = self._cached_suite(self.champion_dir, self.champion, tasks, checker)
        clock.lap("seconds.suites")
        health = HealthFigures(
            nonfinite_params=count_nonfinite(self.candidate.module),
            kl_to_champion=self._kl(tasks, cand),
        )
        clock.lap("seconds.health")
        gates = evaluate_gates(cand, champ, self.config, health=health, alpha=alpha_k)
        if champ is not None:
            extras.update(power_figures(cand, champ, self.config,
                                        self.config.error_control.alpha
                                        if alpha_k is None else alpha_k))
        clock.lap("seconds.gates")
        extras.update(hack_figures(tasks, cand, champ))  # answer monitors: recorded, not gated
        extras.update(sampled_figures(cand, champ, self.config.bootstrap))  # recorded, not gated
        if champ is not None:
            extras.update(self._champion_at_its_best(tasks, checker, cand, champ))
        if self.config.guards_skip_on_fail and not all(g.passed for g in gates):
            extras["guards.skipped"] = 1.0  # rejected already: the guards cannot change it
        else:
            gates += self.guard_gates(extras)
        clock.lap("seconds.guards")
        extras["candidate.suite_seconds"] = cand.seconds
        if alpha_k is not None:
            extras["alpha_k"] = alpha_k
        gates += self._optional_gates(champ, extras)
        clock.lap("seconds.optional")
        extras.update(clock.laps)
        return self._record(cand, champ, gates, extras)

    def _champion_at_its_best(self, tasks, checker, cand: SuiteResult, champ: SuiteResult
                              ) -> dict[str, float]:
        """The champion's pass rate greedily, at the suite's temperature and at each of
        ``champion_temperatures`` (sampled, cached per version), its best of them, and the
        candidate at the serving temperature against that best: a candidate that only learned
        a lower temperature is no better than the champion at its best. Recorded, not gated."""
        s = self.config.suite
        rates = {0.0: champ.pass_rate}
        if champ.sampled_pass_rate is not None:
            rates[s.temperature] = champ.sampled_pass_rate
        for t in self.config.champion_temperatures:
            if t in rates:
                continue
            swept = s.model_copy(update={"temperature": t})
            result = self._cached_suite(self.champion_dir, self.champion, tasks, checker,
                                        f"t{t:g}", suite=swept)
            rates[t] = result.sampled_pass_rate if result.sampled_pass_rate is not None else 0.0
        out = {f"champion.pass_rate.t{t:g}": r for t, r in sorted(rates.items())}
        best_t = max(rates, key=lambda t: (rates[t], -t))
        out["champion.best_temperature"] = best_t
        out["champion.best_pass_rate"] = rates[best_t]
        served = cand.sampled_pass_rate
        if served is not None:
            out["candidate.served_minus_champion_best"] = served - rates[best_t]
        return out

    def _two_looks(self, tasks, checker, alpha_k: float, extras: dict[str, float]):
        """O'Brien-Fleming two-look suite: returns the tasks, both results and the level of the
        look that decided (config.sequential)."""
        import numpy as np
        from scipy.stats import norm

        from gating.gates import route_levels
        from gating.stats import cluster_ids, cluster_signs, mcnemar_z, obrien_fleming_bounds
        from gating.suite import prompt_key

        n1 = self.config.sequential.first_size
        first = tasks[:n1]
        keys = [prompt_key(t) for t in tasks]
        t1 = len(set(keys[:n1])) / len(set(keys))
        imp = self.config.improvement
        share = 0.0 if imp is None else imp.shorter_route_share
        # the boundaries are set on the primary route; a look's nominal level is handed back as
        # the decision level whose primary share it is
        primary = route_levels(alpha_k, self.config.error_control.rule, share)[0]
        ratio = primary / alpha_k
        c1, c2 = obrien_fleming_bounds(primary, t1) if t1 < 1.0 else (math.inf, 0.0)
        cand = self._cached_suite(self.candidate_dir, self.candidate, first, checker, "look1")
        champ = self._cached_suite(self.champion_dir, self.champion, first, checker, "look1")
        metric, unit = self.config.primary_metric, self.config.bootstrap.cluster
        d = (np.asarray(cand.primary_values(metric), dtype=float)
             - np.asarray(champ.primary_values(metric), dtype=float))
        z1 = mcnemar_z(*cluster_signs(d, None if unit == "row"
                                      else cluster_ids(cand.cluster_keys(unit))))
        extras.update({"sequential.t1": t1, "sequential.z1": z1, "sequential.c1": c1,
                       "sequential.c2": c2})
        if abs(z1) >= c1:  # a clear win or a clear loss: stop at the first look
            extras["sequential.look"] = 1.0
            return first, cand, champ, float(norm.sf(c1)) / ratio
        rest = tasks[n1:]
        cand2 = self._cached_suite(self.candidate_dir, self.candidate, rest, checker, "look2")
        champ2 = self._cached_suite(self.champion_dir, self.champion, rest, checker, "look2")
        extras["sequential.look"] = 2.0
        return tasks, _joined(cand, cand2), _joined(champ, champ2), float(norm.sf(c2)) / ratio

    def _record_load_failure(self) -> GateVerdict:
        """A candidate that does not load (shape mismatch, corrupt file) fails the ``loads`` gate;
        the verdict is recorded like any other, so the cycle goes on and the version is tagged."""
        gate = GateResult(
            name="loads", value=0.0, threshold=1.0, passed=False, detail=self.load_error or "",
        )
        return self._record(SuiteResult(tasks=[]), None, [gate], dict(self.setup_seconds))

    @property
    def decision(self) -> int:
        """Index of this gate decision of the model (1, 2, ...; 0 without a champion): picks the
        suite draw and the level alpha_k."""
        return 0 if self.spending is None else self.spending.k + 1

    def _suite(self):
        from gating.suite import build_suite

        return build_suite(self.config.suite, self.decision)

    def _run_suite(self, model: Policy, tasks, checker, suite: SuiteConfig | None = None,
                   label: str = "gate suite") -> SuiteResult:
        from gating.suite import run_suite, uses_chat

        s = suite or self.config.suite
        return run_suite(
            model, tasks, max_new_tokens=s.max_new_tokens, seed=s.seed, checker=checker,
            token_penalty=s.token_penalty, batch_size=s.batch_size, chat=uses_chat(model, s),
            samples=s.samples, temperature=s.temperature, label=label,
        )

    def suite_label(self, ckpt: Path, part: str = "", guard: str = "") -> str:
        """What a suite's progress line names: the suite (gate or a guard), the model and its
        version, and the look or temperature, e.g. ``gate: candidate v3, look 2``."""
        who = (f"candidate v{self.candidate_version}" if ckpt == self.candidate_dir
               else f"champion v{self.champion_version}")
        where = {"look1": ", look 1", "look2": ", look 2"}.get(
            part, f" at temperature {part[1:]}" if part.startswith("t") else "")
        return f"{f'guard {guard}' if guard else 'gate'}: {who}{where}"

    def _cached_suite(self, ckpt: Path, model: Policy, tasks, checker, part: str = "", *,
                      suite: SuiteConfig | None = None, guard: str = "") -> SuiteResult:
        """Greedy decoding is deterministic: a suite result is reused for the same weights and
        suite config (keyed by their hashes, so a re-created registry cannot hit a stale one);
        ``part`` names a look of a sequential gate; ``suite``: another suite than the target one
        (a guard, named by ``guard`` in its progress line)."""
        key = suite_cache_key(self.config, ckpt, suite=suite, tasks=tasks) + (
            f"-{part}" if part else "")
        path = self.workdir / SUITE_CACHE / f"{key}.json"
        if path.exists():
            return SuiteResult.model_validate_json(path.read_text())
        result = self._run_suite(model, tasks, checker, suite,
                                 label=self.suite_label(ckpt, part, guard))
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(result.model_dump_json())
        return result

    def guard_gates(self, extras: dict[str, float]) -> list[GateResult]:
        """The regression-guard suites (``config.guards``), each drawn for this decision and run
        by both models; none without a champion."""
        from gating.gates import families_gate, guard_gate
        from gating.suite import build_suite

        if self.champion is None:
            return []
        gates, pairs = [], []
        for guard in self.config.guards:
            tasks, checker = build_suite(guard.suite, self.decision)
            results = [self._cached_suite(ckpt, model, tasks, checker, suite=guard.suite,
                                          guard=guard.name)
                       for ckpt, model in ((self.candidate_dir, self.candidate),
                                           (self.champion_dir, self.champion))]
            if guard.test != "families_only":
                gates.append(guard_gate(guard, *results, self.config.bootstrap,
                                        self.config.guardrails))
            pairs.append((guard, *results))
            extras[f"guard.{guard.name}.candidate_pass_rate"] = results[0].pass_rate
            extras[f"guard.{guard.name}.champion_pass_rate"] = results[1].pass_rate
            extras[f"guard.{guard.name}.tasks"] = float(len(tasks))
        families = families_gate(pairs, self.config.bootstrap, self.config.guardrails)
        return gates + ([] if families is None else [families])

    def _kl(self, tasks, cand: SuiteResult) -> float | None:
        """KL on the candidate's own completions (of the first ``health.kl_max_tasks`` tasks),
        fed the same prompts it saw."""
        from gating.health import kl_to_champion
        from gating.suite import prompt_room, task_prompt_ids, uses_chat

        if self.champion is None:
            return None
        room = prompt_room(self.candidate.max_seq_len, self.config.suite.max_new_tokens)
        chat = uses_chat(self.candidate, self.config.suite)
        by_id = {t.task_id: t for t in tasks}
        outcomes = cand.tasks[:self.config.health.kl_max_tasks]
        prompts = [task_prompt_ids(self.candidate, by_id[o.task_id], room, chat=chat)
                   for o in outcomes]
        completions = [o.token_ids for o in outcomes]
        return kl_to_champion(self.candidate, self.champion, prompts, completions)

    def _optional_gates(self, champ: SuiteResult | None, extras: dict[str, float]) -> list:
        gates: list[GateResult] = []
        if self.config.ope is not None and self.champion_version is not None:
            from gating.ope import ope_gate

            gate, figures = ope_gate(
                self.candidate, self.config.ope, self.champion_version,
                confidence=self.config.bootstrap.confidence, seed=self.config.bootstrap.seed,
            )
            gates.append(gate)
            extras.update(figures)
        if self.config.infra is not None:
            from gating.infra import infra_gates

            infra, figures = infra_gates(
                tracking_uri=self.tracking_uri, model_name=self.model_name,
                version=self.candidate_version, config=self.config.infra,
                workdir=self.workdir / "infra", seed=self.config.suite.seed,
            )
            gates += infra
            extras.update(figures)
        return gates

    # -- record ----------------------------------------------------------------------------------
    def _record(
        self, cand: SuiteResult, champ: SuiteResult | None, gates: list[GateResult],
        extras: dict[str, float],
    ) -> GateVerdict:
        import mlflow

        mlflow.set_tracking_uri(self.tracking_uri)
        self.guard()
        with self._start_run() as run:
            verdict = GateVerdict(
                passed=all(g.passed for g in gates), run_id=run.info.run_id,
                model_name=self.model_name, candidate_version=self.candidate_version,
                champion_version=self.champion_version, gates=gates,
                candidate=cand.summary(), champion=None if champ is None else champ.summary(),
                extras=extras, promoted=self.promote and all(g.passed for g in gates),
            )
            verdict = verdict.model_copy(update={"decision": decision_line(verdict)})
            self._log_run(verdict, cand, champ)
        self._tag_version(verdict, run.info.experiment_id)
        self._spend(verdict)
        # Promote last: an alias never moves without a complete record of why.
        if verdict.promoted:
            self.guard()
            registry.promote(
                self.tracking_uri, self.model_name, self.candidate_version,
                expected=self.champion_version,
            )
        log.info("gate %s: candidate v%s vs champion %s", PASS if verdict.passed else FAIL,
                 verdict.candidate_version, verdict.champion_version,
                 extra={"terminal": False})  # the cycle's summary repeats the verdict
        log.debug("gate %s", format_table(verdict))
        return verdict

    def _start_run(self):  # -> mlflow's ActiveRun context manager
        """The gate run. Under a caller's run (a cycle) it is created as a child that started
        when the gate began, so its duration in the UI is the gate's real one. A standalone gate
        opens its run in the gate experiment at logging time (MLflow resumes a run only in the
        caller's active experiment)."""
        import mlflow
        from mlflow import MlflowClient

        name = f"gate-v{self.candidate_version}"
        parent = mlflow.active_run()
        if parent is None:
            return mlflow.start_run(run_name=name,
                                    experiment_id=gate_experiment_id(self.tracking_uri))
        run = MlflowClient(tracking_uri=self.tracking_uri).create_run(
            parent.info.experiment_id, start_time=self.started_ms, run_name=name,
            tags={"mlflow.parentRunId": parent.info.run_id})
        return mlflow.start_run(run_id=run.info.run_id, nested=True)

    def _log_run(self, v: GateVerdict, cand: SuiteResult, champ: SuiteResult | None) -> None:
        import mlflow

        config_json = self.config.model_dump_json(indent=2)
        mlflow.log_params(_flatten(json.loads(config_json), "gate."))
        mlflow.log_dict(json.loads(config_json), "gate/config.json")
        mlflow.set_tags({
            "ratchet.stage": "gate", "gate.verdict": PASS if v.passed else FAIL,
            "gate.candidate_version": str(v.candidate_version),
            "gate.champion_version": str(v.champion_version),
            "gate.promoted": str(v.promoted).lower(),
            "gate.decision": (v.decision or decision_line(v))[:5000],
            "gate.suite.decision": str(self.decision),
            "gate.suite.seed": str(draw_seed(self.config.suite, self.decision)),
            **({} if self.spending is None else {
                "gate.alpha_k": repr(self.spending.level()),
                "gate.alpha.rule": self.spending.rule}),
            **{f"gate.{g.name}": PASS if g.passed else FAIL for g in v.gates},
        })
        mlflow.log_metrics(_gate_metrics(v))
        mlflow.log_param("gate.ci_level", self.config.bootstrap.confidence)
        lineage = self._lineage()
        mlflow.set_tags(lineage)
        mlflow.set_tag("mlflow.note.content", _note(v, self.config.bootstrap.confidence, lineage))
        mlflow.log_text(v.model_dump_json(indent=2), "gate/verdict.json")
        mlflow.log_text(format_table(v), "gate/report.txt")
        if self.config.report_html:
            mlflow.log_text(render_html(v, config_json, cand, champ), "gate/report.html")
        mlflow.log_text(cand.model_dump_json(), "gate/candidate_suite.json")
        if champ is not None:
            mlflow.log_text(champ.model_dump_json(), "gate/champion_suite.json")

    def _spend(self, v: GateVerdict) -> None:
        """Count this decision in the model's alpha-spending state (a promotion-evidence pass
        earns LORD++ wealth back) and store it on the registered model, so a resumed or
        rescheduled loop continues it."""
        if self.spending is None or not v.gates or v.gates[0].name == "loads":
            return
        # LORD++ earns wealth back only for a decision that promoted (not for evidence that a
        # guardrail then overruled): the schedule's discoveries are the promotions.
        evidence = next((g for g in v.gates if g.name == "improvement_evidence"), None)
        self.spending.record(evidence is not None and evidence.passed and v.passed)
        registry.set_model_tags(self.tracking_uri, self.model_name, self.spending.to_tags())

    def _tag_version(self, v: GateVerdict, experiment_id: str) -> None:
        status = PASS if v.passed else FAIL
        champ = "none (bootstrap)" if v.champion_version is None else f"v{v.champion_version}"
        failed = ", ".join(v.failed_gates) or "none"
        # Relative to the tracking server: the link survives a new host or port.
        link = f"#/experiments/{experiment_id}/runs/{v.run_id}"
        description = (
            f"{v.decision or decision_line(v)}. "
            f"Gate {status.upper()} vs champion {champ}; failed gates: {failed}. "
            f"Pass rate {v.candidate.pass_rate:.3f}, mean tokens "
            f"{v.candidate.mean_completion_tokens:.2f}. [Gate run {v.run_id}]({link})"
            f"{' (promoted to champion)' if v.promoted else ''}"
        )
        tags = {
            "gate.verdict": status, "gate.run_id": v.run_id,
            "gate.champion_version": str(v.champion_version),
            "gate.failed": failed, "gate.decision": (v.decision or decision_line(v))[:5000],
            **{f"gate.{g.name}": status_of(g) for g in v.gates},
        }
        registry.set_version_tags(
            self.tracking_uri, self.model_name, v.candidate_version, tags, description
        )

    def _lineage(self) -> dict[str, str]:
        """Which span and which training run produced the candidate (from its version)."""
        from mlflow import MlflowClient

        client = MlflowClient(tracking_uri=self.tracking_uri)
        mv = client.get_model_version(self.model_name, str(self.candidate_version))
        out = {k: v for k, v in (mv.tags or {}).items()
               if k in ("ratchet.span_id", "ratchet.parent_version")}
        if mv.run_id:
            out["ratchet.train_run_id"] = mv.run_id
            out["ratchet.train_experiment_id"] = client.get_run(mv.run_id).info.experiment_id
        return out

    def record_died(self, reason: str) -> GateVerdict:
        """Record a failing verdict for a candidate whose gate never finished (its process died
        or crashed again and again, e.g. an answer that kills the grader's parent): one failing
        gate ``completes`` with ``reason`` as its detail, recorded like any other verdict (the
        gate run, the version's tags and description), so the caller can release the candidate.
        Loads nothing and runs no suite."""
        gate = GateResult(name="completes", value=0.0, threshold=1.0, passed=False,
                          detail=reason[:2000])
        return self._record(SuiteResult(tasks=[]), None, [gate], {})

    def cleanup(self) -> None:
        self.candidate = self.champion = None
        if self._downloads is not None:
            shutil.rmtree(self._downloads, ignore_errors=True)
            self._downloads = None


def gate_experiment_id(tracking_uri: str) -> str:
    """Id of the experiment that holds gate (and audit) runs started outside any active run,
    created if missing; the active experiment is left alone."""
    from mlflow import MlflowClient

    client = MlflowClient(tracking_uri=tracking_uri)
    exp = client.get_experiment_by_name(EXPERIMENT)
    return exp.experiment_id if exp is not None else client.create_experiment(EXPERIMENT)


def checkpoint_hash(ckpt: Path) -> str:
    """SHA-256 over every file of a checkpoint directory (relative path and content)."""
    h = hashlib.sha256()
    for f in sorted(p for p in Path(ckpt).rglob("*") if p.is_file()):
        h.update(f.relative_to(ckpt).as_posix().encode() + b"\0")
        with open(f, "rb") as fh:
            h.update(hashlib.file_digest(fh, "sha256").digest())
    return h.hexdigest()


def suite_cache_key(config: GateConfig, ckpt: Path, decision: int = 0, *,
                    suite: SuiteConfig | None = None, tasks: list | None = None) -> str:
    """Cache key of a suite result: the suite config (``suite``, else the gate's target suite),
    the draw and the whole checkpoint (config.json too: the same weights under another
    architecture config decode differently). With ``tasks`` the draw is keyed by the drawn tasks
    themselves (ids, prompts, asserts, in order), not by the decision's seed: a draw of a whole
    pool is the same at every decision, so a champion that stays champion is not decoded again."""
    suite = suite or config.suite
    h = hashlib.sha256(suite.model_dump_json().encode())
    if tasks is None:
        h.update(f"/draw-seed/{draw_seed(suite, decision)}".encode())
    else:
        h.update(b"/tasks/")
        for task in tasks:
            h.update(hashlib.sha256(repr(task).encode()).digest())
    h.update(checkpoint_hash(ckpt).encode())
    return h.hexdigest()[:24]


def _joined(a: SuiteResult, b: SuiteResult) -> SuiteResult:
    """Two looks' results as one suite result (tasks in order, expert loads added)."""
    load = [[x + y for x, y in zip(la, lb)] for la, lb in zip(a.expert_load, b.expert_load)]
    return SuiteResult(tasks=a.tasks + b.tasks, expert_load=load or a.expert_load,
                       seconds=a.seconds + b.seconds)


class _Clock:
    """Named wall-clock laps, for the verdict's extras (where does a gate's time go)."""

    def __init__(self) -> None:
        self.laps: dict[str, float] = {}
        self._last = time.perf_counter()

    def lap(self, name: str) -> None:
        now = time.perf_counter()
        self.laps[name] = now - self._last
        self._last = now


COMPARATORS = {
    ">=": "the measured value must be at least the threshold (a floor)",
    "<=": "the measured value must be at most the threshold (a ceiling)",
    "ci_high >=": "no regression: fails only if the whole CI of candidate minus champion lies "
                  "below the threshold (the upper bound must reach it)",
    "ci_low <=": "no regression: fails only if the whole CI of candidate minus champion lies "
                 "above the threshold (the lower bound must reach it)",
    "ci_low >=": "evidence of improvement: the lower CI bound of the change must clear it",
    "ci_low >": "non-inferiority (or a win): the one-sided lower bound of the change must lie "
                "above the threshold; a bound that straddles it fails",
    "ci_high <": "non-inferiority: the one-sided upper bound of the rise must stay below the "
                 "threshold; a bound that straddles it fails",
    "p >": "per-family maximum drop: fails when the family-wise p-value is at or below the "
           "threshold",
}
"""What each kind of comparison in the gate table means (shown in the gate run's note)."""


def _note(v: GateVerdict, confidence: float, lineage: dict[str, str]) -> str:
    """The gate run's description in the MLflow UI: table, CI level, comparators, lineage."""
    lines = [f"**Gate {'PASS' if v.passed else 'FAIL'}**: candidate v{v.candidate_version} vs "
             f"champion {'none' if v.champion_version is None else f'v{v.champion_version}'}: "
             f"**{v.decision or decision_line(v)}**", "",
             "improvement_evidence's value and bounds are the exact McNemar test's: the net "
             "share of independent clusters (functions, else prompts) the candidate answers "
             "better, each bound one-sided at the primary's level (the lower above 0 exactly "
             "when the test rejects). The other bounds are paired-bootstrap quantiles over the "
             "same clusters: the non-inferiority guardrails' (`ci_low >`, `ci_high <`) at "
             f"one-sided 0.05, the others' {confidence:.0%} two-sided.", "",
             f"```\n{format_table(v)}\n```", "", "Comparators:"]
    used = {g.comparator for g in v.gates}
    lines += [f"- `{k}`: {meaning}" for k, meaning in COMPARATORS.items() if k in used]
    if lineage:
        lines += ["", "Lineage: " + ", ".join(f"{k} = `{val}`" for k, val in lineage.items())]
        if "ratchet.train_run_id" in lineage:
            exp, run = lineage["ratchet.train_experiment_id"], lineage["ratchet.train_run_id"]
            lines.append(f"[training run](#/experiments/{exp}/runs/{run})")
    return "\n".join(lines)


def status_of(g: GateResult) -> str:
    return PASS if g.passed else FAIL


def _gate_metrics(v: GateVerdict) -> dict[str, float]:
    m: dict[str, float] = {"gate.passed": float(v.passed)}
    for g in v.gates:
        for suffix, x in (("", g.value), (".threshold", g.threshold), (".ci_low", g.ci_low),
                          (".ci_high", g.ci_high)):
            if x is not None:
                m[f"gate.{g.name}{suffix}"] = float(x)
        m[f"gate.{g.name}.passed"] = float(g.passed)
    for who, s in (("candidate", v.candidate), ("champion", v.champion)):
        if s is None:
            continue
        for k, x in s.model_dump().items():
            if x is not None:
                m[f"{who}.{k}"] = float(x)
    m.update({k: float(x) for k, x in v.extras.items()})
    return m


def run_gate(
    *,
    tracking_uri: str,
    model_name: str,
    candidate_version: int,
    champion_version: int | None,
    config: GateConfig,
    workdir: Path,
    promote: bool = True,
    guard: Callable[[], None] | None = None,
) -> GateVerdict:
    """Gate ``candidate_version`` against ``champion_version`` (None: absolute gates only).

    ``guard`` is called right before the verdict is written (and before a promotion); it raises
    to stop a caller that lost its right to write (a cycle's lease, runtime/lease.py).

    ``promote=False`` records the verdict and leaves ``champion`` alone (the cycle promotes in its
    deploy stage, compare-and-set under its lease); otherwise a pass promotes compare-and-set
    against ``champion_version`` (``registry.ChampionMoved`` if the champion moved meanwhile).
    """
    runner = GateRunner(
        tracking_uri=tracking_uri, model_name=model_name, candidate_version=candidate_version,
        champion_version=champion_version, config=config, workdir=workdir, promote=promote,
        guard=guard,
    )
    runner.setup()
    try:
        return runner.run()
    finally:
        runner.cleanup()

