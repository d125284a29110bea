"""SIGKILL `ratchet cycle` at each stage, rerun it, and check that nothing was lost or doubled.

Real broker, MLflow server, Beam DirectRunner and the tiny MoE; the cycle runs as a subprocess
(`python -m ratchet.cli cycle`). The test-only hook ``RATCHET_TEST_PAUSE_AT=<stage>``
(ratchet/cycle_state.py) makes the cycle write ``<workdir>/paused-<stage>`` inside that stage and
sleep, so the kill lands there reliably:

- ingest: the span and its Kafka offsets are committed, the cycle state is not advanced;
- train: the candidate is registered (alias ``candidate``), the state does not know it;
- gate: the candidate waits for its verdict;
- deploy: the verdict is recorded, promotion has not happened.

After the rerun: every reward row of every validated span is in exactly one gated candidate's
training data (the version's ``ratchet.span_ids``/``ratchet.rows`` and the train run's params),
no run of the model is left RUNNING, and the aliases are consistent. Two concurrent cycles on one
model: one runs, the other waits (then finds nothing new) or exits with a clear message; there is
never more than one promotion from the same champion.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import uuid
from collections import Counter
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


def _setup(broker, tmp_path: Path, *, wait_s: float = 120.0) -> tuple[str, Path]:
    """A fresh model and consumer group, the recorded traffic replayed for it; the config file."""
    from ingest.kafka_io import ensure_topics, start_group_at_end
    from ingest.schema import TOPICS
    from ratchet.replay import replay

    ensure_topics(broker.bootstrap)
    name, group = f"kill-{uuid.uuid4().hex[:8]}", f"g-{uuid.uuid4().hex[:8]}"
    start_group_at_end(broker.bootstrap, group, TOPICS.values())
    assert replay(FIXTURE, bootstrap=broker.bootstrap) > 100
    config = {
        "model_name": name,
        "champion": {"sft_steps": 60, "seed": 0},  # the cached warm start of test_cycle
        "min_rows_to_train": 8,
        "gate": PERMISSIVE_GATE,
        "trainer": {"seed": 0, "steps": 2, "batch_size": 32},
        "ingest": {"group_id": group, "drain": True},
        "lock": {"ttl_s": 30.0, "wait_s": wait_s, "settle_s": 0.3},
    }
    path = tmp_path / f"{name}.json"
    path.write_text(json.dumps(config))
    return name, path


def _argv(config: Path, workdir: Path, broker, mlflow_server) -> list[str]:
    return [sys.executable, "-m", "ratchet.cli", "cycle", "--config", str(config),
            "--workdir", str(workdir), "--bootstrap", broker.bootstrap,
            "--tracking-uri", mlflow_server.uri]


def _env(pause: str | None = None) -> dict[str, str]:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    env.pop("RATCHET_TEST_PAUSE_AT", None)
    if pause:
        env["RATCHET_TEST_PAUSE_AT"] = pause
    return env


def _start(argv: list[str], log: Path, pause: str | None = None) -> subprocess.Popen:
    out = open(log, "w")
    return subprocess.Popen(argv, env=_env(pause), cwd=ROOT, stdout=out, stderr=subprocess.STDOUT)


def _kill_at(argv: list[str], workdir: Path, stage: str) -> None:
    proc = _start(argv, workdir.parent / f"{workdir.name}-killed.log", pause=stage)
    marker = workdir / f"paused-{stage}"
    deadline = time.monotonic() + 600
    try:
        while not marker.exists():
            assert proc.poll() is None, (workdir.parent / f"{workdir.name}-killed.log").read_text()
            assert time.monotonic() < deadline, f"never reached {stage}"
            time.sleep(0.5)
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=30)
    assert proc.returncode == -signal.SIGKILL
    marker.unlink()


def _versions(uri: str, name: str) -> list:
    from mlflow import MlflowClient

    return MlflowClient(uri, registry_uri=uri).search_model_versions(f"name = '{name}'")


def _check_ledger(uri: str, name: str, workdirs: list[Path]) -> dict[str, int]:
    """Every validated span's rows in exactly one gated candidate; no RUNNING run; aliases sane."""
    from mlflow import MlflowClient

    from ratchet.cycle_state import CycleStore
    from runtime import registry

    versions = _versions(uri, name)
    gated = [v for v in versions if "gate.verdict" in v.tags]
    ids: Counter = Counter()
    for w in workdirs:  # span ids are per workdir (one controller machine each)
        ids += _check_workdir(uri, w, gated)
    assert ids and max(ids.values()) == 1  # each reward row once, across every span and machine
    # Nothing RUNNING, every cycle finished, aliases consistent.
    client = MlflowClient(uri)
    exp = client.get_experiment_by_name("ratchet")
    running = client.search_runs([exp.experiment_id], "attributes.status = 'RUNNING'")
    assert not [r for r in running if r.data.tags.get("ratchet.model") == name]
    for w in workdirs:
        assert all(s.finished for s in CycleStore(w / "spans").all())
    cand = registry.resolve_alias(uri, name, registry.CANDIDATE)
    by_version = {int(v.version): v for v in versions}
    if cand is not None:
        assert "gate.verdict" in by_version[cand].tags
    for v in versions:  # a version is bootstrap, gated, or explicitly abandoned
        t = v.tags
        assert "ratchet.origin" in t or "gate.verdict" in t or "ratchet.abandoned" in t, t
    promotions = [v for v in versions if v.tags.get("ratchet.promotion", "").startswith("promoted")]
    parents = Counter(v.tags["ratchet.parent_version"] for v in promotions)
    assert all(c == 1 for c in parents.values()), parents  # never two from one champion
    champ = registry.resolve_alias(uri, name, registry.CHAMPION)
    if promotions:
        assert champ == max(int(v.version) for v in promotions)
    return {"rows": sum(ids.values()), "gated": len(gated), "promotions": len(promotions)}


