"""A recording served at temperature 0 replays through `ratchet replay` and trains.

Real broker, MLflow server, Beam DirectRunner and the tiny MoE; the CLI runs as a subprocess.
The recorded simulator traffic (tests/fixtures/events.jsonl) is rewritten as a greedy fleet
would have logged it (every completion's ``sampling.temperature`` 0). Greedy rows carry no
behaviour probability: the rewarded ones train through the trainer's filtered imitation term,
and a candidate is registered and gated. With that term off, the same traffic ends the cycle as
a readable "skipped: no trainable rows" (exit 0, no traceback), its span is consumed, and the
next `ratchet cycle` moves on instead of failing on it again.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import uuid
from pathlib import Path

import pytest

pytestmark = [pytest.mark.integration, pytest.mark.slow]

ROOT = Path(__file__).resolve().parents[2]
FIXTURE = ROOT / "tests" / "fixtures" / "events.jsonl"
PERMISSIVE_GATE = {
    "suite": {"size": 8, "max_new_tokens": 16},
    "min_pass_rate": 0.0,
    "pass_rate_change": {"min_abs": -1.0},
    "improvement": None,
    "token_budget": {"max_abs_increase": 1e4, "max_rel_increase": 10.0},
    "bootstrap": {"max_pass_rate_drop": 1.0, "max_token_rise": 1e4},
    "hack": {"max_no_edit_increase": 1.0, "max_malformed_increase": 1.0},
    "health": {"max_kl_to_champion": 1e3},
}


def greedy_recording(path: Path) -> int:
    """The fixture with every completion served at temperature 0; returns how many."""
    n = 0
    with FIXTURE.open() as src, path.open("w") as out:
        for line in src:
            r = json.loads(line)
            event = _parsed(r) if r["topic"] == "ratchet.completions" else None
            if isinstance(event, dict) and isinstance(event.get("sampling"), dict):
                event["sampling"]["temperature"] = 0.0
                r["value"] = json.dumps(event)
                n += 1
            out.write(json.dumps(r) + "\n")
    return n


def _parsed(record: dict):
    """The record's event, or None where the fixture holds malformed bytes on purpose."""
    try:
        return json.loads(record["value"])
    except (KeyError, ValueError):
        return None


def _config(tmp_path: Path, broker, trainer: dict) -> tuple[str, Path]:
    from ingest.kafka_io import ensure_topics, start_group_at_end
    from ingest.schema import TOPICS

    ensure_topics(broker.bootstrap)
    name, group = f"greedy-{uuid.uuid4().hex[:8]}", f"g-{uuid.uuid4().hex[:8]}"
    start_group_at_end(broker.bootstrap, group, TOPICS.values())  # only this test's replay
    config = {
        "model_name": name,
        "champion": {"sft_steps": 60, "seed": 0},  # the cached warm start of test_cycle
        "min_rows_to_train": 8,
        "gate": PERMISSIVE_GATE,
        "trainer": {"seed": 0, "steps": 3, "batch_size": 32, **trainer},
        "ingest": {"group_id": group, "drain": True},
    }
    path = tmp_path / f"{name}.json"
    path.write_text(json.dumps(config))
    return name, path


def _ratchet(*args: str, config: Path, workdir: Path, broker, mlflow_server):
    argv = [sys.executable, "-m", "ratchet.cli", *args, "--config", str(config), "--workdir",
            str(workdir), "--bootstrap", broker.bootstrap, "--tracking-uri", mlflow_server.uri]
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    env.pop("RATCHET_TEST_PAUSE_AT", None)
    return subprocess.run(argv, env=env, cwd=ROOT, capture_output=True, text=True, timeout=1800)


def _train_metrics(uri: str, name: str) -> list[dict[str, float]]:
    from mlflow import MlflowClient

    client = MlflowClient(uri)
    exps = [e.experiment_id for e in client.search_experiments()]
    runs = client.search_runs(exps, filter_string=f"tags.`ratchet.model` = '{name}' and "
                              "tags.`ratchet.stage` = 'train'")
    return [r.data.metrics for r in runs]


def test_greedy_recording_replays_and_trains(broker, mlflow_server, tmp_path):
    recording = tmp_path / "greedy.jsonl"
    assert greedy_recording(recording) > 100
    name, config = _config(tmp_path, broker, {})
    done = _ratchet("replay", str(recording), config=config, workdir=tmp_path / "w",
                    broker=broker, mlflow_server=mlflow_server)
    out = done.stdout + done.stderr
    assert done.returncode == 0, out
    assert "Traceback" not in out
    assert "candidate v2 vs champion v1" in done.stdout, out
    [m] = _train_metrics(mlflow_server.uri, name)
    assert m["rows_used"] > 50 and m["rows_greedy"] == m["rows_used"]
    assert 0 < m["rows_greedy_imitated"] < m["rows_greedy"]  # the rewarded ones only
    assert m["greedy_loss"] != 0.0


def test_greedy_recording_without_the_imitation_term_is_skipped_once(broker, mlflow_server,
                                                                      tmp_path):
    recording = tmp_path / "greedy.jsonl"
    greedy_recording(recording)
    name, config = _config(tmp_path, broker, {"greedy": {"loss": "off"}})
    workdir = tmp_path / "w"
    done = _ratchet("replay", str(recording), config=config, workdir=workdir, broker=broker,
                    mlflow_server=mlflow_server)
    out = done.stdout + done.stderr
    assert done.returncode == 0, out
    assert "Traceback" not in out
    assert "skipped — no trainable rows:" in done.stdout and "greedy" in done.stdout, out
    states = [json.loads(p.read_text()) for p in workdir.rglob("_cycles/cycle-*.json")]
    assert [s["stage"] for s in states] == ["skipped"] and states[0]["span_ids"]

    again = _ratchet("cycle", config=config, workdir=workdir, broker=broker,
                     mlflow_server=mlflow_server)
    out = again.stdout + again.stderr
    assert again.returncode == 0, out
    assert "Traceback" not in out and "no trainable rows" not in again.stdout, out
    assert "min_rows_to_train" in again.stdout  # nothing new: the greedy span was consumed
