"""experiments/churn_floor.py: noise of a given scale on the trained weights, its KL and its
churn."""

import json

import pytest
import torch

from experiments import churn_floor as cf


def test_noise_is_a_share_of_each_tensors_spread_and_seeded():
    w = torch.tensor([1.0, 2.0, 3.0])  # std 1
    one = torch.tensor([-4.0])  # one element: its absolute value
    params = [torch.zeros(3), torch.zeros(1)]
    cf.perturb(params, [w, one], scale=0.1, seed=5)
    gen = torch.Generator().manual_seed(5)
    expected = [w + 0.1 * torch.randn(3, generator=gen), one + 0.4 * torch.randn(1, generator=gen)]
    assert all(torch.allclose(p, e) for p, e in zip(params, expected))
    again = [torch.zeros(3), torch.zeros(1)]
    cf.perturb(again, [w, one], scale=0.0, seed=5)
    assert torch.equal(again[0], w) and torch.equal(again[1], one)


def test_args_refuse_unknown_pools_and_negative_scales():
    with pytest.raises(SystemExit):
        cf.parse_args(["--pools", "guard,nowhere"])
    with pytest.raises(SystemExit):
        cf.parse_args(["--scales", "-0.1"])


def test_tiny_dry_run_no_noise_changes_nothing_and_noise_moves_the_policy(tmp_path):
    out = tmp_path / "floor.json"
    cf.main(["--tiny", "--scales", "0,2", "--pools", "guard_fresh", "--limit", "2",
             "--requests", "4", "--max-new-tokens", "8", "--workdir", str(tmp_path / "w"),
             "--out", str(out)])
    r = json.loads(out.read_text())
    still, moved = r["moves"]
    assert still["scale"] == 0.0 and abs(still["kl_traffic"]) < 1e-6
    assert still["pools"]["guard_fresh"]["discordant_share"] == 0.0
    assert moved["kl_traffic"] > 1e-4
    assert r["trained_parameters"] > 0 and r["rows"] == 4
    assert not (tmp_path / "w" / "tiny" / "churn_floor" / "scale2-seed0").exists()
    cf.main(["--tiny", "--scales", "1,2", "--pools", "guard_fresh", "--limit", "2",
             "--requests", "4", "--max-new-tokens", "8", "--workdir", str(tmp_path / "w"),
             "--out", str(out)])
    again = json.loads(out.read_text())["moves"]
    assert [m["scale"] for m in again] == [0.0, 1.0, 2.0]
    assert again[2] == moved  # kept, not redone


def test_overlap_counts_the_flips_a_candidate_shares_with_noise_by_hand(tmp_path):
    noise = tmp_path / "floor.json"
    noise.write_text(json.dumps({"moves": [
        {"scale": 0.03, "seed": 0, "kl_traffic": 0.005,
         "pools": {"guard": {"verdicts": "+-==.."}}}]}))
    cand = tmp_path / "cand.json"
    cand.write_text(json.dumps({"arms": [
        {"name": "a", "seed": 1, "pools": {"guard": {"verdicts": "-=+=.."},
                                          "sealed": {"verdicts": "++"}}}]}))
    out = tmp_path / "overlap.json"
    cf.main(["--out", str(noise), "--against", str(cand), "--overlap-out", str(out)])
    (row,) = json.loads(out.read_text())["candidates"]  # sealed: no noise move scored it
    assert (row["pool"], row["tasks"], row["flips"]) == ("guard", 6, 2)
    assert row["against"] == [{"scale": 0.03, "seed": 0, "kl_traffic": 0.005, "flips": 2,
                               "shared": 1, "chance": 2 * 2 / 6}]
    cand.write_text(json.dumps({"arms": [{"name": "a", "seed": 1,
                                          "pools": {"guard": {"verdicts": "+-"}}}]}))
    with pytest.raises(ValueError, match="another task list"):
        cf.main(["--out", str(noise), "--against", str(cand), "--overlap-out", str(out)])


