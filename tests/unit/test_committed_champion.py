"""The committed toy champion (trainer/champion/) is what the recipe builds today, and both the
learning fixtures and the CLI's bootstrap start from it instead of an eight-minute warm start."""

import json

import pytest
from pydantic import ValidationError

from policy.toy.checkpoint import load_checkpoint
from policy.toy.model import MoEConfig
from ratchet.bootstrap import _toy_champion
from ratchet.config import ChampionBootstrapConfig, RatchetConfig
from trainer.fixtures import (
    COMMITTED,
    COMMITTED_LAZY,
    SFT_SEED,
    TOY_CONFIG,
    _lazy_key,
    _recipe_key,
    champion_dir,
    champion_path,
    lazy_champion_dir,
)
from trainer.habit import LAZY_SHARE, LAZY_STEPS
from trainer.sft import SFT_STEPS


def test_the_committed_champion_was_built_by_todays_recipe():
    meta = json.loads((COMMITTED / "metadata.json").read_text())
    # fails when policy/toy/model.py, trainer/sft.py, the toy config or the train split change:
    # rebuild it with `python -m trainer.fixtures` and commit trainer/champion/
    assert meta["recipe_key"] == _recipe_key()
    assert (meta["seed"], meta["steps"]) == (SFT_SEED, SFT_STEPS)


def test_fixtures_and_bootstrap_start_from_the_committed_champion():
    assert champion_dir() == COMMITTED
    cfg = ChampionBootstrapConfig()
    assert cfg.sft_steps == SFT_STEPS and cfg.seed == SFT_SEED
    out, cached = _toy_champion(cfg, MoEConfig.model_validate_json(TOY_CONFIG.read_text()))
    assert (out, cached) == (COMMITTED, True)
    model = load_checkpoint(out)
    assert model.config == MoEConfig.model_validate_json(TOY_CONFIG.read_text())


def test_another_warm_start_is_not_the_committed_one():
    cfg = ChampionBootstrapConfig(sft_steps=60)
    assert champion_path(cfg.seed, cfg.sft_steps) != COMMITTED


def test_the_committed_lazy_champion_was_built_by_todays_recipe_and_bootstraps():
    # fails when trainer/habit.py or the warm start's recipe change: `python -m trainer.fixtures`
    meta = json.loads((COMMITTED_LAZY / "metadata.json").read_text())
    assert meta["recipe_key"] == _lazy_key(LAZY_SHARE, LAZY_STEPS)
    assert meta["parent_recipe_key"] == _recipe_key()
    assert lazy_champion_dir() == COMMITTED_LAZY
    cfg = ChampionBootstrapConfig(lazy_fix=True)
    out, cached = _toy_champion(cfg, MoEConfig.model_validate_json(TOY_CONFIG.read_text()))
    assert (out, cached) == (COMMITTED_LAZY, True)


def test_lazy_fix_is_refused_for_another_warm_start_or_policy():
    with pytest.raises(ValidationError, match="committed toy champion only"):
        ChampionBootstrapConfig(lazy_fix=True, sft_steps=60)
    with pytest.raises(ValidationError, match="policy.type 'toy' without a path"):
        RatchetConfig.model_validate({"champion": {"lazy_fix": True},
                                      "policy": {"type": "toy", "path": str(COMMITTED)}})
