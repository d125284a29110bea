"""`ratchet demo`: the whole loop on embedded defaults, end to end.

Starts the embedded broker and a local MLflow server, bootstraps the toy champion, starts the
fleet, the holdback (replicas pinned to the anchor, ``fleet.holdback``) with a router in front
that keeps its share of users on them, and the user simulator, then for each cycle: one round
of simulated traffic (its delayed signals drained in compressed event time) followed by ingest →
train → gate → deploy. Prints a per-cycle table, writes it as JSON and a PNG plot, and prints the
MLflow UI address. Its last lines are the impact table: the last cycle's champion against the
holdback on the live traffic.

The workdir is the demo's scratch space: it is wiped at the start (the embedded broker is
memory-only, so state kept from an earlier demo would not match its topics) — but only if ratchet
made it: a marker file says so. Any other non-empty directory is refused, never deleted.
"""

from __future__ import annotations

import json
import logging
import shutil
import textwrap
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

from ratchet.config import RatchetConfig

log = logging.getLogger(__name__)

MARKER = ".ratchet-workdir"
"""Written into every workdir ratchet creates; only such a directory is ever wiped."""


class WorkdirError(ValueError):
    """The workdir holds something ratchet did not create."""


def prepare_workdir(workdir: Path) -> None:
    """An empty workdir with the marker: wipes an earlier demo's workdir, refuses anything else."""
    if workdir.exists():
        if not workdir.is_dir():
            raise WorkdirError(f"--workdir {workdir} is a file, not a directory")
        if any(workdir.iterdir()):
            if not (workdir / MARKER).exists():
                raise WorkdirError(
                    f"--workdir {workdir} is not empty and was not created by ratchet "
                    f"(no {MARKER}); refusing to delete it — pick another directory"
                )
            shutil.rmtree(workdir)
    workdir.mkdir(parents=True, exist_ok=True)
    (workdir / MARKER).write_text("created by ratchet demo; this directory is wiped on reuse\n")


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
    train_rows: int
    """The span's rows plus those carried from rejected cycles of the same champion."""
    detector_agreement: float | None
    """Share of the span's follow-ups where ingest's detector agreed with the simulator's flag."""
    champion_version: int | None
    candidate_version: int | None
    gate_candidate: float | None
    gate_champion: float | None
    gate_ci_low: float | None
    """The decision's interval of the change (``CycleResult.gate_ci_low``)."""
    gate_ci_high: float | None
    gate_tasks: int | None
    outcome: str
    promoted: bool
    rolled_back: bool
    seconds: float
    cycle_run_id: str
    gate_run_id: str | None
    train_run_id: str | None
    live_se: dict[str, float] = field(default_factory=dict)
    """Standard error of each live metric across the round's requests (simulator.RoundStats)."""
    gate_decision: str | None = None
    """The gate's verdict in one line: which rule decided, with its figures."""
    audit: str | None = None
    """The lifetime audit's line when this cycle's promotion made one due."""
    length_cut_rate: float | None = None
    """Share of the round's replies cut at max_tokens (finish_reason ``length``)."""
    drift: str | None = None
    """The drift alarm's line when the impact table showed the champion surely worse."""


def _version(v: int | None) -> str:
    return "-" if v is None else f"v{v}"


def _num(value: float | None, digits: int = 3) -> str:
    return "-" if value is None else f"{value:.{digits}f}"


def _ci(row: CycleRow) -> str:
    if row.gate_ci_low is None or row.gate_ci_high is None:
        return "-"
    return f"[{row.gate_ci_low:+.3f},{row.gate_ci_high:+.3f}]"


def _rows(r: CycleRow) -> str:
    return str(r.span_rows) if r.train_rows <= r.span_rows else f"{r.span_rows}/{r.train_rows}"


