"""What the loop did for users, measured live: the champion against the holdback.

The router keeps a fixed share of users on the anchor version (deploy/fleet/router.py), so the
reward rows hold, side by side, what the champion of the day and the anchor served to randomly
split users at the same time. :func:`impact_table` compares them on every product metric the
rows carry:

- edit persistence at 600 s (the success metric; an empty or refused answer keeps nothing),
- dissatisfied follow-ups (a completion without one counts as not dissatisfied),
- client-reported pass (the explicit accept/reject a client sent, where it sent one),
- latency and completion tokens (reported, not alarmed on: latency follows the replicas' load).

Each is the relative change of the champion's mean over the holdback's, ``R = m_c / m_h - 1``,
with an always-valid interval: the normal-mixture confidence sequence of deploy/fleet/judge.py
(mixing scale ``relative_scale``) on the delta-method variance ``v_c / (n_c m_h^2) + m_c^2 v_h /
(n_h m_h^4)``, at ``alpha`` over the metrics (Bonferroni). A table recomputed every cycle may be
read every cycle: the chance that any interval ever misses its truth stays below ``alpha``.

Only concurrent traffic is compared: holdback rows from the champion's first served row on. A
row's side is the router's arm it records (``arm``: ``stable`` rows of the champion's version
against ``holdback`` rows), so the table exists even while the champion is the anchor: an A/A
comparison of two groups of users served one version, whose intervals should cover 0 (a sure
difference there is :attr:`ImpactTable.split_alarm`, never a drift: there is nothing to roll
back to). Rows
without an arm (written before the column existed, or served with no router) fall back to their
version: the champion's against the anchor's; with no arm and the champion the anchor there is
nothing to compare, and the table says so. A metric
is ``worse`` when its whole interval lies on the bad side of 0; :attr:`ImpactTable.drift` lists
the alarmed ones (edit persistence, dissatisfied follow-ups, pass).

Imports pyarrow and nothing heavy, so ``ratchet impact`` prints the table in well under 3 s.
Deliberately left out: acting on the drift (ratchet/cycle.py runs the audit's rollback) and
where the table is recorded (MLflow, the workdir).
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Literal

from deploy.fleet.judge import msprt_half_width

Better = Literal["higher", "lower"]

ALARMED = ("edit_persistence_600", "dissatisfied_rate", "pass_rate")
"""Metrics whose sure worsening is a drift alarm (latency and tokens are reported only)."""


@dataclass(frozen=True)
class ImpactRow:
    metric: str
    better: Better
    champion: float | None
    holdback: float | None
    n_champion: int
    n_holdback: int
    change: float | None = None
    """Relative change of the champion over the holdback (0.1 = 10% higher)."""
    low: float | None = None
    high: float | None = None
    verdict: Literal["better", "worse", "unclear", "no data"] = "no data"


@dataclass
class ImpactTable:
    model_name: str
    champion_version: int | None
    anchor_version: int | None
    since: str | None
    """Event time of the champion's first row: holdback rows before it are left out."""
    alpha: float
    relative_scale: float
    rows: list[ImpactRow] = field(default_factory=list)
    note: str = ""

    @property
    def a_a(self) -> bool:
        """Both arms serve one version (the champion is still the anchor): an A/A comparison."""
        return self.champion_version is not None and self.champion_version == self.anchor_version

    @property
    def drift(self) -> list[str]:
        """Alarmed metrics on which the champion is surely worse than the holdback (never in an
        A/A comparison: there is no other version to roll back to)."""
        if self.a_a:
            return []
        return [r.metric for r in self.rows if r.metric in ALARMED and r.verdict == "worse"]

    @property
    def split_alarm(self) -> list[str]:
        """In an A/A comparison, the alarmed metrics on which one arm is surely better than the
        other: one version cannot differ from itself, so the split or the interval is off (or a
        chance of at most ``alpha`` came up). Latency and tokens are left out as in the drift:
        latency follows each arm's replicas' load."""
        return [r.metric for r in self.rows
                if self.a_a and r.metric in ALARMED and r.verdict in ("better", "worse")]

    def to_json(self) -> dict:
        return {**asdict(self), "drift": self.drift, "split_alarm": self.split_alarm}

    @classmethod
    def from_json(cls, data: dict) -> ImpactTable:
        data = {k: v for k, v in data.items() if k not in ("drift", "split_alarm")}
        return cls(**{**data, "rows": [ImpactRow(**r) for r in data.get("rows", [])]})


