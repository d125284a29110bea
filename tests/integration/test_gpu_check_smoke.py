"""scripts/gpu_check.sh --cpu-smoke: every step of the GPU check on the CPU at tiny shapes, with
the GPU machine's image emulated (packages it lacks and the kit does not carry are hidden), so
the one command a lent GPU runs cannot rot between loans."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = [pytest.mark.integration, pytest.mark.slow]
ROOT = Path(__file__).parents[2]


def _env(**extra) -> dict:
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "OUT")}
    return {**env, "PYTHON": sys.executable, "TORCH_EXTENSIONS_DIR":
            str(ROOT / ".cache" / "torch_extensions"), **extra}


def test_the_emulated_image_hides_what_the_gpu_machine_lacks():
    code = ("import importlib.util as u; print([m for m in ('mlflow', 'ray', 'kafka', "
            "'apache_beam', 'fastapi', 'pydantic', 'deepspeed', 'transformers') "
            "if u.find_spec(m)])")
    env = _env(RATCHET_GPU_IMAGE="emulate",
               PYTHONPATH=f"{ROOT / 'scripts' / 'gpu_image'}:{ROOT}")
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True,
                         check=True, timeout=120).stdout
    assert out.strip() == "['pydantic', 'deepspeed', 'transformers']"


def test_gpu_check_cpu_smoke_runs_every_step(tmp_path):
    proc = subprocess.run(["bash", str(ROOT / "scripts" / "gpu_check.sh"), "--cpu-smoke"],
                          env=_env(OUT=str(tmp_path)), cwd=ROOT, capture_output=True, text=True,
                          timeout=1800)
    log = (tmp_path / "gpu_check.log").read_text() if (tmp_path / "gpu_check.log").exists() \
        else proc.stdout + proc.stderr
    assert proc.returncode == 0, log[-4000:]
    summary = json.loads((tmp_path / "summary.json").read_text())
    assert summary["ok"] and summary["smoke"]
    assert summary["steps"] == {"env": "ok", "rl": "ok", "ds": "ok", "train": "ok", "gpu": "ok"}
    rl = json.loads((tmp_path / "rl_step.json").read_text())
    assert rl["ok"] and {c["name"] for c in rl["checks"]} >= {
        "kl_theta_ref_k3", "ratio_mean", "is_weight_mean", "replay_replaced", "loss_finite"}
    assert rl["logprob_gap_bf16_vs_fp32"]["tokens"] > 0
    ds = json.loads((tmp_path / "ds_step.json").read_text())
    assert ds["ok"] and ds["metrics"]["ratio_mean"] == pytest.approx(1.0, abs=1e-3)
    train = json.loads((tmp_path / "train_gpu.json").read_text())
    assert {r["model"].split()[0] for r in train["runs"]} == {"toy", "olmoe"}
    for run in train["runs"]:
        assert {"mfu", "tokens_per_s", "model", "peak_mem_gb"} <= run.keys()
    assert (tmp_path / "pytest.xml").exists()
    assert len(list(tmp_path.iterdir())) <= 8  # what a GPU call brings back