_COLUMNS = [  # (header, width, cell)
    ("cycle", 5, lambda r: str(r.cycle)),
    ("live", 4, lambda r: _version(r.served_version)),
    ("pass", 5, lambda r: _num(r.pass_rate_live)),
    ("edit", 5, lambda r: _num(r.edit_persistence)),
    ("dissat", 6, lambda r: _num(r.dissatisfied_rate)),
    ("lat_ms", 6, lambda r: _num(r.mean_latency_ms, 1)),
    ("tokens", 6, lambda r: _num(r.completion_tokens, 1)),
    ("rows", 9, _rows),
    ("detect", 6, lambda r: _num(r.detector_agreement, 2)),
    ("gated", 9, lambda r: f"{_version(r.candidate_version)}/{_version(r.champion_version)}"),
    ("cand", 5, lambda r: _num(r.gate_candidate)),
    ("champ", 5, lambda r: _num(r.gate_champion)),
    ("decision CI", 15, _ci),
    ("n", 4, lambda r: "-" if r.gate_tasks is None else str(r.gate_tasks)),
    ("outcome", 11, lambda r: r.outcome),
    ("sec", 4, lambda r: f"{r.seconds:.0f}"),
]
"""``live`` is the version serving the round's traffic; ``pass``, ``edit``, ``dissat``,
``tokens`` are its live pass rate, 600-s edit persistence, share of dissatisfied follow-ups and
completion tokens; ``rows`` is the cycle's new span rows, then ``/`` and all rows the candidate was
trained on when rows were carried from rejected cycles; ``detect`` is the share of follow-ups where
ingest's detector agreed with the simulated user; ``gated`` is candidate/champion, the versions the
gate compared, ``cand``/``champ`` their pass rates on the same ``n`` gate tasks and
``decision CI`` the interval of the test that decided: the exact McNemar test's interval of the net
share of independent clusters the candidate answers better, each bound one-sided at the decision's
level, so its lower bound is above 0 exactly when the candidate won (a guardrail can still
reject it; the decision line names which)."""

LEGEND = (
    "live: version serving the round; pass/edit/dissat/tokens: its live pass rate, edit "
    "persistence, dissatisfied follow-ups, answer tokens; rows: new span rows[/all trained on]; "
    "detect: follow-up detector agreement; gated: candidate/champion; cand/champ: gate pass rates "
    "on n tasks; decision CI: net share of clusters better (above 0: a win).")
LEGEND_WIDTH = 120
"""The legend wraps at the table's widest line (three lines under the table)."""


def format_table(rows: list[CycleRow]) -> str:
    """A fixed-width table, one line per cycle."""
    lines = [" ".join(h.rjust(w) for h, w, _ in _COLUMNS)]
    lines += [" ".join(cell(r).rjust(w) for _, w, cell in _COLUMNS) for r in rows]
    return "\n".join(lines)


def cycle_report(row: CycleRow, index: int, cycles: int, seconds: dict[str, float]) -> str:
    """What the terminal shows after a cycle: its outcome and stage seconds on one line, then its
    table row (the header only with the first cycle's row)."""
    stages = ", ".join(f"{stage} {s:.0f} s" for stage, s in seconds.items())
    table = format_table([row])
    if index > 0:
        table = table.split("\n", 1)[1]
    decision = f"\n  {row.gate_decision}" if row.gate_decision else ""
    return (f"cycle {row.cycle} ({index + 1} of {cycles}): {row.outcome}; {stages}{decision}\n"
            f"{table}")


def outcome_of(result) -> str:
    if result.skipped:
        return "skipped"
    if result.rolled_back:
        return "rolled back"
    return "promoted" if result.promoted else "rejected"


_PANELS = [  # (title, field, better, scale): panels of one scale share their y axis
    ("live pass rate", "pass_rate_live", "higher", "rate"),
    ("live edit persistence (600 s)", "edit_persistence", "higher", "rate"),
    ("live dissatisfied follow-ups", "dissatisfied_rate", "lower", "rate"),
    ("live completion tokens", "completion_tokens", "lower", "tokens"),
    ("live mean latency (ms): follows the\nmachine's load, not only the model", "mean_latency_ms",
     "lower", "ms"),
]
_SE_KEYS = {"pass_rate_live": "pass_rate", "completion_tokens": "mean_completion_tokens"}


def plot(rows: list[CycleRow], path: Path, gain: dict | None = None) -> None:
    """A 2 x 4 grid: the gate's pass rates, the decision's interval on its own axis (a net share
    of clusters, not a pass rate), and one panel per live metric with its 95% interval (1.96
    standard errors across the round's requests) and the first cycle's value as the warm
    start's reference. The three rates share one 0-1 axis, so noise cannot pass for a trend;
    latency is flagged as load-bound; the last cell says what the marks mean."""
    import matplotlib.pyplot as plt

    fig = figure(rows, gain)
    fig.savefig(path, dpi=100)
    plt.close(fig)


