"""The two-look gate on real toy checkpoints: a clear loss stops at the first look, a tie goes on
to the whole suite, and each look's result is what the gates are evaluated on."""

from __future__ import annotations

import pytest

from gating.config import GateConfig, SequentialConfig, SuiteConfig


@pytest.fixture(scope="module")
def checkpoints(tmp_path_factory):
    import torch

    from policy.toy.checkpoint import load_checkpoint, save_checkpoint
    from policy.toy.model import MoETransformer
    from trainer.fixtures import champion_dir

    champion = load_checkpoint(champion_dir())
    torch.manual_seed(3)
    worse = MoETransformer(champion.config).eval()
    root = tmp_path_factory.mktemp("seq")
    return {"champion": (champion_dir(), champion),
            "worse": (save_checkpoint(worse, root / "worse"), worse)}


def _runner(tmp_path, cand, champ):
    from gating.gate import GateRunner

    config = GateConfig(suite=SuiteConfig(size=80, max_new_tokens=16),
                        sequential=SequentialConfig(first_size=40))
    runner = GateRunner(tracking_uri="unused", model_name="m", candidate_version=2,
                        champion_version=1, config=config, workdir=tmp_path)
    (runner.candidate_dir, runner.candidate), (runner.champion_dir, runner.champion) = cand, champ
    return runner


def test_a_clear_loss_stops_at_the_first_look(checkpoints, tmp_path):
    runner = _runner(tmp_path, checkpoints["worse"], checkpoints["champion"])
    tasks, checker = runner._suite()
    extras: dict[str, float] = {}
    seen, cand, champ, level = runner._two_looks(tasks, checker, 0.05, extras)
    assert extras["sequential.look"] == 1.0 and len(seen) == len(cand.tasks) == 40
    assert extras["sequential.z1"] <= -extras["sequential.c1"]
    assert level < 0.05 / 2  # the first look spends little of alpha_k


def test_a_tie_gets_the_whole_suite(checkpoints, tmp_path):
    runner = _runner(tmp_path, checkpoints["champion"], checkpoints["champion"])
    tasks, checker = runner._suite()
    extras: dict[str, float] = {}
    seen, cand, champ, level = runner._two_looks(tasks, checker, 0.05, extras)
    assert extras["sequential.look"] == 2.0 and extras["sequential.z1"] == 0.0
    assert len(seen) == len(cand.tasks) == len(champ.tasks) == 80
    assert [t.task_id for t in cand.tasks] == [t.task_id for t in tasks]
    assert 0.0 < level < 0.05


def test_first_look_must_be_a_prefix():
    with pytest.raises(ValueError, match="first_size"):
        GateConfig(suite=SuiteConfig(size=40), sequential=SequentialConfig(first_size=40))