def _check_workdir(uri: str, workdir: Path, gated: list) -> Counter:
    """The workdir's validated spans with rows are each in exactly one of its gated candidates."""
    import pyarrow.parquet as pq
    from mlflow import MlflowClient

    from ingest.spans import SpanStore
    from ratchet.cycle_state import CycleStore

    cycles = {s.cycle_id for s in CycleStore(workdir / "spans").all()}
    mine = [v for v in gated if v.tags.get("ratchet.cycle_id") in cycles]
    spans = {m["span_id"]: m for m in SpanStore(workdir / "spans").manifests_list()
             if m["status"] == "ok" and m["rows"] > 0}
    trained_on = Counter(s for v in mine for s in v.tags["ratchet.span_ids"].split(","))
    assert set(trained_on) == set(spans) and all(c == 1 for c in trained_on.values()), trained_on
    for v in mine:
        rows = sum(spans[s]["rows"] for s in v.tags["ratchet.span_ids"].split(","))
        assert int(v.tags["ratchet.rows"]) == rows
        run = MlflowClient(uri).get_run(v.run_id)
        assert run.data.params["rows"] == str(rows)
        assert run.data.params["span_ids"] == v.tags["ratchet.span_ids"]
    return Counter(
        r for m in spans.values() for f in m["files"]
        for r in pq.read_table(workdir / "spans" / f).column("response_id").to_pylist()
    )


@pytest.mark.parametrize("stage", ["ingest", "train", "gate", "deploy"])
def test_sigkill_at_a_stage_then_rerun_trains_every_row_once(
    stage, broker, mlflow_server, tmp_path
):
    from mlflow import MlflowClient

    name, config = _setup(broker, tmp_path)
    workdir = tmp_path / "work"
    argv = _argv(config, workdir, broker, mlflow_server)
    _kill_at(argv, workdir, stage)
    killed_run_ids = {r.info.run_id for r in MlflowClient(mlflow_server.uri).search_runs(
        [MlflowClient(mlflow_server.uri).get_experiment_by_name("ratchet").experiment_id],
        f"tags.`ratchet.model` = '{name}' and attributes.status = 'RUNNING'")}
    assert killed_run_ids  # the kill left the cycle's runs RUNNING

    again = subprocess.run(argv, env=_env(), cwd=ROOT, capture_output=True, text=True,
                           timeout=900)
    assert again.returncode == 0, again.stdout[-3000:] + again.stderr[-3000:]
    figures = _check_ledger(mlflow_server.uri, name, [workdir])
    print(f"kill at {stage}:", json.dumps(figures))
    assert figures["gated"] == 1 and figures["promotions"] == 1 and figures["rows"] > 50
    client = MlflowClient(mlflow_server.uri)
    for run_id in killed_run_ids:
        run = client.get_run(run_id)
        assert run.info.status == "KILLED" and "ratchet.killed_reason" in run.data.tags