def figure(rows: list[CycleRow], gain: dict | None = None):  # -> matplotlib Figure
    """The figure ``plot`` saves."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    x = [r.cycle for r in rows]
    fig, grid = plt.subplots(2, 4, figsize=(16, 7.4))
    axes = list(grid.flat)
    _gate_panel(axes[0], rows)
    if gain is not None:
        n = sorted({r.gate_tasks for r in rows if r.gate_tasks})
        axes[0].set_title(f"gate pass rate (higher is better, n = {'/'.join(map(str, n))})\n"
                          f"{gain.get('split', 'fresh')} set "
                          f"v{gain['first_version']} -> v{gain['final_version']}: "
                          f"{gain['delta']:+.3f} [{gain['ci_low']:+.3f}, {gain['ci_high']:+.3f}]",
                          fontsize=8)
    _decision_panel(axes[1], rows)
    for ax, (title, name, better, scale) in zip(axes[2:7], _PANELS):
        se_key = _SE_KEYS.get(name, name)
        ys = [getattr(r, name) for r in rows]
        err = [1.96 * r.live_se.get(se_key, 0.0) for r in rows]
        ax.errorbar(x, ys, yerr=err, marker="o", capsize=3, color="tab:blue", label="live")
        if ys:
            ax.axhline(ys[0], color="gray", linestyle="--", linewidth=1,
                       label=f"cycle {x[0]} (warm start's traffic)")
        ax.set_title(f"{title}\n({better} is better; bars: 95% interval)", fontsize=8)
        ax.set_xlabel("cycle (traffic served by that cycle's champion)", fontsize=7)
        ax.set_xticks(x)
        ax.legend(fontsize=6, loc="upper right")
        if scale == "rate":
            ax.set_ylim(0.0, 1.0)
        else:
            top = max((y + e for y, e in zip(ys, err)), default=1.0)
            ax.set_ylim(0.0, top * 1.3 or 1.0)
    axes[7].axis("off")
    axes[7].text(0.0, 0.95, _PLOT_KEY, fontsize=8, va="top", wrap=True)
    fig.tight_layout()
    return fig


_PLOT_KEY = (
    "How to read it\n\n"
    "gate pass rate: the candidate each cycle trained and\n"
    "the champion it was gated against, on the same n\n"
    "gate tasks; dashed: the first champion (warm start).\n\n"
    "decision: the interval of the test that decided, as a\n"
    "net share of independent clusters the candidate\n"
    "answers better; above 0 is a win (a guardrail can\n"
    "still reject it). Under each cycle: what decided.\n\n"
    "live panels: what the round's users got from the\n"
    "version serving it; the champion changes the cycle\n"
    "after a promotion.")


def short_reason(decision: str, width: int = 28) -> str:
    """The rule that decided, cut to fit a plot label: "rejected: guard `count_even` dropped 5 of
    7, p = 0.029 ..." -> "guard `count_even` dropped…"."""
    reason = decision.split(":", 1)[-1].strip().split(",")[0].split(":")[0]
    return reason if len(reason) <= width else reason[: width - 1].rstrip() + "…"


def _outcome_word(r: CycleRow) -> str:
    """What decided a cycle, in a word or two for a tick label."""
    if r.rolled_back:
        return "rolled back"
    if r.promoted or not r.gate_decision:
        return r.outcome
    reason = short_reason(r.gate_decision, 40)
    if reason.startswith("no evidence"):
        return "no win"
    if reason.startswith("guard "):
        return "guard\n" + reason.split("`")[1] if "`" in reason else "guard"
    return reason.split(" ")[0]


