"""The retain-set anchor: its loss and gradient by hand, 0 at the champion, logged per step and
after the update, and it keeps the retain-set KL down; the adaptive coefficient."""

import json

import pyarrow as pa
import pytest
import torch

from policy.toy.checkpoint import save_checkpoint
from tasks.toy import generate_tasks
from trainer import rl
from trainer.config import TrainerConfig
from trainer.recipe import RLRecipe
from trainer.retain import AdaptiveCoef, RetainDraw, load_groups, load_prompts
from trainer.rollout import sample_rows


def test_retain_kl_loss_value_and_gradient_by_hand():
    logp = torch.tensor([[-1.0, -2.0, -0.5], [-3.0, -1.5, -9.0]], requires_grad=True)
    ref = torch.tensor([[-1.5, -2.0, -0.3], [-2.0, -1.0, -1.0]])
    mask = torch.tensor([[True, True, True], [True, True, False]])
    loss, m = rl.retain_kl_loss(logp, ref, mask)
    d = [0.5, 0.0, -0.2, -1.0, -0.5]  # log pi_theta - log pi_ref on the 5 real tokens
    assert float(loss.detach()) == pytest.approx(sum(0.5 * x * x for x in d) / 5, abs=1e-6)
    assert m["retain_kl"] == pytest.approx(sum(d) / 5, abs=1e-6)
    k3 = [torch.tensor(-x).exp().item() - 1 + x for x in d]  # r - 1 - log r, log r = -d
    assert m["retain_kl_k3"] == pytest.approx(sum(k3) / 5, abs=1e-6)
    assert m["retain_tokens"] == 5
    loss.backward()
    want = torch.tensor([[0.5, 0.0, -0.2], [-1.0, -0.5, 0.0]]) / 5  # (logp - ref) / n, masked
    assert torch.allclose(logp.grad, want, atol=1e-6)


def test_adaptive_coefficient_doubles_above_the_budget_and_halves_back():
    c = AdaptiveCoef(0.5, 0.02)
    assert [c.update(kl) for kl in (0.05, 0.05, 0.015, 0.001, 0.001, 0.001)] == \
        [1.0, 2.0, 2.0, 1.0, 0.5, 0.5]  # 0.015 is within [target / 2, target]: kept
    fixed = AdaptiveCoef(0.5, None)
    assert fixed.update(10.0) == 0.5
    capped = AdaptiveCoef(1.0, 1e-9)
    for _ in range(20):
        capped.update(1.0)
    assert capped.value == 1000.0


def test_a_retain_line_without_a_prompt_is_named(tmp_path):
    path = tmp_path / "r.jsonl"
    path.write_text('{"prompt": "a"}\n{"task_id": "x"}\n')
    with pytest.raises(ValueError, match=r"r.jsonl:2: .*'prompt'"):
        load_prompts(path)


def test_the_group_draw_anchors_a_small_group_as_often_as_a_large_one(tmp_path):
    path = tmp_path / "r.jsonl"
    lines = [{"prompt": f"big {i}", "family": "big"} for i in range(40)]
    lines += [{"prompt": "small 0", "family": "small"}, {"prompt": "small 1", "family": "small"},
              {"prompt": "loose"}]  # no family: a group of its own
    path.write_text("".join(json.dumps(x) + "\n" for x in lines))
    groups = load_groups(path, "family")
    assert len(set(groups)) == 3 and groups[-1] != groups[0]

    def share(by: str) -> float:
        draw = RetainDraw(groups, by, torch.Generator().manual_seed(0))
        picks = [i for _ in range(300) for i in draw.pick(4)]
        return sum(40 <= i <= 41 for i in picks) / len(picks)

    assert share("uniform") < 0.1  # 2 of 43 lines
    assert share("by_group") == pytest.approx(1 / 3, abs=0.01)  # each round visits every group
    with pytest.raises(ValueError, match="by_family.*'by_kl'"):
        RetainDraw(groups, "by_family", torch.Generator())


def test_the_kl_draw_visits_every_group_once_then_the_one_that_moved():
    groups = ["a"] * 10 + ["b"] * 10 + ["c"] * 2
    draw = RetainDraw(groups, "by_kl", torch.Generator().manual_seed(0), explore=0.25)
    assert {groups[i] for i in draw.pick(3)} == {"a", "b", "c"}  # the first round: each once
    for i, kl in ((0, 0.001), (10, 0.0), (20, 0.2)):
        draw.observe(i, kl)
    picks = [groups[i] for _ in range(200) for i in draw.pick(4)]
    # 3/4 of visits by KL (c: 0.2 of 0.201), 1/4 at random (c: 1/3 of them)
    assert picks.count("c") / len(picks) == pytest.approx(0.75 * 0.2 / 0.201 + 0.25 / 3, abs=0.04)
    assert picks.count("b") / len(picks) == pytest.approx(0.25 / 3, abs=0.03)
    draw.observe(20, -0.2)  # the mean of the last two measurements: 0, so c is no longer chased
    later = [groups[i] for _ in range(200) for i in draw.pick(4)]
    assert later.count("a") > 0.7 * len(later)


