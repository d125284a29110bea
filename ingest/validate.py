"""The expectations every span meets before it may be used for training.

Checks: schema version, nulls in required columns, value ranges (rewards within the reward
config's bounds, persistence in [0, 1], latency, token counts), unique response ids, the share of
rows with each signal joined, the share of rows from the newest behaviour-policy version, and
drift of reward mean/std and mean completion length against the previous validated span.

A span is checked in parts (``SpanValidator``), so nothing holds all of its rows: the row-level
expectations run on each part (``check_part``, by the worker that wrote it), the span-level ones
(unique ids, shares, drift) once on a few narrow columns of every row (``narrow``: ~0.1 KB per
row). ``validate_span`` is the same over one table. The row-level expectations are computed
with pyarrow and give Great Expectations' report (``check_part_gx`` runs them with Great
Expectations; a test holds the two together), so a worker never imports it; the span-level ones
run with Great Expectations, imported on first use (its import costs ~4 s), in an ephemeral
context, offline. Deliberately left out: deciding what a failed span means for the cycle (the
span is quarantined by ingest/pipeline.py; the gate reads the manifest).
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from ingest.schema import READABLE_SCHEMA_VERSIONS, REWARD_SCHEMA

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
    """The flat columns the row-level expectations look at, as pandas (list/map columns are
    left out)."""
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
    df = table.select(cols).to_pandas()
    unversioned = pc.and_(pc.is_valid(table.column("followup_text")),
                          pc.is_null(table.column("detector_version")))
    df["followup_without_detector"] = unversioned.to_numpy(zero_copy_only=False)
    return df


NARROW_COLUMNS = (
    "response_id",
    "model_version",
    "completion_tokens",
    "reward",
    "finish_reason",
    "response_text",
    "defaulted_signals",
    "edit_persistence_30",
    "edit_persistence_120",
    "edit_persistence_300",
    "edit_persistence_600",
    "followup_dissatisfied",
    "followup_flag",
    "feedback_accept",
    "trainable",
    "task_kind",
)
"""What a span keeps of every row for the span-level checks and ``batch_monitors``."""
NARROW_SCHEMA = pa.schema([REWARD_SCHEMA.field(c) for c in NARROW_COLUMNS])


def narrow(table: pa.Table) -> pa.Table:
    """The few columns of ``table`` that the span-level checks and monitors need, made small:
    ``response_id`` becomes a 64-bit hash (blake2b of the string: the same in every worker
    process that writes a part, so the uniqueness check can run over parts from many; a
    collision, p ~ n²/2⁶⁵, would quarantine a good span, never admit a bad one),
    ``response_text`` becomes ``""`` or ``"x"`` (the monitors only ask whether it is empty),
    ``finish_reason`` is dictionary-encoded. ~0.1 KB per row instead of the row's ~0.55 KB."""
    t = table.select(NARROW_COLUMNS).cast(NARROW_SCHEMA)
    ids = pa.array([_id_hash(x) for x in t.column("response_id").to_pylist()], pa.int64())
    empty = pc.equal(pc.utf8_length(t.column("response_text")), 0)
    text = pc.if_else(empty, "", "x")
    t = t.set_column(t.schema.get_field_index("response_id"), "response_id", ids)
    t = t.set_column(t.schema.get_field_index("response_text"), "response_text", text)
    i = t.schema.get_field_index("finish_reason")
    return t.set_column(i, "finish_reason", pc.dictionary_encode(t.column(i)))


def _id_hash(response_id: str) -> int:
    """A 64-bit hash of ``response_id``, the same in every process (``hash`` is salted)."""
    digest = hashlib.blake2b(response_id.encode("utf-8"), digest_size=8).digest()
    return int.from_bytes(digest, "little", signed=True)


def _span_frame(table: pa.Table):
    """The span-level expectations' frame, from ``narrow`` rows."""
    df = table.select(["response_id", "model_version", "completion_tokens", "reward"]).to_pandas()
    any_persistence = pc.is_valid(
        pc.coalesce(*[table.column(f"edit_persistence_{w}") for w in (30, 120, 300, 600)])
    )
    df["has_edit_persistence"] = any_persistence.to_numpy(zero_copy_only=False)
    for signal, column in (("followup", "followup_dissatisfied"), ("feedback", "feedback_accept")):
        df[f"has_{signal}"] = pc.is_valid(table.column(column)).to_numpy(zero_copy_only=False)
    return df