def _gate_panel(ax, rows: list[CycleRow]) -> None:
    gated = [r for r in rows if r.gate_candidate is not None]
    x = [r.cycle for r in gated]
    champ = [r.gate_champion for r in gated]
    ax.plot(x, [float("nan") if c is None else c for c in champ], marker="s", color="gray",
            label="champion (the version gated against)")
    ax.plot(x, [r.gate_candidate for r in gated], "o", color="tab:blue", label="candidate")
    first = next((c for c in champ if c is not None), None)
    if first is not None:
        ax.axhline(first, color="gray", linestyle="--", linewidth=1, label="first champion")
    promoted = [r for r in gated if r.promoted and not r.rolled_back]
    rolled = [r for r in gated if r.rolled_back]
    if promoted:
        ax.scatter([r.cycle for r in promoted], [r.gate_candidate for r in promoted],
                   marker="^", s=80, color="green", zorder=3, label="promoted")
    if rolled:
        ax.scatter([r.cycle for r in rolled], [r.gate_candidate for r in rolled],
                   marker="x", s=80, color="red", zorder=3, label="rolled back")
    rejected = [r for r in gated if not r.promoted and not r.rolled_back]
    if rejected:
        ax.scatter([r.cycle for r in rejected], [r.gate_candidate for r in rejected],
                   marker="v", s=60, color="tab:orange", zorder=3, label="rejected")
    sizes = sorted({r.gate_tasks for r in gated if r.gate_tasks})
    n = "" if not sizes else f", n = {'/'.join(map(str, sizes))} tasks"
    ax.set_title(f"gate pass rate\n(higher is better{n})", fontsize=9)
    ax.set_xlabel("cycle", fontsize=7)
    ax.set_xticks([r.cycle for r in rows])
    ax.margins(y=0.25)
    ax.legend(fontsize=6, loc="best")


def _decision_panel(ax, rows: list[CycleRow]) -> None:
    """Each cycle's decision interval (net share of clusters better) around 0, its outcome
    under the cycle."""
    bars = [r for r in rows if r.gate_ci_low is not None and r.gate_ci_high is not None]
    ax.axhline(0.0, color="black", linewidth=0.8)
    for r in bars:
        colour = ("red" if r.rolled_back else "green" if r.promoted else "tab:orange")
        ax.vlines(r.cycle, r.gate_ci_low, r.gate_ci_high, color=colour, linewidth=3)
    ax.set_title("decision: net share of clusters better\n(interval of the deciding test; "
                 "above 0: a win)", fontsize=8)
    ax.set_xticks([r.cycle for r in rows])
    ax.set_xticklabels([f"{r.cycle}\n{_outcome_word(r)}" for r in rows], fontsize=7)
    ax.margins(y=0.2)


GAIN_TASKS = 1000
"""Sealed-set tasks (``tasks.toy.fresh_tasks``) the first and final champions are scored on."""


def champion_gain(tracking_uri: str, model_name: str, first: int, final: int, workdir: Path,
                  n_tasks: int = GAIN_TASKS) -> dict:
    """What the demo's cycles did to the champion: the first and the final champion scored
    greedily on the same tasks of the sealed set (``tasks.toy.fresh_tasks``: never gated, tuned
    or trained on), with the 95% paired-bootstrap CI of the change resampling distinct prompts.
    Toy policies only (the caller checks the config)."""
    import numpy as np

    from gating.gates import paired_bootstrap
    from gating.stats import cluster_ids
    from policy.loader import load_policy
    from runtime import registry
    from tasks.toy import fresh_tasks
    from trainer.evaluate import evaluate

    tasks = fresh_tasks(n_tasks)
    scores = {}
    for version in sorted({first, final}):
        directory = registry.download_checkpoint(tracking_uri, model_name, version,
                                                 workdir / "gain" / f"v{version}")
        policy = load_policy(directory)
        log.info("scoring champion v%d on %d fresh tasks", version, len(tasks))
        scores[version] = evaluate(policy.module, tasks)
    a, b = scores[first], scores[final]
    ci = paired_bootstrap(np.array(b.passed, float), np.array(a.passed, float),
                          n_resamples=2000, confidence=0.95, seed=0,
                          clusters=cluster_ids([t.prompt for t in tasks]))
    return {"first_version": first, "final_version": final, "tasks": len(tasks),
            "prompts": ci.n_clusters, "split": "fresh", "sealed": True, "pass_first": a.pass_rate,
            "pass_final": b.pass_rate,
            "delta": ci.mean, "ci_low": ci.low, "ci_high": ci.high,
            "tokens_first": a.mean_tokens, "tokens_final": b.mean_tokens}


