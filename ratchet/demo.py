"""`ratchet demo`: the whole loop on embedded defaults, end to end.

Starts the embedded broker and a local MLflow server, bootstraps the toy champion, starts the
fleet and the user simulator, then for each cycle: one round of simulated traffic (its delayed
signals drained in compressed event time) followed by ingest → train → gate → deploy. Prints a
per-cycle table, writes it as JSON and a PNG plot, and prints the MLflow UI address.

The workdir is the demo's scratch space: it is wiped at the start (the embedded broker is
memory-only, so state kept from an earlier demo would not match its topics).
"""

from __future__ import annotations

import json
import logging
import shutil
import time
from dataclasses import asdict, dataclass
from pathlib import Path

from ratchet.config import RatchetConfig

log = logging.getLogger(__name__)


@dataclass
class CycleRow:
    """One line of the demo table: the traffic a champion served, then what the cycle did."""

    cycle: int
    served_version: int
    pass_rate_live: float
    edit_persistence: float
    dissatisfied_rate: float
    mean_latency_ms: float
    completion_tokens: float
    span_rows: int
    gate_score: float | None
    gate_candidate: float | None
    gate_champion: float | None
    promoted: bool
    seconds: float


_COLUMNS = [  # (field, header)
    ("cycle", "cycle"), ("served_version", "served"), ("pass_rate_live", "live_pass"),
    ("edit_persistence", "edit_p600"), ("dissatisfied_rate", "dissat"),
    ("mean_latency_ms", "lat_ms"), ("completion_tokens", "tokens"), ("span_rows", "rows"),
    ("gate_score", "gate_score"), ("gate_candidate", "gate_cand"),
    ("gate_champion", "gate_chmp"), ("promoted", "promoted"), ("seconds", "sec"),
]


def _cell(value: object) -> str:
    if value is None:
        return "-"
    if isinstance(value, float):
        return f"{value:.3f}" if abs(value) < 10 else f"{value:.1f}"
    return str(value)


def format_table(rows: list[CycleRow]) -> str:
    """A fixed-width table, one line per cycle."""
    width = max(len(h) for _, h in _COLUMNS) + 1
    lines = ["".join(h.rjust(width) for _, h in _COLUMNS)]
    lines += ["".join(_cell(getattr(r, f)).rjust(width) for f, _ in _COLUMNS) for r in rows]
    return "\n".join(lines)