def row_expectations(
    gxe: Any,
    *,
    reward_bounds: tuple[float, float],
    max_completion_tokens: int,
    max_latency_ms: float,
) -> list[Any]:
    """Expectations each row meets on its own: checked part by part."""
    lo, hi = reward_bounds
    eps = 1e-4
    exps = [gxe.ExpectColumnValuesToNotBeNull(column=c) for c in REQUIRED]
    exps += [
        gxe.ExpectColumnValuesToBeInSet(
            column="schema_version", value_set=list(READABLE_SCHEMA_VERSIONS)
        ),
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
    return exps


def span_expectations(
    gxe: Any,
    *,
    min_join_share: dict[str, float],
    current_version: int,
    min_current_version_share: float,
    drift: dict[str, tuple[float, float]],
) -> list[Any]:
    """Expectations over the whole span (uniqueness, shares, drift): checked once, on the
    span's ``narrow`` rows."""
    exps = [gxe.ExpectColumnValuesToBeUnique(column="response_id")]
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
    """Run the suite on one table of rows (a span in one part); returns (success, report with
    each failed expectation). See ``SpanValidator`` for a span in parts."""
    v = SpanValidator(
        reward_bounds=reward_bounds,
        max_completion_tokens=max_completion_tokens,
        max_latency_ms=max_latency_ms,
    )
    v.add_part(table)
    return v.finish(
        min_join_share=min_join_share,
        min_current_version_share=min_current_version_share,
        drift=drift,
    )


class SpanValidator:
    """The suite over a span that arrives in parts, holding one part at a time.

    ``add_part`` runs the row-level expectations on a part with Great Expectations and keeps
    the part's ``narrow`` rows; ``finish`` runs the span-level ones (unique response ids, join
    and current-version shares, drift) with Great Expectations on the kept narrow rows, and
    merges the reports: a row-level expectation fails if it fails on any part (its
    ``unexpected_count`` summed over parts, ``observed`` of the first failing part). The newest
    behaviour version is the largest ``model_version`` in the span. An empty span passes
    without running the suite.
    """

    def __init__(
        self, *, reward_bounds: tuple[float, float], max_completion_tokens: int,
        max_latency_ms: float,
    ) -> None:
        self.limits = {
            "reward_bounds": reward_bounds,
            "max_completion_tokens": max_completion_tokens,
            "max_latency_ms": max_latency_ms,
        }
        self.parts: list[pa.Table] = []
        self.failed: dict[tuple[str, str], dict[str, Any]] = {}
        self.evaluated = 0

    @property
    def rows(self) -> int:
        return sum(t.num_rows for t in self.parts)

    @property
    def narrow_rows(self) -> pa.Table:
        """The span's ``narrow`` rows so far (for ``batch_monitors``)."""
        if not self.parts:
            return narrow(REWARD_SCHEMA.empty_table())
        return pa.concat_tables(self.parts)

    def add_part(self, table: pa.Table) -> None:
        """Check ``table``'s rows here (``check_part``) and keep its ``narrow`` rows."""
        if table.num_rows == 0:
            return
        self.add_checked(check_part(table, **self.limits), narrow(table))

    def add_checked(self, checked: dict[str, Any], narrow_rows: pa.Table) -> None:
        """Take a part checked elsewhere (``check_part``'s report, e.g. by the worker that wrote
        it) and its ``narrow`` rows."""
        if narrow_rows.num_rows == 0:
            return
        self.evaluated = max(self.evaluated, checked["evaluated"])
        for f in checked["failed"]:
            key = (f["expectation"], json.dumps(f["kwargs"], sort_keys=True, default=str))
            if key in self.failed:
                self.failed[key]["unexpected_count"] = (
                    self.failed[key]["unexpected_count"] or 0
                ) + (f["unexpected_count"] or 0)
            else:
                self.failed[key] = f
        self.parts.append(narrow_rows)

    def finish(
        self,
        *,
        min_join_share: dict[str, float],
        min_current_version_share: float,
        drift: dict[str, tuple[float, float]],
    ) -> tuple[bool, dict[str, Any]]:
        if not self.parts:
            return True, {"success": True, "skipped": "empty span", "failed": []}
        gx, gxe = _gx()
        df = _span_frame(pa.concat_tables(self.parts))
        exps = span_expectations(
            gxe,
            min_join_share=min_join_share,
            current_version=int(df["model_version"].max()),
            min_current_version_share=min_current_version_share,
            drift=drift,
        )
        span = _report(_run_suite(gx, df, exps))
        failed = [*self.failed.values(), *span["failed"]]
        report = {
            "success": not failed,
            "evaluated": self.evaluated + span["evaluated"],
            "parts": len(self.parts),
            "failed": failed,
        }
        return not failed, report


def check_part(
    table: pa.Table,
    *,
    reward_bounds: tuple[float, float],
    max_completion_tokens: int,
    max_latency_ms: float,
) -> dict[str, Any]:
    """The row-level expectations (``row_expectations``) over one part of a span, computed
    with pyarrow: ``{"evaluated": n, "failed": [...]}``, JSON-able, what a worker reports with
    its part. The same report as Great Expectations gives (``check_part_gx``; tested on parts
    that break every expectation) without importing it (~4 s) in every worker process: a
    not-null expectation counts nulls (and NaN, null in pandas), an in-set or between one counts
    the non-null values outside (nulls and NaN are not judged, as in Great Expectations over
    pandas)."""
    if table.num_rows == 0:
        return {"evaluated": 0, "failed": []}
    frame = _frame_columns(table)
    checks = _row_checks(reward_bounds, max_completion_tokens, max_latency_ms)
    failed = []
    for expectation, kwargs in checks:
        column = frame[kwargs["column"]]
        if expectation == "expect_column_values_to_not_be_null":  # NaN is null in pandas
            bad = column.null_count
            if pa.types.is_floating(column.type):
                bad += int(pc.sum(pc.cast(pc.is_nan(column), pa.int64())).as_py() or 0)
        elif expectation == "expect_column_values_to_be_in_set":
            outside = pc.invert(pc.is_in(column, value_set=pa.array(kwargs["value_set"])))
            bad = int(pc.sum(pc.cast(outside, pa.int64())).as_py() or 0)
        else:
            values = pc.cast(column, pa.float64())
            out = pc.less(values, kwargs["min_value"])
            if "max_value" in kwargs:
                out = pc.or_(out, pc.greater(values, kwargs["max_value"]))
            bad = int(pc.sum(pc.cast(out, pa.int64())).as_py() or 0)
        if bad:
            failed.append({"expectation": expectation, "kwargs": kwargs, "observed": None,
                           "unexpected_count": bad})
    return {"evaluated": len(checks), "failed": failed}


def _frame_columns(table: pa.Table) -> dict[str, pa.ChunkedArray]:
    """``_frame``'s columns as Arrow (no pandas)."""
    cols = {name: table.column(name) for name in table.column_names}
    cols["followup_without_detector"] = pc.and_(
        pc.is_valid(table.column("followup_text")), pc.is_null(table.column("detector_version"))
    )
    return cols


def _row_checks(
    reward_bounds: tuple[float, float], max_completion_tokens: int, max_latency_ms: float
) -> list[tuple[str, dict[str, Any]]]:
    """``row_expectations`` as ``(expectation type, kwargs)``, kwargs as Great Expectations
    reports them (bounds as floats)."""
    lo, hi = reward_bounds
    eps = 1e-4
    between = "expect_column_values_to_be_between"
    checks = [("expect_column_values_to_not_be_null", {"column": c}) for c in REQUIRED]
    checks += [
        ("expect_column_values_to_be_in_set",
         {"column": "schema_version", "value_set": list(READABLE_SCHEMA_VERSIONS)}),
        (between, {"column": "reward", "min_value": float(lo - eps), "max_value": float(hi + eps)}),
        (between, {"column": "completion_tokens", "min_value": 0.0,
                   "max_value": float(max_completion_tokens)}),
        (between, {"column": "latency_ms", "min_value": 0.0, "max_value": float(max_latency_ms)}),
        (between, {"column": "model_version", "min_value": 1.0}),
    ]
    checks += [
        (between, {"column": f"edit_persistence_{w}", "min_value": 0.0, "max_value": 1.0})
        for w in (30, 120, 300, 600)
    ]
    checks += [
        (between, {"column": "dissatisfied_score", "min_value": 0.0, "max_value": 1.0}),
        ("expect_column_values_to_be_in_set",
         {"column": "followup_without_detector", "value_set": [False]}),
    ]
    return checks


def check_part_gx(
    table: pa.Table,
    *,
    reward_bounds: tuple[float, float],
    max_completion_tokens: int,
    max_latency_ms: float,
) -> dict[str, Any]:
    """``check_part`` run by Great Expectations itself (the reference it is tested against)."""
    if table.num_rows == 0:
        return {"evaluated": 0, "failed": []}
    gx, gxe = _gx()
    limits = {"reward_bounds": tuple(reward_bounds), "max_completion_tokens": max_completion_tokens,
              "max_latency_ms": max_latency_ms}
    exps = row_expectations(gxe, **limits)
    key = ("rows", json.dumps(limits, sort_keys=True))
    report = _report(_run_suite(gx, _frame(table), exps, key))
    return {"evaluated": report["evaluated"], "failed": report["failed"]}


def _gx() -> tuple[Any, Any]:
    os.environ.setdefault("GX_ANALYTICS_ENABLED", "false")
    logging.getLogger("great_expectations").setLevel(logging.ERROR)
    import great_expectations as gx
    import great_expectations.expectations as gxe

    return gx, gxe


_SUITES: dict[tuple[str, str], tuple[Any, Any]] = {}
"""Ephemeral contexts with their suites, built once per process and key (``_run_suite``)."""


def _run_suite(
    gx: Any, df: Any, expectations: list[Any], key: tuple[str, str] | None = None
) -> Any:
    """Great Expectations' validation result of ``expectations`` over the frame ``df``.

    With ``key`` (the same expectations every time the key is the same), the ephemeral context,
    data source and suite are built on the first call and reused: building them cost ~0.3 s
    per call, paid by every part."""
    if key is not None and key in _SUITES:
        batch_def, suite = _SUITES[key]
        return batch_def.get_batch(batch_parameters={"dataframe": df}).validate(suite)
    ctx = gx.get_context(mode="ephemeral")
    ctx.variables.progress_bars = {"globally": False}
    batch_def = (
        ctx.data_sources.add_pandas("span")
        .add_dataframe_asset("rows")
        .add_batch_definition_whole_dataframe("all")
    )
    suite = ctx.suites.add(gx.ExpectationSuite(name="reward_span"))
    for exp in expectations:
        suite.add_expectation(exp)
    if key is not None:
        _SUITES[key] = (batch_def, suite)
    return batch_def.get_batch(batch_parameters={"dataframe": df}).validate(suite)


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
