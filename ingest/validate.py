"""Great Expectations suite run on every span before it may be used for training.

Checks: schema version, nulls in required columns, value ranges (rewards within the reward
config's bounds, persistence in [0, 1], latency, token counts), unique response ids, the share of
rows with each signal joined, the share of rows from the newest behaviour-policy version, and
drift of reward mean/std and mean completion length against the previous validated span.

Great Expectations is imported inside ``validate_span`` (its import costs ~4 s) and runs in an
ephemeral context, offline. Deliberately left out: deciding what a failed span means for the
cycle (the span is quarantined by ingest/pipeline.py; the gate reads the manifest).
"""

from __future__ import annotations

import logging
import os
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from ingest.schema import READABLE_SCHEMA_VERSIONS

REQUIRED = (
    "response_id",
    "conversation_id",
    "event_time",
    "model_name",
    "model_version",
    "task_kind",
    "finish_reason",
    "completion_tokens",
    "latency_ms",
    "reward",
)
SIGNAL_COLUMNS = {
    "edit_persistence": "edit_persistence_600",
    "followup": "followup_dissatisfied",
    "feedback": "feedback_accept",
}


def _frame(table: pa.Table):
    """The flat columns the suite looks at, as pandas (list/map columns are left out)."""
    cols = [
        *REQUIRED,
        "schema_version",
        "edit_persistence_30",
        "edit_persistence_120",
        "edit_persistence_300",
        "edit_persistence_600",
        "followup_dissatisfied",
        "feedback_accept",
        "dissatisfied_score",
    ]
    flat = table.select(cols)
    df = flat.to_pandas()
    any_persistence = pc.is_valid(
        pc.coalesce(*[table.column(f"edit_persistence_{w}") for w in (30, 120, 300, 600)])
    )
    df["has_edit_persistence"] = any_persistence.to_numpy(zero_copy_only=False)
    df["has_followup"] = pc.is_valid(table.column("followup_dissatisfied")).to_numpy(
        zero_copy_only=False
    )
    df["has_feedback"] = pc.is_valid(table.column("feedback_accept")).to_numpy(zero_copy_only=False)
    unversioned = pc.and_(pc.is_valid(table.column("followup_text")),
                          pc.is_null(table.column("detector_version")))
    df["followup_without_detector"] = unversioned.to_numpy(zero_copy_only=False)
    return df


def _expectations(
    gxe: Any,
    *,
    reward_bounds: tuple[float, float],
    max_completion_tokens: int,
    max_latency_ms: float,
    min_join_share: dict[str, float],
    current_version: int,
    min_current_version_share: float,
    drift: dict[str, tuple[float, float]],
) -> list[Any]:
    lo, hi = reward_bounds
    eps = 1e-4
    exps = [gxe.ExpectColumnValuesToNotBeNull(column=c) for c in REQUIRED]
    exps += [
        gxe.ExpectColumnValuesToBeInSet(
            column="schema_version", value_set=list(READABLE_SCHEMA_VERSIONS)
        ),
        gxe.ExpectColumnValuesToBeUnique(column="response_id"),
        gxe.ExpectColumnValuesToBeBetween(column="reward", min_value=lo - eps, max_value=hi + eps),
        gxe.ExpectColumnValuesToBeBetween(
            column="completion_tokens", min_value=0, max_value=max_completion_tokens
        ),
        gxe.ExpectColumnValuesToBeBetween(
            column="latency_ms", min_value=0, max_value=max_latency_ms
        ),
        gxe.ExpectColumnValuesToBeBetween(column="model_version", min_value=1),
    ]
    exps += [
        gxe.ExpectColumnValuesToBeBetween(column=f"edit_persistence_{w}", min_value=0, max_value=1)
        for w in (30, 120, 300, 600)
    ]
    exps += [  # the follow-up detector ran on every joined follow-up, with a score in [0, 1]
        gxe.ExpectColumnValuesToBeBetween(column="dissatisfied_score", min_value=0, max_value=1),
        gxe.ExpectColumnValuesToBeInSet(column="followup_without_detector", value_set=[False]),
    ]
    for signal, share in min_join_share.items():
        if share > 0:
            exps.append(
                gxe.ExpectColumnValuesToBeInSet(
                    column=f"has_{signal}", value_set=[True], mostly=share
                )
            )
    if min_current_version_share > 0:
        exps.append(
            gxe.ExpectColumnValuesToBeInSet(
                column="model_version",
                value_set=[current_version],
                mostly=min_current_version_share,
            )
        )
    for metric, (a, b) in drift.items():
        cls = (
            gxe.ExpectColumnMeanToBeBetween
            if metric != "reward_std"
            else gxe.ExpectColumnStdevToBeBetween
        )
        column = "completion_tokens" if metric == "mean_length" else "reward"
        exps.append(cls(column=column, min_value=a, max_value=b))
    return exps


