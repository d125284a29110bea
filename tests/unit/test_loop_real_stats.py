"""bench/loop_real.py's statistics: pass rates grouped by independent function (prompt text when a
task has none), the paired final-minus-first delta resampling those clusters, a summary carrying
every documented key, and the merge of two arms."""

import argparse
import json
from pathlib import Path

import pytest

from bench.loop_real import by_cluster, paired_delta, summarise

KEYS = {"cycles", "pass_first", "pass_final", "ci_low", "ci_high", "placebo_delta",
        "humaneval_first", "humaneval_final", "promotions", "placebo_promotions", "per_cycle"}


def test_by_cluster_groups_repeated_keys():
    assert by_cluster(["a", "a", "b", "c"], [True, False, False, True]) == {
        "a": 0.5, "b": 0.0, "c": 1.0}


def test_paired_delta_is_the_mean_over_prompts_with_a_bracketing_interval():
    first = {"a": 0.5, "b": 0.0, "c": 1.0}
    final = {"a": 1.0, "b": 1.0, "c": 1.0}
    delta, low, high = paired_delta(first, final)
    assert delta == pytest.approx(0.5)  # (0.5 + 1 + 0) / 3
    assert 0.0 <= low <= delta <= high <= 1.0
    same, lo2, hi2 = paired_delta(first, first)
    assert (same, lo2, hi2) == (0.0, 0.0, 0.0)
    with pytest.raises(ValueError, match="different clusters"):
        paired_delta(first, {"a": 1.0})


def test_summary_has_every_key_and_counts_promotions_per_arm():
    args = argparse.Namespace(cycles=2, requests=8, config=Path("c.json"), humaneval=0)
    sealed = [{"prompt": p} for p in ("a", "a", "b", "c")]
    rows = [{"arm": "rl", "promoted": True}, {"arm": "rl", "promoted": False},
            {"arm": "placebo", "promoted": True}]
    scores = {"first": {"passed": [True, False, False, True], "humaneval": None},
              "rl-final": {"passed": [True, True, True, True], "humaneval": None},
              "placebo-final": {"passed": [True, False, False, True], "humaneval": None}}
    out = summarise(args, rows, scores, sealed, 1.0)
    assert KEYS <= set(out)
    assert out["pass_first"] == 0.5 and out["pass_final"] == 1.0
    assert out["promotions"] == 1 and out["placebo_promotions"] == 1
    assert out["placebo_delta"] == 0.0
    assert out["ci_low"] <= 0.5 <= out["ci_high"]
    assert out["sealed_prompts"] == 3 and out["complete"] is False


def _arm_file(path, arm, first, final, cycles=1, complete=True, promoted=True):
    import json

    scores = {"first": {"version": 1, "passed": first, "humaneval": None}}
    if final is not None:
        scores[f"{arm}-final"] = {"version": 2, "passed": final, "humaneval": None}
    row = {"arm": arm, "cycle": 0, "promoted": promoted, "outcome": "promoted",
           "live_pass_rate": 0.5, "edit_persistence": 0.5, "dissatisfied_rate": 0.1,
           "gate_candidate": 0.6, "gate_champion": 0.4}
    path.write_text(json.dumps({"complete": complete, "cycles": cycles, "requests_per_cycle": 8,
                                "humaneval_problems": 0, "seconds": 10.0, "load1": 1.0,
                                "date": "2026-11-26 02:00 UTC", "scores": scores,
                                "per_cycle": [row]}))
    return path


def test_merge_joins_an_rl_and_a_placebo_file_run_side_by_side(tmp_path, capsys):
    import json

    from bench.loop_real import main
    from tasks.pyfuncs import BY_FAMILY, instances, write_jsonl

    sealed = write_jsonl(instances(BY_FAMILY["reverse_str"], 4, seed=3), tmp_path / "s.jsonl")
    rl = _arm_file(tmp_path / "rl.json", "rl", [False, False, True, False],
                   [True, True, True, False])
    pl = _arm_file(tmp_path / "pl.json", "placebo", [False, False, True, False],
                   [False, False, True, False])
    out = tmp_path / "merged.json"
    main(["--merge", str(rl), str(pl), "--sealed-file", str(sealed), "--out", str(out)])
    merged = json.loads(out.read_text())
    assert merged["pass_first"] == 0.25 and merged["pass_final"] == 0.75
    assert merged["placebo_delta"] == 0.0
    assert merged["promotions"] == 1 and merged["placebo_promotions"] == 1
    assert [r["arm"] for r in merged["per_cycle"]] == ["rl", "placebo"]
    assert merged["complete"] and merged["arms_side_by_side"]
    main(["--merge", str(rl), str(pl), "--sealed-file", str(sealed), "--out", str(out),
          "--sequential"])
    assert json.loads(out.read_text())["arms_side_by_side"] is False


