from datetime import UTC, datetime, timedelta

import pyarrow as pa
import pytest
from pydantic import ValidationError

from deploy.fleet.rollout import RewardTable, RolloutConfig
from ingest.schema import REWARD_SCHEMA

T0 = datetime(2026, 1, 1, tzinfo=UTC)


def test_steps_must_increase_and_end_at_full_traffic():
    assert RolloutConfig().steps == (0.1, 0.25, 0.5, 1.0)
    for bad in ((0.5, 0.25, 1.0), (0.1, 0.5), (1.0,), (0.0, 1.0), (0.2, 0.2, 1.0)):
        with pytest.raises(ValidationError, match="steps"):
            RolloutConfig(steps=bad)


def _row(name, version, seconds, persistence, dissatisfied):
    return {
        "schema_version": 1,
        "response_id": f"r{version}-{seconds}",
        "conversation_id": "c",
        "event_time": T0 + timedelta(seconds=seconds),
        "model_name": name,
        "model_version": version,
        "task_kind": "arith",
        "prompt": "p",
        "response_text": "t",
        "response_token_ids": [1],
        "response_logprobs": [-0.5],
        "routed_experts": [[[0, 1]]],
        "temperature": 1.0,
        "finish_reason": "stop",
        "completion_tokens": 1,
        "latency_ms": 1.0,
        "edit_persistence_30": None,
        "edit_persistence_120": None,
        "edit_persistence_300": None,
        "edit_persistence_600": persistence,
        "followup_dissatisfied": dissatisfied,
        "feedback_accept": None,
        "reward": 0.0,
        "reward_components": [],
        "defaulted_signals": [],
    }


def test_reward_table_filters_window_model_and_version():
    rows = [
        _row("m", 1, 10, 0.9, True),
        _row("m", 1, 20, None, None),  # no signals: counted as not dissatisfied
        _row("m", 2, 15, 0.1, False),
        _row("other", 1, 12, 0.5, True),  # another model's version 1
        _row("m", 1, 100, 0.7, True),  # outside the window
    ]
    table = RewardTable(pa.Table.from_pylist(rows, schema=REWARD_SCHEMA), T0, model_name="m")
    got = table.product(T0, T0 + timedelta(seconds=60), 1)
    assert got.edit_persistence == pytest.approx([0.9])
    assert got.dissatisfied == [True, False]
    assert table.product(T0, T0 + timedelta(seconds=60), 2).dissatisfied == [False]
    assert table.closed_until() == T0
