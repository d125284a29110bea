"""experiments/local_update.py: its arguments, the arm grid and trainer configs, the comparison
figures by hand, and a dry run on a tiny random Mixtral (the figures themselves are meaningless
there: the experiment is bench/results/local_update.json on the real preset)."""

import json
from pathlib import Path

import pytest

from bench import _common
from experiments import local_update as lu
from ratchet.config import load_config


def test_arguments_and_the_arm_grid():
    a = lu.parse_args(["--objectives", "cispo,token_clip", "--retain", "on", "--lora", "off,on",
                       "--seeds", "2", "--limit", "5"])
    assert [x["name"] for x in lu.arms(a)] == [
        "cispo/retain-on/lora-off", "cispo/retain-on/lora-on",
        "token_clip/retain-on/lora-off", "token_clip/retain-on/lora-on"]
    d = lu.parse_args([])
    assert (d.objectives, d.retain, d.lora, d.seeds, d.limit) == (
        ["token_clip", "cispo"], ["on", "off"], ["off", "on"], 3, 0)
    assert len(lu.arms(d)) == 8


@pytest.mark.parametrize("argv", [["--objectives", "ppo"], ["--retain", "maybe"],
                                  ["--seeds", "0"], ["--rows", "/nonexistent.parquet"],
                                  ["--pools", ""], ["--rows-seed", "-1"]])
def test_bad_arguments_exit(argv):
    with pytest.raises(SystemExit):
        lu.parse_args(argv)


def test_another_rows_seed_is_another_cycles_traffic_in_its_own_file(tmp_path):
    pool = [{"prompt": f"p{i}"} for i in range(50)]
    assert _common.traffic_tasks(pool, 4, 0) == pool[:4]  # what every committed run sampled
    assert [t["prompt"] for t in _common.traffic_tasks(pool[:3], 5, 0)] == ["p0", "p1", "p2", "p0",
                                                                       "p1"]
    fresh = _common.traffic_tasks(pool, 10, 1)
    assert len({t["prompt"] for t in fresh}) == 10 and fresh != pool[:10]
    assert fresh == _common.traffic_tasks(pool, 10, 1) != _common.traffic_tasks(pool, 10, 2)
    assert lu.rows_cache(tmp_path, tune=False, requests=64, seed=0).name == \
        "rows_train_64.parquet"
    assert lu.rows_cache(tmp_path, tune=True, requests=64, seed=1).name == \
        "rows_tune_64_seed1.parquet"
    assert lu.parse_args([]).rows_seed == 0
    assert lu.candidate_dir(tmp_path, "full 8 steps", 2, tune=False) == \
        tmp_path / "candidates" / "full-8-steps" / "seed2"
    assert lu.candidate_dir(tmp_path, "full 8 steps", 2, tune=False, rows_seed=1) == \
        tmp_path / "candidates" / "full-8-steps" / "rows1-seed2"


def test_each_arm_changes_only_its_own_settings():
    base = load_config(lu.CONFIG, check_paths=False).trainer
    arm = {"name": "x", "objective": "cispo", "retain": False, "lora": True}
    cfg = lu.trainer_config(base, arm, seed=2, steps=None, lora_lr=None)
    assert cfg.objective.type == "cispo" and cfg.retain.kl_coef == 0.0  # measured only
    assert cfg.trainable.scope == "lora" and cfg.lr == pytest.approx(base.lr * 10)
    assert (cfg.seed, cfg.steps, cfg.batch_size, cfg.replay) == (2, base.steps, base.batch_size,
                                                                 base.replay)
    on = lu.trainer_config(base, {**arm, "retain": True, "lora": False}, seed=0, steps=3,
                           lora_lr=1e-3)
    assert on.retain.path == base.retain.path and on.lr == base.lr and on.steps == 3


def test_comparison_by_hand():
    tasks = [{"function": "f/a", "family": "f"}, {"function": "f/a", "family": "f"},
             {"function": "g/b", "family": "g"}, {"function": "h/c", "family": "h"}]
    c = lu.compare(tasks, [True, False, True, False], [True, True, False, False])
    assert c["pass_champion"] == 0.5 and c["pass_candidate"] == 0.5
    assert c["discordant_share"] == 0.5 and c["functions"] == 3
    assert c["delta"] == pytest.approx((0.5 - 1.0 + 0.0) / 3)  # per function: f +0.5, g -1
    assert c["per_family_change"] == {"f": 1, "g": -1, "h": 0}
    assert c["verdicts"] == "=+-."
    assert c["family_max_drop"]["family"] == "g" and not c["family_max_drop"]["surely_worse"]


