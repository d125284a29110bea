"""Rendering a gate verdict: the terminal table and the HTML report, from the same rows.

Both views list every gate with its value, threshold, comparison, CI and verdict, then the
candidate and champion suite summaries, so what ``ratchet gates show`` prints and what the
MLflow artifact shows cannot disagree.

Deliberately left out: reading the verdict from MLflow (gating/show.py).
"""

from __future__ import annotations

import html
import math

from gating.records import FAIL, PASS, GateResult, GateVerdict, SuiteResult, SuiteSummary

_HEAD = ("gate", "value", "cmp", "threshold", "ci_low", "ci_high", "verdict")
_SUMMARY_FIELDS = (
    "n_tasks", "pass_rate", "mean_completion_tokens", "score", "malformed_rate", "no_edit_rate",
    "load_entropy",
)


def _fmt(x: float | None) -> str:
    if x is None:
        return "-"
    if isinstance(x, int):
        return str(x)
    if not math.isfinite(x):
        return str(x)
    return f"{x + 0.0:.4g}"  # + 0.0 turns -0.0 into 0.0


def gate_rows(gates: list[GateResult]) -> list[tuple[str, ...]]:
    return [
        (g.name, _fmt(g.value), g.comparator, _fmt(g.threshold), _fmt(g.ci_low), _fmt(g.ci_high),
         PASS if g.passed else FAIL)
        for g in gates
    ]


def summary_rows(
    candidate: SuiteSummary, champion: SuiteSummary | None
) -> list[tuple[str, str, str]]:
    rows = []
    for name in _SUMMARY_FIELDS:
        champ = "-" if champion is None else _fmt(getattr(champion, name))
        rows.append((name, _fmt(getattr(candidate, name)), champ))
    return rows


def _title(v: GateVerdict) -> str:
    champ = "none (bootstrap)" if v.champion_version is None else f"v{v.champion_version}"
    verdict = "PASS" if v.passed else "FAIL"
    return (
        f"Gate {verdict}: {v.model_name} v{v.candidate_version} vs champion {champ}"
        f" (run {v.run_id}){' - promoted' if v.promoted else ''}"
    )


def _text_table(head: tuple[str, ...], rows: list[tuple[str, ...]]) -> str:
    widths = [max(len(r[i]) for r in [head, *rows]) for i in range(len(head))]
    lines = ["  ".join(c.ljust(w) for c, w in zip(r, widths)) for r in [head, *rows]]
    lines.insert(1, "  ".join("-" * w for w in widths))
    return "\n".join(lines)


_FIRST = ("loads", "guard.families", "improvement_evidence")
"""Which failed gate a rejection line names first: a candidate that did not load, then harm
shown in a family, then the missing evidence of a win; the rest in table order."""


def _power_note(v: GateVerdict) -> str:
    e = v.extras
    if "power.mde" not in e:
        return ""
    head = (f"{int(e['power.clusters'])} independent clusters, "
            f"{e['power.discordant_share']:.0%} discordant; ")
    target = f"{e.get('power.target', 0.8):.0%} power"
    if e["power.mde"] >= 1.0:  # the gain it would take is more than the whole suite
        return head + f"too few to detect any gain with {target}"
    return head + f"detects +{e['power.mde']:.3f} with {target}"


MALFORMED_WARNING = 0.5
"""Above this share of malformed answers on either side, the table warns that the suite may not
fit the model (its prompt format or its checker) rather than measure it."""


def _malformed_warning(v: GateVerdict, sides: tuple[str, str]) -> str:
    shares = [(name, s.malformed_rate) for name, s in zip(sides, (v.candidate, v.champion))
              if s is not None]
    if not any(rate > MALFORMED_WARNING for _, rate in shares):
        return ""
    return ("warning: malformed on more than half the suite: "
            + ", ".join(f"{name} {rate:.0%}" for name, rate in shares)
            + " (the suite may not fit the model: its prompt format or its checker)")