def test_two_concurrent_cycles_one_runs_the_other_waits_or_exits(
    broker, mlflow_server, tmp_path
):
    from runtime.lease import ModelLease

    name, config = _setup(broker, tmp_path, wait_s=600.0)
    # Two machines: own workdirs, one registry, one consumer group.
    a, b = tmp_path / "a", tmp_path / "b"
    procs = [_start(_argv(config, w, broker, mlflow_server), tmp_path / f"{w.name}.log")
             for w in (a, b)]
    lease = ModelLease(mlflow_server.uri, name)
    deadline = time.monotonic() + 300
    while lease.read() is None:  # someone holds it
        assert time.monotonic() < deadline
        time.sleep(0.5)
    short = json.loads(config.read_text())
    short["lock"]["wait_s"] = 1.0
    impatient = tmp_path / "impatient.json"
    impatient.write_text(json.dumps(short))
    third = subprocess.run(_argv(impatient, tmp_path / "c", broker, mlflow_server), env=_env(),
                           cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert third.returncode == 75, third.stdout[-2000:] + third.stderr[-2000:]
    assert "locked by another cycle" in third.stderr
    for p in procs:
        assert p.wait(timeout=900) == 0, [(tmp_path / f"{w}.log").read_text() for w in "ab"]
    figures = _check_ledger(mlflow_server.uri, name, [a, b])
    assert figures["promotions"] == 1
    origins = [v for v in _versions(mlflow_server.uri, name) if "ratchet.origin" in v.tags]
    assert len(origins) == 1  # one bootstrap champion, not two
    logs = (tmp_path / "a.log").read_text() + (tmp_path / "b.log").read_text()
    assert "rows < min_rows_to_train" in logs  # the waiter found the offsets already consumed


def test_a_candidate_that_lost_its_checkpoint_gets_a_failing_verdict_on_resume(
    broker, mlflow_server, tmp_path
):
    from ratchet.cycle_state import CycleStore
    from runtime import registry

    name, config = _setup(broker, tmp_path)
    workdir = tmp_path / "work"
    argv = _argv(config, workdir, broker, mlflow_server)
    _kill_at(argv, workdir, "gate")
    candidate = registry.resolve_alias(mlflow_server.uri, name, registry.CANDIDATE)
    version = next(v for v in _versions(mlflow_server.uri, name) if int(v.version) == candidate)
    every = list((mlflow_server.workdir / "artifacts").rglob("config.json"))
    model_id = version.source.removeprefix("models:/")
    lost = [p for p in every if f"/{model_id}/" in str(p)]
    assert lost, (version.source, every)
    for path in lost:
        path.unlink()

    again = subprocess.run(argv, env=_env(), cwd=ROOT, capture_output=True, text=True,
                           timeout=900)  # raised FileNotFoundError here, on every rerun

    assert again.returncode == 0, again.stdout[-3000:] + again.stderr[-3000:]
    tags = registry.version_tags(mlflow_server.uri, name, candidate)
    assert tags["gate.verdict"] == "fail" and tags["gate.loads"] == "fail"
    assert registry.resolve_alias(mlflow_server.uri, name, registry.CHAMPION) != candidate
    assert CycleStore(workdir / "spans").unfinished() is None


def test_a_cycle_stalled_past_its_lease_exits_without_promoting_the_abandoned_candidate(
    broker, mlflow_server, tmp_path
):
    from runtime import registry

    name, config = _setup(broker, tmp_path, wait_s=60.0)
    short = json.loads(config.read_text())
    short["lock"]["ttl_s"] = 6.0
    config.write_text(json.dumps(short))
    a, b = tmp_path / "a", tmp_path / "b"  # two controller machines, own workdirs
    env = {**_env("gate"), "RATCHET_TEST_PAUSE_S": "4"}
    log_a = tmp_path / "a.log"
    proc = subprocess.Popen(_argv(config, a, broker, mlflow_server), env=env, cwd=ROOT,
                            stdout=open(log_a, "w"), stderr=subprocess.STDOUT)
    try:
        deadline = time.monotonic() + 600
        while not (a / "paused-gate").exists():
            assert proc.poll() is None and time.monotonic() < deadline, log_a.read_text()
            time.sleep(0.1)
        proc.send_signal(signal.SIGSTOP)  # stalled in the gate, past its 6 s lease
        candidate = registry.resolve_alias(mlflow_server.uri, name, registry.CANDIDATE)
        time.sleep(7.0)
        other = subprocess.run(_argv(config, b, broker, mlflow_server), env=_env(), cwd=ROOT,
                               capture_output=True, text=True, timeout=600)
        assert other.returncode == 0, other.stdout[-3000:] + other.stderr[-3000:]
        assert registry.ABANDONED in registry.version_tags(mlflow_server.uri, name, candidate)
        proc.send_signal(signal.SIGCONT)
        assert proc.wait(timeout=300) == 75, log_a.read_text()[-3000:]
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert "stopped without writing" in log_a.read_text()
    tags = registry.version_tags(mlflow_server.uri, name, candidate)
    assert "gate.verdict" not in tags and tags.get("gate.promoted") != "true"
    assert registry.resolve_alias(mlflow_server.uri, name, registry.CHAMPION) != candidate
    # A rerun on the stalled machine drops its abandoned candidate instead of gating it.
    again = subprocess.run(_argv(config, a, broker, mlflow_server), env=_env(), cwd=ROOT,
                           capture_output=True, text=True, timeout=600)
    assert again.returncode in (0, 1), again.stdout[-3000:] + again.stderr[-3000:]
    assert registry.resolve_alias(mlflow_server.uri, name, registry.CHAMPION) != candidate
    assert "gate.verdict" not in registry.version_tags(mlflow_server.uri, name, candidate)
