"""The recorded RL fixture and the warm-started champion it was recorded from.

``champion_dir()`` is the warm-started toy MoE: the committed checkpoint under
``trainer/champion/`` while its recipe key matches the code, else warm-started once
(deterministic for a seed) and cached under ``.cache/ratchet/``. ``fixture_rows()`` reads the
recorded reward rows from ``tests/fixtures/rl_rows.parquet`` or records them (sample from the
champion, score with ``tasks.toy.check``, reward +1 / -1 minus a length penalty: the simulator's
rule).
Shared by bench/learning.py and tests/integration/test_trainer_learning.py.

Left out: anything served through Kafka (the production loop's data path is tested elsewhere).
"""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow as pa

ROOT = Path(__file__).resolve().parents[1]
CACHE = ROOT / ".cache" / "ratchet"
FIXTURE = ROOT / "tests" / "fixtures" / "rl_rows.parquet"
TOY_CONFIG = ROOT / "trainer" / "configs" / "toy.json"
COMMITTED = ROOT / "trainer" / "champion"
"""The committed warm start of ``TOY_CONFIG`` (seed ``SFT_SEED``, ``trainer.sft.SFT_STEPS``
steps) with the recipe key it was built with, so a fresh clone starts from it without the
eight-minute build; ``commit_champion()`` rebuilds it."""
SFT_SEED = 0
FIXTURE_TASKS = 2000
FIXTURE_SAMPLES = 4
FIXTURE_SEED = 1
FIXTURE_TEMPERATURE = 1.0
LOGGED_EVAL_TASKS = 160


def champion_dir(seed: int = SFT_SEED, steps: int | None = None) -> Path:
    """The warm-started champion checkpoint for ``seed`` and ``steps``: the committed one
    (``COMMITTED``) when it was built by today's recipe, else trained on first use and cached."""
    from policy.toy.checkpoint import save_checkpoint
    from policy.toy.model import MoEConfig
    from trainer.sft import SFT_STEPS, warm_start

    steps = SFT_STEPS if steps is None else steps
    out = champion_path(seed, steps)
    if not (out / "model.safetensors").exists():
        cfg = MoEConfig.model_validate_json(TOY_CONFIG.read_text())
        model = warm_start(cfg, seed=seed, steps=steps)
        save_checkpoint(model, out, metadata={"origin": "warm_start", "seed": seed,
                                              "steps": steps, "model_version": 1,
                                              "recipe_key": _recipe_key()})
    return out


COMMITTED_LAZY = ROOT / "trainer" / "champion_lazy"
"""The committed :func:`lazy_champion_dir` (the demo's and the loop bench's first champion)."""


def lazy_champion_dir(share: float | None = None, steps: int | None = None) -> Path:
    """The committed champion with the lazy-fix habit of ``trainer.habit`` planted (``share`` of
    off_by_one demonstrations unfixed, ``steps`` SFT steps): the committed copy when it was built
    by today's recipe, else built once (about a minute) and cached."""
    from policy.toy.checkpoint import load_checkpoint, save_checkpoint
    from trainer.habit import LAZY_SHARE, LAZY_STEPS, plant_lazy_fix

    share = LAZY_SHARE if share is None else share
    steps = LAZY_STEPS if steps is None else steps
    key = _lazy_key(share, steps)
    out = _lazy_path(key)
    if not (out / "model.safetensors").exists():
        model = plant_lazy_fix(load_checkpoint(champion_dir()), share=share, steps=steps)
        save_checkpoint(model, out, metadata={
            "origin": "warm_start + planted lazy-fix habit", "model_version": 1,
            "lazy_fix_share": share, "lazy_fix_steps": steps, "recipe_key": key,
            "parent_recipe_key": _recipe_key()})
    return out


def lazy_champion_path(share: float | None = None, steps: int | None = None) -> Path:
    """Where ``lazy_champion_dir(share, steps)`` is (or will be once built)."""
    from trainer.habit import LAZY_SHARE, LAZY_STEPS

    return _lazy_path(_lazy_key(LAZY_SHARE if share is None else share,
                                LAZY_STEPS if steps is None else steps))


def _lazy_path(key: str) -> Path:
    meta = COMMITTED_LAZY / "metadata.json"
    if meta.exists() and json.loads(meta.read_text()).get("recipe_key") == key:
        return COMMITTED_LAZY
    return CACHE / f"champion-lazy-{key}"


def _lazy_key(share: float, steps: int) -> str:
    import hashlib

    h = hashlib.sha256(f"{_recipe_key()}|{share}|{steps}".encode())
    h.update((ROOT / "trainer" / "habit.py").read_bytes())
    return "l" + h.hexdigest()[:10]