def decision_line(v: GateVerdict, verbs: tuple[str, str] = ("promoted", "rejected")) -> str:
    """The verdict in one line: which rule decided, with its figures. E.g. ``promoted: +0.062
    [+0.011, +0.095] net share of 162 clusters better, superiority p = 0.015 <= 0.04 (14 better /
    4 worse); pass-rate change over tasks +0.062; guardrails held`` (the bracket is the deciding
    test's interval, :func:`gating.gates.improvement_gate`) or ``rejected: guard `count_even`
    dropped 5 of 7, p = 0.03 <= 0.05 (largest of 31 families)``. ``verbs``: the
    words for a pass and a fail (a comparison that decides nothing says "would promote")."""
    yes, no = verbs
    by_name = {g.name: g for g in v.gates}
    if v.passed:
        if v.champion_version is None:
            return (f"{yes}: first champion, absolute gates held (pass rate "
                    f"{v.candidate.pass_rate:.3f})")
        ev = by_name.get("improvement_evidence")
        win = ev.reason if ev is not None and ev.reason else "every gate held"
        return f"{yes}: {win}; guardrails held"
    failed = [g for g in v.gates if not g.passed]
    first = sorted(failed, key=lambda g: _FIRST.index(g.name) if g.name in _FIRST else len(_FIRST))
    g = first[0]
    figures = g.detail or f"{_fmt(g.value)} {g.comparator} {_fmt(g.threshold)}"
    why = g.reason or f"{g.name} failed ({figures})"
    others = [x.name for x in first[1:]]
    line = f"{no}: {why}"
    if g.name == "improvement_evidence" and _power_note(v):
        line += f" ({_power_note(v)})"
    if others:
        line += f"; also failed: {', '.join(others)}"
    return line


def sampled_line(extras: dict[str, float]) -> str:
    """The pass rates at the suite's sampling temperature, e.g. ``sampled (what users get):
    candidate 0.412 vs champion 0.380, +0.032 [+0.004, +0.061]; recorded, not gated``."""
    line = f"sampled (what users get): candidate {extras['sampled.candidate_pass_rate']:.3f}"
    if "sampled.change" in extras:
        line += (f" vs champion {extras['sampled.champion_pass_rate']:.3f}, "
                 f"{extras['sampled.change']:+.3f} [{extras['sampled.change.ci_low']:+.3f}, "
                 f"{extras['sampled.change.ci_high']:+.3f}]")
    return line + "; recorded, not gated"


def level_line(extras: dict[str, float]) -> str:
    """The one level of a decision, printed as its decision line prints it: the superiority
    test's (``power.level``), and where it comes from when the model's error control, the
    shorter route or the looks made it differ from ``alpha_k``."""
    line = f"level: one-sided {extras['power.level']:.2g}, the superiority test's"
    if "alpha_k" in extras and abs(extras["alpha_k"] - extras["power.level"]) > 1e-12:
        line += (f" (this decision's share {extras['alpha_k']:.2g} of the model's error budget, "
                 "less the shorter route's part and the looks' spending)")
    return line


def format_table(verdict: GateVerdict, *, sides: tuple[str, str] = ("candidate", "champion"),
                 title: str | None = None) -> str:
    """The gate table for the terminal: the decision line, the power of the draw, the gates.
    ``sides`` name the two columns of the suite summary and ``title`` replaces the gate's own
    (``ratchet gates compare`` names the versions as the user gave them)."""
    head = [title or _title(verdict), verdict.decision or decision_line(verdict)]
    if warning := _malformed_warning(verdict, sides):
        head.append(warning)
    if "power.level" in verdict.extras:
        head.append(level_line(verdict.extras))
    if _power_note(verdict):
        head.append(f"power: {_power_note(verdict)} at that level")
    if "sampled.candidate_pass_rate" in verdict.extras:
        head.append(sampled_line(verdict.extras))
    parts = [*head, "", _text_table(_HEAD, gate_rows(verdict.gates)), ""]
    parts.append(_text_table(("suite", *sides),
                             summary_rows(verdict.candidate, verdict.champion)))
    if verdict.extras:
        parts += ["", *(f"{k}: {_fmt(v)}" for k, v in sorted(verdict.extras.items()))]
    return "\n".join(parts)