def format_gain(gain: dict) -> str:
    return (f"champion v{gain['first_version']} -> v{gain['final_version']} on "
            f"{gain['tasks']:,} fresh tasks (sealed set, {gain.get('prompts', gain['tasks']):,} "
            f"prompts): pass {gain['pass_first']:.3f} -> "
            f"{gain['pass_final']:.3f} ({gain['delta']:+.3f}, 95% prompt-clustered CI "
            f"[{gain['ci_low']:+.3f}, {gain['ci_high']:+.3f}]); completion tokens "
            f"{gain['tokens_first']:.1f} -> {gain['tokens_final']:.1f}")


def starting_point(config: RatchetConfig, gain: dict | None,
                   n_tasks: int = GAIN_TASKS) -> dict:
    """What the demo's first champion is. With ``champion.lazy_fix`` it is the toy warm start
    damaged on purpose (the planted lazy-fix habit of trainer/habit.py), so the loop has a flaw
    to repair; the undamaged warm start it was made from is scored greedily on the same fresh
    tasks as the gain, so the gain reads against it. Toy policies only."""
    cfg = config.champion
    if not cfg.lazy_fix:
        return {"champion": "warm_start", "planted_flaw": None}
    from policy.toy.checkpoint import load_checkpoint
    from tasks.toy import fresh_tasks
    from trainer.evaluate import evaluate
    from trainer.fixtures import champion_dir

    tasks = fresh_tasks(n_tasks)
    log.info("scoring the undamaged warm start on %d fresh tasks", len(tasks))
    warm = evaluate(load_checkpoint(champion_dir(cfg.seed, cfg.sft_steps)), tasks)
    out = {"champion": "lazy_fix", "planted_flaw": "lazy-fix habit (trainer/habit.py): the warm "
           "start fine-tuned on off_by_one demonstrations left half unfixed",
           "warm_start_pass": warm.pass_rate, "warm_start_tokens": warm.mean_tokens,
           "tasks": len(tasks), "split": "fresh"}
    if gain is not None:
        out["final_minus_warm_start"] = gain["pass_final"] - warm.pass_rate
    return out


def format_start(start: dict, gain: dict | None) -> str:
    """One line naming the first champion; with a planted flaw, the undamaged warm start's score
    beside the gain."""
    if not start.get("planted_flaw"):
        return "champion v1: the warm start (no flaw planted)"
    line = (f"champion v1 is the warm start damaged on purpose ({start['planted_flaw']}); the "
            f"undamaged warm start scores {start['warm_start_pass']:.3f} on the same "
            f"{start['tasks']:,} fresh tasks")
    if gain is not None:
        line += (f" (final champion v{gain['final_version']}: {gain['pass_final']:.3f}, "
                 f"{start['final_minus_warm_start']:+.3f} against it)")
    return line


def _log_live(tracking_uri: str, experiment: str, run_id: str, stats) -> None:
    """The live product metrics of the traffic before a cycle, on that cycle's run."""
    from mlflow import MlflowClient

    from ratchet.history import publish

    client = MlflowClient(tracking_uri=tracking_uri)
    for name, value in (("live.edit_persistence", stats.edit_persistence),
                        ("live.dissatisfied_rate", stats.dissatisfied_rate),
                        ("live.pass_rate", stats.pass_rate),
                        ("live.mean_latency_ms", stats.mean_latency_ms),
                        ("live.mean_completion_tokens", stats.mean_completion_tokens),
                        ("live.length_cut_rate", stats.length_cut_rate)):
        client.log_metric(run_id, name, float(value))
    publish(tracking_uri, experiment)


def demo_config(config: RatchetConfig) -> RatchetConfig:
    """The demo compresses time: the simulator has sent every delayed signal of a round (10
    minutes of event time in a second) before the cycle starts, but the server stamps completions
    in wall time, so the watermark would not pass the longest join window until much later
    traffic arrives. The demo's ingest therefore finalises every pending completion at the end of
    each span (``drain``) — production cycles every few hours leave it off. For the same reason a
    signal's event time runs up to ten minutes ahead of the wall clock, so the replicas and ingest
    accept ``SIMULATED_SKEW_S`` of future skew instead of their production bounds."""
    from simulation.simulator import SIMULATED_SKEW_S

    parse = config.ingest.parse.model_copy(update={"max_future_skew_s": SIMULATED_SKEW_S})
    ingest = config.ingest.model_copy(update={"drain": True, "parse": parse})
    return config.model_copy(update={"ingest": ingest})