def test_a_family_that_lost_every_function_is_surely_worse():
    tasks = [{"function": f"{f}/{i}", "family": f} for f in "abcd" for i in range(8)]
    before = [True] * 32
    after = [f != "a" for f in "abcd" for _ in range(8)]
    c = lu.compare(tasks, before, after)
    assert c["family_max_drop"]["family"] == "a" and c["family_max_drop"]["surely_worse"]
    assert c["family_max_drop"]["p"] <= 0.05


def test_dry_run_on_a_tiny_model(tmp_path):
    out = tmp_path / "local_update.json"
    lu.main(["--tiny", "--requests", "4", "--steps", "1", "--seeds", "1", "--objectives",
             "token_clip", "--retain", "on", "--lora", "off,on", "--pools", "sealed,guard",
             "--limit", "2", "--max-new-tokens", "8", "--workdir", str(tmp_path / "w"),
             "--out", str(out)])
    r = json.loads(out.read_text())
    assert r["complete"] and r["tiny"] and r["rows"] == 4
    assert [a["name"] for a in r["arms"]] == ["token_clip/retain-on/lora-off",
                                               "token_clip/retain-on/lora-on"]
    for a in r["arms"]:
        assert set(a["pools"]) == {"sealed", "guard"}
        assert a["pools"]["sealed"]["tasks"] == 2
        assert {"kl_theta_ref_k3_final", "retain_kl_final"} <= a["train"].keys()


def test_each_sweep_setting_changes_only_what_it_names():
    base = load_config(lu.CONFIG, check_paths=False).trainer
    assert lu.sweep_config(base, {}, seed=0).model_dump() == base.model_copy(
        update={"seed": 0}).model_dump()
    cfg = lu.sweep_config(base, {"scope": "lora", "lr": 5e-4, "lora_rank": 32,
                                 "retain_kl_target": 0.01, "replay_share": 0.5}, seed=1)
    assert (cfg.trainable.scope, cfg.trainable.lora_rank, cfg.lr) == ("lora", 32, 5e-4)
    assert (cfg.retain.kl_target, cfg.replay.share, cfg.seed) == (0.01, 0.5, 1)
    assert (cfg.steps, cfg.objective, cfg.retain.path) == (base.steps, base.objective,
                                                           base.retain.path)
    with pytest.raises(ValueError):
        lu.sweep_config(base, {"beta": 1.0}, seed=0)
    by_family = lu.sweep_config(base, dict(lu.SWEEP)["full retain by family 8 prompts"], seed=0)
    assert (by_family.retain.draw, by_family.retain.prompts, by_family.retain.kl_target) == (
        "by_group", 8, 0.01)
    for name, scale in (("full neg 0.25", 0.25), ("full neg 0", 0.0)):
        neg = lu.sweep_config(base, lu.setting_overrides(dict(lu.SWEEP)[name]), seed=0)
        assert (neg.neg_adv_scale, neg.retain.kl_target, neg.lr, neg.steps) == (
            scale, 0.01, base.lr, base.steps)
    assert base.neg_adv_scale == 1.0
    named = lu.arms(lu.parse_args(["--tune", "--settings", "full retain by family"]))
    assert [a["name"] for a in named] == ["full retain by family"]  # on the tuning draw
    names = [n for n, _ in lu.SWEEP]
    assert len(set(names)) == len(names) and "full preset" in names
    halves = [lu.arms(lu.parse_args(["--tune", "--part", f"{k}/2"])) for k in (0, 1)]
    assert sorted(a["name"] for h in halves for a in h) == sorted(names)
    assert all(sum(a["overrides"].get("scope") == "lora" for a in h) == 2 for h in halves)


def _entry(name, trained, guard, transfer, kl=0.05, outside=None):
    pools = {"trained": {"delta": trained}, "guard": {"delta": guard},
             "transfer": {"delta": transfer}}
    if outside is not None:
        pools["outside"] = {"delta": outside}
    return {"name": name, "train": {"kl_theta_ref_k3_final": kl}, "pools": pools}


def test_the_choice_rule_by_hand():
    entries = [_entry("a", 0.20, -0.05, 0.10),       # most gain, but breaks guard
               _entry("b", 0.10, -0.01, 0.00),
               _entry("b", 0.14, -0.02, 0.02),        # two seeds: 0.12, -0.015, 0.01
               _entry("c", 0.12, 0.00, -0.01, kl=0.01),
               _entry("d", 0.05, 0.01, -0.03)]
    c = lu.choose(entries)
    assert sorted(c["admissible"]) == ["b", "c"]
    assert c["settings"]["b"]["seeds"] == 2
    assert c["settings"]["b"]["trained"] == pytest.approx(0.12)
    assert c["chosen"] == "c"  # tie on the trained side: the lower KL
    none = lu.choose([_entry("a", 0.2, -0.05, 0.1), _entry("d", 0.05, -0.03, -0.04)])
    assert none["admissible"] == [] and none["chosen"] == "d"


