"""Compare two registered versions on your own JSONL suite: ``ratchet gates compare A B``.

The same statistics as the gate (gating/gates.py): version B is the candidate, version A the
baseline; both answer every task of the suite greedily, and the verdict lists the superiority
test, the non-inferiority guardrails, the per-family maximum-drop test over the suite's families
and the draw's power. Nothing is recorded and no alias moves: it is how an engineer checks a
promotion against a private suite.

Deliberately left out: recording a verdict or promoting (gating/gate.py).
"""

from __future__ import annotations

import shutil
import tempfile
from pathlib import Path

from gating.config import GateConfig, GuardSuite, SuiteConfig
from gating.gates import evaluate_gates, families_gate, power_figures
from gating.records import GateVerdict, SuiteResult
from gating.report import decision_line


def compare_results(baseline: SuiteResult, candidate: SuiteResult, config: GateConfig, *,
                    model_name: str = "", baseline_version: int = 0,
                    candidate_version: int = 0) -> GateVerdict:
    """The verdict of ``candidate`` against ``baseline`` on the same tasks, at one decision's
    level (``config.error_control.alpha``); the suite's own families take the max-drop test."""
    alpha = config.error_control.alpha
    gates = evaluate_gates(candidate, baseline, config, alpha=alpha)
    family = families_gate([(GuardSuite(name="suite", suite=config.suite), candidate, baseline)],
                           config.bootstrap, config.guardrails)
    gates += [] if family is None else [family]
    passed = all(g.passed for g in gates)
    verdict = GateVerdict(
        passed=passed, run_id="-", model_name=model_name, candidate_version=candidate_version,
        champion_version=baseline_version, gates=gates, candidate=candidate.summary(),
        champion=baseline.summary(), extras=power_figures(candidate, baseline, config, alpha),
    )
    return verdict.model_copy(update={"decision": decision_line(
        verdict, ("would promote", "would reject"))})


def compare_versions(*, tracking_uri: str, model_name: str, baseline: int, candidate: int,
                     suite_path: Path, config: GateConfig, workdir: Path) -> GateVerdict:
    """Download both versions, run the whole JSONL suite on each, and compare them."""
    from gating.suite import build_suite, run_suite, uses_chat
    from policy.loader import load_policy
    from runtime import registry

    n_tasks = sum(1 for line in Path(suite_path).read_text(encoding="utf-8").split("\n")
                  if line.strip())
    suite = config.suite.model_copy(update={
        "kind": "jsonl", "path": str(suite_path), "size": max(1, min(n_tasks, 10_000)),
        "draw": "fixed"})
    SuiteConfig.model_validate(suite.model_dump())  # the same checks as a config file
    config = config.model_copy(update={"suite": suite})
    tasks, checker = build_suite(suite)
    workdir.mkdir(parents=True, exist_ok=True)
    downloads = Path(tempfile.mkdtemp(prefix="compare-", dir=workdir))
    try:
        results = []
        for version in (baseline, candidate):
            ckpt = registry.download_checkpoint(tracking_uri, model_name, version, downloads)
            policy = load_policy(ckpt)
            results.append(run_suite(
                policy, tasks, max_new_tokens=suite.max_new_tokens, seed=suite.seed,
                checker=checker, token_penalty=suite.token_penalty, batch_size=suite.batch_size,
                chat=uses_chat(policy, suite)))
            del policy
    finally:
        shutil.rmtree(downloads, ignore_errors=True)
    return compare_results(results[0], results[1], config, model_name=model_name,
                           baseline_version=baseline, candidate_version=candidate)
