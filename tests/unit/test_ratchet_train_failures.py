"""A train stage that fails every time (e.g. the replay set-up raising on the champion's own
answers) is bounded: after ``stage_max_deaths`` failed attempts the cycle is skipped with the
count and the reasons, its spans are consumed, and the next cycle moves on."""

from __future__ import annotations

import json

import pytest

from ratchet.config import RatchetConfig
from ratchet.cycle import Cycle, CycleResult
from ratchet.runner import failed


def _cycle_with_a_span(tmp_path) -> Cycle:
    span = tmp_path / "spans" / "_manifests" / "span-000001"
    span.mkdir(parents=True)
    (span / "manifest.json").write_text(json.dumps({
        "span_id": "span-000001", "rows": 40, "status": "ok",
        "files": ["spans/date=2026-01-01/hour=00/span-000001.parquet"]}))
    cycle = Cycle(RatchetConfig(), tracking_uri="unused", bootstrap="unused", workdir=tmp_path)
    cycle._settle_orphan_candidate = lambda state: None  # no registry here: no other candidate
    cycle._impact = lambda state, result: None  # nor an impact table (no registry, no spans)
    state = cycle.store.new()
    state.span_ids, state.span_rows = ["span-000001"], {"span-000001": 40}
    state.champion_version, state.stage = 1, "ingested"
    cycle.store.save(state)
    return cycle


def test_a_train_stage_that_keeps_failing_skips_the_cycle_after_stage_max_deaths(tmp_path):
    cycle = _cycle_with_a_span(tmp_path)
    tries = []

    def train(state):
        tries.append(state.cycle_id)
        raise RuntimeError("replay: compile() raised RecursionError")

    cycle._train = train
    reason = "RuntimeError: replay: compile() raised RecursionError"
    for attempt in (1, 2, 3):  # the default stage_max_deaths
        state = cycle.store.unfinished()
        with pytest.raises(RuntimeError, match="RecursionError"):
            cycle._advance(state, CycleResult(index=attempt, run_id="r"))
        assert cycle.store.unfinished().stage_failures == {"train": [reason] * attempt}

    result = CycleResult(index=4, run_id="r")
    cycle._advance(cycle.store.unfinished(), result)
    assert len(tries) == 3  # not trained a fourth time
    assert result.skipped == ("the train stage failed 3 times (stage_max_deaths=3): "
                              f"3x {reason}")
    assert failed(result)  # `ratchet cycle` exits non-zero: a skip for an error
    (state,) = cycle.store.all()
    assert state.stage == "skipped" and state.note == result.skipped
    assert state.stage_failures == {}
    assert cycle.store.unfinished() is None and cycle.store.unconsumed_spans() == {}


def test_a_train_attempt_that_succeeds_clears_the_count(tmp_path):
    cycle = _cycle_with_a_span(tmp_path)
    outcomes = iter([RuntimeError("out of memory"), None])

    def train(state):
        error = next(outcomes)
        if error:
            raise error
        state.stage = "skipped"  # as a cycle with no trainable rows ends

    cycle._train = train
    with pytest.raises(RuntimeError):
        cycle._advance(cycle.store.unfinished(), CycleResult(index=1, run_id="r"))
    state = cycle.store.unfinished()
    cycle._advance(state, CycleResult(index=2, run_id="r"))
    assert state.stage_failures == {}