def commit_lazy_champion() -> Path:
    """Rebuild ``COMMITTED_LAZY`` from the recipe (after ``commit_champion()``)."""
    import shutil

    shutil.rmtree(COMMITTED_LAZY, ignore_errors=True)
    built = lazy_champion_dir()
    shutil.copytree(built, COMMITTED_LAZY)
    return COMMITTED_LAZY


def champion_path(seed: int, steps: int) -> Path:
    """Where ``champion_dir(seed, steps)`` is (or will be once built)."""
    from trainer.sft import SFT_STEPS

    key = _recipe_key()
    if (seed, steps) == (SFT_SEED, SFT_STEPS) and committed_recipe_key() == key:
        return COMMITTED
    return CACHE / f"champion-s{seed}-n{steps}-{key}"


def committed_recipe_key() -> str | None:
    """The recipe key the committed champion was built with (None if there is none)."""
    meta = COMMITTED / "metadata.json"
    return json.loads(meta.read_text()).get("recipe_key") if meta.exists() else None


def commit_champion() -> Path:
    """Rebuild ``COMMITTED`` from the recipe (seed ``SFT_SEED``, ``SFT_STEPS`` steps; about eight
    minutes on two cores): run after changing the model, the SFT code or the train split."""
    import shutil

    from trainer.sft import SFT_STEPS

    shutil.rmtree(COMMITTED, ignore_errors=True)  # champion_dir() then builds (or finds the cache)
    shutil.copytree(champion_dir(SFT_SEED, SFT_STEPS), COMMITTED)
    return COMMITTED


def _recipe_key() -> str:
    """Changes whenever the model config, the SFT code or the train split it learns from
    changes. The train split enters as a fingerprint of its tasks, not as tasks/toy.py's text, so
    a new split or a checker change there does not rebuild the champion."""
    import hashlib

    from tasks.toy import generate_tasks

    h = hashlib.sha256(TOY_CONFIG.read_bytes())
    for path in ("trainer/sft.py", "policy/toy/model.py"):
        h.update((ROOT / path).read_bytes())
    train = generate_tasks(_FINGERPRINT_TASKS, seed=SFT_SEED, split="train")
    h.update(json.dumps([t.to_dict() for t in train]).encode())
    return "t" + h.hexdigest()[:10]


_FINGERPRINT_TASKS = 2000


def record_rows(champion: Path, *, n_tasks: int = FIXTURE_TASKS,
                samples_per_task: int = FIXTURE_SAMPLES, seed: int = FIXTURE_SEED,
                model_version: int = 1) -> pa.Table:
    """Sample from the champion on train-split tasks and reward with the simulator's rule."""
    from policy.toy.checkpoint import load_checkpoint
    from tasks.toy import generate_tasks
    from trainer.rollout import sample_rows

    model = load_checkpoint(champion)
    tasks = generate_tasks(n_tasks, seed=seed, split="train")  # n, seed as in fixture_tasks()
    return sample_rows(model, tasks, samples_per_task=samples_per_task,
                       temperature=FIXTURE_TEMPERATURE, model_version=model_version, seed=seed)


def fixture_tasks():
    """The tasks whose prompts the fixture logged (``FIXTURE_SAMPLES`` rows each)."""
    from tasks.toy import generate_tasks

    return generate_tasks(FIXTURE_TASKS, seed=FIXTURE_SEED, split="train")


def logged_eval_tasks(samples: int) -> list:
    """The first ``LOGGED_EVAL_TASKS`` logged prompts, ``samples`` times each: re-sampled at the
    fixture's temperature they score the RL objective itself."""
    return fixture_tasks()[:LOGGED_EVAL_TASKS] * samples


def tiny_champion(directory: Path, *, n_tasks: int = 8):
    """A seeded 2-layer toy champion (model version 1) and rows sampled from it, for backend
    tests: ``(model, checkpoint dir, rows)``; the rows are also at ``directory/rows.parquet``."""
    import pyarrow.parquet as pq
    import torch

    from policy.toy.checkpoint import save_checkpoint
    from policy.toy.model import MoEConfig, MoETransformer
    from tasks.toy import generate_tasks
    from trainer.rollout import sample_rows

    torch.manual_seed(0)
    model = MoETransformer(MoEConfig(d_model=32, n_layers=2, n_heads=2, d_ff=48)).eval()
    champion = save_checkpoint(model, directory / "champion", metadata={"model_version": 1})
    rows = sample_rows(model, generate_tasks(n_tasks, seed=0, split="train"), samples_per_task=2,
                       temperature=1.0, model_version=1, seed=0, max_new_tokens=6)
    pq.write_table(rows, directory / "rows.parquet")
    return model, champion, rows


