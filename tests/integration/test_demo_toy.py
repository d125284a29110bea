"""`ratchet demo` on the toy defaults through the CLI, as `make demo` runs it (smaller sizes): the
committed lazy-fix champion is registered without a warm start, the cycles run, and the demo
scores the first and final champions on fresh tasks with a paired CI. The second cycle trains on
its own rows plus those of a rejected first candidate (carry)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = [pytest.mark.integration, pytest.mark.slow]

ROOT = Path(__file__).resolve().parents[2]


def test_toy_demo_reports_the_champions_gain_on_fresh_tasks(tmp_path):
    # what `make demo` runs (configs/toy-lazy-fix.json), at smaller sizes
    config = {"model_name": "ratchet-toy-it", "champion": {"lazy_fix": True},
              "simulator": {"requests_per_round": 96},
              "trainer": {"steps": 4}, "gate": {"suite": {"size": 48}}, "fleet": {"replicas": 1}}
    config_file = tmp_path / "toy-it.json"
    config_file.write_text(json.dumps(config))
    workdir = tmp_path / "demo"
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    done = subprocess.run(
        [sys.executable, "-m", "ratchet.cli", "demo", "--config", str(config_file), "--cycles",
         "2", "--workdir", str(workdir)], cwd=ROOT, env=env, capture_output=True, text=True,
        timeout=1200)
    assert done.returncode == 0, done.stderr[-3000:]

    summary = json.loads((workdir / "demo_summary.json").read_text())
    assert summary["bootstrap_seconds"] < 60, "the committed champion needs no warm start"
    first, second = summary["cycles"]
    assert [first["cycle"], second["cycle"]] == [1, 2]  # as MLflow names them: cycle-0001, …
    assert first["train_rows"] == first["span_rows"] > 0
    # carry: a rejected candidate's rows are trained on again from the same champion
    carried = 0 if first["promoted"] or first["rolled_back"] else first["span_rows"]
    assert second["train_rows"] == second["span_rows"] + carried
    gain = summary["gain"]
    assert gain["first_version"] == 1 and gain["split"] == "fresh" and gain["tasks"] == 1000
    assert 0.0 < gain["pass_first"] < 1.0
    assert gain["ci_low"] <= gain["delta"] <= gain["ci_high"]
    assert abs(gain["delta"] - (gain["pass_final"] - gain["pass_first"])) < 1e-9
    assert f"champion v1 -> v{gain['final_version']} on 1,000 fresh tasks" in done.stdout
    # the first champion is named as damaged on purpose, the undamaged warm start scored beside
    start = summary["start"]
    assert start["champion"] == "lazy_fix" and "lazy-fix habit" in start["planted_flaw"]
    assert start["tasks"] == gain["tasks"] and start["warm_start_pass"] > gain["pass_first"]
    assert "champion v1 is the warm start damaged on purpose" in done.stdout
    assert f"undamaged warm start scores {start['warm_start_pass']:.3f}" in done.stdout
    assert (workdir / "cycles.png").stat().st_size > 0