def _holdback(config: RatchetConfig, ep, fleet, workdir: Path):
    """The holdback replicas (pinned to the registry alias ``anchor``) and the router that sends
    ``fleet.holdback.share`` of the users to them; ``(None, None)`` when the share or the
    replica count is 0."""
    from deploy.fleet.fleet import Fleet, RouterProcess
    from runtime import registry
    from simulation.simulator import SIMULATED_SKEW_S

    hb = config.fleet.holdback
    if hb.share <= 0 or hb.replicas <= 0:
        return None, None
    anchor = registry.ensure_anchor(ep.tracking_uri, config.model_name)
    holdback = Fleet.start(
        n_replicas=hb.replicas, tracking_uri=ep.tracking_uri, model_name=config.model_name,
        bootstrap=ep.bootstrap, workdir=workdir / "fleet-holdback",
        admin_token=config.fleet.admin_token, alias=registry.ANCHOR, name="holdback",
        signal_max_skew_s=SIMULATED_SKEW_S, api_keys_path=fleet.api_keys_path,
        behind_router=True,
    )
    try:
        router = RouterProcess.start(
            stable_urls=fleet.urls, canary_urls=[], holdback_urls=holdback.urls,
            holdback_share=hb.share, admin_token=config.fleet.admin_token,
            workdir=workdir / "router")
    except BaseException:
        holdback.stop()
        raise
    log.info("holdback: %.0f%% of users on anchor v%s (%s), router %s", 100 * hb.share, anchor,
             ", ".join(holdback.urls), router.url)
    return holdback, router


def _final_impact(config: RatchetConfig, tracking_uri: str, workdir: Path):
    """The last cycle's impact table (its champion served the last round), else one computed
    now for the champion."""
    from deploy.fleet.impact import impact_from_spans, latest_impact
    from runtime import registry

    last = latest_impact(workdir / "impact")
    if last is not None:
        return last
    hb = config.fleet.holdback
    return impact_from_spans(
        workdir / "spans", model_name=config.model_name,
        champion_version=registry.resolve_alias(tracking_uri, config.model_name,
                                                registry.CHAMPION),
        anchor_version=registry.resolve_alias(tracking_uri, config.model_name, registry.ANCHOR),
        alpha=hb.alpha, relative_scale=hb.relative_scale)


