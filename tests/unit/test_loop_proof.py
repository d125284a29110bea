"""bench/loop_proof.py: the proof's statistics (sign-flip test over pairs, family averages,
family-clustered intervals, the first champion's best temperature), its targets, and the scored
pieces' cache (a piece is scored once per weights; two processes split the pieces) and the pruning
of a scored unit's weights."""

from __future__ import annotations

import json
import os
import threading
from pathlib import Path

import pytest

from bench import loop_proof as lp

ROOT_CONFIG = lp.ROOT / "configs" / "smollm2-pyfuncs.json"


def test_sign_flip_p_is_exact_and_one_sided():
    assert lp.sign_flip_p([0.1] * 6) == 1 / 64
    # [1, -1]: the sign vectors (+,+) mean 0, (+,-) 1, (-,+) -1, (-,-) 0; observed 0: 3 of 4
    assert lp.sign_flip_p([1.0, -1.0]) == 0.75
    assert lp.sign_flip_p([-0.2, -0.1, -0.3]) == 1.0


def test_every_family_counts_once_in_the_average():
    tasks = [{"family": "a", "sampled": 1.0}] * 3 + [{"family": "b", "sampled": 0.0}]
    assert lp.family_average(tasks) == 0.5


def _tasks(values: dict[str, list[float]], greedy: dict[str, list[bool]] | None = None):
    out = []
    for fam, vs in values.items():
        for i, v in enumerate(vs):
            g = greedy[fam][i] if greedy else v >= 0.5
            out.append({"task_id": f"{fam}/{i}", "family": fam, "cluster": f"{fam}/{i}",
                        "passed": g, "sampled": v})
    return out


def _unit(arm: str, promotions: int, live: list[float]) -> dict:
    key = "promotions" if arm == "rl" else "placebo_promotions"
    return {key: promotions, "per_cycle": [
        {"cycle": i, "live_pass_rate": x, "edit_persistence": x, "dissatisfied_rate": 1 - x,
         "completion_tokens": 30.0, "mean_latency_ms": 100.0} for i, x in enumerate(live)]}


def _run(first_sealed, final_sealed, grid=None):
    first = {"sealed": _tasks(first_sealed), "transfer": _tasks({"t": [0.5, 0.5]}),
             "guard": _tasks({"g": [1.0, 1.0]}), "humaneval": _tasks({"h0": [0.5], "h1": [0.5]})}
    first.update(grid or {})
    final = {"sealed": _tasks(final_sealed), "transfer": _tasks({"t": [0.5, 0.75]}),
             "guard": _tasks({"g": [1.0, 1.0]}), "humaneval": _tasks({"h0": [0.5], "h1": [0.75]})}
    return {"first": first, "final": final}


def test_the_pooled_figures_pair_each_rl_run_with_its_placebo():
    base = {"a": [0.25, 0.25], "b": [0.0, 0.0]}
    grid = {"sealed_t0.3": _tasks({"a": [0.5, 0.5], "b": [0.25, 0.25]})}  # the best: 0.375
    units, scores = {}, {}
    for seed, (rl_final, pl_final) in enumerate([({"a": [0.75, 0.75], "b": [0.5, 0.5]}, base),
                                                 ({"a": [0.5, 0.5], "b": [0.5, 0.5]}, base)]):
        units[(seed, "rl")] = _unit("rl", 1, [0.2, 0.4, 0.6])
        units[(seed, "placebo")] = _unit("placebo", 0, [0.2, 0.2, 0.2])
        scores[(seed, "rl")] = _run(base, rl_final, grid)
        scores[(seed, "placebo")] = _run(base, pl_final, grid)
    out = lp.pool(units, scores)
    # rl primary: seed 0 (0.75 + 0.5) / 2 - 0.125 = 0.5; seed 1 0.5 - 0.125 = 0.375
    assert [p["rl_primary"] for p in out["pairs"]] == [0.5, 0.375]
    assert [p["placebo_primary"] for p in out["pairs"]] == [0.0, 0.0]
    assert out["primary_p"] == 0.25 and out["pooled_rl_gain"] == 0.4375
    assert out["transfer_ci_low"]["sampled"] == pytest.approx(0.125)  # one family
    assert out["humaneval_ci_low"] == 0.0  # problems are the clusters: h0 +0, h1 +0.25
    v = out["vs_best_temperature"]
    assert v["first_best"] == "0.3" and v["first_best_pass"] == 0.375
    assert v["delta"] == pytest.approx(0.4375 + 0.125 - 0.375)
    g = out["targets"]
    assert g["rl_above_placebo"]["pairs"] == 2 and not g["rl_above_placebo"]["reached"]
    assert g["pooled_rl_gain"]["reached"] and g["promotions"]["reached"]
    assert g["guard"]["reached"] and g["humaneval"]["reached"]
    assert out["live"]["live_pass_rate"]["last_cycle_rl_minus_placebo"] == [0.4, 0.4]
    assert out["live"]["dissatisfied_rate"]["p"] == 0.25  # down in both pairs: 1 of 4


