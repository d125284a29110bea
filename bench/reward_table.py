"""The reward of an empty, a refused, an honest wrong and a correct answer, with the signals a
real client sends for each (no persistence for an answer without code), for a client that
declares nothing and one that declares it reports persistence for every insertion.

Prints the table and writes bench/results/reward_table.json. ``BEFORE`` holds the same cases
scored by the reward at commit 7b83256 (latency 800 ms, then a reward component), for the
comparison; run this file at a commit to score them with its reward.
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

from rewards.answers import answer_kind
from rewards.config import RewardConfig
from rewards.signals import RowSignals, compute_reward, is_trainable

WRONG = {30: 0.2, 120: 0.06, 300: 0.02, 600: 0.005}
RIGHT = {30: 0.95, 120: 0.93, 300: 0.92, 600: 0.9}
CODE = "```python\ndef count_unique(xs):\n    return len(xs)\n```"
CASES = {  # name: (text, tokens, persistence, dissatisfied follow-up)
    "empty": ("", 1, {}, None),
    "empty+complaint": ("", 1, {}, True),
    "refused": ("I'm sorry, I can't help with that.", 9, {}, None),
    "honest_wrong": (CODE, 48, WRONG, True),
    "honest_wrong_silent": (CODE, 48, WRONG, None),
    "honest_wrong_not_inserted": (CODE, 48, {}, True),
    "correct": (CODE, 48, RIGHT, None),
}
BEFORE = {  # commit 7b83256, same signals, latency 800 ms
    "undeclared/empty": 0.093, "undeclared/empty+complaint": -0.407,
    "undeclared/refused": 0.093, "undeclared/honest_wrong": -1.327,
    "undeclared/honest_wrong_silent": -0.827, "undeclared/correct": 0.927,
    "undeclared/honest_wrong_not_inserted": -0.407, "declaring/honest_wrong_not_inserted": -2.407,
    "declaring/empty": -1.907, "declaring/empty+complaint": -2.407,
    "declaring/refused": -1.907, "declaring/honest_wrong": -1.327,
    "declaring/honest_wrong_silent": -0.827, "declaring/correct": 0.927,
}


def table(config: RewardConfig) -> dict[str, dict]:
    out = {}
    for declares in (False, True):
        for name, (text, tokens, scores, fu) in CASES.items():
            row = RowSignals(tokens, scores, fu, None, declares,
                             answered=answer_kind(text) == "code")
            reward, _, _ = compute_reward(row, config)
            key = f"{'declaring' if declares else 'undeclared'}/{name}"
            out[key] = {"before": BEFORE[key], "after": round(reward, 3),
                        "trained_on": is_trainable(row, config)}
    return out


def main() -> None:
    config = RewardConfig(length_scale_tokens=64)  # the pyfuncs preset: max_new_tokens 64
    rows = table(config)
    print(f"{'case':34} {'before':>8} {'after':>8}  trained on")
    for key, r in rows.items():
        print(f"{key:34} {r['before']:8.3f} {r['after']:8.3f}  {r['trained_on']}")
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True,
                            text=True).stdout.strip()
    out = Path(__file__).parent / "results" / "reward_table.json"
    out.write_text(json.dumps({"commit": commit, "length_scale_tokens": 64, "rows": rows},
                              indent=1) + "\n")


if __name__ == "__main__":
    main()