def plot(rows: list[CycleRow], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    x = [r.cycle for r in rows]
    panels = [
        ("held-out pass rate", [("candidate", [r.gate_candidate for r in rows]),
                                ("champion", [r.gate_champion for r in rows])]),
        ("live traffic", [("edit persistence", [r.edit_persistence for r in rows]),
                          ("dissatisfied rate", [r.dissatisfied_rate for r in rows]),
                          ("pass rate", [r.pass_rate_live for r in rows])]),
        ("mean latency (ms)", [("latency", [r.mean_latency_ms for r in rows])]),
        ("completion tokens", [("tokens", [r.completion_tokens for r in rows])]),
    ]
    fig, axes = plt.subplots(1, len(panels), figsize=(4 * len(panels), 3.2))
    for ax, (title, series) in zip(axes, panels):
        for label, ys in series:
            ax.plot(x, [float("nan") if y is None else y for y in ys], marker="o", label=label)
        ax.set_title(title)
        ax.set_xlabel("cycle")
        ax.set_xticks(x)
        if len(series) > 1:
            ax.legend(fontsize=7)
    for r in rows:
        if r.promoted:
            axes[0].axvline(r.cycle, color="green", alpha=0.2)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


_SIMULATED_SKEW_S = 900.0
"""The simulator posts a 600 s edit checkpoint about a second after its completion (speed 600),
dated in simulated time: the replicas accept ``created`` this far from their clock."""


def demo_config(config: RatchetConfig) -> RatchetConfig:
    """The demo compresses time: the simulator has sent every delayed signal of a round (10
    minutes of event time in a second) before the cycle starts, but the server stamps completions
    in wall time, so the watermark would not pass the longest join window until much later
    traffic arrives. The demo's ingest therefore finalises every pending completion at the end of
    each span (``drain``) — production cycles every few hours leave it off."""
    return config.model_copy(update={"ingest": config.ingest.model_copy(update={"drain": True})})


def run(config: RatchetConfig, *, workdir: Path, cycles: int, keep_running: bool = False) -> int:
    from deploy.fleet import Fleet
    from deploy.simulator import UserSimulator
    from ratchet.bootstrap import ensure_champion
    from ratchet.cycle import Cycle
    from ratchet.runner import services
    from runtime import registry

    t0 = time.perf_counter()
    config = demo_config(config)
    shutil.rmtree(workdir, ignore_errors=True)
    workdir.mkdir(parents=True)
    rows: list[CycleRow] = []
    stage_seconds: list[dict[str, float]] = []
    with services(workdir, bootstrap=None, tracking_uri=None) as ep:
        ensure_champion(config, tracking_uri=ep.tracking_uri, workdir=workdir)
        bootstrap_s = time.perf_counter() - t0
        fleet = Fleet.start(
            n_replicas=config.fleet.replicas, tracking_uri=ep.tracking_uri,
            model_name=config.model_name, bootstrap=ep.bootstrap, workdir=workdir / "fleet",
            admin_token=config.fleet.admin_token,
            signal_max_skew_s=_SIMULATED_SKEW_S,
        )
        try:
            sim = UserSimulator(
                urls=fleet.urls, api_key=fleet.create_api_key("demo-simulator"),
                speed=config.simulator.speed,
                seed=config.simulator.seed,
            )
            cycle = Cycle(config, tracking_uri=ep.tracking_uri, bootstrap=ep.bootstrap,
                          workdir=workdir, fleet=fleet)
            for i in range(cycles):
                c0 = time.perf_counter()
                served = registry.resolve_alias(ep.tracking_uri, config.model_name,
                                                registry.CHAMPION)
                stats = sim.run_round(config.simulator.requests_per_round,
                                      concurrency=config.simulator.concurrency)
                sim.drain()
                traffic_s = time.perf_counter() - c0
                result = cycle.run(i)
                stage_seconds.append({"traffic": round(traffic_s, 2), **result.seconds})
                rows.append(CycleRow(
                    cycle=i, served_version=served, pass_rate_live=stats.pass_rate,
                    edit_persistence=stats.edit_persistence,
                    dissatisfied_rate=stats.dissatisfied_rate,
                    mean_latency_ms=stats.mean_latency_ms,
                    completion_tokens=stats.mean_completion_tokens, span_rows=result.span_rows,
                    gate_score=result.candidate_score,
                    gate_candidate=result.candidate_pass_rate,
                    gate_champion=result.champion_pass_rate, promoted=result.promoted,
                    seconds=time.perf_counter() - c0,
                ))
                print(format_table(rows[-1:]).splitlines()[-1], flush=True)
        finally:
            fleet.stop()
        total_s = time.perf_counter() - t0
        table = format_table(rows)
        print("\n" + table)
        png = workdir / "cycles.png"
        plot(rows, png)
        summary = {
            "total_seconds": round(total_s, 1), "bootstrap_seconds": round(bootstrap_s, 1),
            "promotions": sum(r.promoted for r in rows), "stage_seconds": stage_seconds,
            "cycles": [asdict(r) for r in rows],
        }
        (workdir / "demo_summary.json").write_text(json.dumps(summary, indent=2))
        print(f"\nper-stage seconds: {stage_seconds}")
        print(f"demo took {total_s:.0f} s (bootstrap {bootstrap_s:.0f} s); "
              f"{summary['promotions']} promotion(s); plot: {png}")
        print(f"MLflow UI: {ep.tracking_uri}  (after the demo: ratchet ui --workdir {workdir})")
        if keep_running:
            input("services are up; press Enter to stop them\n")
    return 0
