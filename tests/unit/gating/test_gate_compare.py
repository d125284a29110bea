"""``ratchet gates compare A B --suite FILE``: the gate's statistics on a user's own suite."""

from __future__ import annotations

import json

from gating.compare import compare_results
from gating.config import GateConfig
from gating.records import SuiteResult, TaskOutcome
from gating.report import format_table
from ratchet.cli import EXIT_USAGE, main


def _suite(passed: list[bool], kinds: list[str]) -> SuiteResult:
    return SuiteResult(tasks=[
        TaskOutcome(task_id=f"t{i}", kind=k, prompt_key=f"p{i}", passed=p, malformed=False,
                    no_edit=False, completion_tokens=6, score=float(p))
        for i, (p, k) in enumerate(zip(passed, kinds, strict=True))])


def test_a_family_that_broke_is_named_in_the_comparison():
    kinds = ["clamp"] * 8 + ["square"] * 8 + ["other"] * 184
    baseline = _suite([True] * 100 + [False] * 100, kinds)
    # the candidate wins 30 "other" tasks but loses every clamp task
    candidate = _suite([False] * 8 + [True] * 92 + [True] * 30 + [False] * 70, kinds)
    v = compare_results(baseline, candidate, GateConfig(), model_name="m", baseline_version=1,
                        candidate_version=2)
    gates = {g.name: g for g in v.gates}
    assert gates["improvement_evidence"].passed  # 30 better vs 8 worse clusters
    assert not gates["guard.families"].passed
    assert v.decision.startswith("would reject: guard `clamp` dropped 8 of 8, p = ")
    table = format_table(v)
    assert v.decision in table and "200 independent clusters" in table


def test_compare_refuses_a_missing_or_bad_suite(tmp_path, capsys):
    code = main(["gates", "compare", "1", "2", "--suite", str(tmp_path / "none.jsonl"),
                 "--tracking-uri", "http://127.0.0.1:9"])
    assert code == EXIT_USAGE and "no such file" in capsys.readouterr().err
    bad = tmp_path / "bad.jsonl"
    bad.write_text(json.dumps({"task_id": "a", "prompt": "p", "tests": [], "colour": 1}) + "\n")
    code = main(["gates", "compare", "1", "2", "--suite", str(bad),
                 "--tracking-uri", "http://127.0.0.1:9"])
    err = capsys.readouterr().err
    assert code == EXIT_USAGE and "colour" in err, err
