"""The impact table: the champion against the holdback, each change with an always-valid
interval."""

import random
from datetime import UTC, datetime, timedelta

import pyarrow as pa
import pytest

from deploy.fleet.impact import (
    ImpactTable,
    format_impact,
    impact_table,
    latest_impact,
    relative_change,
    write_impact,
)
from ingest.schema import REWARD_SCHEMA

T0 = datetime(2026, 1, 1, tzinfo=UTC)


def _row(rng, version, seconds, *, persist, dissat, accept, tokens, latency=100.0, arm=None):
    return {"arm": arm,
        "schema_version": 1, "response_id": f"r{version}-{seconds}-{rng.random()}",
        "conversation_id": "c", "event_time": T0 + timedelta(seconds=seconds),
        "model_name": "m", "model_version": version, "task_kind": "arith", "prompt": "p",
        "response_text": "t", "response_token_ids": [1], "response_logprobs": [-0.5],
        "routed_experts": [[[0, 1]]], "temperature": 1.0, "finish_reason": "stop",
        "completion_tokens": max(1, round(rng.gauss(tokens, 4.0))),
        "latency_ms": rng.gauss(latency, 20.0),
        "edit_persistence_600": min(1.0, max(0.0, rng.gauss(persist, 0.25))),
        "followup_dissatisfied": rng.random() < dissat,
        "feedback_accept": (rng.random() < accept) if rng.random() < 0.5 else None,
        "reward": 0.0, "reward_components": [], "defaulted_signals": [],
    }


HOLD = dict(persist=0.5, dissat=0.3, accept=0.6, tokens=20.0)
CHAMP = dict(persist=0.6, dissat=0.2, accept=0.75, tokens=15.0)


def _table(n, seed=0, champ=CHAMP, hold=HOLD):
    rng = random.Random(seed)
    rows = [_row(rng, 3, 100 + i, **champ) for i in range(n)]
    rows += [_row(rng, 1, 100 + i, **hold) for i in range(n)]
    rows += [_row(rng, 1, i, persist=0.0, dissat=1.0, accept=0.0, tokens=99.0)
             for i in range(50)]  # served before the champion's first row: left out
    return pa.Table.from_pylist(rows, schema=REWARD_SCHEMA)


def test_a_planted_effect_is_recovered_within_its_interval():
    table = impact_table(_table(3000), model_name="m", champion_version=3, anchor_version=1)
    got = {r.metric: r for r in table.rows}
    assert got["edit_persistence_600"].n_holdback == 3000  # the 50 earlier rows are left out
    # the planted relative changes (persistence clipped to [0, 1] keeps its means near 0.5/0.6)
    planted = {"dissatisfied_rate": 0.2 / 0.3 - 1, "pass_rate": 0.75 / 0.6 - 1,
               "completion_tokens": 15 / 20 - 1, "latency_ms": 0.0,
               "edit_persistence_600": got["edit_persistence_600"].champion
               / got["edit_persistence_600"].holdback - 1}
    for name, effect in planted.items():
        row = got[name]
        assert row.low < effect < row.high, (name, row)
        assert row.change == pytest.approx(effect, abs=0.06)
    assert 0.15 < got["edit_persistence_600"].change < 0.25
    assert got["edit_persistence_600"].verdict == "better"
    assert got["dissatisfied_rate"].verdict == "better"  # lower is better
    assert got["completion_tokens"].verdict == "better"
    assert got["latency_ms"].verdict == "unclear"
    assert table.drift == []
    text = format_impact(table)
    assert "champion v3 vs holdback on anchor v1" in text and "edit_persistence_600" in text


def test_a_worse_champion_raises_the_drift_alarm():
    table = impact_table(_table(3000, seed=1, champ=HOLD, hold=CHAMP), model_name="m",
                         champion_version=3, anchor_version=1)
    assert set(table.drift) == {"edit_persistence_600", "dissatisfied_rate", "pass_rate"}
    assert "DRIFT" in format_impact(table)


def test_equal_arms_stay_unclear_over_repeated_looks():
    rng = random.Random(5)
    champ, hold = [], []
    for _ in range(20):  # a look after every 100 rows per arm
        champ += [rng.random() for _ in range(100)]
        hold += [rng.random() for _ in range(100)]
        r, low, high = relative_change(champ, hold, alpha=0.01, scale=0.1)
        assert low < 0 < high


def test_nothing_to_compare_while_the_champion_is_the_anchor(tmp_path):
    table = impact_table(_table(10), model_name="m", champion_version=1, anchor_version=1)
    assert table.rows == [] and "is the anchor" in format_impact(table)
    write_impact(table, tmp_path, 2)
    assert (tmp_path / "impact-0002.json").exists()
    again = latest_impact(tmp_path)
    assert isinstance(again, ImpactTable) and again.note == table.note


def _arm_rows(n, seed, arm, effect):
    rng = random.Random(seed)
    return [_row(rng, 1, 100 + i, arm=arm, **effect) for i in range(n)]


def test_the_champion_as_anchor_is_compared_by_arm():
    # A/A: one version serves both arms; the rows' arms tell the groups of users apart
    rows = _arm_rows(2000, 1, "stable", HOLD) + _arm_rows(500, 2, "holdback", HOLD)
    rows += _arm_rows(300, 3, "canary", CHAMP)  # a canary of the same version: neither side
    table = impact_table(pa.Table.from_pylist(rows, schema=REWARD_SCHEMA), model_name="m",
                         champion_version=1, anchor_version=1)
    got = {r.metric: r for r in table.rows}
    assert got["edit_persistence_600"].n_champion == 2000
    assert got["edit_persistence_600"].n_holdback == 500
    assert all(r.low < 0 < r.high for r in table.rows), format_impact(table)
    assert table.drift == []
    # a planted effect between the arms of one version is found the same way
    rows = _arm_rows(2000, 1, "stable", CHAMP) + _arm_rows(2000, 2, "holdback", HOLD)
    table = impact_table(pa.Table.from_pylist(rows, schema=REWARD_SCHEMA), model_name="m",
                         champion_version=1, anchor_version=1)
    assert {r.metric: r.verdict for r in table.rows}["edit_persistence_600"] == "better"
    # the arms of one version differ: a split alarm, never a drift (nothing to roll back to)
    rows = _arm_rows(2000, 1, "stable", HOLD) + _arm_rows(2000, 2, "holdback", CHAMP)
    table = impact_table(pa.Table.from_pylist(rows, schema=REWARD_SCHEMA), model_name="m",
                         champion_version=1, anchor_version=1)
    assert table.drift == [] and "edit_persistence_600" in table.split_alarm
    assert "A/A ALARM" in format_impact(table) and "DRIFT" not in format_impact(table)
    assert ImpactTable.from_json(table.to_json()).split_alarm == table.split_alarm


def test_rows_with_an_arm_side_by_their_arm_not_their_version():
    # a holdback user's row is the holdback's whatever the version; an unrouted row of the
    # champion's version (no arm) still counts for the champion
    rng = random.Random(4)
    rows = [_row(rng, 3, 100 + i, arm="stable", **CHAMP) for i in range(1000)]
    rows += [_row(rng, 3, 100 + i, **CHAMP) for i in range(200)]
    rows += [_row(rng, 1, 100 + i, arm="holdback", **HOLD) for i in range(700)]
    table = impact_table(pa.Table.from_pylist(rows, schema=REWARD_SCHEMA), model_name="m",
                         champion_version=3, anchor_version=1)
    got = {r.metric: r for r in table.rows}
    assert (got["edit_persistence_600"].n_champion, got["edit_persistence_600"].n_holdback) \
        == (1200, 700)