def drift_bounds(
    previous: dict[str, float] | None,
    *,
    rows: int,
    max_reward_mean_drift: float,
    max_reward_std_drift: float,
    max_length_drift_ratio: float,
    min_rows_for_drift: int,
) -> dict[str, tuple[float, float]]:
    """Allowed (min, max) of reward mean/std and mean length, from the previous span's stats."""
    if previous is None or rows < min_rows_for_drift or previous["rows"] < min_rows_for_drift:
        return {}
    m, s, n = previous["reward_mean"], previous["reward_std"], previous["mean_length"]
    return {
        "reward_mean": (m - max_reward_mean_drift, m + max_reward_mean_drift),
        "reward_std": (max(0.0, s - max_reward_std_drift), s + max_reward_std_drift),
        "mean_length": (n / max_length_drift_ratio, n * max_length_drift_ratio),
    }


def validate_span(
    table: pa.Table,
    *,
    reward_bounds: tuple[float, float],
    max_completion_tokens: int,
    max_latency_ms: float,
    min_join_share: dict[str, float],
    min_current_version_share: float,
    drift: dict[str, tuple[float, float]],
) -> tuple[bool, dict[str, Any]]:
    """Run the suite on the span's rows; returns (success, report with each failed expectation).

    The newest behaviour version is the largest ``model_version`` in the span. An empty span
    passes without running the suite.
    """
    if table.num_rows == 0:
        return True, {"success": True, "skipped": "empty span", "failed": []}
    os.environ.setdefault("GX_ANALYTICS_ENABLED", "false")
    logging.getLogger("great_expectations").setLevel(logging.ERROR)
    import great_expectations as gx
    import great_expectations.expectations as gxe

    df = _frame(table)
    ctx = gx.get_context(mode="ephemeral")
    ctx.variables.progress_bars = {"globally": False}
    batch_def = (
        ctx.data_sources.add_pandas("span")
        .add_dataframe_asset("rows")
        .add_batch_definition_whole_dataframe("all")
    )
    suite = ctx.suites.add(gx.ExpectationSuite(name="reward_span"))
    for exp in _expectations(
        gxe,
        reward_bounds=reward_bounds,
        max_completion_tokens=max_completion_tokens,
        max_latency_ms=max_latency_ms,
        min_join_share=min_join_share,
        current_version=int(df["model_version"].max()),
        min_current_version_share=min_current_version_share,
        drift=drift,
    ):
        suite.add_expectation(exp)
    result = batch_def.get_batch(batch_parameters={"dataframe": df}).validate(suite)
    return result.success, _report(result)


def _report(result: Any) -> dict[str, Any]:
    failed = []
    for r in result.results:
        if not r.success:
            cfg = r.expectation_config
            failed.append(
                {
                    "expectation": cfg.type,
                    "kwargs": {k: v for k, v in cfg.kwargs.items() if k != "batch_id"},
                    "observed": _jsonable(r.result.get("observed_value")),
                    "unexpected_count": r.result.get("unexpected_count"),
                }
            )
    return {
        "success": bool(result.success),
        "evaluated": len(result.results),
        "failed": failed,
    }


def _jsonable(x: Any) -> Any:
    if isinstance(x, (str, int, float, bool)) or x is None:
        return x
    try:
        return float(x)
    except (TypeError, ValueError):
        return str(x)
