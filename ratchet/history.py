"""The cross-cycle view: one HTML page on the experiment with every cycle's gate scores, span
size and outcome, re-published after each cycle.

The page (``overview/cycles.html``, with ``overview/cycles.json``) is an artifact of one run named
``cycles-overview`` (tag ``ratchet.stage=overview``) in the cycles' experiment, so it is one click
from the runs table. It is built from what each cycle run records (tags ``ratchet.cycle_seq``,
``ratchet.outcome``, ``ratchet.champion_version``, ``ratchet.candidate_version``; metrics
``gate.candidate_pass_rate``, ``gate.champion_pass_rate``, ``gate.ci_low``, ``gate.ci_high``,
``span_rows``, ``live.*``), not from local files, so it is the same for every controller.

Deliberately left out: the per-gate report (gating/report.py) and the demo's PNG (ratchet/demo.py).
"""

from __future__ import annotations

import html
import json

OVERVIEW_RUN = "cycles-overview"
FIELDS = ("gate.candidate_pass_rate", "gate.champion_pass_rate", "gate.ci_low", "gate.ci_high",
          "span_rows", "live.edit_persistence", "live.dissatisfied_rate")


def cycle_records(tracking_uri: str, experiment: str) -> list[dict]:
    """One dict per finished cycle run of ``experiment``, oldest first."""
    from mlflow import MlflowClient

    client = MlflowClient(tracking_uri=tracking_uri)
    exp = client.get_experiment_by_name(experiment)
    if exp is None:
        return []
    runs = client.search_runs([exp.experiment_id], "tags.`ratchet.stage` = 'cycle'",
                              order_by=["attributes.start_time ASC"], max_results=5000)
    out = []
    for run in runs:
        tags, metrics = run.data.tags, run.data.metrics
        out.append({
            "seq": tags.get("ratchet.cycle_seq", "?"), "run_id": run.info.run_id,
            "outcome": tags.get("ratchet.outcome", run.info.status.lower()),
            "champion_version": tags.get("ratchet.champion_version"),
            "candidate_version": tags.get("ratchet.candidate_version"),
            **{name: metrics.get(name) for name in FIELDS},
        })
    return out


def render(records: list[dict], experiment: str) -> str:
    """The overview page: a table and an inline SVG of the gate pass rates."""
    head = ["cycle", "outcome", "candidate", "champion", "cand. pass", "champ. pass",
            "decision CI", "span rows", "live edit p.", "live dissat."]
    rows = []
    for r in records:
        ci = ("-" if r["gate.ci_low"] is None else
              f"[{r['gate.ci_low']:+.3f}, {r['gate.ci_high']:+.3f}]")
        cells = [r["seq"], r["outcome"], r["candidate_version"] or "-",
                 r["champion_version"] or "-", _f(r["gate.candidate_pass_rate"]),
                 _f(r["gate.champion_pass_rate"]), ci, _f(r["span_rows"], 0),
                 _f(r["live.edit_persistence"]), _f(r["live.dissatisfied_rate"])]
        rows.append("<tr>" + "".join(f"<td>{html.escape(str(c))}</td>" for c in cells) + "</tr>")
    table = ("<table border=1 cellpadding=4><tr>" + "".join(f"<th>{h}</th>" for h in head)
             + "</tr>" + "".join(rows) + "</table>")
    return (f"<html><head><meta charset='utf-8'><title>{html.escape(experiment)} cycles</title>"
            f"</head><body><h2>Cycles of experiment {html.escape(experiment)}</h2>"
            f"{_svg(records)}<p>Gate pass rate of the candidate (blue; bar = the decision's "
            f"interval of the change, added to the champion's rate) and of the champion it was "
            f"gated against (gray); green = promoted. The decision's interval is the exact McNemar "
            f"test's interval of the net share of independent clusters the candidate answers "
            f"better, each bound one-sided at the decision's level: above 0 exactly when the "
            f"candidate won.</p>{table}</body></html>")


def _f(value: float | None, digits: int = 3) -> str:
    return "-" if value is None else f"{value:.{digits}f}"