def _html_table(head: tuple[str, ...], rows: list[tuple[str, ...]], verdict_col: int | None) -> str:
    out = ["<table>", "<tr>" + "".join(f"<th>{html.escape(h)}</th>" for h in head) + "</tr>"]
    for r in rows:
        cls = ""
        if verdict_col is not None:
            cls = f' class="{r[verdict_col]}"'
        out.append(f"<tr{cls}>" + "".join(f"<td>{html.escape(c)}</td>" for c in r) + "</tr>")
    out.append("</table>")
    return "\n".join(out)


_CSS = """
body { font-family: sans-serif; margin: 2em; }
table { border-collapse: collapse; margin-bottom: 1.5em; }
th, td { border: 1px solid #999; padding: 4px 10px; text-align: left; }
tr.pass td:last-child { color: #060; font-weight: bold; }
tr.fail td:last-child { color: #b00; font-weight: bold; }
"""


def changed_tasks(candidate: SuiteResult, champion: SuiteResult | None, limit: int = 50
                  ) -> list[tuple[str, ...]]:
    """Rows for the prompts whose verdict differs between the two models (first ``limit``), each
    prompt once with the number of suite rows that asked it."""
    if champion is None:
        return []
    rows: dict[str, list] = {}
    for key, a, b in zip(candidate.clusters, candidate.tasks, champion.tasks, strict=True):
        if a.passed == b.passed:
            continue
        if key in rows:
            rows[key][-1] += 1
            continue
        rows[key] = [a.task_id[:12], a.kind, PASS if a.passed else FAIL,
                     PASS if b.passed else FAIL, repr(a.answer[:40]), repr(b.answer[:40]), 1]
    return [tuple(map(str, r)) for r in list(rows.values())[:limit]]


def render_html(verdict: GateVerdict, config_json: str, candidate: SuiteResult | None = None,
                champion: SuiteResult | None = None) -> str:
    """A self-contained HTML report: gates, suite summaries, the tasks whose verdict changed,
    extras and the resolved config."""
    changed = changed_tasks(candidate, champion) if candidate is not None else []
    changed_html = "" if not changed else "<h2>Tasks that changed verdict</h2>" + _html_table(
        ("task", "kind", "candidate", "champion", "candidate answer", "champion answer",
         "rows"),
        changed, verdict_col=None)
    title = html.escape(_title(verdict))
    extras = "".join(
        f"<li>{html.escape(k)}: {html.escape(_fmt(v))}</li>" for k, v in sorted(
            verdict.extras.items())
    )
    return "\n".join([
        "<!doctype html>", "<html><head><meta charset='utf-8'>",
        f"<title>{title}</title><style>{_CSS}</style></head><body>",
        f"<h1 id='verdict' class='{PASS if verdict.passed else FAIL}'>{title}</h1>",
        f"<p id='decision'>{html.escape(verdict.decision or decision_line(verdict))}</p>",
        (f"<p id='power'>power: {html.escape(_power_note(verdict))}</p>"
         if _power_note(verdict) else ""),
        "<h2>Gates</h2>", _html_table(_HEAD, gate_rows(verdict.gates), verdict_col=6),
        "<h2>Suite</h2>",
        _html_table(("suite", "candidate", "champion"),
                    summary_rows(verdict.candidate, verdict.champion), verdict_col=None),
        changed_html,
        f"<h2>Extras</h2><ul>{extras}</ul>" if extras else "",
        "<h2>Resolved gate config</h2>", f"<pre>{html.escape(config_json)}</pre>",
        "</body></html>",
    ])