def test_the_recipe_feeds_the_measured_kl_back_to_the_draw(setting):
    recipe, _ = _train(setting, draw="by_kl", group_field="task_id", kl_coef=1.0,
                       kl_target=None, prompts=4)
    assert recipe.retain_draw.by == "by_kl"
    # 6 steps x 4 prompts: each sample's KL reached its group (empty completions aside)
    assert 0 < len(recipe.retain_draw.kl) <= 24
    assert any(v != 0.0 for v in recipe.retain_draw.kl.values())


@pytest.fixture
def setting(tiny_model, tmp_path):
    champion = save_checkpoint(tiny_model, tmp_path / "champion", metadata={"model_version": 1})
    rows = sample_rows(tiny_model, generate_tasks(8, seed=0, split="train"), samples_per_task=1,
                       model_version=1, seed=0, max_new_tokens=6, temperature=1.0)
    rows = rows.set_column(rows.schema.get_field_index("reward"), "reward",
                           pa.array([1.0 if i % 2 else -1.0 for i in range(rows.num_rows)]))
    retain = tmp_path / "retain.jsonl"
    retain.write_text("".join(json.dumps({"prompt": t.prompt}) + "\n"
                              for t in generate_tasks(32, seed=5, split="heldout")))
    return champion, rows, retain


def _train(setting, **retain):
    champion, rows, path = setting
    cfg = TrainerConfig(steps=6, batch_size=8, lr=5e-2, kl_coef=0.0, anchor_kl_coef=0.0,
                        retain={"path": str(path), "max_new_tokens": 8, "eval_prompts": 32,
                                **retain})
    recipe = RLRecipe(champion, rows, cfg)
    recipe.setup()
    return recipe, recipe.train()


def test_zero_at_the_champion_and_logged_every_step(setting):
    recipe, summary = _train(setting, kl_coef=1.0, kl_target=None)
    first = recipe.history[0]  # the policy is the champion when the first step is measured
    assert first["retain_kl"] == pytest.approx(0.0, abs=1e-6)
    assert first["retain_kl_k3"] == pytest.approx(0.0, abs=1e-6)
    assert first["retain_tokens"] > 0
    # every step's metrics (what goes to MLflow) carry it, and the summary the final KLs
    assert all({"retain_kl", "retain_kl_k3", "retain_kl_coef"} <= h.keys()
               for h in recipe.history)
    assert {"retain_kl_final", "retain_kl_k3_final", "kl_theta_ref_k3_final"} <= summary.keys()
    assert summary["kl_theta_ref_k3_final"] > 0 and summary["retain_kl_k3_final"] > 0


def test_the_term_keeps_the_retain_kl_down(setting):
    _, off = _train(setting, kl_coef=0.0, kl_target=None)  # measured, not trained on
    _, on = _train(setting, kl_coef=20.0, kl_target=None)
    assert on["retain_kl_k3_final"] < 0.5 * off["retain_kl_k3_final"]
    # the traffic rows still moved the policy
    assert on["kl_theta_ref_k3_final"] > 0


def test_the_recipe_samples_the_retain_prompts_of_its_draw(setting):
    recipe, _ = _train(setting, draw="by_group", group_field="task_id")
    distinct = len(set(load_prompts(setting[2])))  # no task_id field: a group per prompt
    assert recipe.counts["retain_groups"] == distinct > 1
    assert recipe.retain_draw.by == "by_group"


def test_the_coefficient_adapts_to_the_budget(setting):
    recipe, _ = _train(setting, kl_coef=1.0, kl_target=1e-6)
    coefs = [h["retain_kl_coef"] for h in recipe.history]
    assert coefs[0] == 1.0 and coefs[-1] > coefs[0]


def test_the_smollm2_preset_anchors_on_the_retain_pool_and_replays_it():
    from pathlib import Path

    from ratchet.config import load_config

    root = Path(__file__).resolve().parents[3]
    t = load_config(root / "configs" / "smollm2-pyfuncs.json", check_paths=False).trainer
    assert t.retain.path == t.replay.path == "tasks/data/pyfuncs_retain.jsonl"
    assert (root / t.retain.path).is_file()
    assert t.retain.kl_target == 0.01  # the budget the tuning sweep chose (local_update_tuning)
    assert t.replay.share == 0.25 and t.nll_coef == 0.0  # replay, no self-imitation
    assert len(load_prompts(root / t.retain.path)) >= 100


def test_the_smollm2_preset_draws_its_retain_samples_once_as_its_rule_decided():
    """docs/LEARNING.md's rule on bench/results/train_step_real_once.json: the preset draws the
    retain samples once at setup only while the measured run kept both KLs within 1.25 times the
    per-step run's (or under the budget)."""
    import json
    from pathlib import Path

    from ratchet.config import load_config

    root = Path(__file__).resolve().parents[3]
    t = load_config(root / "configs" / "smollm2-pyfuncs.json", check_paths=False).trainer
    runs = json.loads((root / "bench" / "results" / "train_step_real_once.json").read_text())
    every, once = runs["settings"]["prefix"]["metrics"], runs["settings"]["once"]["metrics"]
    kept = all(once[k] <= max(1.25 * every[k], t.retain.kl_target)
               for k in ("retain_kl_final", "kl_theta_ref_k3_final"))
    assert runs["settings"]["once"]["steps"] == runs["settings"]["prefix"]["steps"] == t.steps
    assert kept and t.retain.resample_every == 0