def test_greedy_can_be_the_first_champions_best_decoding():
    greedy = {"a": [True, True], "b": [True, False]}  # 0.75 greedy, sampled 0.25
    sealed = _tasks({"a": [0.25, 0.25], "b": [0.25, 0.25]}, greedy)
    low = _tasks({"a": [0.0, 0.0], "b": [0.0, 0.0]})
    best, rate = lp.best_temperature({"0.8": sealed, "0.3": low})
    assert (best, rate) == ("greedy", 0.75)


def test_a_family_that_dropped_in_every_run_is_surely_worse():
    fams = {f"f{i}": [1.0] * 4 for i in range(6)}
    first = _tasks(fams)
    final = _tasks({**fams, "f0": [0.0] * 4})
    assert lp.max_drop([(first, final)] * 3, "sampled")["family"] == "f0"


def _ckpt(tmp_path: Path, name: str, content: bytes) -> Path:
    d = tmp_path / name
    d.mkdir()
    (d / "model.safetensors").write_bytes(content)
    return d


def _wanted(tmp_path: Path) -> dict[str, dict]:
    pool = tmp_path / "pool.jsonl"
    pool.write_text('{"task_id": "x"}\n')
    return {"sealed": lp._piece("jsonl", pool, 8, 0.8), "guard": lp._piece("jsonl", pool, 4, 0.8)}


def test_a_piece_is_scored_once_per_weights(tmp_path):
    calls = []

    def scorer(ckpt, piece):
        calls.append((ckpt.name, piece["samples"]))
        return [{"task_id": "x", "family": "f", "cluster": "x", "passed": True, "sampled": 1.0}]

    wanted, cache = _wanted(tmp_path), tmp_path / "cache"
    a = lp.score_checkpoint(_ckpt(tmp_path, "a", b"w1"), wanted, cache, label="a", scorer=scorer)
    same = lp.score_checkpoint(_ckpt(tmp_path, "b", b"w1"), wanted, cache, label="b",
                               scorer=scorer)
    other = lp.score_checkpoint(_ckpt(tmp_path, "c", b"w2"), wanted, cache, label="c",
                                scorer=scorer)
    assert a == same and a != other
    assert calls == [("a", 8), ("a", 4), ("c", 8), ("c", 4)]
    assert lp.load_scores(cache, a)["sealed"][0]["sampled"] == 1.0


def test_a_piece_another_process_holds_is_left_and_then_waited_for(tmp_path):
    """The process holding ``sealed`` writes it; this one scores ``guard`` meanwhile and then
    reads ``sealed`` without decoding it."""
    import fcntl

    wanted, cache = _wanted(tmp_path), tmp_path / "cache"
    ckpt = _ckpt(tmp_path, "a", b"w1")
    key = lp.piece_key(ckpt, wanted["sealed"])
    calls, done = [], {}
    (cache / ".locks").mkdir(parents=True)
    held = open(cache / ".locks" / f"{key}.lock", "w")
    fcntl.flock(held, fcntl.LOCK_EX)

    def scorer(c, piece):
        calls.append(piece["samples"])
        return [{"task_id": "x", "family": "f", "cluster": "x", "passed": False, "sampled": 0.0}]

    t = threading.Thread(target=lambda: done.update(keys=lp.score_checkpoint(
        ckpt, wanted, cache, label="a", scorer=scorer)))
    t.start()
    t.join(timeout=5)
    assert t.is_alive() and calls == [4]  # guard scored; waiting for sealed
    lp._write_atomic(cache / f"{key}.json", {"tasks": [{"sampled": 0.5}]})
    fcntl.flock(held, fcntl.LOCK_UN)
    held.close()
    t.join(timeout=30)
    assert not t.is_alive() and calls == [4]
    assert json.loads((cache / f"{key}.json").read_text())["tasks"][0]["sampled"] == 0.5