def test_merge_refuses_arms_that_scored_the_first_champion_differently(tmp_path):
    import pytest

    from bench.loop_real import main
    from tasks.pyfuncs import BY_FAMILY, instances, write_jsonl

    sealed = write_jsonl(instances(BY_FAMILY["reverse_str"], 2, seed=3), tmp_path / "s.jsonl")
    rl = _arm_file(tmp_path / "rl.json", "rl", [True, False], [True, True])
    pl = _arm_file(tmp_path / "pl.json", "placebo", [False, False], [False, False])
    with pytest.raises(SystemExit, match="differently"):
        main(["--merge", str(rl), str(pl), "--sealed-file", str(sealed),
              "--out", str(tmp_path / "m.json")])


def test_merge_counts_a_placebo_cut_short_by_the_cycles_it_finished(tmp_path):
    import json

    import pytest

    from bench.loop_real import main
    from tasks.pyfuncs import BY_FAMILY, instances, write_jsonl

    sealed = write_jsonl(instances(BY_FAMILY["reverse_str"], 2, seed=3), tmp_path / "s.jsonl")
    rl = _arm_file(tmp_path / "rl.json", "rl", [True, False], [True, True], cycles=3)
    cut = _arm_file(tmp_path / "pl.json", "placebo", [True, False], None, complete=False,
                    promoted=False)
    out = tmp_path / "m.json"
    main(["--merge", str(rl), str(cut), "--sealed-file", str(sealed), "--out", str(out)])
    merged = json.loads(out.read_text())
    assert merged["placebo_delta"] == 0.0 and merged["placebo_complete"] is False
    assert "1 of 3 cycles" in merged["placebo_note"]
    promoted = _arm_file(tmp_path / "pl2.json", "placebo", [True, False], None, complete=False)
    with pytest.raises(SystemExit, match="never scored"):
        main(["--merge", str(rl), str(promoted), "--sealed-file", str(sealed), "--out", str(out)])


def test_pool_summary_pairs_each_scored_checkpoint_with_the_first_by_family():
    from bench.loop_real import pool_summary

    tasks = [{"prompt": f"p{i}", "family": fam} for i, fam in enumerate(["a", "a", "b", "b"])]
    scores = {"first": {"version": 1, "passed": [], "transfer": [True, True, False, True]},
              "rl-final": {"version": 3, "passed": [], "transfer": [False, False, False, True]},
              "rl-last-candidate": {"version": 4, "passed": [], "transfer": None}}
    out = pool_summary(tasks, scores, "transfer")
    assert out["tasks"] == 4 and out["families"] == ["a", "b"] and out["pass_first"] == 0.75
    final = out["rl-final"]
    assert final["version"] == 3 and final["pass"] == 0.25
    assert final["delta"] == pytest.approx(-0.5) and final["ci"][0] <= -0.5 <= final["ci"][1]
    assert final["per_family"] == {"a": {"tasks": 2, "functions": 2, "first": 2, "then": 0},
                                   "b": {"tasks": 2, "functions": 2, "first": 1, "then": 1}}
    assert "rl-last-candidate" not in out  # not scored on the transfer set


def test_a_version_scored_under_another_key_is_not_scored_again(tmp_path, monkeypatch):
    from bench.loop_real import _score

    class Downloaded(Exception):
        pass

    def download(*args, **kwargs):
        raise Downloaded

    monkeypatch.setattr("runtime.registry.download_checkpoint", download)

    args = argparse.Namespace(humaneval=0, transfer_tasks=[], guard_tasks=[], max_new_tokens=8,
                              batch=4)
    first = {"version": 1, "passed": [True, False], "transfer": None, "humaneval": None}
    scores = {"first": first}
    # scoring again would start by downloading the checkpoint
    _score(args, None, "m", 1, "rl-final", [{"prompt": "a"}, {"prompt": "b"}], tmp_path, scores)
    assert scores["rl-final"] == first
    args.humaneval = 164  # the first has no HumanEval figure: the final must be scored
    with pytest.raises(Downloaded):
        _score(args, None, "m", 1, "placebo-final", [{"prompt": "a"}], tmp_path, scores)


