"""Reward rows (``ingest.schema.REWARD_SCHEMA``) to padded training tensors.

Each row becomes a :class:`Sample` (prompt ids, response ids, logged logprobs, logged routing,
reward, behaviour version, temperature — 0 for greedy rows — and top_p: null or absent, as in v1
rows, reads as 1.0). The prompt ids are the ones served (``prompt_token_ids``, schema v2) when
the row has them; otherwise the prompt text is tokenised with the policy's ``encode_prompt`` (the
toy's by default). Logged prompt-position routing (``prompt_routed_experts``) is replayed too.
:func:`collate` aligns everything on the model's input positions:
for a sequence ``prompt + response`` the input is ``seq[:-1]`` and response token j is predicted
at input position ``len(prompt) - 1 + j`` — where its logged logprob and its logged routing (the
routing that produced it at serving time) are placed.

Row order: :func:`order_by_content` sorts rows by what they were, so the cycle's candidate is a
function of its rows, not of the order its spans listed them in.

Left out: reading Parquet (callers pass a pyarrow Table), reward shaping (rewards/ did it).
Malformed or broken answers are ordinary samples here: they carry their (negative) reward.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable
from dataclasses import dataclass, field

import pyarrow as pa
import torch
from torch import Tensor

from policy.toy.generate import encode_prompt
from policy.toy.tokenizer import PAD


@dataclass
class Sample:
    prompt_ids: list[int]
    response_ids: list[int]
    logp_b: list[float]
    routes: list[list[list[int]]]  # (len(response_ids), layers, top_k) or [] when not logged
    reward: float
    kind: str
    group: str  # samples sharing a prompt share a group (for the group-mean baseline)
    version: int
    temperature: float  # 0 = greedy (the behaviour policy was deterministic)
    weight: float = 1.0
    top_p: float = 1.0  # nucleus the row was sampled from (1 = none; null in v1 rows)
    prompt_routes: list = field(default_factory=list)  # (len(prompt_ids), layers, top_k) or []
    trainable: bool = True  # False: nothing known of its persistence (rewards.signals.is_trainable)


@dataclass
class Batch:
    """All (B, T) on input positions unless noted; replay is (B, T, L, k) with -1 = router."""

    tokens: Tensor
    targets: Tensor
    pad_mask: Tensor
    resp_mask: Tensor
    logp_b: Tensor
    replay: Tensor
    temperature: Tensor  # (B,), 1.0 for greedy rows
    rewards: Tensor  # (B,)
    weights: Tensor  # (B,)
    kinds: list[str]
    groups: list[str]
    top_p: Tensor  # (B,)
    greedy: Tensor  # (B,) bool: logged at temperature 0
    prompt_mask: Tensor  # (B, T) bool: input positions holding prompt tokens

    def to(self, device: torch.device | str) -> Batch:
        """The same batch with every tensor on ``device`` (collate builds on the CPU)."""
        moved = {k: v.to(device, non_blocking=True) if isinstance(v, Tensor) else v
                 for k, v in self.__dict__.items()}
        return Batch(**moved)


REQUIRED = ("prompt", "response_token_ids", "response_logprobs", "routed_experts", "reward",
            "task_kind", "model_version", "temperature")
OPTIONAL = ("top_p", "prompt_token_ids", "prompt_routed_experts", "trainable")
"""REWARD_SCHEMA v2 columns; absent or null (v1 rows): top_p 1.0, prompt re-tokenised,
trainable."""

IDENTITY = ("prompt", "prompt_token_ids", "response_token_ids", "task_kind", "model_version",
            "temperature", "top_p")
"""What a row was: the columns :func:`order_by_content` sorts on (logprobs are left out: the
same tokens served in another batch can differ in the last float bits)."""


def order_by_content(rows: pa.Table) -> pa.Table:
    """``rows`` sorted by a digest of what each row was (:data:`IDENTITY`), then by reward.

    The trainer's seeded batches are drawn by row position, and a span's rows are ordered by
    event time and response id, which differ between two runs of the same traffic (wall-clock
    times, fresh uuids). Sorted by content, the same rows give the same batches, hence the same
    candidate, whatever order they arrived in."""
    present = [c for c in IDENTITY if c in rows.column_names]
    cols = [rows.column(c).to_pylist() for c in present]
    digests = [hashlib.blake2b(repr(values).encode(), digest_size=16).digest()
               for values in zip(*cols)]
    rewards = rows.column("reward").to_pylist()
    order = sorted(range(rows.num_rows), key=lambda i: (digests[i], rewards[i]))
    return rows.take(pa.array(order, pa.int64()))


def without_holdback(rows: pa.Table, *, anchor_version: int | None,
                     champion_version: int) -> tuple[pa.Table, int]:
    """``rows`` less those the holdback served, and how many were left out.

    A row that records the router's arm (``arm``) is a holdback row when its arm is
    ``holdback``, whatever the version, also while the anchor is the champion. A row without one
    falls back to its version: the holdback serves the anchor version, so while the anchor is
    not the champion being trained every such row of the anchor version is a holdback row (the
    stable and canary arms serve the champion and its candidates); while the anchor is the
    champion they are kept (the version alone cannot tell the arms apart)."""
    import pyarrow.compute as pc

    from ingest.schema import holdback_mask

    held = holdback_mask(rows, anchor_version=anchor_version, champion_version=champion_version)
    kept = rows.filter(pc.invert(held))
    return kept, rows.num_rows - kept.num_rows


def rows_to_samples(
    rows: pa.Table, *, vocab_size: int, max_seq_len: int,
    encode_prompt: Callable[[str], list[int]] = encode_prompt,
) -> tuple[list[Sample], int]:
    """Samples from reward rows, and how many were truncated to fit ``max_seq_len``."""
    missing = [c for c in REQUIRED if c not in rows.column_names]
    if missing:
        raise ValueError(f"reward rows lack columns {missing}")
    cols = {c: rows.column(c).to_pylist() for c in REQUIRED}
    for c in OPTIONAL:
        cols[c] = rows.column(c).to_pylist() if c in rows.column_names else [None] * rows.num_rows
    samples, truncated = [], 0
    for i in range(rows.num_rows):
        s = _sample(i, cols, vocab_size, encode_prompt)
        truncated += _fit(s, max_seq_len)
        samples.append(s)
    return samples, truncated


def _sample(i: int, cols: dict[str, list], vocab_size: int,
            encode_prompt: Callable[[str], list[int]]) -> Sample:
    ids = [int(t) for t in cols["response_token_ids"][i]]
    lps = [float(x) for x in cols["response_logprobs"][i]]
    if len(lps) != len(ids):
        raise ValueError(f"row {i}: {len(ids)} response tokens but {len(lps)} logprobs")
    bad = [t for t in ids if not 0 <= t < vocab_size]
    if bad:
        raise ValueError(f"row {i}: response_token_ids has id {bad[0]} outside [0, {vocab_size})")
    routes = cols["routed_experts"][i] or []
    prompt = cols["prompt"][i]
    top_p = cols["top_p"][i]
    served = [int(t) for t in cols["prompt_token_ids"][i] or []]
    bad = [t for t in served if not 0 <= t < vocab_size]
    if bad:
        raise ValueError(f"row {i}: prompt_token_ids has id {bad[0]} outside [0, {vocab_size})")
    prompt_ids = served or encode_prompt(prompt)
    prompt_routes = (cols["prompt_routed_experts"][i] or []) if served else []
    return Sample(prompt_ids, ids, lps, routes if len(routes) == len(ids) else [],
                  float(cols["reward"][i]), str(cols["task_kind"][i]), prompt,
                  int(cols["model_version"][i]), float(cols["temperature"][i]),
                  top_p=1.0 if top_p is None else float(top_p),
                  prompt_routes=prompt_routes if len(prompt_routes) == len(prompt_ids) else [],
                  trainable=cols["trainable"][i] is not False)


def _fit(s: Sample, max_seq_len: int) -> bool:
    """Truncate the response (then the prompt's head) so prompt + response <= max_seq_len."""
    over = len(s.prompt_ids) + len(s.response_ids) - max_seq_len
    if over <= 0:
        return False
    keep = max(len(s.response_ids) - over, min(len(s.response_ids), max_seq_len // 2))
    s.response_ids, s.logp_b = s.response_ids[:keep], s.logp_b[:keep]
    s.routes = s.routes[:keep]
    s.prompt_routes = []  # a cut prompt is routed differently from what was served
    room = max_seq_len - keep
    if len(s.prompt_ids) > room:
        s.prompt_ids = s.prompt_ids[:1] + s.prompt_ids[len(s.prompt_ids) - room + 1:]
    return True


def collate(samples: list[Sample], *, n_layers: int, top_k: int, pad_id: int = PAD) -> Batch:
    """Right-padded tensors for a list of samples (see the module docstring for alignment).

    ``n_layers`` is the number of MoE layers (0 for a dense policy); the pad mask comes from the
    lengths, not from ``pad_id`` (a model may pad with its EOS id)."""
    width = max(len(s.prompt_ids) + len(s.response_ids) for s in samples) - 1
    b = len(samples)
    tokens = torch.full((b, width), pad_id, dtype=torch.long)
    targets = torch.full((b, width), pad_id, dtype=torch.long)
    resp = torch.zeros(b, width, dtype=torch.bool)
    pad_mask = torch.zeros(b, width, dtype=torch.bool)
    logp_b = torch.zeros(b, width)
    replay = torch.full((b, width, n_layers, top_k), -1, dtype=torch.long)
    prompt = torch.zeros(b, width, dtype=torch.bool)
    for i, s in enumerate(samples):
        seq = s.prompt_ids + s.response_ids
        n, p, r = len(seq) - 1, len(s.prompt_ids), len(s.response_ids)
        tokens[i, :n] = torch.tensor(seq[:-1])
        targets[i, :n] = torch.tensor(seq[1:])
        resp[i, p - 1 : p - 1 + r] = True
        prompt[i, :p] = True
        pad_mask[i, :n] = True
        logp_b[i, p - 1 : p - 1 + r] = torch.tensor(s.logp_b)
        routes = torch.tensor(s.routes, dtype=torch.long) if s.routes else None
        if routes is not None and routes.shape[1:] == (n_layers, top_k):
            replay[i, p - 1 : p - 1 + r] = routes
        prompt_routes = torch.tensor(s.prompt_routes[: p - 1], dtype=torch.long)
        if p > 1 and prompt_routes.shape[1:] == (n_layers, top_k):
            replay[i, : p - 1] = prompt_routes
    return Batch(tokens, targets, pad_mask, resp, logp_b, replay,
                 torch.tensor([s.temperature if s.temperature > 0 else 1.0 for s in samples]),
                 torch.tensor([s.reward for s in samples]),
                 torch.tensor([s.weight for s in samples]),
                 [s.kind for s in samples], [s.group for s in samples],
                 torch.tensor([s.top_p for s in samples]),
                 torch.tensor([s.temperature <= 0 for s in samples]), prompt)
