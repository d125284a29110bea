"""The retain-set anchor's data: prompts outside the trained families, completions sampled on
them, and the coefficient that keeps their KL to the champion under a budget.

:func:`load_prompts` reads the ``prompt`` of every line of a JSONL task file and
:func:`load_groups` the group each belongs to; :class:`RetainDraw` picks the prompts a step samples
(uniformly over prompts, each group as often as any other, or most often the groups whose
measured KL to the champion is highest);
:func:`sample_completions` has a policy sample a completion of each prompt (no gradient; under
LoRA the adapted weights are computed once per call) and turns them into :class:`Sample` rows the
trainer collates like any other; :class:`AdaptiveCoef` doubles or halves the weight of the term
after each step so the measured retain KL stays under its target. The loss itself is
``trainer.rl.retain_kl_loss``; the recipe wires them (``TrainerConfig.retain``).

Left out: grading the completions (the anchor is a KL to the champion, not a reward) and prompts
of other formats than the suite JSONL.
"""

from __future__ import annotations

import contextlib
import json
from pathlib import Path

import torch

from policy.base import Policy
from trainer.data import Sample, _fit


def load_prompts(path: str | Path) -> list[str]:
    """The ``prompt`` of every non-blank line of ``path``, in file order."""
    path = Path(path)
    prompts = []
    for i, raw in enumerate(path.read_text(encoding="utf-8").split("\n"), start=1):
        if not raw.strip():
            continue
        try:
            prompt = json.loads(raw)["prompt"]
        except (json.JSONDecodeError, KeyError, TypeError) as e:
            raise ValueError(f"{path}:{i}: a retain line needs a JSON object with a 'prompt' "
                             f"string ({e!r})") from None
        if not isinstance(prompt, str) or not prompt:
            raise ValueError(f"{path}:{i}: field 'prompt' must be a non-empty string")
        prompts.append(prompt)
    if not prompts:
        raise ValueError(f"{path}: no prompts")
    return prompts


def load_groups(path: str | Path, field: str) -> list[str]:
    """The ``field`` of every non-blank line of ``path`` (in :func:`load_prompts`' order), as text;
    a line without it is a group of its own (keyed by its prompt)."""
    groups = []
    for raw in Path(path).read_text(encoding="utf-8").split("\n"):
        if raw.strip():
            line = json.loads(raw)
            value = line.get(field)
            groups.append(f"{field}={value}" if value is not None else f"prompt={line['prompt']}")
    return groups


class RetainDraw:
    """Which retain prompts a step samples. ``uniform``: ``n`` distinct prompts, each as likely as
    any other, so a group with many lines (a template with many constants) takes most of the
    anchor. ``by_group``: groups are visited in shuffled rounds (every group once per round) and
    each visit takes one of the group's prompts at random, so a group of two lines is anchored as
    often as one of forty. ``by_kl``: the first round is ``by_group``'s; after it, a visit goes
    to a group at random with probability ``explore`` and otherwise to a group drawn in
    proportion to its measured KL (:meth:`observe`: the mean of its last two measurements,
    negatives as 0), so the anchor goes where the update is moving the policy away from the
    champion. All draw from ``generator`` only."""

    def __init__(self, groups: list[str], by: str, generator: torch.Generator, *,
                 explore: float = 0.25):
        if by not in ("uniform", "by_group", "by_kl"):
            raise ValueError(f"retain draw {by!r}: expected 'uniform', 'by_group' or 'by_kl'")
        self.n, self.by, self.gen, self.explore = len(groups), by, generator, explore
        self.group_of = groups
        self.members: dict[str, list[int]] = {}
        for i, g in enumerate(groups):
            self.members.setdefault(g, []).append(i)
        self.keys = list(self.members)
        self.round: list[str] = []
        self.kl: dict[str, float] = {}
        self.first_round_left = len(self.keys) if by == "by_kl" else 0

    def pick(self, n: int) -> list[int]:
        """Indices of ``n`` prompts (at most the file's count under ``uniform``)."""
        if self.by == "uniform":
            return torch.randperm(self.n, generator=self.gen)[:n].tolist()
        out = []
        for _ in range(n):
            m = self.members[self._next_group()]
            out.append(m[int(torch.randint(len(m), (1,), generator=self.gen))])
        return out

    def _next_group(self) -> str:
        if self.by == "by_group" or self.first_round_left > 0:
            self.first_round_left = max(self.first_round_left - 1, 0)
            if not self.round:
                order = torch.randperm(len(self.keys), generator=self.gen).tolist()
                self.round = [self.keys[j] for j in order]
            return self.round.pop()
        weights = torch.tensor([max(self.kl.get(k, 0.0), 0.0) for k in self.keys])
        if float(torch.rand((), generator=self.gen)) < self.explore or float(weights.sum()) <= 0:
            weights = torch.ones(len(self.keys))
        return self.keys[int(torch.multinomial(weights, 1, generator=self.gen))]

    def observe(self, index: int, kl: float) -> None:
        """The policy's KL to the champion (nats per token) measured on a sample of prompt
        ``index``: its group's weight under ``by_kl`` becomes the mean of this and the previous
        measurement (this one alone the first time)."""
        g = self.group_of[index]
        self.kl[g] = kl if g not in self.kl else 0.5 * (self.kl[g] + kl)


def sample_completions(plug: Policy, prompt_ids: list[list[int]], *, max_new_tokens: int,
                       temperature: float, seed: int, kind: str = "retain") -> list[Sample]:
    """One completion per prompt sampled by ``plug`` (eval mode, no gradient), as samples with
    reward 0 (empty completions left out), each in group ``{kind}/{position of its prompt}``, cut
    to the policy's ``max_seq_len``."""
    from torch.nn.utils import parametrize

    module = plug.module
    was_training = module.training
    module.eval()
    cached = parametrize.cached() if parametrize.is_parametrized(module) or any(
        parametrize.is_parametrized(m) for m in module.modules()) else contextlib.nullcontext()
    try:
        with cached:
            outs = plug.generate(prompt_ids, max_new_tokens=max_new_tokens,
                                 temperature=temperature, seed=seed)
    finally:
        module.train(was_training)
    samples = []
    for i, (ids, o) in enumerate(zip(prompt_ids, outs)):
        if not o.token_ids:
            continue
        s = Sample(list(ids), list(o.token_ids), list(o.logprobs), [], 0.0, kind,
                   f"{kind}/{i}", 0, temperature)
        _fit(s, plug.max_seq_len)
        samples.append(s)
    return samples


class AdaptiveCoef:
    """beta of the retain term: doubled after a step whose KL is above ``target``, halved below
    ``target / 2``, kept within [base, 1000 * base]; fixed at ``base`` when ``target`` is None."""

    def __init__(self, base: float, target: float | None):
        self.base, self.target, self.value = base, target, base

    def update(self, kl: float) -> float:
        if self.target is None or self.base == 0.0:
            return self.value
        if kl > self.target:
            self.value = min(self.value * 2.0, 1000.0 * self.base)
        elif kl < self.target / 2:
            self.value = max(self.value / 2.0, self.base)
        return self.value
