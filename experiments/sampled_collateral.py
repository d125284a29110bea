"""Is a loss the greedy answers show on a guard family a loss users served at the usual
temperature get? Each checkpoint answers every guard-pool prompt of ``--families`` greedily and
``--samples`` times at ``--temperature`` (the SmolLM2 preset's simulator temperature, 0.8), through
the gate's suite runner (chat, the task's asserts in the sandbox). Per candidate and family:
greedy passes against the champion's, the mean sampled pass share and its paired change over
prompts (95% bootstrap over prompts: a family of one function has no other replication), and, on
each prompt whose greedy answer departs from the champion's, the champion's log-probability margin
of its own token over the candidate's at the first token where they part (a margin near 0 is a
near-tie a small update flips).

    .venv/bin/python -m experiments.sampled_collateral --champion DIR --candidates DIR... \
        --families count_even --samples 32 --out bench/results/sampled_collateral.json

Left out: the whole guard pool (on this 2-core machine 32 samples of 7 prompts take about six
minutes a checkpoint; the pool's 291 prompts would take four hours).
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench import provenance  # noqa: E402

GUARD = ROOT / "tasks" / "data" / "pyfuncs_guard.jsonl"
OUT = ROOT / "bench" / "results" / "sampled_collateral.json"
BOOTSTRAP = 10_000


def say(msg: str) -> None:
    print(f"[sampled_collateral] {msg}", file=sys.stderr, flush=True)


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m experiments.sampled_collateral",
                                description=__doc__.splitlines()[0])
    p.add_argument("--champion", type=Path, required=True, help="the champion's checkpoint")
    p.add_argument("--candidates", type=Path, nargs="+", required=True)
    p.add_argument("--families", nargs="+", required=True, help="guard-pool families")
    p.add_argument("--pool", type=Path, default=GUARD)
    p.add_argument("--samples", type=int, default=32)
    p.add_argument("--temperature", type=float, default=0.8)
    p.add_argument("--max-new-tokens", type=int, default=64)
    p.add_argument("--threads", type=int, default=None)
    p.add_argument("--out", type=Path, default=OUT)
    a = p.parse_args(argv)
    if a.samples < 1 or a.temperature <= 0:
        p.error("--samples must be >= 1 and --temperature > 0")
    for path in (a.champion, *a.candidates):
        if not path.is_dir():
            p.error(f"{path}: no checkpoint directory")
    return a


def load(checkpoint: Path):
    from policy.config import HFPolicyConfig
    from policy.loader import load_policy

    return load_policy(HFPolicyConfig(path=checkpoint, chat_template=True))


def answer(policy, tasks: list, checker, args) -> dict:
    """Greedy verdicts, greedy token ids and sampled pass shares of ``policy`` on ``tasks``."""
    from gating.suite import run_suite

    r = run_suite(policy, tasks, max_new_tokens=args.max_new_tokens, seed=0, checker=checker,
                  batch_size=len(tasks), chat=True, samples=args.samples,
                  temperature=args.temperature)
    return {"greedy": [t.passed for t in r.tasks], "sampled": [t.sampled_pass for t in r.tasks],
            "token_ids": [t.token_ids for t in r.tasks], "seconds": r.seconds}


def departure_margins(champion, tasks: list, mine: list[list[int]], theirs: list[list[int]], *,
                      max_new_tokens: int) -> list[float | None]:
    """Per task, the ``champion`` policy's log-prob of its own greedy token minus that of the
    candidate's at the first position where the two greedy answers differ (None: they do not
    differ)."""
    import torch

    from gating.suite import prompt_room, task_prompt_ids

    room = prompt_room(champion.max_seq_len, max_new_tokens)
    out: list[float | None] = []
    for task, a, b in zip(tasks, mine, theirs, strict=True):
        k = next((j for j in range(min(len(a), len(b))) if a[j] != b[j]), None)
        if k is None:
            out.append(None)
            continue
        ids = torch.tensor([task_prompt_ids(champion, task, room, chat=True) + list(a[:k])])
        with torch.no_grad():
            logp = torch.log_softmax(champion.module(ids).logits[0, -1].float(), dim=-1)
        out.append(round(float(logp[a[k]] - logp[b[k]]), 3))
    return out


def paired_change(before: list[float], after: list[float], *, seed: int = 0) -> dict:
    """Mean of ``after - before`` over prompts with a 95% bootstrap interval over prompts."""
    d = [y - x for x, y in zip(before, after, strict=True)]
    rng = random.Random(seed)
    means = sorted(statistics.fmean(d[rng.randrange(len(d))] for _ in d)
                   for _ in range(BOOTSTRAP))
    return {"delta": statistics.fmean(d), "ci_low": means[int(0.025 * BOOTSTRAP)],
            "ci_high": means[int(0.975 * BOOTSTRAP) - 1]}


def run(args: argparse.Namespace) -> dict:
    from tasks.jsonl_suite import jsonl_suite

    if args.threads:
        import torch

        torch.set_num_threads(args.threads)
    every, checker = jsonl_suite(path=args.pool, size=10**9, seed=0, timeout_s=5.0)
    tasks = {family: [t for t in every if t.kind == family] for family in args.families}
    for family, these in tasks.items():
        if not these:
            raise SystemExit(f"no task of family {family!r} in {args.pool}")
    result = {**provenance.stamp(), "samples": args.samples, "temperature": args.temperature,
              "champion": str(args.champion), "families": {}}
    champion = load(args.champion)  # kept: its margins are read against every candidate
    champ = {}
    for family, these in tasks.items():
        say(f"{family}: {len(these)} prompts, champion")
        champ[family] = answer(champion, these, checker, args)
        result["families"][family] = {
            "prompts": len(these), "candidates": {},
            "champion": {k: champ[family][k] for k in ("greedy", "sampled")}}
    for cand in args.candidates:
        policy = load(cand)
        for family, these in tasks.items():
            say(f"{family}: {cand}")
            theirs, mine = champ[family], answer(policy, these, checker, args)
            result["families"][family]["candidates"][str(cand)] = {
                "greedy": mine["greedy"], "sampled": mine["sampled"],
                "greedy_passed": [sum(theirs["greedy"]), sum(mine["greedy"])],
                "sampled_mean": [statistics.fmean(theirs["sampled"]),
                                 statistics.fmean(mine["sampled"])],
                "sampled_change": paired_change(theirs["sampled"], mine["sampled"]),
                "champion_margin_at_departure": departure_margins(
                    champion, these, theirs["token_ids"], mine["token_ids"],
                    max_new_tokens=args.max_new_tokens),
                "seconds": mine["seconds"]}
        del policy
    return result


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    result = run(args)
    for family, entry in result["families"].items():
        for cand, c in entry["candidates"].items():
            ch = c["sampled_change"]
            say(f"{family} {Path(cand).name}: greedy {c['greedy_passed'][0]} -> "
                f"{c['greedy_passed'][1]} of {entry['prompts']}; sampled "
                f"{c['sampled_mean'][0]:.3f} -> {c['sampled_mean'][1]:.3f} "
                f"({ch['delta']:+.3f} [{ch['ci_low']:+.3f}, {ch['ci_high']:+.3f}]); margins "
                f"{c['champion_margin_at_departure']}")
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=1) + "\n")
    say(f"wrote {args.out}")


if __name__ == "__main__":
    from bench._common import show_progress

    show_progress()
    main()