def test_without_scores_a_version_is_kept_for_a_later_scorer_and_downloaded_once(
        tmp_path, monkeypatch):
    from bench.loop_real import _score

    downloads = []

    def download(uri, name, version, dst):
        downloads.append(version)
        return dst / "ckpt"

    monkeypatch.setattr("runtime.registry.download_checkpoint", download)
    args = argparse.Namespace(humaneval=164, no_scores=True)
    scores = {}
    _score(args, None, "m", 1, "first", [], tmp_path, scores)
    _score(args, None, "m", 1, "rl-final", [], tmp_path, scores)  # still the first champion
    _score(args, None, "m", 3, "rl-last-candidate", [], tmp_path, scores)
    assert downloads == [1, 3]
    assert scores["first"] == scores["rl-final"] == {
        "version": 1, "path": str(tmp_path / "scored" / "v1" / "ckpt")}
    assert scores["rl-last-candidate"]["version"] == 3


def test_sealed_and_transfer_figures_cluster_by_function_not_prompt():
    from bench.loop_real import pool_summary

    # three prompts of one function and one prompt of another: two independent functions
    tasks = [{"prompt": f"p{i}", "family": "f", "function": fn}
             for i, fn in enumerate(["f/k=1", "f/k=1", "f/k=1", "f/k=2"])]
    first = [False, False, False, True]
    final = [True, True, True, True]
    args = argparse.Namespace(cycles=1, requests=8, config=Path("c.json"), humaneval=0,
                              transfer_tasks=tasks)
    scores = {"first": {"version": 1, "passed": first, "humaneval": None, "transfer": first},
              "rl-final": {"version": 2, "passed": final, "humaneval": None, "transfer": final}}
    out = summarise(args, [], scores, tasks, 1.0)
    assert out["sealed_prompts"] == 4 and out["sealed_functions"] == 2
    # mean over functions: (1 + 0) / 2, not over prompts (3 / 4)
    assert out["ci_low"] <= 0.5 <= out["ci_high"]
    assert out["pass_first"] == 0.25  # the pass rate stays per task
    tr = pool_summary(tasks, scores, "transfer")
    assert tr["functions"] == 2 and tr["rl-final"]["delta"] == pytest.approx(0.5)
    assert tr["rl-final"]["per_family"]["f"] == {"tasks": 4, "functions": 2, "first": 1,
                                                 "then": 4}


def test_the_carry_over_line_names_each_pool_and_its_surely_worse_family():
    from bench.loop_real import carry_over_line

    # guard: family "a" loses all 8 of its functions, "b" keeps its 8
    tasks = [{"prompt": f"{f}{i}", "family": f, "function": f"{f}/{i}"}
             for f in "ab" for i in range(8)]
    first = [True] * 16
    final = [False] * 8 + [True] * 8
    args = argparse.Namespace(cycles=1, requests=8, config=Path("c.json"), humaneval=0,
                              transfer_tasks=tasks, guard_tasks=tasks)
    scores = {"first": {"version": 1, "passed": first, "humaneval": None, "transfer": first,
                        "guard": first},
              "rl-final": {"version": 2, "passed": final, "humaneval": None, "transfer": first,
                           "guard": final}}
    out = summarise(args, [], scores, tasks, 1.0)
    drop = out["guard"]["rl-final"]["family_max_drop"]
    assert drop["family"] == "a" and drop["surely_worse"] and drop["drop"] == 1.0
    line = carry_over_line(out)
    assert line.startswith("carry-over, final vs first champion (by function): sealed -0.500 [")
    assert "transfer +0.000 [+0.000, +0.000], no family worse" in line
    assert "guard -0.500 [" in line and "worst family a -1.00 (surely worse)" in line
    # nothing promoted: the final is the first, and the rejected last candidate has its own line
    scores["rl-last-candidate"] = {**scores["rl-final"], "version": 3}
    scores["rl-final"] = {**scores["first"]}
    out = summarise(args, [], scores, tasks, 1.0)
    assert carry_over_line(out) is None
    last = carry_over_line(out, "rl-last-candidate")
    assert last.startswith("carry-over, the last candidate (not promoted) vs the first champion "
                           "(by function): sealed -0.500 [")
    assert "worst family a -1.00 (surely worse)" in last