def run(config: RatchetConfig, *, workdir: Path, cycles: int, keep_running: bool = False) -> int:
    from deploy.fleet.fleet import Fleet
    from ratchet.bootstrap import describe_champion, ensure_champion
    from ratchet.cycle import Cycle
    from ratchet.runner import services
    from runtime import registry
    from simulation.simulator import SIMULATED_SKEW_S, UserSimulator

    t0 = time.perf_counter()
    config = demo_config(config)
    if not (workdir / MARKER).exists():  # the CLI prepared it, and its log file is in it now
        raise WorkdirError(f"--workdir {workdir} was not prepared (call prepare_workdir first)")
    rows: list[CycleRow] = []
    stage_seconds: list[dict[str, float]] = []
    with services(workdir, bootstrap=None, tracking_uri=None) as ep:
        first = ensure_champion(config, tracking_uri=ep.tracking_uri, workdir=workdir)
        policy = describe_champion(config, tracking_uri=ep.tracking_uri, workdir=workdir)
        bootstrap_s = time.perf_counter() - t0
        fleet = Fleet.start(
            n_replicas=config.fleet.replicas, tracking_uri=ep.tracking_uri,
            model_name=config.model_name, bootstrap=ep.bootstrap, workdir=workdir / "fleet",
            admin_token=config.fleet.admin_token,
            signal_max_skew_s=SIMULATED_SKEW_S,
            behind_router=config.fleet.holdback.share > 0 and config.fleet.holdback.replicas > 0,
        )
        holdback = router = None
        try:
            holdback, router = _holdback(config, ep, fleet, workdir)
            sim = UserSimulator(
                urls=[router.url] if router else fleet.urls,
                api_key=fleet.create_api_key("demo-simulator"),
                speed=config.simulator.speed,
                seed=config.simulator.seed,
                max_tokens=config.simulator.max_tokens,
                temperature=config.simulator.temperature,
                request_timeout_s=config.simulator.request_timeout_s,
                tasks=config.simulator.load_tasks(),
                policy=config.simulator.signal_policy(),
                stop_after_code_block=config.simulator.stop_after_code_block,
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
                _log_live(ep.tracking_uri, config.experiment, result.run_id, stats)
                stage_seconds.append({"traffic": round(traffic_s, 2), **result.seconds})
                rows.append(CycleRow(
                    cycle=result.seq, served_version=served, pass_rate_live=stats.pass_rate,
                    edit_persistence=stats.edit_persistence,
                    dissatisfied_rate=stats.dissatisfied_rate,
                    mean_latency_ms=stats.mean_latency_ms,
                    completion_tokens=stats.mean_completion_tokens, span_rows=result.span_rows,
                    train_rows=result.train_rows,
                    detector_agreement=result.detector_agreement,
                    champion_version=result.champion_version,
                    candidate_version=result.candidate_version,
                    gate_candidate=result.candidate_pass_rate,
                    gate_champion=result.champion_pass_rate, gate_ci_low=result.gate_ci_low,
                    gate_ci_high=result.gate_ci_high, gate_tasks=result.gate_tasks,
                    gate_decision=result.gate_decision, audit=result.audit,
                    drift=result.drift,
                    outcome=outcome_of(result), promoted=result.promoted,
                    rolled_back=result.rolled_back, seconds=time.perf_counter() - c0,
                    cycle_run_id=result.run_id, gate_run_id=result.gate_run_id,
                    train_run_id=result.train_run_id, live_se=stats.standard_errors,
                    length_cut_rate=stats.length_cut_rate,
                ))
                log.info("%s", cycle_report(rows[-1], i, cycles, stage_seconds[-1]))
        finally:
            for process in (router, holdback, fleet):
                if process is not None:
                    process.stop()
        final = registry.resolve_alias(ep.tracking_uri, config.model_name, registry.CHAMPION)
        gain = (champion_gain(ep.tracking_uri, config.model_name, first, final, workdir)
                if config.policy.type == "toy" else None)
        start = starting_point(config, gain) if config.policy.type == "toy" else None
        total_s = time.perf_counter() - t0
        table = format_table(rows)
        print("\n" + table)
        print(textwrap.fill(LEGEND, width=LEGEND_WIDTH))
        for r in rows:  # each decision line was shown after its cycle; what came later is here
            if r.audit:
                print(f"cycle {r.cycle}: {r.audit}")
            if r.drift:
                print(f"cycle {r.cycle}: {r.drift}")
        if gain is not None:
            print(format_gain(gain))
        if start is not None:
            print(format_start(start, gain))
        png = workdir / "cycles.png"
        plot(rows, png, gain)
        impact = _final_impact(config, ep.tracking_uri, workdir)
        summary = {
            "policy": policy, "gain": gain, "start": start, "impact": impact.to_json(),
            "total_seconds": round(total_s, 1),
            "bootstrap_seconds": round(bootstrap_s, 1),
            "promotions": sum(r.promoted for r in rows), "stage_seconds": stage_seconds,
            "cycles": [asdict(r) for r in rows],
        }
        (workdir / "demo_summary.json").write_text(json.dumps(summary, indent=2))
        print(f"demo took {total_s:.0f} s (services and first champion {bootstrap_s:.0f} s); "
              f"{summary['promotions']} promotion(s); plot: {png}; full log: "
              f"{workdir / 'ratchet.log'}")
        print(f"the champion's decision in MLflow: {ep.tracking_uri}/#/models/"
              f"{config.model_name}/versions/{final}; every run: "
              f"{registry.runs_page(ep.tracking_uri, config.experiment)} (both while the demo "
              f"runs; after it: .venv/bin/ratchet ui --workdir {workdir})")
        from deploy.fleet.impact import format_impact

        print("what the loop did for users, live (ratchet impact --workdir "
              f"{workdir}):\n{format_impact(impact)}")
        if keep_running:
            input("services are up; press Enter to stop them\n")
    return 0