def test_a_scored_unit_keeps_its_first_and_final_weights_and_the_first_once(tmp_path):
    units, runs = tmp_path / "units", tmp_path / "runs"
    units.mkdir()

    def unit(arm: str, final: bytes) -> dict[str, Path]:
        base = runs / "seed0" / arm / arm
        files = {"first": base / "scored/v1/first", "final": base / "scored/v2/final",
                 "registry": base / "mlflow/artifacts/m-1/first", "last": base / "scored/v4/last"}
        content = {"first": b"A" * 10, "registry": b"A" * 10, "final": final, "last": b"C" * 30}
        for name, folder in files.items():
            folder.mkdir(parents=True)
            (folder / "model.safetensors").write_bytes(content[name])
        (base / "mlflow/artifacts/m-1/verdict.json").write_text("{}")
        lp.unit_scores_file(units, 0, arm).write_text(json.dumps(
            {"checkpoints": {"first": str(files["first"]), "final": str(files["final"])}}))
        return files

    rl, placebo = unit("rl", b"B" * 20), unit("placebo", b"A" * 10)  # placebo never promoted
    assert lp.prune_unit(units, 0, "rl", runs) == 10 + 30  # registry copy and last candidate
    assert lp.prune_unit(units, 0, "placebo", runs) == 10 + 30 + 10 + 10  # and two links
    for files in (rl, placebo):
        assert not (files["registry"] / "model.safetensors").exists()
        assert not (files["last"] / "model.safetensors").exists()
        assert (files["registry"].parent / "verdict.json").exists()
    assert (rl["final"] / "model.safetensors").read_bytes() == b"B" * 20
    firsts = [f["first"] / "model.safetensors" for f in (rl, placebo)]
    firsts.append(placebo["final"] / "model.safetensors")
    assert all(os.path.samefile(firsts[0], f) and f.read_bytes() == b"A" * 10 for f in firsts)
    assert len(list((runs / "weights").iterdir())) == 2  # A and B, each once
    assert lp.prune_unit(units, 0, "rl", runs) == 0  # nothing more to free
    assert lp.prune_unit(units, 1, "rl", runs) == 0  # not scored: untouched


def test_scoring_shows_its_progress_and_logs_it_beside_the_units(tmp_path, monkeypatch, capsys,
                                                                 routed_logs):
    """A piece decodes for half an hour: its progress lines (runtime/progress.py logs them) reach
    the terminal and a log file in the workdir."""
    import logging

    def pool_with_progress(args, pools):
        logging.getLogger("ratchet.progress").info("sealed (41 tasks): 8/41 task, ~600 s left")

    monkeypatch.setattr(lp, "write_pooled", pool_with_progress)
    lp.main(["--pool-only", "--units", str(tmp_path / "units"),
             "--workdir", str(tmp_path / "runs")])
    assert "8/41 task" in capsys.readouterr().err
    assert "8/41 task" in (tmp_path / "runs" / "loop_proof.log").read_text()