def test_a_checkpoint_scored_on_the_same_tasks_is_not_decoded_again(tmp_path, monkeypatch):
    import argparse

    from bench import loop_real

    decoded = []

    def fake_decode(ckpt, tasks, *, max_new_tokens, batch):
        decoded.append(len(tasks))
        return [True] * len(tasks)

    # the decoder is what is counted here; the cache key and files are the real ones
    monkeypatch.setattr(loop_real, "score_sealed", fake_decode)
    monkeypatch.setattr(loop_real, "score_humaneval", lambda ckpt, n: [False] * n)
    ckpt = tmp_path / "v1"
    ckpt.mkdir()
    (ckpt / "model.safetensors").write_bytes(b"weights")
    task = {"task_id": "t1", "prompt": "p", "tests": ["assert f(1) == 1"]}
    args = argparse.Namespace(transfer_tasks=[task], guard_tasks=[], max_new_tokens=64, batch=8,
                              humaneval=3, score_cache=tmp_path / "cache")
    first = loop_real.score_checkpoint(ckpt, [task, task], args, label="v1")
    assert decoded == [2, 1] and first["humaneval"] == 0.0
    assert loop_real.score_checkpoint(ckpt, [task, task], args, label="v1") == first
    assert decoded == [2, 1]  # from the cache
    loop_real.score_checkpoint(ckpt, [task], args, label="v1")  # other tasks: decoded
    assert decoded == [2, 1, 1, 1]
    (ckpt / "model.safetensors").write_bytes(b"other weights")
    loop_real.score_checkpoint(ckpt, [task, task], args, label="v1")  # other weights: decoded
    assert decoded == [2, 1, 1, 1, 2, 1]
    args.score_cache = None
    loop_real.score_checkpoint(ckpt, [task, task], args, label="v1")
    assert decoded[-2:] == [2, 1] and len(decoded) == 8


def test_a_changed_grader_or_decoder_module_scores_a_checkpoint_again(tmp_path, monkeypatch):
    from bench import loop_real

    root = tmp_path / "repo"
    for module in ("policy/hf/decode.py", "tasks/grader.py", "trainer/loss.py"):
        (root / module).parent.mkdir(parents=True, exist_ok=True)
        (root / module).write_text("x = 1\n")
    monkeypatch.setattr(loop_real, "ROOT", root)
    ckpt = tmp_path / "v1"
    ckpt.mkdir()
    (ckpt / "model.safetensors").write_bytes(b"weights")
    args = argparse.Namespace(transfer_tasks=[], guard_tasks=[], max_new_tokens=64, humaneval=0)
    task = {"task_id": "t1", "prompt": "p", "tests": ["assert f(1) == 1"]}

    def key() -> str:
        return loop_real.fingerprint(ckpt, [task], args, humaneval=False)

    before = key()
    with pytest.raises(FileNotFoundError, match="no \\*.safetensors"):
        loop_real.fingerprint(tmp_path, [task], args, humaneval=False)  # not the checkpoint
    (root / "trainer/loss.py").write_text("x = 2\n")  # neither decodes nor grades
    assert key() == before
    (root / "tasks/grader.py").write_text("x = 2\n")
    graded = key()
    assert graded != before
    (root / "policy/hf/decode.py").write_text("x = 2\n")
    assert key() not in (before, graded)


def test_a_run_resumes_only_from_a_file_of_the_same_settings(tmp_path):
    from bench.loop_real import resume_record, run_keys

    work, out = tmp_path / "work", tmp_path / "run.json"
    work.mkdir()
    args = argparse.Namespace(cycles=4, requests=8, config=Path("c.json"), humaneval=0, seed=1,
                              arm="rl", workdir=work, out=out, max_new_tokens=64)
    rows = [{"arm": "rl", "cycle": 0, "promoted": False}]
    pending = {"arm": "rl", "cycle": 1, "served_version": 1, "stats": {}, "traffic_s": 3.0}
    recorded = {**run_keys(args), "per_cycle": rows, "scores": {"first": {"version": 1}},
                "pending": pending, "seconds": 120.0, "complete": False}
    out.write_text(json.dumps(recorded))
    record = resume_record(args)
    assert (record.rows, record.pending, record.seconds_before) == (rows, pending, 120.0)
    assert record.scores == {"first": {"version": 1}} and record.resumes == []
    assert record.commit is None  # a file written before runs recorded their commit
    out.write_text(json.dumps({**recorded, "commit": "abc1234"}))
    assert resume_record(args).commit == "abc1234"
    out.write_text(json.dumps(recorded))
    for change in ({"seed": 2}, {"arm": "placebo"}, {"cycles": 3}):
        with pytest.raises(SystemExit, match="another run"):
            resume_record(argparse.Namespace(**{**vars(args), **change}))
    out.write_text(json.dumps({**recorded, "complete": True}))
    with pytest.raises(SystemExit, match="complete"):
        resume_record(args)
    out.write_text(json.dumps(recorded))
    work.rmdir()
    with pytest.raises(SystemExit, match="gone"):
        resume_record(args)