def test_the_choice_rule_holds_the_outside_side_to_the_same_floor():
    entries = [_entry("a", 0.20, 0.00, 0.00, outside=-0.05),  # breaks the neighbours
               _entry("b", 0.10, -0.01, 0.00, outside=0.01)]
    c = lu.choose(entries)
    assert c["admissible"] == ["b"] and c["chosen"] == "b"
    assert "guard and transfer and outside" in c["rule"]
    none = lu.choose([_entry("a", 0.2, 0.0, 0.0, outside=-0.05),
                      _entry("d", 0.1, -0.03, 0.0, outside=0.0)])
    assert none["admissible"] == [] and none["chosen"] == "d"  # worst side -0.03 beats -0.05
    with pytest.raises(ValueError, match="different sides"):
        lu.choose([_entry("a", 0.2, 0.0, 0.0, outside=0.0), _entry("b", 0.1, 0.0, 0.0)])


def test_rescore_adds_a_side_to_the_kept_candidates_and_chooses_again(tmp_path, capsys):
    out, work = tmp_path / "tune.json", tmp_path / "w"
    lu.main(["--tiny", "--tune", "--settings", "full preset,full 8 steps", "--requests", "4",
             "--steps", "1", "--seeds", "1", "--limit", "2", "--max-new-tokens", "8",
             "--keep-weights", "--workdir", str(work), "--out", str(out)])
    r = json.loads(out.read_text())
    full = [entry["pools"].pop("outside") for entry in r["arms"]]  # as scored before the side
    out.write_text(json.dumps(r))
    rescore = ["--tiny", "--rescore", str(out), "--sides", "outside", "--limit", "2",
               "--max-new-tokens", "8", "--workdir", str(work)]
    lu.main(rescore)
    after = json.loads(out.read_text())
    assert [e["pools"]["outside"]["verdicts"] for e in after["arms"]] == [
        f["verdicts"] for f in full]  # greedy: the same answers as when trained and scored
    assert after["choice"]["settings"]["full preset"]["outside"] == full[0]["delta"]
    del after["arms"][1]["pools"]["outside"]
    out.write_text(json.dumps(after))
    for f in lu.candidate_dir(work / "tiny", "full 8 steps", 0, tune=True).glob("*.safetensors"):
        f.unlink()
    lu.main(rescore)
    assert "outside" not in json.loads(out.read_text())["arms"][1]["pools"]
    assert "weights gone, not rescored: full 8 steps seed 0" in capsys.readouterr().out


def test_tuning_dry_run_in_parts_and_the_choice(tmp_path):
    outs = []
    for k in (0, 1):
        out = tmp_path / f"part{k}.json"
        lu.main(["--tiny", "--tune", "--part", f"{k + 3}/7", "--requests", "4", "--steps", "1",
                 "--seeds", "1", "--limit", "2", "--max-new-tokens", "8",
                 "--workdir", str(tmp_path / "w"), "--out", str(out)])
        outs.append(out)
    parts = [json.loads(p.read_text()) for p in outs]
    assert [a["name"] for a in parts[0]["arms"]] == ["full preset", "full retain by family"]
    scored = tmp_path / "w" / "tiny" / "tuning" / "full-preset" / "seed0"
    assert (scored / lu.TRAIN_METRICS).is_file()
    assert not list(scored.glob("*.safetensors"))  # a scored tuning candidate keeps no weights
    assert set(parts[0]["arms"][0]["pools"]) == {"trained", "guard", "transfer", "outside"}
    assert parts[1]["rows"] == parts[0]["rows"] == 4  # the second part reuses the rows
    merged = tmp_path / "tuning.json"
    lu.main(["--choose", *map(str, outs), "--out", str(merged)])
    r = json.loads(merged.read_text())
    assert len(r["arms"]) == 4 and r["choice"]["chosen"] in r["choice"]["settings"]


def test_a_written_champion_cache_is_read_while_a_training_run_holds_the_lock(tmp_path):
    import fcntl
    import threading

    cache = tmp_path / "champion_scores_x.json"
    cache.write_text(json.dumps({"guard": [True, False]}))
    got = []
    with open(tmp_path / ".lock", "w") as held:
        fcntl.flock(held, fcntl.LOCK_EX)  # as a training run holds it
        reader = threading.Thread(target=lambda: got.append(lu._cached(cache, "x", list)),
                                  daemon=True)
        reader.start()
        reader.join(timeout=5)
        read_while_held = list(got)
        fcntl.flock(held, fcntl.LOCK_UN)
    reader.join(timeout=5)
    assert read_while_held == [{"guard": [True, False]}]
    fresh = tmp_path / "champion_scores_y.json"
    assert lu._cached(fresh, "y", lambda: {"guard": [False]}) == {"guard": [False]}
    assert json.loads(fresh.read_text()) == {"guard": [False]}
    assert not fresh.with_suffix(".part").exists()


