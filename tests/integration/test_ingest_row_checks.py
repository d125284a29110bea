"""The workers' row-level checks (``check_part``, pyarrow) give Great Expectations' report.

Parts of reward rows, clean and broken in every way a row-level expectation catches (nulls in
each required column, values outside each range, at the bounds, NaN, an unknown schema
version, a follow-up without a detector version), are checked by ``check_part`` and by Great
Expectations (``check_part_gx``): the same expectations fail, with the same kwargs and
unexpected counts.
"""

from __future__ import annotations

import json

import pyarrow as pa
import pytest

from ingest.validate import REQUIRED, check_part, check_part_gx
from rewards.config import RewardConfig
from tests.unit.ingest.test_ingest_parts import _rows

pytestmark = [pytest.mark.integration]

LO, HI = RewardConfig().bounds()
LIMITS = {"reward_bounds": (LO, HI), "max_completion_tokens": 4096, "max_latency_ms": 6e5}


def _set(table: pa.Table, name: str, values: list, type_: pa.DataType | None = None) -> pa.Table:
    i = table.schema.get_field_index(name)
    array = pa.array(values, type_ or table.schema.field(name).type)
    return table.set_column(i, pa.field(name, array.type, nullable=True), array)


def _edit(table: pa.Table, name: str, at: dict[int, object]) -> pa.Table:
    values = table.column(name).to_pylist()
    for k, v in at.items():
        values[k] = v
    return _set(table, name, values)


def _key(report: dict) -> list[str]:
    return sorted(json.dumps(f, sort_keys=True, default=str) for f in report["failed"])


def _broken(table: pa.Table) -> pa.Table:
    for j, column in enumerate(REQUIRED):
        table = _edit(table, column, {j: None})
    table = _edit(table, "reward", {20: HI + 1e-4, 21: HI + 1e-3, 22: LO - 1e-3, 23: float("nan")})
    table = _edit(table, "completion_tokens", {24: -1, 25: 4096, 26: 4097})
    table = _edit(table, "latency_ms", {27: 6e5 + 1, 28: -0.5})
    table = _edit(table, "model_version", {29: 0})
    table = _edit(table, "schema_version", {30: 3, 31: 1})
    for k, w in enumerate((30, 120, 300, 600)):
        table = _edit(table, f"edit_persistence_{w}", {32 + k: 1.5, 36 + k: -0.1, 40 + k: 1.0})
    table = _edit(table, "dissatisfied_score", {44: 1.01, 45: None})
    table = _edit(table, "followup_text", {46: "no!", 47: "fine"})
    return _edit(table, "detector_version", {46: None, 47: "v1"})


@pytest.mark.parametrize("broken", [False, True])
def test_pyarrow_row_checks_give_the_great_expectations_report(broken):
    table = _rows(60, seed=5)
    if broken:
        table = _broken(table)
    got, want = check_part(table, **LIMITS), check_part_gx(table, **LIMITS)
    assert got["evaluated"] == want["evaluated"] == 21
    assert _key(got) == _key(want)
    assert bool(got["failed"]) == broken
    if broken:  # every row-level expectation is broken once at least
        assert len(got["failed"]) == 21


def test_an_empty_part_is_not_checked():
    empty = _rows(8, seed=1).slice(0, 0)
    assert check_part(empty, **LIMITS) == check_part_gx(empty, **LIMITS)
