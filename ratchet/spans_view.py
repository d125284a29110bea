"""`ratchet spans show`: what a reward span holds, in the terminal.

Describes one span of a workdir: rows, which signals
arrived, defaulted shares, the reward distribution (quantiles and a text histogram) and the
reward components' means. Reads the manifests and Parquet files directly; starts no service.
"""

from __future__ import annotations

import json
from pathlib import Path

SPANS = "spans"


def _manifests(workdir: Path) -> list[dict]:
    root = workdir / SPANS / "_manifests"
    if not root.is_dir():
        raise LookupError(f"{workdir} has no spans (no {root})")
    return [json.loads((d / "manifest.json").read_text())
            for d in sorted(root.iterdir()) if (d / "manifest.json").exists()]


def describe_span(workdir: Path, span_id: str) -> str:
    """Rows, signal coverage and the reward distribution of ``span_id``."""
    import pyarrow.compute as pc
    import pyarrow.parquet as pq

    from ingest.schema import upgrade_reward_table

    found = [m for m in _manifests(workdir) if m["span_id"] == span_id]
    if not found:
        known = ", ".join(m["span_id"] for m in _manifests(workdir)) or "none"
        raise LookupError(f"no span {span_id!r} in {workdir} (spans: {known})")
    m = found[0]
    files = [workdir / SPANS / f for f in m.get("files", [])]
    if not files:
        return f"{span_id}: status {m.get('status')}, no rows"
    import pyarrow as pa

    table = pa.concat_tables([upgrade_reward_table(pq.read_table(f)) for f in files])
    rewards = table.column("reward").to_pylist()
    lines = [f"{span_id}: status {m.get('status')}, {table.num_rows} rows, "
             f"models {sorted(set(table.column('model_version').to_pylist()))}"]
    for name in ("edit_persistence_600", "followup_dissatisfied", "feedback_accept"):
        have = table.num_rows - table.column(name).null_count
        lines.append(f"  {name:<22} present in {have}/{table.num_rows} rows")
    q = pc.quantile(table.column("reward"), q=[0.0, 0.1, 0.5, 0.9, 1.0]).to_pylist()
    lines.append("  reward  min {:.3f}  p10 {:.3f}  median {:.3f}  p90 {:.3f}  max {:.3f}"
                 .format(*q))
    lines += ["  " + line for line in histogram(rewards)]
    return "\n".join(lines)


def histogram(values: list[float], bins: int = 10, width: int = 40) -> list[str]:
    """A text histogram: one line per bin, '[lo, hi) count ####'."""
    if not values:
        return ["(no values)"]
    lo, hi = min(values), max(values)
    step = (hi - lo) / bins or 1.0
    counts = [0] * bins
    for v in values:
        counts[min(int((v - lo) / step), bins - 1)] += 1
    top = max(counts)
    return [f"[{lo + i * step:+.2f}, {lo + (i + 1) * step:+.2f}) {c:>6} "
            + "#" * round(width * c / top) for i, c in enumerate(counts)]