def test_parts_merge_when_one_scored_a_side_the_other_gained_later(tmp_path):
    def part(name: str, champion: dict) -> Path:
        out = tmp_path / f"{name}.json"
        out.write_text(json.dumps({"complete": True, "tune": False, "rows": 64,
                                   "rows_reward_mean": -0.5, "config": "c", "load": 1.0,
                                   "commit": "x", "champion": champion,
                                   "arms": [{"name": name, "seed": 0}]}))
        return out

    early = part("early", {"trained": 0.5, "guard": 0.9})
    late = part("late", {"trained": 0.5, "guard": 0.9, "outside": 0.7})
    merged = lu.merge([early, late], tmp_path / "merged.json")
    assert [a["name"] for a in merged["arms"]] == ["early", "late"]
    other = part("other", {"trained": 0.5, "guard": 0.8, "outside": 0.7})
    with pytest.raises(SystemExit, match="champion"):
        lu.merge([early, other], tmp_path / "merged.json")
    with pytest.raises(SystemExit, match="champion"):
        lu.merge([early, part("apart", {"outside": 0.7})], tmp_path / "merged.json")


def test_named_settings_on_the_pools_with_seeds_split_over_processes(tmp_path):
    a = lu.parse_args(["--settings", "full preset,lora r8 lr 5e-4", "--first-seed", "2"])
    assert [x["name"] for x in lu.arms(a)] == ["full preset", "lora r8 lr 5e-4"]
    assert lu.arms(a)[1]["overrides"] == {"scope": "lora", "lr": 5e-4}
    with pytest.raises(SystemExit):
        lu.parse_args(["--settings", "full lr 3e-3"])
    outs = []
    for first in (0, 1):
        out = tmp_path / f"s{first}.json"
        lu.main(["--tiny", "--settings", "full 8 steps", "--first-seed", str(first), "--seeds",
                 "1", "--requests", "4", "--steps", "1", "--pools", "sealed", "--limit", "2",
                 "--max-new-tokens", "8", "--workdir", str(tmp_path / "w"), "--out", str(out)])
        outs.append(out)
    merged = tmp_path / "merged.json"
    lu.main(["--choose", *map(str, outs), "--out", str(merged)])
    r = json.loads(merged.read_text())
    assert [(x["name"], x["seed"]) for x in r["arms"]] == [("full 8 steps", 0),
                                                           ("full 8 steps", 1)]
    assert "choice" not in r and not r["tune"]


def test_a_stopped_run_resumes_without_training_or_scoring_again(tmp_path, capsys):
    out = tmp_path / "r.json"
    argv = ["--tiny", "--settings", "full preset", "--requests", "4", "--steps", "1",
            "--pools", "sealed", "--limit", "2", "--max-new-tokens", "8",
            "--workdir", str(tmp_path / "w"), "--out", str(out)]
    lu.main([*argv, "--seeds", "1"])
    first = json.loads(out.read_text())
    out.write_text(json.dumps({**first, "complete": False}))  # as if stopped after seed 0
    cand = tmp_path / "w" / "tiny" / "candidates" / "full-preset"
    assert (cand / "seed0" / lu.TRAIN_METRICS).is_file()
    stamp = {f: f.stat().st_mtime_ns for f in (cand / "seed0").iterdir()}
    lu.main([*argv, "--seeds", "2"])
    again = json.loads(out.read_text())
    assert again["complete"] and [a["seed"] for a in again["arms"]] == [0, 1]
    assert again["arms"][0] == first["arms"][0]
    assert {f: f.stat().st_mtime_ns for f in (cand / "seed0").iterdir()} == stamp  # not retrained
    assert (cand / "seed1" / lu.TRAIN_METRICS).is_file()
    assert "seed 0: in " in capsys.readouterr().out


@pytest.mark.skipif(__import__("pathlib").Path("/dev/nvidiactl").exists(),
                    reason="a GPU machine: DeepSpeed detects its accelerator")
def test_the_bench_keeps_deepspeeds_accelerator_guess_off_its_output(tmp_path):
    import os
    import subprocess
    import sys

    env = {k: v for k, v in os.environ.items() if k != "DS_ACCELERATOR"}
    out = subprocess.run(
        [sys.executable, "-m", "experiments.local_update", "--tiny", "--settings", "full preset",
         "--seeds", "1", "--requests", "2", "--steps", "1", "--pools", "sealed", "--limit", "1",
         "--max-new-tokens", "4", "--workdir", str(tmp_path / "w"), "--out",
         str(tmp_path / "r.json")], capture_output=True, text=True, env=env,
        cwd=lu.ROOT, timeout=300)
    assert out.returncode == 0, out.stderr[-2000:]
    assert "Setting accelerator to CPU" not in out.stdout + out.stderr


