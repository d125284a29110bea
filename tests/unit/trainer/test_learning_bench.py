"""bench/learning.py's controls and statistics, filtered SFT and per-task evaluation, on tiny
inputs (the experiment itself: bench/results/learning.json)."""

import pyarrow.compute as pc
import pytest

from bench import learning
from policy.toy.checkpoint import load_checkpoint, load_metadata
from tasks.toy import generate_tasks
from trainer.evaluate import evaluate
from trainer.filtered_sft import filtered_sft
from trainer.fixtures import tiny_champion


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    return tiny_champion(tmp_path_factory.mktemp("tiny"))


def test_paired_bootstrap_hand_computed():
    before = [0, 1, 0, 1] * 50
    afters = [[1, 1, 0, 1] * 50, [0, 1, 1, 1] * 50]  # per task: +0.5, 0, +0.5, 0
    delta, lo, hi = learning.paired_bootstrap(before, afters)
    assert delta == pytest.approx(0.25)
    assert lo < 0.25 < hi and hi - lo < 0.15
    same = learning.paired_bootstrap(before, [before, before])
    assert same == (0.0, 0.0, 0.0)


def test_paired_bootstrap_resamples_prompts_when_given():
    """The same 200 rows, but only 4 distinct prompts (each asked 50 times): the interval over
    prompts is far wider than over rows (4 observations, not 200)."""
    before = [0, 1, 0, 1] * 50
    afters = [[1, 1, 0, 1] * 50, [0, 1, 1, 1] * 50]
    keys = ["p0", "p1", "p2", "p3"] * 50
    _, lo_rows, hi_rows = learning.paired_bootstrap(before, afters)
    delta, lo, hi = learning.paired_bootstrap(before, afters, keys=keys)
    assert delta == pytest.approx(0.25)
    assert hi - lo > 3 * (hi_rows - lo_rows)
    distinct = learning.paired_bootstrap(before, afters, keys=[f"p{i}" for i in range(200)])
    assert distinct == learning.paired_bootstrap(before, afters)


def test_placebo_shuffles_rewards_and_keeps_everything_else(tiny):
    _, _, rows = tiny
    shuffled = learning.arm_rows("placebo", rows, seed=0)
    assert sorted(shuffled.column("reward").to_pylist()) == sorted(rows.column("reward")
                                                                    .to_pylist())
    assert shuffled.column("prompt") == rows.column("prompt")
    assert learning.arm_rows("placebo", rows, 0) == shuffled  # seeded


def test_one_sample_keeps_one_row_per_prompt(tiny):
    _, _, rows = tiny
    one = learning.arm_rows("one_sample", rows, seed=1)
    prompts = one.column("prompt").to_pylist()
    assert len(prompts) == len(set(prompts)) == len(set(rows.column("prompt").to_pylist()))


def test_filtered_sft_trains_on_positive_rows_only(tiny, tmp_path):
    model, champion, rows = tiny
    positive = int(pc.sum(pc.greater(rows.column("reward"), 0.0)).as_py() or 0)
    if positive == 0:  # the untrained tiny model: make two rows positive
        rewards = [1.0, 1.0] + rows.column("reward").to_pylist()[2:]
        rows = rows.set_column(rows.column_names.index("reward"), "reward",
                               __import__("pyarrow").array(rewards, rows.schema.field("reward")
                                                           .type))
        positive = 2
    kept = filtered_sft(champion, rows, tmp_path / "sft", steps=2, batch_size=4, lr=1e-2)
    assert kept == positive and load_metadata(tmp_path / "sft")["rows_kept"] == positive
    after = load_checkpoint(tmp_path / "sft")
    moved = any((a - b).abs().max() > 0 for a, b in zip(after.parameters(),
                                                        model.parameters()))
    assert moved
    with pytest.raises(ValueError, match="no row has reward"):
        filtered_sft(champion, rows, tmp_path / "none", steps=1, min_reward=1e9)


def test_evaluate_reports_per_task_results_in_task_order(tiny):
    model, _, _ = tiny
    tasks = generate_tasks(7, seed=0, split="fresh")
    r = evaluate(model, tasks, max_new_tokens=4, batch_size=3)
    assert len(r.passed) == len(r.tokens) == 7
    assert r.pass_rate == sum(r.passed) / 7 and r.mean_tokens == sum(r.tokens) / 7


def _fake(seed: int) -> dict:
    return {"seed": seed, "pass_after": 0.5, "passed": [True, False]}