def _svg(records: list[dict], width: int = 720, height: int = 360, pad: int = 56) -> str:
    """Gate pass rates per cycle with axes: the y range fits the points and their intervals
    (0.02 margin), ticks every 0.02 to 0.1 as the range needs, x labelled by cycle number."""
    pts = [(i, r) for i, r in enumerate(records) if r["gate.candidate_pass_rate"] is not None]
    if not pts:
        return "<p>(no gated cycles yet)</p>"
    values = []
    for _, r in pts:
        values.append(r["gate.candidate_pass_rate"])
        champ = r["gate.champion_pass_rate"]
        if champ is not None:
            values.append(champ)
            if r["gate.ci_low"] is not None:
                values += [champ + r["gate.ci_low"], champ + r["gate.ci_high"]]
    lo, hi = max(0.0, min(values) - 0.02), min(1.0, max(values) + 0.02)
    step = next(s for s in (0.02, 0.05, 0.1, 0.2) if (hi - lo) / s <= 8)
    lo, hi = step * int(lo / step), min(1.0, step * (int(hi / step) + 1))
    n = max(len(records) - 1, 1)

    def xy(i: float, y: float) -> tuple[float, float]:
        return (pad + i * (width - 2 * pad) / n,
                height - pad - (y - lo) * (height - 2 * pad) / (hi - lo))

    parts = [f"<svg width='{width}' height='{height}' xmlns='http://www.w3.org/2000/svg' "
             "font-family='sans-serif' font-size='11'>",
             f"<rect width='{width}' height='{height}' fill='white' stroke='#ccc'/>"]
    x0, y0 = xy(0, lo)
    x1, y1 = xy(n, hi)
    parts.append(f"<line x1='{x0}' y1='{y0}' x2='{x1}' y2='{y0}' stroke='black'/>")
    parts.append(f"<line x1='{x0}' y1='{y0}' x2='{x0}' y2='{y1}' stroke='black'/>")
    k = 0
    while lo + k * step <= hi + 1e-9:
        _, ty = xy(0, lo + k * step)
        parts.append(f"<line x1='{x0}' y1='{ty}' x2='{x1}' y2='{ty}' stroke='#eee'/>")
        parts.append(f"<text x='{x0 - 6}' y='{ty + 4}' text-anchor='end'>{lo + k * step:.2f}"
                     "</text>")
        k += 1
    for i, r in enumerate(records):
        tx, _ = xy(i, lo)
        parts.append(f"<text x='{tx}' y='{y0 + 16}' text-anchor='middle'>"
                     f"{html.escape(str(r['seq']).lstrip('0') or '0')}</text>")
    parts.append(f"<text x='{(x0 + x1) / 2}' y='{height - 12}' text-anchor='middle'>cycle</text>")
    parts.append(f"<text x='14' y='{(y0 + y1) / 2}' text-anchor='middle' "
                 f"transform='rotate(-90 14 {(y0 + y1) / 2})'>gate pass rate</text>")
    for i, r in pts:
        cx, cy = xy(i, r["gate.candidate_pass_rate"])
        champ = r["gate.champion_pass_rate"]
        if champ is not None and r["gate.ci_low"] is not None:
            _, ya = xy(i, champ + r["gate.ci_low"])
            _, yb = xy(i, champ + r["gate.ci_high"])
            parts.append(f"<line x1='{cx}' x2='{cx}' y1='{ya}' y2='{yb}' stroke='steelblue' "
                         "stroke-width='2'/>")
        if champ is not None:
            gx, gy = xy(i, champ)
            parts.append(f"<rect x='{gx - 4}' y='{gy - 4}' width='8' height='8' fill='gray'/>")
        color = "green" if r["outcome"] == "promoted" else "steelblue"
        parts.append(f"<circle cx='{cx}' cy='{cy}' r='5' fill='{color}'/>")
    parts.append("</svg>")
    return "".join(parts)


def publish(tracking_uri: str, experiment: str) -> str | None:
    """Re-render the overview into the experiment's overview run; returns its run id."""
    import mlflow
    from mlflow import MlflowClient

    records = cycle_records(tracking_uri, experiment)
    if not records:
        return None
    client = MlflowClient(tracking_uri=tracking_uri)
    exp = client.get_experiment_by_name(experiment)
    found = client.search_runs([exp.experiment_id], "tags.`ratchet.stage` = 'overview'",
                               max_results=1)
    if found:
        run_id = found[0].info.run_id
    else:
        run = client.create_run(exp.experiment_id, run_name=OVERVIEW_RUN,
                                tags={"ratchet.stage": "overview"})
        run_id = run.info.run_id
        client.set_terminated(run_id)
    mlflow.set_tracking_uri(tracking_uri)
    client.log_text(run_id, render(records, experiment), "overview/cycles.html")
    client.log_text(run_id, json.dumps(records, indent=1), "overview/cycles.json")
    client.set_tag(run_id, "mlflow.note.content",
                   f"Cross-cycle overview of {len(records)} cycles: see overview/cycles.html")
    return run_id