def test_a_sweep_setting_trains_the_same_whatever_the_preset_became():
    """The preset took the chosen retain budget (0.01) after the sweep's first seed ran; a
    setting that names no budget still trains at the sweep's 0.02 on later seeds."""
    base = load_config(lu.CONFIG, check_paths=False).trainer
    assert base.retain.kl_target == 0.01  # the preset today
    sweep = dict(lu.SWEEP)
    for name in ("full preset", "full lr 2.5e-5", "lora r8 lr 5e-4", "full replay 0.5"):
        cfg = lu.sweep_config(base, lu.setting_overrides(sweep[name]), seed=1)
        assert cfg.retain.kl_target == 0.02, name
    assert lu.sweep_config(base, lu.setting_overrides(sweep["full replay 0.5"]),
                           seed=1).replay.share == 0.5
    chosen = lu.sweep_config(base, lu.setting_overrides(sweep["full retain budget 0.01"]), seed=1)
    assert (chosen.retain.kl_target, chosen.lr, chosen.replay.share) == (0.01, 5e-5, 0.25)


def test_rescore_scores_kept_pool_candidates_on_humaneval_once(tmp_path, capsys):
    out, work = tmp_path / "pools.json", tmp_path / "w"
    lu.main(["--tiny", "--settings", "full 8 steps", "--requests", "4", "--steps", "1",
             "--seeds", "1", "--limit", "2", "--max-new-tokens", "8", "--workdir", str(work),
             "--out", str(out)])
    rescore = ["--tiny", "--rescore", str(out), "--humaneval", "2", "--workdir", str(work)]
    lu.main(rescore)
    entry = json.loads(out.read_text())["arms"][0]
    he = entry["humaneval"]
    assert (he["tasks"], he["functions"], len(he["verdicts"])) == (2, 2, 2)
    assert set(he["verdicts"]) <= set("=.+-") and "tuning_draw" not in entry  # no side asked
    assert json.loads((work / "tiny" / "champion_humaneval_2.json").read_text()) in (
        [a, b] for a in (True, False) for b in (True, False))
    capsys.readouterr()
    lu.main(rescore)  # scored already: nothing to do
    assert "on HumanEval" not in capsys.readouterr().out
    assert lu.parse_args(["--rescore", str(out)]).sides == ["outside"]
    assert lu.parse_args(["--rescore", str(out), "--humaneval", "3"]).sides == []
    with pytest.raises(SystemExit):
        lu.parse_args(["--humaneval", "-1"])


def _stored_entry(lose: str) -> dict:
    """A pool candidate as a result file stores it: every task unchanged but every guard prompt
    of family ``lose`` lost, with the comparisons of today's compare() and the guard's
    per-family test as it read before families of one function were tested over prompts."""
    from tasks.pyfuncs import read_jsonl

    pools = {}
    for name in ("sealed", "transfer", "guard"):
        tasks = read_jsonl(lu.POOLS[name])
        before = [True] * len(tasks)
        after = [not (name == "guard" and t["family"] == lose) for t in tasks]
        pools[name] = lu.compare(tasks, before, after)
    pools["guard"]["family_max_drop"] = {"family": lose, "p": 0.99, "surely_worse": False}
    return {"name": "full lr 2.5e-5", "seed": 0, "pools": pools}


def test_retest_calls_a_one_function_family_from_the_stored_verdicts(tmp_path):
    path = tmp_path / "pool_run.json"
    path.write_text(json.dumps({"rows_seed": 1, "arms": [
        _stored_entry("count_even"), {"name": "old", "seed": 0, "pools": {"guard": {}}}]}))
    r = lu.retest([path])
    assert len(r["candidates"]) == 1  # the entry without verdicts is left out
    c = r["candidates"][0]
    assert (c["name"], c["seed"], c["rows_seed"]) == ("full lr 2.5e-5", 0, 1)
    guard = c["family_max_drop"]["guard"]
    assert not guard["before"]["surely_worse"]
    assert guard["after"]["family"] == "count_even" and guard["after"]["unit"] == "prompts"
    assert guard["after"]["surely_worse"] and guard["after"]["p"] <= 0.01  # 7 of 7 prompts
    assert c["stays_local"]["after"] == {"sealed": False, "transfer": True, "guard": False,
                                         "churn": True, "all": False}
    assert c["stays_local"]["before"]["guard"]


def test_stays_local_criteria_by_hand():
    def pool(ci_low, surely=False, churn=0.0):
        return {"ci_low": ci_low, "discordant_share": churn,
                "family_max_drop": {"surely_worse": surely}}

    ok = {"sealed": pool(0.01), "transfer": pool(-0.03), "guard": pool(-0.5, churn=0.0635)}
    assert lu.stays_local(ok)["all"]
    for name, bad in [("sealed", pool(0.0)), ("sealed", pool(0.05, surely=True)),
                      ("transfer", pool(-0.031)), ("transfer", pool(0.1, surely=True)),
                      ("guard", pool(0.1, surely=True))]:
        r = lu.stays_local({**ok, name: bad})
        assert not r[name] and not r["all"]
    r = lu.stays_local({**ok, "guard": pool(0.0, churn=0.064)})
    assert not r["churn"] and r["guard"] and not r["all"]