def test_a_unit_whose_weights_went_with_its_machine_is_kept_on_record_and_run_again(
        tmp_path, monkeypatch, routed_logs):
    """Only bench/results outlives a machine: a complete unit left unscored when its run folder
    went cannot be scored (the key of weights that are not there is refused), so its record is
    set aside and the unit runs again whole; a scored unit, or one whose weights are there, is
    left as it is. The gates' suite results outlive the machine beside the units."""
    import bench.loop_real_seeds as seeds

    units, runs = tmp_path / "units", tmp_path / "runs"
    units.mkdir()
    here = _ckpt(tmp_path, "here", b"A")

    def record(seed: int, arm: str, final: Path) -> None:
        seeds.unit_file(units, seed, arm).write_text(json.dumps({"complete": True, "scores": {
            "first": {"version": 1, "path": str(here)},
            f"{arm}-final": {"version": 2, "path": str(final)}}}))

    record(0, "rl", tmp_path / "gone")
    record(0, "placebo", here)
    (units / "seed0_rl.lost1.json").write_text("{}")  # lost once before
    assert lp.lost_champions(units, 0, "rl") == ["final"]
    assert lp.lost_champions(units, 0, "placebo") == []
    with pytest.raises(FileNotFoundError):
        lp.piece_key(tmp_path / "gone", _wanted(tmp_path)["sealed"])
    suites = tmp_path / "suites"  # the gates' suite results kept beside the units
    suites.mkdir()
    (suites / "champion.json").write_text("{}")
    ran, scored = [], []

    def run_unit(seed: int, arm: str, **kw) -> None:
        assert (runs / "suite-cache" / "champion.json").is_file()  # offered to the unit's gate
        gate = seeds.suite_results(runs / f"seed{seed}" / arm, arm)
        gate.mkdir(parents=True)
        (gate / "candidate.json").write_text("{}")
        ran.append((seed, arm))
        record(seed, arm, here)

    monkeypatch.setattr(seeds, "run_unit", run_unit)
    monkeypatch.setattr(lp, "score_unit", lambda units, seed, arm, *a: scored.append((seed, arm)))
    monkeypatch.setattr(lp, "write_pooled", lambda args, pools: None)
    monkeypatch.setattr(lp, "torch_threads", lambda n: None)
    lp.main(["--pairs", "1", "--units", str(units), "--workdir", str(runs), "--suites",
             str(suites)])
    assert ran == [(0, "rl")] and scored == [(0, "rl"), (0, "placebo")]
    assert sorted(f.name for f in suites.iterdir()) == ["candidate.json", "champion.json"]
    assert json.loads((units / "seed0_rl.lost2.json").read_text())["scores"]["rl-final"][
        "path"] == str(tmp_path / "gone")
    assert lp.lost_champions(units, 0, "rl") == []


def test_a_lost_champion_is_trained_again_from_its_lineage_to_the_same_weights(tmp_path):
    """A unit's lineage (bench/results) trains its final champion again from the first one on the
    rows it was trained on, to the digests it had; weights that come out otherwise are refused,
    and a unit set aside takes its lineage files with it."""
    import shutil

    import pyarrow.parquet as pq
    import torch

    import bench.loop_real_seeds as seeds
    from policy.toy.checkpoint import save_checkpoint
    from policy.toy.model import MoEConfig, MoETransformer
    from tasks.toy import generate_tasks
    from trainer.config import TrainerConfig
    from trainer.recipe import TRAIN_ROWS, run_training
    from trainer.rollout import sample_rows

    torch.manual_seed(0)
    model = MoETransformer(MoEConfig(d_model=32, n_layers=2, n_heads=2, n_experts=4, top_k=2,
                                     d_ff=48, max_seq_len=160)).eval()
    first = save_checkpoint(model, tmp_path / "run" / "v1", metadata={"model_version": 1})
    rows = sample_rows(model, generate_tasks(4, seed=0, split="train"), samples_per_task=2,
                       temperature=1.0, model_version=1, seed=0, max_new_tokens=6)
    final = tmp_path / "run" / "v2"
    run_training(first, rows, TrainerConfig(steps=2, batch_size=4, lr=1e-3), final,
                 current_version=1)
    units, work = tmp_path / "units", tmp_path / "work"
    units.mkdir()
    seeds.unit_file(units, 0, "rl").write_text(json.dumps({"complete": True, "scores": {
        "first": {"version": 1, "path": str(first)},
        "rl-final": {"version": 2, "path": str(final)}}}))
    digests = lp.weight_digests(final)

    lineage = json.loads(lp.keep_lineage(units, 0, "rl").read_text())
    assert [(s["version"], s["parent_version"]) for s in lineage["chain"]] == [(2, 1)]
    assert pq.read_table(units / lineage["chain"][0]["rows"]).equals(rows)
    shutil.rmtree(final)
    assert lp.lost_champions(units, 0, "rl") == ["final"]
    assert lp.rebuild_champions(units, 0, "rl", ROOT_CONFIG, work)
    assert lp.weight_digests(final) == digests and (final / TRAIN_ROWS).is_file()
    assert lp.lost_champions(units, 0, "rl") == []

    lineage["chain"][0]["weights"] = {"model.safetensors": "0" * 64}  # weights it never had
    lp.lineage_file(units, 0, "rl").write_text(json.dumps(lineage))
    assert not lp.rebuild_champions(units, 0, "rl", ROOT_CONFIG, work)
    assert lp.set_aside(units, 0, "rl").name == "seed0_rl.lost1.json"
    assert sorted(f.name for f in units.iterdir()) == [
        "seed0_rl.lost1.json", "seed0_rl.lost1.lineage.json", "seed0_rl.lost1.v2.parquet"]