def _mean_var(xs: list[float]) -> tuple[float, float]:
    n = len(xs)
    m = sum(xs) / n
    return m, (sum((x - m) ** 2 for x in xs) / (n - 1) if n > 1 else 0.0)


def relative_change(champion: list[float], holdback: list[float], *, alpha: float,
                    scale: float, binary: bool = False) -> tuple[float, float, float] | None:
    """``(R, low, high)``: the champion's mean relative to the holdback's, ``R = m_c / m_h - 1``,
    and its always-valid interval at ``alpha``; None when either arm has fewer than 2 values or
    the holdback's mean is not positive (no relative change exists). ``binary``: 0/1 values,
    whose variance gets the judge's floor."""
    nc, nh = len(champion), len(holdback)
    if nc < 2 or nh < 2:
        return None
    mc, vc = _mean_var(champion)
    mh, vh = _mean_var(holdback)
    if mh <= 0.0:
        return None
    # a floor on each variance (about that of a rate with one event in n + 2), as the judge's:
    # an arm that never was dissatisfied in a window is not certain never to be
    if binary:
        vc, vh = max(vc, 1.0 / (nc + 2)), max(vh, 1.0 / (nh + 2))
    r = mc / mh - 1.0
    var = vc / (nc * mh * mh) + mc * mc * vh / (nh * mh ** 4)
    h = msprt_half_width(var, alpha, scale)
    return r, r - h, r + h


def _metric_values(rows) -> dict[str, tuple[Better, list[float]]]:
    """Per metric, which way is better and one value per row that has it."""
    from deploy.fleet.rollout import kept_shares

    cols = {name: rows[name].to_pylist() for name in (
        "edit_persistence_600", "response_text", "followup_dissatisfied", "feedback_accept",
        "latency_ms", "completion_tokens")}
    return {
        "edit_persistence_600": ("higher", kept_shares(cols["edit_persistence_600"],
                                                       cols["response_text"])),
        "dissatisfied_rate": ("lower", [float(bool(v)) for v in cols["followup_dissatisfied"]]),
        "pass_rate": ("higher", [float(v) for v in cols["feedback_accept"] if v is not None]),
        "latency_ms": ("lower", [float(v) for v in cols["latency_ms"] if v is not None]),
        "completion_tokens": ("lower", [float(v) for v in cols["completion_tokens"]
                                        if v is not None]),
    }


def _sides(rows, champion_version: int, anchor_version: int):
    """Boolean masks of ``rows``: the champion's side and the holdback's (None: no row records
    an arm and the champion is the anchor, so no side can be told apart)."""
    import pyarrow.compute as pc

    from ingest.schema import holdback_mask

    arm = rows["arm"]
    no_arm = pc.is_null(arm)
    hold = holdback_mask(rows, anchor_version=anchor_version, champion_version=champion_version)
    champ = pc.and_(pc.equal(rows["model_version"], champion_version),
                    pc.or_(pc.equal(pc.fill_null(arm, ""), "stable"), no_arm))
    if champion_version != anchor_version:
        return champ, hold
    # one version on both sides: only rows that record their arm tell them apart
    champ = pc.and_(champ, pc.invert(no_arm))
    return champ, (None if pc.all(no_arm).as_py() is not False else hold)