def test_validity_ranks_tuning_churn_against_guard_churn_once_per_candidate(tmp_path):
    def entry(name, seed, kl, guard, outside):
        return {"name": name, "seed": seed, "train": {"kl_theta_ref_k3_final": kl},
                "pools": {"guard": {"discordant_share": guard, "delta": -guard}},
                "tuning_draw": {"outside": {"discordant_share": outside}}}

    a, b = tmp_path / "a.json", tmp_path / "b.json"
    # outside churn rises with guard churn; the traffic KL falls with it
    a.write_text(json.dumps({"arms": [entry("x", 0, 0.4, 0.02, 0.05),
                                      entry("x", 1, 0.3, 0.04, 0.10),
                                      {"name": "unscored", "seed": 0, "train": {},
                                       "pools": {"guard": {"discordant_share": 0.5,
                                                           "delta": 0.0}}}]}))
    b.write_text(json.dumps({"arms": [entry("x again", 0, 0.4, 0.02, 0.05),  # same run as x 0
                                      entry("y", 0, 0.2, 0.06, 0.20),
                                      entry("y", 1, 0.1, 0.08, 0.30)]}))
    r = lu.validity([a, b])
    assert [(c["name"], c["seed"]) for c in r["candidates"]] == [("x", 0), ("x", 1), ("y", 0),
                                                                 ("y", 1)]
    assert all(c["stays_local"] is None for c in r["candidates"])  # no sealed/transfer verdicts
    corr = r["spearman_with_guard_discordance"]
    assert corr["tuning outside"]["candidates"] == 4
    assert corr["tuning outside"]["spearman"] == pytest.approx(1.0)
    assert corr["kl_traffic"]["spearman"] == pytest.approx(-1.0)


def test_the_churn_rule_bounds_traffic_kl_at_half_the_reference_by_hand():
    entries = [_entry("full preset", 0.30, 0.00, 0.00, kl=0.20),  # the reference: bound 0.10
               _entry("big", 0.25, 0.01, 0.00, kl=0.15),          # above the bound
               _entry("small", 0.08, 0.00, 0.00, kl=0.03),
               _entry("small", 0.10, 0.00, 0.00, kl=0.05),        # two seeds: 0.09, KL 0.04
               _entry("edge", 0.09, -0.01, 0.00, kl=0.10),        # at the bound: admitted
               _entry("broken", 0.20, -0.03, 0.00, kl=0.01)]      # below the floor
    c = lu.choose_local(entries)
    assert c["kl_bound"] == pytest.approx(0.10)
    assert sorted(c["admissible"]) == ["edge", "small"]
    assert c["chosen"] == "small"  # tie on the trained side (0.09): the lower KL
    assert c["previous_rule_chosen"] == "full preset"
    assert "0.5 x 'full preset'" in c["rule"]
    none = lu.choose_local([_entry("full preset", 0.3, 0.0, 0.0, kl=0.2),
                            _entry("b", 0.2, 0.0, 0.0, kl=0.15),
                            _entry("c", 0.2, -0.05, 0.0, kl=0.01)])
    assert none["admissible"] == [] and none["chosen"] == "b"  # lowest KL above the floor
    with pytest.raises(ValueError, match="reference"):
        lu.choose_local([_entry("b", 0.2, 0.0, 0.0)])


def test_the_committed_churn_choice_is_the_rule_on_the_committed_sweep():
    tuning = json.loads((lu.ROOT / "bench/results/local_update_tuning.json").read_text())
    committed = json.loads(lu.CHOICE_LOCAL.read_text())
    again = lu.choose_local(tuning["arms"])
    assert committed["chosen"] == again["chosen"] == "lora r8 lr 2.5e-4"
    assert committed["admissible"] == again["admissible"]


def test_stays_local_judges_the_fresh_pools_with_the_same_criteria():
    def pool(ci_low, churn=0.0):
        return {"ci_low": ci_low, "discordant_share": churn,
                "family_max_drop": {"surely_worse": False}}

    pools = {"sealed": pool(-0.1), "transfer": pool(-0.1), "guard": pool(0.0, churn=0.5),
             "sealed_fresh": pool(0.02), "transfer_fresh": pool(0.03),
             "guard_fresh": pool(0.0, churn=0.05)}
    assert not lu.stays_local(pools)["all"]
    assert lu.stays_local(pools, suffix="_fresh")["all"]
    assert not lu.stays_local({**pools, "guard_fresh": pool(0.0, churn=0.07)},
                              suffix="_fresh")["churn"]


