"""The lifetime audit: every few promotions, the champion against the model's first champion.

Each gate compares a candidate with the champion of the day, so a model can drift by steps that
are each too small to block (a guard that holds at -0.02 three times in a row lets -0.06 through).
The audit closes that gap: when ``gate.audit.every`` promotions have happened since the last
audit, the champion is compared with the anchor (the champion before the model's first
promotion) on the audit suites, the burden of proof on the champion: each suite non-inferior at
its margin and the per-family maximum-drop test over their families (gating/gates.py, the same
tests as the gate's guardrails). A pass makes the champion the version to fall back to; a
failure moves ``champion`` back to the last version that passed an audit (the anchor before any
did). Either way the audit is one MLflow run (``audit-v<champion>``) with the table, the figures
and the verdict as JSON, and the champion version carries its outcome in its tags.

The audit's state lives on the registered model, so a resumed or rescheduled loop continues it:
``ratchet.audit.anchor`` (the first champion), ``ratchet.audit.passed`` (the version to fall back
to) and ``ratchet.audit.at`` (the newest version the last audit covered). The promotions since
then are counted from the versions' own ``gate.promoted`` tags, so a cycle that resumes after a
crash counts nothing twice.

The live drift alarm is the same mechanism fed by traffic instead of suites: when the
holdback comparison (deploy/fleet/impact.py) shows the champion surely worse than the anchor,
:func:`record_drift` records a failing audit verdict on the champion (its reason and the impact
run) and settles it like any other, so ``champion`` goes back to the fallback and the version is
never promoted again.

The verdict is durable before anything acts on it: the audited version's tag ``audit.verdict``
is written (inside the audit's run) before ``champion`` moves back, and ``registry.promote``
refuses a version tagged ``audit.verdict=fail``, so a version that failed its audit is never
champion again, whatever the order in which a crash interrupts the writes. ``ratchet.audit.at``
is written last: a version with a verdict past it is an audit whose effects a crash may have cut
short, and :func:`unsettled_audit` finds it so that :func:`settle_audit` finishes them (each
write is idempotent) instead of running the audit a second time.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from gating.config import GateConfig, GuardSuite
from gating.records import GateResult, GateVerdict, SuiteResult
from gating.report import decision_line, format_table
from runtime import registry

log = logging.getLogger(__name__)

ANCHOR = "ratchet.audit.anchor"
PASSED = "ratchet.audit.passed"
AT = "ratchet.audit.at"


@dataclass(frozen=True)
class AuditPlan:
    """An audit that is due: ``champion`` against ``anchor``; ``fallback`` is where a failure
    moves ``champion``; ``promotions`` counts the promotions since the last audit."""

    champion: int
    anchor: int
    fallback: int
    promotions: int


@dataclass(frozen=True)
class AuditRecord:
    """An audit's verdict as its champion version carries it (tags ``audit.*``)."""

    champion: int
    passed: bool
    run_id: str
    decision: str
    fallback: int


def note_anchor(tracking_uri: str, model_name: str, champion_before: int | None) -> None:
    """Remember the model's first champion (the one its first promotion replaces); later calls
    leave it alone."""
    if champion_before is None:
        return
    if ANCHOR in registry.model_tags(tracking_uri, model_name):
        return
    first = str(champion_before)
    registry.set_model_tags(tracking_uri, model_name, {ANCHOR: first, PASSED: first, AT: first})


def promotions_since(tracking_uri: str, model_name: str, after: int, upto: int) -> list[int]:
    """Versions in (``after``, ``upto``] that a cycle promoted and no canary rolled back."""
    from mlflow import MlflowClient

    client = MlflowClient(tracking_uri=tracking_uri)
    found = client.search_model_versions(f"name = '{model_name}'")
    return sorted(int(mv.version) for mv in found
                  if after < int(mv.version) <= upto
                  and (mv.tags or {}).get("gate.promoted") == "true")


def audit_due(tracking_uri: str, model_name: str, every: int) -> AuditPlan | None:
    """The audit to run now, or None: none before the first promotion, none while fewer than
    ``every`` promotions happened since the last audit, none while the anchor is champion."""
    tags = registry.model_tags(tracking_uri, model_name)
    champion = registry.resolve_alias(tracking_uri, model_name, registry.CHAMPION)
    if ANCHOR not in tags or champion is None:
        return None
    anchor = int(tags[ANCHOR])
    at = int(tags.get(AT, anchor))
    promoted = promotions_since(tracking_uri, model_name, at, champion)
    if champion == anchor or len(promoted) < every:
        return None
    return AuditPlan(champion=champion, anchor=anchor, fallback=int(tags.get(PASSED, anchor)),
                     promotions=len(promoted))