def test_stable_tasks_are_the_ones_no_defining_noise_move_flips():
    moves = [{"scale": 0.03, "seed": s, "pools": {"p": {"verdicts": v}}}
             for s, v in enumerate(["-===..", "=+==..", "====.+"])]
    assert cf.stable_tasks(moves, "p", scale=0.03, seeds=[0, 1]) == [2, 3, 4, 5]
    assert cf.stable_tasks(moves, "p", scale=0.03, seeds=[0, 1, 2]) == [2, 3, 4]
    with pytest.raises(ValueError, match="seeds \\[7\\]"):
        cf.stable_tasks(moves, "p", scale=0.03, seeds=[0, 7])


def test_candidates_judged_on_the_stable_tasks_by_hand():
    """Every champion verdict a pass; noise seeds 0-1 flip guard tasks 0-9, the check seed task
    10; a candidate that loses guard tasks 0-9 churns 10/72 of the whole pool and none of the
    62 stable tasks, and the check move churns 1/62 of them."""
    from experiments import local_update as lu
    from tasks.pyfuncs import read_jsonl

    n = {p: len(read_jsonl(lu.POOLS[p])) for p in ("sealed_fresh2", "transfer_fresh2",
                                                    "guard_fresh2")}
    assert n["guard_fresh2"] == 72

    def verdicts(pool, lost=()):
        return "".join("-" if i in lost else "=" for i in range(n[pool]))

    def move(seed, lost):
        return {"scale": 0.03, "seed": seed, "kl_traffic": 0.005, "pools": {
            p: {"verdicts": verdicts(p, lost if p == "guard_fresh2" else ())} for p in n}}

    noise = {"moves": [move(0, range(5)), move(1, range(5, 10)), move(2, [10])]}
    cand = {"arms": [{"name": "a", "seed": 0, "train": {"kl_theta_ref_k3_final": 0.02},
                      "pools": {p: lu.compare(read_jsonl(lu.POOLS[p]), [True] * n[p],
                                              [v == "=" for v in verdicts(
                                                  p, range(10) if p == "guard_fresh2" else ())])
                                for p in n}}]}
    out = cf.judge_stable(noise, [cand], scale=0.03, define=[0, 1], check=[2])
    assert out["stable"]["guard_fresh2"]["tasks"] == 62
    assert out["stable"]["sealed_fresh2"]["tasks"] == n["sealed_fresh2"]
    assert out["checks"][0]["pools"]["guard_fresh2"]["discordant_share"] == pytest.approx(1 / 62)
    (c,) = out["candidates"]
    assert c["pools"]["guard_fresh2"]["discordant_share"] == 0.0
    assert c["whole"]["guard_fresh2"]["discordant_share"] == pytest.approx(10 / 72)
    assert c["stays_local_stable"]["_fresh2"]["churn"]
    assert not c["stays_local_whole"]["_fresh2"]["churn"]
    assert not c["stays_local_stable"]["_fresh2"]["sealed"]  # no gain is no gain
    assert c["losses_only_stable"]["_fresh2"]["churn"]
    assert not c["losses_only_stable"]["_fresh2"]["all"]
    # a move that loses 5 of 72 guard tasks and gains nothing is judged as a candidate would be
    assert [m["seed"] for m in out["noise_whole"]] == [0, 1, 2]
    (first,) = [m["stays_local"]["_fresh2"] for m in out["noise_whole"] if m["seed"] == 0]
    assert not first["sealed"] and not first["churn"] and first["transfer"]


def test_noise_moves_are_set_against_each_other_pair_by_pair():
    """Move 0 keeps every one of the 72 guard_fresh2 verdicts, move 1 loses the first 36: the
    pair (0, 1) is a gain with its CI above 0, (1, 0) a loss; a move of another scale is left
    out."""
    def move(seed, lost, scale=0.03):
        return {"scale": scale, "seed": seed, "pools": {
            "guard_fresh2": {"verdicts": "-" * lost + "=" * (72 - lost)}}}

    rows = cf.null_pairs([move(1, 36), move(0, 0), move(2, 5, scale=0.01)], scale=0.03)
    assert [(r["seed"], r["against"]) for r in rows] == [(0, 1), (1, 0)]
    first, second = rows
    assert first["delta"] > 0 and first["ci_low"] > 0
    assert second["delta"] == pytest.approx(-first["delta"]) and second["ci_high"] < 0