def test_sidecar_resume_skips_finished_runs_of_the_same_settings_only(tmp_path):
    path = tmp_path / "runs.jsonl"
    common = {"config": {"lr": 1e-4}, "steps": 120, "eval": ["fresh", 2000],
              "fixture": "f1", "starts": {"champion": "c1"}}
    keys = {a: learning.job_key(common, a, None) for a in ("before", "rl", "online")}
    stale = learning.job_key({**common, "steps": 60}, "rl", None)
    assert stale != keys["rl"] and keys["rl"] != keys["online"]
    assert learning.job_key(common, "online", {"rounds": 2}) != keys["online"]
    learning.append_run(path, keys["before"], "before", 0, "champion", {"pass": 0.5})
    learning.append_run(path, keys["rl"], "rl", 0, "champion", _fake(0))
    learning.append_run(path, stale, "rl", 1, "champion", _fake(1))  # other settings
    with path.open("a") as f:
        f.write('{"key": "' + keys["rl"] + '", "arm": "rl", "seed": 2, "sta')  # cut short
    done = learning.load_runs(path)
    assert len(done) == 3
    jobs = [("before", 0, "champion")] + [("rl", s, "champion") for s in (0, 1, 2)] + [
        ("online", 0, "champion")]
    finished, pending = learning.split_jobs(jobs, keys, done)
    assert [(a, s) for a, s, _, _ in finished] == [("before", 0), ("rl", 0)]
    assert finished[1][3]["passed"] == [True, False]  # per-task results kept for the bootstrap
    assert pending == [("rl", 1, "champion"), ("rl", 2, "champion"), ("online", 0, "champion")]
    assert learning.split_jobs(jobs, keys, {}) == ([], jobs)  # no --resume: everything runs


def test_sidecar_later_line_replaces_earlier_and_chain_appends(tmp_path):
    path = tmp_path / "runs.jsonl"
    keys = {"rl": "k"}
    learning.append_run(path, "k", "rl", 0, "champion", {"pass_after": 0.1})
    learning.append_run(path, "k", "rl", 0, "champion", {"pass_after": 0.2})
    assert learning.load_runs(path)[("k", "rl", 0, "champion")] == {"pass_after": 0.2}
    finished = [("rl", 0, "champion", {"pass_after": 0.2})]
    new = iter([("rl", 1, "champion", {"pass_after": 0.3})])
    got = list(learning._chain(finished, new, path, keys))
    assert [g[1] for g in got] == [0, 1]
    assert learning.load_runs(path)[("k", "rl", 1, "champion")] == {"pass_after": 0.3}


def test_best_arm_ignores_placebos_and_ablations():
    arms = {"rl": {"ci_low": 0.01}, "online": {"ci_low": 0.03}, "placebo": {"ci_low": 0.2},
            "stale_on": {"ci_low": 0.1}, "online_placebo": {"ci_low": 0.5}}
    assert learning.best_arm(arms) == "online"
    assert learning.best_arm({"placebo": {"ci_low": 0.2}}) is None


def test_heldout_eval_set_stays_inside_the_tuning_draw():
    assert [t.task_id for t in learning.eval_tasks("heldout", 5)] == [
        t.task_id for t in generate_tasks(5, 7, "heldout")]
    with pytest.raises(ValueError, match="heldout"):
        learning.eval_tasks("heldout", 1001)


def test_kl_to_start_is_zero_for_the_start_and_grows_with_training(tiny, tmp_path):
    _, champion, rows = tiny
    assert learning.kl_to_start(champion, champion, rows) == pytest.approx(0.0, abs=1e-6)
    filtered_sft(champion, rows, tmp_path / "a", steps=1, batch_size=4, lr=1e-3,
                 min_reward=-1e9)
    filtered_sft(champion, rows, tmp_path / "b", steps=4, batch_size=4, lr=1e-2,
                 min_reward=-1e9)
    near = learning.kl_to_start(tmp_path / "a", champion, rows)
    far = learning.kl_to_start(tmp_path / "b", champion, rows)
    assert 0.0 < near < far


def test_option_arms_train_with_their_fields_and_steps(tiny, tmp_path):
    _, champion, rows = tiny
    m = learning.train_arm("rl_big_batch", 0, champion, rows, {"mismatch_every": 0}, 8,
                           tmp_path / "big")
    assert load_metadata(tmp_path / "big")["steps"] == 2  # a quarter of the steps
    assert load_metadata(tmp_path / "big")["trainer_config"]["batch_size"] == 256
    assert m["rows_used"] == rows.num_rows
    learning.train_arm("cispo", 0, champion, rows, {"mismatch_every": 0}, 2, tmp_path / "c")
    assert load_metadata(tmp_path / "c")["trainer_config"]["objective"]["type"] == "cispo"
