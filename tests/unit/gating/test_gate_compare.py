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


def _malformed(n: int, kinds: list[str]) -> SuiteResult:
    return SuiteResult(tasks=[
        TaskOutcome(task_id=f"t{i}", kind=k, prompt_key=f"p{i}", passed=False, malformed=True,
                    no_edit=False, completion_tokens=6, score=0.0)
        for i, k in zip(range(n), kinds, strict=True)])


def test_the_comparison_names_the_versions_as_given_and_warns_when_the_suite_does_not_fit():
    kinds = ["a", "b"]
    v = compare_results(_malformed(2, kinds), _malformed(2, kinds), GateConfig(), model_name="m",
                        baseline_version=3, candidate_version=5)
    table = format_table(v, sides=("v5 (B)", "v3 (A)"), title="m: v5 (B) against v3 (A)")
    head = table.splitlines()[:6]
    assert head[0] == "m: v5 (B) against v3 (A)"
    assert "champion" not in table and "(run -)" not in table
    assert any(line.startswith("warning: malformed on more than half the suite: v5 (B) 100%, "
                               "v3 (A) 100%") for line in head), head
    # 2 clusters cannot show any gain: the power figure is no share above 1
    assert "too few to detect" in table and "detects +1." not in table