def impact_table(rows, *, model_name: str, champion_version: int | None,
                 anchor_version: int | None, alpha: float = 0.05,
                 relative_scale: float = 0.1) -> ImpactTable:
    """The champion against the holdback in ``rows`` (a REWARD_SCHEMA table); see the module
    docstring."""
    import pyarrow.compute as pc

    table = ImpactTable(model_name, champion_version, anchor_version, None, alpha,
                        relative_scale)
    if champion_version is None or anchor_version is None:
        table.note = "no champion or no anchor: nothing to compare"
        return table
    mine = rows.filter(pc.equal(rows["model_name"], model_name))
    champ_side, hold_side = _sides(mine, champion_version, anchor_version)
    champ = mine.filter(champ_side)
    if champ.num_rows == 0:
        table.note = (f"the champion v{champion_version} is the anchor: nothing to compare yet"
                      if champion_version == anchor_version and hold_side is None
                      else f"no rows of the champion v{champion_version} yet")
        return table
    since = pc.min(champ["event_time"])
    table.since = since.as_py().isoformat()
    hold = mine.filter(pc.and_(hold_side, pc.greater_equal(mine["event_time"], since)))
    if hold.num_rows == 0:
        table.note = f"no holdback rows (anchor v{anchor_version}) since the champion's first"
    c_values, h_values = _metric_values(champ), _metric_values(hold)
    level = alpha / len(c_values)
    for name, (better, cs) in c_values.items():
        hs = h_values[name][1]
        row = ImpactRow(name, better, sum(cs) / len(cs) if cs else None,
                        sum(hs) / len(hs) if hs else None, len(cs), len(hs))
        found = relative_change(cs, hs, alpha=level, scale=relative_scale,
                                binary=name in ("dissatisfied_rate", "pass_rate"))
        if found is not None:
            r, low, high = found
            good_low, good_high = (low, high) if better == "higher" else (-high, -low)
            verdict = "better" if good_low > 0 else "worse" if good_high < 0 else "unclear"
            row = ImpactRow(name, better, row.champion, row.holdback, row.n_champion,
                            row.n_holdback, r, low, high, verdict)
        table.rows.append(row)
    return table


def impact_from_spans(spans_root: Path, **kwargs) -> ImpactTable:
    """:func:`impact_table` over every committed span under ``spans_root``."""
    from ingest.spans import read_spans

    return impact_table(read_spans(Path(spans_root)), **kwargs)


def _pct(x: float | None) -> str:
    return "-" if x is None else f"{100 * x:+.1f}%"


def _val(x: float | None) -> str:
    if x is None:
        return "-"
    return f"{x:.1f}" if abs(x) >= 10 else f"{x:.3f}"


def format_impact(table: ImpactTable) -> str:
    """The table as the terminal shows it: a header line naming the versions, one line per
    metric, the drift alarm if any."""
    head = (f"impact: champion v{table.champion_version} vs holdback on anchor "
            f"v{table.anchor_version}"
            + (f" (concurrent traffic since {table.since[:19]})" if table.since else ""))
    if not table.rows:
        return f"{head}: {table.note}"
    level = 100 * (1 - table.alpha)
    lines = [head, f"{'metric':>20} {'better':>6} {'champion':>9} {'holdback':>9} "
             f"{'n_champ':>7} {'n_hold':>6} {'change':>8} {f'{level:.0f}% always-valid':>20} "
             f"{'verdict':>8}"]
    for r in table.rows:
        interval = "-" if r.low is None else f"[{_pct(r.low)}, {_pct(r.high)}]"
        lines.append(f"{r.metric:>20} {r.better:>6} {_val(r.champion):>9} {_val(r.holdback):>9} "
                     f"{r.n_champion:>7} {r.n_holdback:>6} {_pct(r.change):>8} {interval:>20} "
                     f"{r.verdict:>8}")
    if table.note:
        lines.append(f"  {table.note}")
    if table.drift:
        lines.append(f"  DRIFT: the champion is surely worse than the anchor on "
                     f"{', '.join(table.drift)}")
    if table.split_alarm:
        lines.append(f"  A/A ALARM: both arms serve v{table.champion_version}, yet they differ on "
                     f"{', '.join(table.split_alarm)}: check the holdback split")
    return "\n".join(lines)


def write_impact(table: ImpactTable, directory: Path, seq: int) -> Path:
    """``impact-<seq>.json`` and ``latest.json`` under ``directory``; returns the first."""
    directory.mkdir(parents=True, exist_ok=True)
    text = json.dumps(table.to_json(), indent=2)
    path = directory / f"impact-{seq:04d}.json"
    path.write_text(text)
    (directory / "latest.json").write_text(text)
    return path


def latest_impact(directory: Path) -> ImpactTable | None:
    path = directory / "latest.json"
    return ImpactTable.from_json(json.loads(path.read_text())) if path.exists() else None