def audit_suites(config: GateConfig) -> list[GuardSuite]:
    """The suites an audit runs: ``audit.suites``, else the gate's target suite (its fixed draw,
    non-inferior at ``audit.margin``) and the gate's guards."""
    audit = config.audit
    if audit is None:
        return []
    if audit.suites:
        return list(audit.suites)
    target = GuardSuite(name="target", suite=config.suite.model_copy(update={"draw": "fixed"}),
                        max_drop=audit.margin)
    return [target, *[g for g in config.guards if g.name != "target"]]


def run_audit(
    *,
    tracking_uri: str,
    model_name: str,
    plan: AuditPlan,
    config: GateConfig,
    workdir: Path,
    guard: Callable[[], None] | None = None,
    roll_back: Callable[[int], None] | None = None,
) -> GateVerdict:
    """Run the audit ``plan``, record it and act on it: a pass moves the fallback to the
    champion; a failure moves ``champion`` back to ``plan.fallback`` (compare-and-set against
    the audited champion) and calls ``roll_back(version)`` so the fleet serves it. ``guard`` is
    called before every write (a cycle's lease)."""
    from gating.gate import GateRunner

    guard = guard or (lambda: None)
    runner = GateRunner(
        tracking_uri=tracking_uri, model_name=model_name, candidate_version=plan.champion,
        champion_version=plan.anchor, workdir=workdir, promote=False, guard=guard,
        config=config.model_copy(update={"guards": audit_suites(config), "sequential": None}),
    )
    extras: dict[str, float] = {"audit.promotions": float(plan.promotions)}
    runner.setup()
    try:
        if runner.load_error is not None:
            gates = [GateResult(name="loads", value=0.0, threshold=1.0, passed=False,
                                detail=runner.load_error)]
        else:
            gates = runner.guard_gates(extras)
    finally:
        runner.cleanup()
    return _record(tracking_uri, model_name, plan, config, gates, extras, guard, roll_back)


def audit_line(v: GateVerdict, fallback: int) -> str:
    """The audit's verdict in one line, e.g. ``audit kept v7: non-inferior to the anchor v1 on
    target, solved (3 promotions)`` or ``audit rolled back v7 to v4: guard `target` ...``."""
    promotions = int(v.extras.get("audit.promotions", 0))
    if v.passed:
        suites = ", ".join(g.name.removeprefix("guard.") for g in v.gates
                           if g.name != "guard.families")
        return (f"audit kept v{v.candidate_version}: non-inferior to the anchor "
                f"v{v.champion_version} on {suites or 'no suite'}; families held "
                f"({promotions} promotions since the last audit)")
    return decision_line(v, verbs=("kept", f"audit rolled back v{v.candidate_version} to "
                                           f"v{fallback} (anchor v{v.champion_version})"))


def unsettled_audit(tracking_uri: str, model_name: str) -> AuditRecord | None:
    """The audit whose verdict is recorded on its champion version but whose effects (the alias
    moved back, the tags, the model's audit position) may not all be written: a version with a
    verdict past ``ratchet.audit.at``, the newest if several. None when every audit is settled."""
    from mlflow import MlflowClient

    tags = registry.model_tags(tracking_uri, model_name)
    if ANCHOR not in tags:
        return None
    at = int(tags.get(AT, tags[ANCHOR]))
    found = MlflowClient(tracking_uri=tracking_uri).search_model_versions(
        f"name = '{model_name}'")
    recorded = sorted((int(mv.version), mv.tags or {}) for mv in found
                      if int(mv.version) > at and registry.AUDIT_VERDICT in (mv.tags or {}))
    if not recorded:
        return None
    version, vtags = recorded[-1]
    return AuditRecord(champion=version, passed=vtags[registry.AUDIT_VERDICT] == "pass",
                       run_id=vtags.get("audit.run_id", ""),
                       decision=vtags.get("audit.decision", ""),
                       fallback=int(vtags.get("audit.fallback_version", tags.get(PASSED, at))))


def settle_audit(tracking_uri: str, model_name: str, record: AuditRecord,
                 guard: Callable[[], None] | None = None,
                 roll_back: Callable[[int], None] | None = None) -> None:
    """Act on a recorded verdict; every write is idempotent, so a run killed halfway is finished
    by running this again. A failure: ``champion`` back to the fallback (compare-and-set against
    the audited version; already there is fine), the version untagged as promoted,
    ``roll_back(fallback)``. Then the model's audit position (and, on a pass, its fallback)."""
    guard = guard or (lambda: None)
    state = {AT: str(record.champion)}
    if record.passed:
        state[PASSED] = str(record.champion)
    else:
        guard()
        try:
            registry.promote(tracking_uri, model_name, record.fallback, expected=record.champion)
        except registry.ChampionMoved as e:  # moved on by hand: not the audited version either
            log.error("audit of v%d: champion not moved back: %s", record.champion, e)
        else:
            if roll_back is not None:
                roll_back(record.fallback)
        guard()
        registry.set_version_tags(tracking_uri, model_name, record.champion, {
            "ratchet.promotion": f"rolled back by the audit to v{record.fallback}",
            "gate.promoted": "false"})
    guard()
    registry.set_model_tags(tracking_uri, model_name, state)


