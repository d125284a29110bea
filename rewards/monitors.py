"""Reward-hacking monitors over a batch of reward rows, and a check between two batches.

A policy that games the reward shows up in batch statistics before it shows up in a benchmark:
it stops being edited (persistence stuck at 1 because users gave up), emits malformed output,
lives off default rewards (signals stop arriving), or drifts in length. ``batch_monitors``
computes those figures over a ``REWARD_SCHEMA`` table; ``compare_batches`` flags a jump.

Deliberately left out: acting on a flag (the gate decides), and any I/O.
"""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import dataclass

import pyarrow as pa
import pyarrow.compute as pc

from rewards.signals import SIGNALS

_PERSISTENCE_COLUMNS = (
    "edit_persistence_600",
    "edit_persistence_300",
    "edit_persistence_120",
    "edit_persistence_30",
)


def _share(mask: pa.Array, n: int) -> float:
    return float(pc.sum(pc.cast(mask, pa.int64())).as_py() or 0) / n if n else 0.0


def _last_persistence(table: pa.Table) -> pa.Array:
    """Per row, the persistence score of the latest checkpoint present (null if none)."""
    return pc.coalesce(*[table.column(c) for c in _PERSISTENCE_COLUMNS])


def batch_monitors(
    table: pa.Table, dead_letters: int = 0, expected_signals: Collection[str] = SIGNALS
) -> dict[str, float]:
    """Monitor figures for one batch of reward rows.

    - ``no_edit_rate``: among rows with a persistence signal, share whose latest score is 1.0.
    - ``malformed_rate``: share of rows (model output) finished by ``error`` or with empty text.
    - ``dead_letter_rate``: dead letters / (rows + dead letters): transport and producer faults
      (stale, too large, unparseable...), kept apart from malformed model output.
    - ``defaulted_share``: share of rows missing at least one of ``expected_signals``; per
      signal (every signal) in ``defaulted_share_<signal>``.
    - ``mean_length``, ``reward_mean``, ``reward_std``, ``rows``.
    """
    n = table.num_rows
    out: dict[str, float] = {"rows": float(n)}
    last = _last_persistence(table)
    with_signal = int(pc.sum(pc.cast(pc.is_valid(last), pa.int64())).as_py() or 0)
    untouched = pc.fill_null(pc.equal(last, 1.0), False)
    out["no_edit_rate"] = _share(untouched, with_signal) if with_signal else 0.0
    bad = pc.or_(
        pc.equal(table.column("finish_reason"), "error"),
        pc.equal(pc.utf8_length(table.column("response_text")), 0),
    )
    out["malformed_rate"] = _share(bad, n)
    out["dead_letter_rate"] = dead_letters / (n + dead_letters) if n + dead_letters else 0.0
    expected = set(expected_signals)
    defaulted = table.column("defaulted_signals").to_pylist()
    missing = [bool(expected.intersection(r)) for r in defaulted]
    out["defaulted_share"] = _share(pa.array(missing, pa.bool_()), n)
    flat = pc.list_flatten(table.column("defaulted_signals"))
    for signal in SIGNALS:
        out[f"defaulted_share_{signal}"] = _share(pc.equal(flat, signal), n)
    out["mean_length"] = float(pc.mean(table.column("completion_tokens")).as_py() or 0.0)
    out["reward_mean"] = float(pc.mean(table.column("reward")).as_py() or 0.0)
    out["reward_std"] = float(pc.stddev(table.column("reward")).as_py() or 0.0) if n > 1 else 0.0
    return out


@dataclass(frozen=True)
class MonitorFlag:
    """A monitor that jumped between two batches."""

    metric: str
    previous: float
    current: float
    limit: float


DEFAULT_LIMITS = {
    "no_edit_rate": 0.15,
    "malformed_rate": 0.05,
    "defaulted_share": 0.2,
    "reward_mean": 0.5,
    "reward_std": 0.5,
}
"""Largest absolute change between two batches before a rate or a reward moment is flagged."""


def compare_batches(
    previous: dict[str, float],
    current: dict[str, float],
    limits: dict[str, float] | None = None,
    max_length_ratio: float = 1.5,
) -> list[MonitorFlag]:
    """Flags for metrics whose absolute change exceeds its limit, and for a length jump.

    Mean length is compared as a ratio (``max(a, b) / min(a, b) > max_length_ratio``).
    """
    flags = []
    for metric, limit in (limits or DEFAULT_LIMITS).items():
        a, b = previous[metric], current[metric]
        if abs(b - a) > limit:
            flags.append(MonitorFlag(metric, a, b, limit))
    a, b = previous["mean_length"], current["mean_length"]
    lo, hi = min(a, b), max(a, b)
    if hi > 0 and (lo <= 0 or hi / lo > max_length_ratio):
        flags.append(MonitorFlag("mean_length", a, b, max_length_ratio))
    return flags
