"""Make reward rows the way the production loop does, without the fleet: sample, check, reward.

Used for recorded fixtures (tests/fixtures/), bench/learning.py and tests: the model answers each
task, ``tasks.toy.check`` scores it, and the reward is +1 when correct, -1 otherwise, minus a
small concave length penalty ``length_penalty * C(tokens)`` (rewards.signals.concave_length_cost:
the first tokens cost about ``length_penalty`` each, later ones less) — the simulator's rule for a
user who runs the suggestion. Rows follow ``ingest.schema.REWARD_SCHEMA`` exactly.

Left out: delayed signals (edit persistence, follow-ups, feedback stay null; their names are
listed in ``defaulted_signals``) and Kafka — ingest/ and the simulator own those.
"""

from __future__ import annotations

import hashlib
from datetime import UTC, datetime

import pyarrow as pa

from ingest.schema import REWARD_SCHEMA, SCHEMA_VERSION
from policy.toy.generate import Generation, generate
from policy.toy.model import MoETransformer
from rewards.signals import concave_length_cost
from tasks.toy import Task, check

LENGTH_K = 1.0 / 16  # per token: C bends after about 16 tokens
LENGTH_Q = 1.0  # logarithmic: C(n) = log(1 + k n) / k

SIGNALS = ("edit_persistence_30", "edit_persistence_120", "edit_persistence_300",
           "edit_persistence_600", "followup_dissatisfied", "feedback_accept")


def length_cost(n_tokens: int, length_penalty: float) -> float:
    """length_penalty * C(n_tokens) with the concave C of rewards.signals (k, q above)."""
    return length_penalty * concave_length_cost(n_tokens, LENGTH_K, LENGTH_Q)


def task_reward(task: Task, text: str, n_tokens: int, length_penalty: float) -> tuple[float, bool]:
    """(+1 if the answer passes else -1) - length_cost(tokens), and whether it passed."""
    passed = check(task, text).passed
    return (1.0 if passed else -1.0) - length_cost(n_tokens, length_penalty), passed


def sample_rows(
    model: MoETransformer,
    tasks: list[Task],
    *,
    samples_per_task: int,
    temperature: float,
    model_version: int,
    seed: int,
    max_new_tokens: int = 32,
    length_penalty: float = 0.01,
    model_name: str = "ratchet-toy",
    batch_size: int = 128,
    top_p: float = 1.0,
) -> pa.Table:
    """One reward row per (task, sample), REWARD_SCHEMA, ordered task by task; ``temperature``
    0 is greedy, ``top_p`` < 1 samples from the nucleus (the logged logprobs are the ones of the
    distribution sampled from)."""
    prompts = [t for t in tasks for _ in range(samples_per_task)]
    gens: list[Generation] = []
    for start in range(0, len(prompts), batch_size):
        chunk = prompts[start:start + batch_size]
        gens += generate(model, [t.prompt for t in chunk], max_new_tokens=max_new_tokens,
                         temperature=temperature, top_p=top_p, seed=seed * 1_000_003 + start)
    records = [_record(t, g, i, temperature, model_version, model_name, length_penalty, seed)
               | {"top_p": top_p} for i, (t, g) in enumerate(zip(prompts, gens))]
    return pa.Table.from_pylist(records, schema=REWARD_SCHEMA)


def _record(task: Task, g: Generation, i: int, temperature: float, version: int, name: str,
            length_penalty: float, seed: int) -> dict:
    reward, passed = task_reward(task, g.text, len(g.token_ids), length_penalty)
    rid = hashlib.sha256(f"{seed}/{version}/{i}/{task.task_id}".encode()).hexdigest()[:24]
    return {
        "schema_version": SCHEMA_VERSION, "response_id": rid, "conversation_id": f"c-{rid}",
        "event_time": datetime(2026, 1, 1, tzinfo=UTC), "model_name": name,
        "model_version": version, "task_kind": task.kind, "prompt": task.prompt,
        "response_text": g.text, "response_token_ids": g.token_ids,
        "response_logprobs": [min(lp, 0.0) for lp in g.logprobs],
        "routed_experts": g.routed_experts, "temperature": temperature,
        "finish_reason": g.finish_reason, "completion_tokens": len(g.token_ids),
        "latency_ms": 0.0, **{s: None for s in SIGNALS}, "reward": reward,
        "reward_components": {"passed": float(passed),
                              "length": -length_cost(len(g.token_ids), length_penalty)},
        "defaulted_signals": list(SIGNALS),
    }


def policy_rows(policy, tasks: list[Task], *, samples: int = 1, temperature: float = 1.0,
                top_p: float = 1.0, seed: int = 0, max_new_tokens: int = 8) -> pa.Table:
    """Rows any :class:`policy.base.Policy` samples itself, ``samples`` per task: the columns
    the recipe reads (served prompt ids, processed logprobs, routed experts of prompt and
    response), reward +1 / -1 by ``tasks.toy.check`` (no length term)."""
    tt = [t for t in tasks for _ in range(samples)]
    gens = policy.generate([policy.encode_prompt(t.prompt) for t in tt],
                           max_new_tokens=max_new_tokens, temperature=temperature, top_p=top_p,
                           seed=seed)
    n = len(gens)
    return pa.table({
        "prompt": [t.prompt for t in tt],
        "prompt_token_ids": [g.prompt_token_ids for g in gens],
        "prompt_routed_experts": [g.prompt_routed_experts for g in gens],
        "response_token_ids": [g.token_ids for g in gens],
        "response_logprobs": [g.logprobs for g in gens],
        "routed_experts": [g.routed_experts for g in gens],
        "reward": [1.0 if check(t, g.text).passed else -1.0 for t, g in zip(tt, gens)],
        "task_kind": [t.kind for t in tt],
        "model_version": [1] * n, "temperature": [temperature] * n, "top_p": [top_p] * n,
    })