def _record(tracking_uri, model_name, plan: AuditPlan, config: GateConfig,
            gates: list[GateResult], extras: dict[str, float], guard, roll_back) -> GateVerdict:
    import mlflow

    from gating.gate import gate_experiment_id

    mlflow.set_tracking_uri(tracking_uri)
    passed = bool(gates) and all(g.passed for g in gates)
    guard()
    parent = mlflow.active_run()
    experiment = None if parent is not None else gate_experiment_id(tracking_uri)
    with mlflow.start_run(run_name=f"audit-v{plan.champion}", nested=parent is not None,
                          experiment_id=experiment) as run:
        verdict = GateVerdict(
            passed=passed, run_id=run.info.run_id, model_name=model_name,
            candidate_version=plan.champion, champion_version=plan.anchor, gates=gates,
            candidate=SuiteResult(tasks=[]).summary(), extras=extras)
        line = audit_line(verdict, plan.fallback)
        verdict = verdict.model_copy(update={"decision": line})
        mlflow.set_tags({
            "ratchet.stage": "audit", "audit.model": model_name,
            "audit.verdict": "pass" if passed else "fail",
            "audit.champion_version": str(plan.champion), "audit.anchor_version": str(plan.anchor),
            "audit.fallback_version": str(plan.fallback), "audit.decision": line[:5000],
            "mlflow.note.content": f"**{line}**\n\n```\n{format_table(verdict)}\n```",
            **{f"audit.{g.name}": "pass" if g.passed else "fail" for g in gates},
        })
        metrics = {f"audit.{g.name}": float(g.value) for g in gates if g.value is not None}
        metrics.update({f"audit.{g.name}.ci_low": float(g.ci_low) for g in gates
                        if g.ci_low is not None})
        mlflow.log_metrics({**metrics, **extras, "audit.passed": float(passed)})
        mlflow.log_dict(json.loads(config.model_dump_json()), "audit/config.json")
        mlflow.log_text(verdict.model_dump_json(indent=2), "audit/verdict.json")
        mlflow.log_text(format_table(verdict), "audit/report.txt")
        guard()  # the verdict on the version, before anything acts on it (module docstring)
        registry.set_version_tags(tracking_uri, model_name, plan.champion, {
            "audit.run_id": verdict.run_id, "audit.decision": line[:5000],
            "audit.fallback_version": str(plan.fallback),
            registry.AUDIT_VERDICT: "pass" if passed else "fail"})  # last: the record is whole
    record = AuditRecord(champion=plan.champion, passed=passed, run_id=verdict.run_id,
                         decision=line, fallback=plan.fallback)
    settle_audit(tracking_uri, model_name, record, guard, roll_back)
    log.info("%s", line)
    return verdict


def record_drift(tracking_uri: str, model_name: str, champion: int, anchor: int, reason: str,
                 run_id: str, guard: Callable[[], None] | None = None,
                 roll_back: Callable[[int], None] | None = None) -> AuditRecord:
    """The live drift alarm as a failed audit of ``champion``: the verdict on the version (the
    impact table's ``run_id`` and ``reason``), then :func:`settle_audit` (champion back to the
    last version that passed an audit other than this one, else ``anchor``; ``roll_back``)."""
    guard = guard or (lambda: None)
    tags = registry.model_tags(tracking_uri, model_name)
    passed = tags.get(PASSED)
    fallback = int(passed) if passed and int(passed) != champion else anchor
    line = (f"drift: champion v{champion} surely worse than the holdback's anchor v{anchor} on "
            f"{reason}; rolled back to v{fallback}")
    if ANCHOR not in tags:  # the audit's own state starts at the anchor
        guard()
        registry.set_model_tags(tracking_uri, model_name,
                                {ANCHOR: str(anchor), PASSED: str(anchor), AT: str(anchor)})
    guard()
    registry.set_version_tags(tracking_uri, model_name, champion, {
        "audit.run_id": run_id, "audit.decision": line[:5000],
        "audit.fallback_version": str(fallback), "audit.drift": reason[:4000],
        registry.AUDIT_VERDICT: "fail"})  # last: the record is whole
    record = AuditRecord(champion=champion, passed=False, run_id=run_id, decision=line,
                         fallback=fallback)
    settle_audit(tracking_uri, model_name, record, guard, roll_back)
    log.warning("%s", line)
    return record