def test_churn_counted_as_losses_only_leaves_the_gains_out():
    """40 guard tasks: 3 gained and 1 lost is a discordance of 4/40 = 0.1 (above the bar 0.0635)
    but 1/40 = 0.025 of losses; 3 lost is 0.075 either way."""
    def pool(verdicts, ci_low=0.0):
        return {"ci_low": ci_low, "discordant_share": sum(v in "+-" for v in verdicts) / 40,
                "family_max_drop": {"surely_worse": False}, "verdicts": verdicts}

    pools = {"sealed_fresh3": pool("=" * 40, 0.1), "transfer_fresh3": pool("=" * 40),
             "guard_fresh3": pool("+++-" + "=" * 36)}
    assert not lu.stays_local(pools, suffix="_fresh3")["churn"]
    assert lu.stays_local(pools, suffix="_fresh3", losses_only=True)["all"]
    pools["guard_fresh3"] = pool("---" + "=" * 37)
    assert not lu.stays_local(pools, suffix="_fresh3", losses_only=True)["churn"]


def test_the_placebo_shuffles_rewards_only_and_names_its_arms():
    import pyarrow as pa

    rows = pa.table({"prompt": [f"p{i}" for i in range(12)],
                     "reward": [1.0] * 4 + [-1.0] * 8})
    placebo = lu.shuffled_rewards(rows, seed=2)
    assert placebo.column("prompt").to_pylist() == rows.column("prompt").to_pylist()
    assert sorted(placebo.column("reward").to_pylist()) == sorted(rows.column("reward").to_pylist())
    assert placebo.column("reward").to_pylist() != rows.column("reward").to_pylist()
    assert placebo.equals(lu.shuffled_rewards(rows, seed=2))  # seeded
    args = lu.parse_args(["--settings", "full lr 2.5e-5", "--placebo"])
    assert [a["name"] for a in lu.arms(args)] == ["full lr 2.5e-5 placebo"]


def test_summary_tables_the_fresh_pools_and_names_the_failed_criteria(tmp_path):
    def pool(delta, churn=0.0, worse=None):
        return {"delta": delta, "ci_low": delta - 0.05, "ci_high": delta + 0.05,
                "discordant_share": churn, "per_family_change": {"f": -3},
                "family_max_drop": {"surely_worse": worse is not None, "family": worse,
                                    "p": 0.01}}

    pools = {"sealed_fresh": pool(0.1), "transfer_fresh": pool(0.03),
             "guard_fresh": pool(0.0, churn=0.1, worse="f")}
    path = tmp_path / "r.json"
    path.write_text(json.dumps({"arms": [{"name": "a", "seed": 0, "pools": pools,
                                          "train": {"kl_theta_ref_k3_final": 0.02}}]}))
    table = lu.summary([path], ("sealed_fresh", "transfer_fresh", "guard_fresh"))
    row = table.splitlines()[2]
    assert "+0.100 [+0.050, +0.150]" in row and "`f` -3 (p = 0.010)" in row
    assert row.endswith("| 0.100 | 0.020 | no: guard, churn |")


def test_rescore_adds_pools_to_the_kept_pool_candidates_once(tmp_path, capsys):
    out, work = tmp_path / "pools.json", tmp_path / "w"
    lu.main(["--tiny", "--settings", "full 8 steps", "--requests", "4", "--steps", "1",
             "--seeds", "1", "--pools", "guard", "--limit", "2", "--max-new-tokens", "8",
             "--workdir", str(work), "--out", str(out)])
    rescore = ["--tiny", "--rescore", str(out), "--add-pools", "guard_fresh2", "--limit", "2",
               "--max-new-tokens", "8", "--workdir", str(work)]
    assert lu.parse_args(rescore).sides == []  # no tuning side unless asked
    lu.main(rescore)
    r = json.loads(out.read_text())
    entry = r["arms"][0]
    assert set(entry["pools"]) == {"guard", "guard_fresh2"} and "tuning_draw" not in entry
    assert len(entry["pools"]["guard_fresh2"]["verdicts"]) == 2
    assert set(r["champion"]) == {"guard", "guard_fresh2"}
    capsys.readouterr()
    lu.main(rescore)  # scored already: nothing to do
    assert "guard_fresh2" not in capsys.readouterr().out.replace("rescored", "")


def test_every_whole_pool_set_is_judged_and_named_by_its_suffix():
    def pool(ci_low, churn=0.0):
        return {"ci_low": ci_low, "discordant_share": churn,
                "family_max_drop": {"surely_worse": False}}

    entry = {"pools": {"sealed_fresh2": pool(0.1), "transfer_fresh2": pool(0.0),
                       "guard_fresh2": pool(0.0, churn=0.06), "guard": pool(0.0)}}
    lu.judge_every_set(entry)
    assert entry["stays_local_fresh2"]["all"] and "stays_local" not in entry
    assert "stays_local_fresh" not in entry
    assert lu.pool_suffix(("sealed_fresh2", "guard_fresh2")) == "_fresh2"
    assert lu.pool_suffix(("sealed_fresh", "guard_fresh")) == "_fresh"
    assert lu.pool_suffix(("sealed", "guard_fresh2")) == ""


