"""The cycle state machine's bookkeeping: which spans are consumed, which cycle is unfinished."""

from __future__ import annotations

import json
import os

import pytest

from ratchet.cycle_state import PAUSE_ENV, CycleStore, pause_point


def _span(root, span_id: str, rows: int, status: str = "ok") -> None:
    d = root / "_manifests" / span_id
    d.mkdir(parents=True)
    files = [f"spans/date=2026-01-01/hour=00/{span_id}.parquet"]
    (d / "manifest.json").write_text(json.dumps(
        {"span_id": span_id, "rows": rows, "status": status, "files": files}
    ))


def test_a_span_is_consumed_only_once_a_gated_candidate_was_trained_on_it(tmp_path):
    _span(tmp_path, "span-000001", 40)
    _span(tmp_path, "span-000002", 0)
    _span(tmp_path, "span-000003", 25, status="quarantined")
    store = CycleStore(tmp_path)
    assert store.unconsumed_spans() == {"span-000001": 40}

    first = store.new()
    first.span_ids, first.span_rows, first.stage = ["span-000001"], {"span-000001": 40}, "trained"
    store.save(first)
    # Trained but not gated (e.g. killed during the gate): not consumed, and still unfinished.
    assert store.unconsumed_spans() == {"span-000001": 40}
    assert store.unfinished().cycle_id == first.cycle_id

    _span(tmp_path, "span-000004", 12)
    first.stage = "gated"
    store.save(first)
    assert store.unconsumed_spans() == {"span-000004": 12}
    first.stage = "deployed"
    store.save(first)
    assert store.unfinished() is None
    assert [s.cycle_id for s in CycleStore(tmp_path).all()] == [first.cycle_id]  # persisted


def test_skipped_cycle_leaves_its_spans_for_the_next(tmp_path):
    _span(tmp_path, "span-000001", 5)
    store = CycleStore(tmp_path)
    skipped = store.new()
    skipped.stage, skipped.note = "skipped", "span has 5 rows < min_rows_to_train"
    store.save(skipped)
    assert store.unfinished() is None
    assert store.unconsumed_spans() == {"span-000001": 5}


def test_a_cycle_skipped_at_train_consumes_its_spans(tmp_path):
    """A span with no trainable rows (greedy rows with nothing to imitate) would skip again on
    every rerun: the cycle skipped at the train stage consumes it, and the next one moves on."""
    _span(tmp_path, "span-000001", 1095)
    store = CycleStore(tmp_path)
    state = store.new()
    state.span_ids, state.span_rows = ["span-000001"], {"span-000001": 1095}
    state.stage, state.note = "skipped", "no trainable rows: 1095 rows, ... 1095 greedy"
    store.save(state)
    assert store.unfinished() is None
    assert store.unconsumed_spans() == {}
    _span(tmp_path, "span-000002", 30)
    assert store.unconsumed_spans() == {"span-000002": 30}


def _finished(store, spans: dict[str, int], champion: int, promoted: bool):
    state = store.new()
    state.span_ids, state.span_rows = sorted(spans), spans
    state.champion_version, state.stage = champion, "deployed"
    state.verdict = {"passed": promoted, "promoted": promoted}
    store.save(state)
    return state


def test_carry_rereads_rejected_cycles_of_the_same_champion_until_a_promotion(tmp_path):
    store = CycleStore(tmp_path)
    _finished(store, {"span-000001": 30}, champion=1, promoted=False)
    _finished(store, {"span-000002": 40}, champion=1, promoted=True)  # ends v1's window
    _finished(store, {"span-000003": 50}, champion=3, promoted=False)
    _finished(store, {"span-000004": 60, "span-000005": 5}, champion=3, promoted=False)
    assert store.carried_spans(3, max_rows=1000) == {
        "span-000004": 60, "span-000005": 5, "span-000003": 50}  # newest cycle first
    assert store.carried_spans(1, max_rows=1000) == {}  # v1 was promoted away from
    assert store.carried_spans(3, max_rows=100) == {"span-000004": 60, "span-000005": 5}
    assert store.carried_spans(3, max_rows=0) == {}
    unfinished = store.new()  # the running cycle itself is never carried
    unfinished.span_rows, unfinished.champion_version = {"span-000006": 7}, 3
    unfinished.stage = "gated"
    store.save(unfinished)
    assert "span-000006" not in store.carried_spans(3, max_rows=1000)


def test_pause_point_is_inert_unless_named(tmp_path, monkeypatch):
    monkeypatch.delenv(PAUSE_ENV, raising=False)
    pause_point("train", tmp_path)
    assert not list(tmp_path.iterdir())
    monkeypatch.setenv(PAUSE_ENV, "gate")
    pause_point("train", tmp_path)
    assert not list(tmp_path.iterdir())
    class Paused(Exception):
        pass

    def sleep(seconds: float) -> None:
        raise Paused(seconds)

    monkeypatch.setattr("time.sleep", sleep)
    with pytest.raises(Paused):
        pause_point("gate", tmp_path)
    assert (tmp_path / "paused-gate").read_text() == str(os.getpid())


def test_a_cycle_has_a_fixed_step_budget_unless_scaling_is_asked_for():
    from ratchet.config import RatchetConfig
    from ratchet.cycle import trainer_config
    from ratchet.cycle_state import CycleState

    config = RatchetConfig.model_validate({"trainer": {"steps": 20}})
    state = CycleState(cycle_id="c", span_ids=["s3"], span_rows={"s3": 384},
                       carried_rows={"s2": 384, "s1": 200})
    assert state.train_span_ids == ["s3", "s2", "s1"] and state.train_rows == 968
    assert trainer_config(config, state).steps == 20  # carried rows are sampled, not added
    scaled = config.model_copy(update={"carry": config.carry.model_copy(
        update={"scale_steps": True})})
    assert trainer_config(scaled, state).steps == round(20 * 968 / 384) == 50
    alone = CycleState(cycle_id="d", span_ids=["s4"], span_rows={"s4": 100})
    assert trainer_config(config, alone) is config.trainer