FIXTURE_CHAMPION_KEY = b"ratchet.champion_sha256"
"""Parquet schema-metadata key: :func:`champion_fingerprint` of the champion the fixture was
sampled from."""


def champion_fingerprint(champion: Path) -> str:
    """sha256 (first 16 hex digits) of a champion's weights: the same model wherever its
    directory lives (the committed copy or the cache)."""
    import hashlib

    return hashlib.sha256((Path(champion) / "model.safetensors").read_bytes()).hexdigest()[:16]


def recorded_from(path: Path = FIXTURE) -> str | None:
    """The fingerprint of the champion a recorded fixture was sampled from (None: unknown)."""
    import pyarrow.parquet as pq

    meta = pq.read_schema(path).metadata or {}
    name = meta.get(FIXTURE_CHAMPION_KEY)
    return name.decode() if name is not None else None


def fixture_rows(regenerate: bool = False) -> pa.Table:
    """The recorded fixture, re-recorded from ``champion_dir()`` if missing, asked to, or
    recorded from another champion: rows logged by a different model are off-policy for this
    one (their logprobs and routing are not the champion's), which silently changes what every
    learning figure measures."""
    return recorded_rows(champion_dir(), regenerate=regenerate)


def recorded_rows(champion: Path, *, regenerate: bool = False) -> pa.Table:
    """The fixture of ``champion`` (same tasks, samples, seed and reward rule): ``FIXTURE`` for
    the committed champion, else a copy cached by its fingerprint under ``CACHE``; recorded when
    missing, asked to, or recorded from another champion."""
    import pyarrow.parquet as pq

    from ingest.schema import upgrade_reward_table

    fingerprint = champion_fingerprint(champion)
    path = _recording_path(fingerprint)
    if regenerate or not path.exists() or recorded_from(path) != fingerprint:
        path.parent.mkdir(parents=True, exist_ok=True)
        table = record_rows(champion)
        meta = {**(table.schema.metadata or {}), FIXTURE_CHAMPION_KEY: fingerprint.encode()}
        partial = path.with_suffix(".partial")
        pq.write_table(table.replace_schema_metadata(meta), partial, compression="zstd")
        partial.rename(path)
        print(f"recorded {path} from {champion} ({fingerprint})", flush=True)
    return upgrade_reward_table(pq.read_table(path))


def recorded_rows_path(champion: Path) -> Path:
    """Where :func:`recorded_rows` keeps the fixture of ``champion``."""
    return _recording_path(champion_fingerprint(champion))


def _recording_path(fingerprint: str) -> Path:
    if fingerprint == champion_fingerprint(champion_dir()):
        return FIXTURE
    return CACHE / f"rows-{fingerprint}.parquet"


DESCENDANT_STEPS = 100
DESCENDANT_LR = 1e-3


def descendant_dir(generations: int = 2) -> Path:
    """The champion ``generations`` versions later: each version continues the warm start for
    ``DESCENDANT_STEPS`` SFT steps (constant lr ``DESCENDANT_LR``, fresh train-split tasks), its
    ``model_version`` one higher. The fixture's rows (version 1) are then ``generations`` versions
    old for it: the stale-rows ablation of bench/learning.py. Cached like ``champion_dir()``."""
    from policy.toy.checkpoint import load_checkpoint, save_checkpoint
    from tasks.toy import generate_tasks
    from trainer.sft import sft_step

    out = CACHE / f"descendant-g{generations}-n{DESCENDANT_STEPS}-{_recipe_key()}"
    if (out / "model.safetensors").exists():
        return out
    import torch

    model = load_checkpoint(champion_dir()).train()
    torch.manual_seed(SFT_SEED)
    opt = torch.optim.AdamW(model.parameters(), lr=DESCENDANT_LR)
    for g in range(generations):
        tasks = generate_tasks(DESCENDANT_STEPS * 48, seed=1000 + g, split="train")
        for step in range(DESCENDANT_STEPS):
            sft_step(model, opt, tasks[step * 48:(step + 1) * 48])
    save_checkpoint(model.eval(), out, metadata={"origin": "descendant", "model_version":
                                                 1 + generations, "parent": str(champion_dir())})
    return out


if __name__ == "__main__":
    print(f"rebuilt {commit_champion()} (recipe key {_recipe_key()})")
    print(f"rebuilt {commit_lazy_champion()}")