def test_each_candidate_is_set_against_its_own_placebo_by_hand(tmp_path):
    n = 72  # guard_fresh2
    real = {"arms": [
        {"name": "a", "seed": 0, "pools": {"guard_fresh2": {"verdicts": "+" * n, "delta": 1.0},
                                           "sealed": {"verdicts": "=", "delta": 0.0}}},
        {"name": "a", "seed": 1, "pools": {"guard_fresh2": {"verdicts": "=" * 36 + "-" * 36,
                                                            "delta": -0.5}}},
        {"name": "b", "seed": 0, "pools": {"guard_fresh2": {"verdicts": "=" * n, "delta": 0.0}}}]}
    placebo = {"arms": [
        {"name": "a placebo", "seed": 0, "pools": {"guard_fresh2": {"verdicts": "." * n,
                                                                    "delta": 0.0}}},
        {"name": "a placebo", "seed": 1, "pools": {"guard_fresh2": {"verdicts": "=" * n,
                                                                    "delta": 0.0}}}]}
    rows = lu.versus(real, placebo, ["guard_fresh2", "sealed"])
    assert [(r["name"], r["seed"], r["pool"]) for r in rows] == [
        ("a", 0, "guard_fresh2"), ("a", 1, "guard_fresh2")]  # b has no placebo; sealed: one side
    first, second = rows
    assert (first["delta"], first["ci_low"], first["ci_high"]) == (1.0, 1.0, 1.0)
    assert (first["pass_real"], first["pass_placebo"]) == (1.0, 0.0)
    assert second["pass_real"] == 0.5 and second["delta"] < 0 and second["ci_high"] < 0
    r, p = tmp_path / "real.json", tmp_path / "placebo.json"
    r.write_text(json.dumps(real))
    p.write_text(json.dumps(placebo))
    out = tmp_path / "versus.json"
    for _ in range(2):  # a second run replaces the pair's rows, it does not add them again
        lu.main(["--versus", str(r), str(p), "--pools", "guard_fresh2", "--out", str(out)])
    assert len(json.loads(out.read_text())["comparisons"]) == 2
    (seeds,) = json.loads(out.read_text())["by_seeds"]
    assert (seeds["real"], seeds["placebo"]) == ([1.0, -0.5], [0.0, 0.0])
    # the placebo's seeds may come in several files
    first_seed, second_seed = tmp_path / "placebo0.json", tmp_path / "placebo1.json"
    for path, arm in zip((first_seed, second_seed), placebo["arms"], strict=True):
        path.write_text(json.dumps({"arms": [arm]}))
    lu.main(["--versus", str(r), str(first_seed), str(second_seed), "--pools", "guard_fresh2",
             "--out", str(out)])
    both = json.loads(out.read_text())
    assert [x["placebo"] for x in both["by_seeds"]] == [[0.0, 0.0], [0.0, 0.0]]
    assert len(both["comparisons"]) == 4  # another file set: kept beside the first
    with pytest.raises(SystemExit):
        lu.parse_args(["--versus", str(r)])


def test_seeds_set_against_placebo_seeds_by_an_exact_permutation_test():
    assert lu.permutation_p([0.3, 0.4, 0.5], [0.0, 0.1, 0.2]) == pytest.approx(1 / 20)
    assert lu.permutation_p([0.0, 0.1, 0.2], [0.3, 0.4, 0.5]) == 1.0
    # the 20 splits of the six values into threes whose sum is at least the real 1.0:
    # {.5, .4, .3}, {.5, .4, .2}, {.5, .4, .1} and {.5, .3, .2}
    assert lu.permutation_p([0.5, 0.4, 0.1], [0.3, 0.2, 0.0]) == pytest.approx(4 / 20)

    def arm(name, seed, delta):
        return {"name": name, "seed": seed, "pools": {"sealed": {"delta": delta}}}

    real = {"arms": [arm("a", s, d) for s, d in enumerate((0.3, 0.4, 0.5))]
            + [arm("b", 0, 0.1)]}
    placebo = {"arms": [arm("a placebo", s, d) for s, d in enumerate((0.0, 0.1, 0.2))]}
    (row,) = lu.versus_by_seeds(real, placebo, ["sealed", "guard"])  # b has no placebo
    assert (row["name"], row["pool"]) == ("a", "sealed")
    assert row["difference"] == pytest.approx(0.3) and row["p"] == pytest.approx(1 / 20)
