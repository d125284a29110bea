"""The benchmark suite runner: greedy answers on held-out tasks, checked and scored.

:func:`run_suite` asks a policy (any :class:`policy.base.Policy`, toy or Hugging Face: prompts go
through the policy's own tokenizer) for a greedy completion of every task's prompt (batched,
reproducible: no sampling), grades each answer with a checker — by default
:func:`tasks.toy.check`, the same function the rewards use, so benchmark and reward cannot
drift apart — and scores it so that a correct but bloated answer scores below a correct tight
one. It also counts the experts the generated tokens were routed to (for the collapse check). A
grade that raises (the sandbox could not start, died, or the answer broke the grader) fails that
task with the reason in its ``detail``; it never ends the suite.

:func:`build_suite` turns a :class:`~gating.config.SuiteConfig` into tasks and their checker:
the toy family's gate pool (split ``gate``: never the sealed set), HumanEval or your own JSONL
tasks, both graded in a sandbox (tasks/humaneval.py, tasks/jsonl_suite.py), drawn afresh for
each gate decision (:func:`draw_seed`). An instruct policy (a tokenizer with a chat template)
gets HumanEval and JSONL tasks as chat turns and is graded on the code in its reply
(:func:`uses_chat`, :func:`task_prompt_ids`). Each outcome carries its prompt's hash
(:func:`prompt_key`), the cluster of the paired statistics.

Deliberately left out: comparing two runs (gating/gates.py) and model loading (gating/gate.py).
"""

from __future__ import annotations

import hashlib
import logging
import time
from collections.abc import Callable
from typing import TYPE_CHECKING

from gating.config import SuiteConfig
from gating.records import SuiteResult, TaskOutcome
from runtime.progress import Progress
from tasks.toy import CheckResult, Task, check, generate_tasks

if TYPE_CHECKING:
    from policy.base import Policy

log = logging.getLogger(__name__)

Checker = Callable[[Task, str], CheckResult]


def task_score(passed: bool, completion_tokens: int, max_new_tokens: int, penalty: float) -> float:
    """``1 - penalty * min(1, tokens / max_new_tokens)`` if passed, else 0."""
    if not passed:
        return 0.0
    return 1.0 - penalty * min(1.0, completion_tokens / max_new_tokens)


def draw_seed(config: SuiteConfig, decision: int = 0) -> int:
    """Seed of the suite drawn for a model's ``decision``-th gate (``seed + decision`` when the
    suite is drawn per decision; ``seed`` when it is fixed)."""
    return config.seed + decision if config.draw == "per_decision" else config.seed


def build_suite(config: SuiteConfig, decision: int = 0) -> tuple[list[Task], Checker]:
    """Tasks and checker for ``config``: the toy gate pool (split ``gate``, never the sealed
    set), HumanEval or a JSONL file (both sandboxed), drawn with :func:`draw_seed`."""
    seed = draw_seed(config, decision)
    if config.kind == "toy":
        return generate_tasks(config.size, seed, "gate"), check
    if config.kind == "jsonl":
        from tasks.jsonl_suite import jsonl_suite

        if config.path is None:
            raise ValueError("gate.suite.path is required when gate.suite.kind is 'jsonl'")
        return jsonl_suite(path=config.path, size=config.size, seed=seed,
                           timeout_s=config.sandbox_timeout_s)
    from tasks.humaneval import humaneval_suite

    return humaneval_suite(size=config.size, seed=seed, timeout_s=config.sandbox_timeout_s)


def prompt_key(task: Task) -> str:
    """The cluster of a task in the paired statistics: a hash of the function it asks for when
    the task names one (``task.function``: variants of one function are not independent
    observations), else of its prompt text and turns."""
    function = getattr(task, "function", None)
    if function:
        return hashlib.sha256(b"function\0" + str(function).encode()).hexdigest()[:16]
    turns = getattr(task, "messages", ())
    h = hashlib.sha256(task.prompt.encode())
    for role, content in turns:
        h.update(b"\0" + role.encode() + b"\0" + content.encode())
    return h.hexdigest()[:16]


def prompt_room(max_seq_len: int, max_new_tokens: int) -> int:
    """Prompt tokens (bytes for the toy) that fit beside BOS and ``max_new_tokens`` in the
    model's context."""
    room = max_seq_len - 1 - max_new_tokens
    if room < 1:
        raise ValueError(f"max_new_tokens={max_new_tokens} leaves no room for a prompt under "
                         f"max_seq_len={max_seq_len}")
    return room


def fit_prompt(prompt: str, max_bytes: int) -> str:
    """The last ``max_bytes`` bytes of ``prompt`` (byte tokenizer): long prompts such as
    HumanEval's keep their end, where the completion starts, within the model's context."""
    raw = prompt.encode("utf-8")
    return prompt if len(raw) <= max_bytes else raw[-max_bytes:].decode("utf-8", errors="ignore")


def fit_prompt_ids(policy: Policy, prompt: str, room: int) -> list[int]:
    """The ids ``prompt`` is fed as, cut to its last ``room`` tokens (a leading BOS kept) so a
    long prompt keeps its end, where the completion starts. The toy cuts the text by bytes first
    (:func:`fit_prompt`), as it always has."""
    if policy.type == "toy":
        return policy.encode_prompt(fit_prompt(prompt, room))
    ids = policy.encode_prompt(prompt)
    if len(ids) <= room + 1:
        return ids
    bos = policy.tokenizer_info.bos_id
    return ids[:1] + ids[-room:] if bos is not None and ids[0] == bos else ids[-(room + 1):]


def uses_chat(policy: Policy, config: SuiteConfig) -> bool:
    """Whether ``policy`` gets the suite's prompts as chat turns: HumanEval or a JSONL suite,
    ``chat='auto'`` and a tokenizer with a chat template (never the toy, nor a tokenizer without
    one)."""
    return (config.kind in ("humaneval", "jsonl") and config.chat == "auto"
            and bool(getattr(policy, "has_chat_template", False)))


def _encode_turns(policy: Policy, turns: list[dict[str, str]]) -> list[int]:
    """Chat turns through the policy's chat template, the assistant turn opened."""
    if len(turns) == 1 and turns[0]["role"] == "user":
        return policy.encode_chat(turns[0]["content"])
    out = policy.tokenizer.apply_chat_template(turns, add_generation_prompt=True, tokenize=True)
    return list(out["input_ids"] if hasattr(out, "keys") else out)


def task_prompt_ids(policy: Policy, task: Task, room: int, *, chat: bool) -> list[int]:
    """The ids ``task`` is fed as: its prompt fitted to ``room`` (:func:`fit_prompt_ids`), or with
    ``chat`` its chat turns through the chat template (a JSONL task's messages, or the HumanEval
    chat turn tasks.humaneval.chat_prompt), their start cut only if they do not fit."""
    if not chat:
        return fit_prompt_ids(policy, task.prompt, room)
    messages = getattr(task, "messages", ())
    if messages:
        ids = _encode_turns(policy, [{"role": r, "content": c} for r, c in messages])
    else:
        from tasks.humaneval import chat_prompt

        ids = policy.encode_chat(chat_prompt(task.prompt))
    return ids if len(ids) <= room + 1 else ids[-(room + 1):]


def _count_experts(load: list[list[int]], routed: list[list[list[int]]]) -> None:
    """Add one generation's routing ``(tokens, layers, top_k)`` into ``load`` ``(layers, E)``."""
    for token in routed:
        for layer, experts in enumerate(token):
            for e in experts:
                load[layer][e] += 1


def _grade(checker: Checker, task: Task, answer: str, chat: bool) -> CheckResult:
    """``checker``'s verdict; a checker that raises (its sandbox could not start or died, the
    answer broke the grader) fails that task with the reason: one task's grade never ends the
    suite. Only ``Exception`` is caught: an interrupt still stops the gate."""
    try:
        return checker(task, answer, chat=True) if chat else checker(task, answer)
    except Exception as exc:  # any grader failure is this task's failure, with its reason
        log.warning("grading %s crashed: %s: %s", task.task_id, type(exc).__name__, exc)
        return CheckResult(passed=False, malformed=False, no_edit=False,
                           detail=f"grader crashed: {type(exc).__name__}: {str(exc)[:150]}")


def _sampled_passes(policy: Policy, checker: Checker, batch: list[Task], prompts: list[list[int]],
                    *, draws: range, temperature: float, seed: int, max_new_tokens: int,
                    chat: bool, stop: dict, per_row: bool = False) -> list[int]:
    """Per task of ``batch``: how many of the completions ``draws`` (draw ``j`` seeded by
    ``seed + j``) at ``temperature`` pass; ``per_row``: each task's draws from its own stream."""
    passed = [0] * len(batch)
    coupled = {"per_row": True} if per_row else {}
    for j in draws:
        gens = policy.generate(prompts, max_new_tokens=max_new_tokens, temperature=temperature,
                               top_p=1.0, seed=seed + j, **stop, **coupled)
        for k, (task, gen) in enumerate(zip(batch, gens, strict=True)):
            passed[k] += int(_grade(checker, task, gen.text, chat).passed)
    return passed


def _sample_seed(seed: int, start: int) -> int:
    """The seed of the samples of the batch that starts at task ``start``."""
    return seed + 7919 * (start + 1)


def _chat_stop(chat: bool) -> dict:
    if not chat:
        return {}
    from tasks.humaneval import reply_complete  # a chat reply is done once its code block closes

    return {"stop_when": reply_complete}


def run_suite(
    model: Policy,
    tasks: list[Task],
    *,
    max_new_tokens: int,
    seed: int,
    checker: Checker = check,
    token_penalty: float = 0.5,
    batch_size: int = 64,
    chat: bool = False,
    samples: int = 0,
    temperature: float = 0.8,
    label: str = "gate suite",
    per_row: bool = False,
) -> SuiteResult:
    """Greedy completions for ``tasks``, graded by ``checker`` and scored by length. ``model``:
    a policy (a bare toy ``MoETransformer`` is wrapped). ``chat``: prompts go in as chat turns
    (:func:`task_prompt_ids`), a reply stops once its code block is closed and the checker is
    called with ``chat=True``. ``samples``: that many more completions per task at
    ``temperature`` (seeded by ``seed`` and the sample's index), graded alike; each task records
    the share that passed. ``label`` names the progress line (which model, which look).
    ``per_row``: every task's samples come from its own seeded stream (an HF policy's
    :func:`policy.hf_generate.row_generators`), so two models' samples of one task are coupled."""
    from policy.loader import as_policy

    start = time.perf_counter()
    policy = as_policy(model)
    spec = policy.moe_spec
    load = [[0] * spec.n_experts for _ in range(spec.n_moe_layers)] if spec.is_moe else []
    room = prompt_room(policy.max_seq_len, max_new_tokens)
    outcomes: list[TaskOutcome] = []
    stop = _chat_stop(chat)  # the prose after a chat reply's code block is not scored
    progress = Progress(f"{label} ({len(tasks)} tasks)", total=len(tasks), unit="task")
    for i in range(0, len(tasks), batch_size):
        batch = tasks[i : i + batch_size]
        prompts = [task_prompt_ids(policy, t, room, chat=chat) for t in batch]
        gens = policy.generate(prompts, max_new_tokens=max_new_tokens, temperature=0.0, top_p=1.0,
                               seed=seed, **stop)
        passes = _sampled_passes(policy, checker, batch, prompts, draws=range(samples),
                                 temperature=temperature, seed=_sample_seed(seed, i),
                                 max_new_tokens=max_new_tokens, chat=chat, stop=stop,
                                 per_row=per_row)
        shares = [p / samples if samples else None for p in passes]
        for task, gen, share in zip(batch, gens, shares, strict=True):
            result = _grade(checker, task, gen.text, chat)
            if spec.is_moe:
                _count_experts(load, gen.routed_experts)
            n = len(gen.token_ids)
            outcomes.append(TaskOutcome(
                task_id=task.task_id, kind=task.kind, prompt_key=prompt_key(task),
                passed=result.passed,
                malformed=result.malformed, no_edit=result.no_edit, completion_tokens=n,
                score=task_score(result.passed, n, max_new_tokens, token_penalty),
                finish_reason=gen.finish_reason, answer=gen.text[:200], detail=result.detail[:200],
                token_ids=list(gen.token_ids), sampled_pass=share,
            ))
        progress.update(len(batch))  # once scored: a batch of a real model takes minutes
    progress.close()
    return SuiteResult(tasks=outcomes, expert_load=load, seconds=time.perf_counter() - start)


def extend_samples(model: Policy, tasks: list[Task], prior: SuiteResult, *, have: int,
                   samples: int, max_new_tokens: int, seed: int, checker: Checker = check,
                   batch_size: int = 64, chat: bool = False,
                   temperature: float = 0.8) -> SuiteResult:
    """``prior``, a :func:`run_suite` result of the same model on ``tasks`` with ``have``
    samples per task, extended to ``samples``: only draws ``have`` .. ``samples - 1`` are
    decoded, with the seeds :func:`run_suite` gives them, so the result is what
    ``run_suite(samples=samples)`` returns (the greedy answers are ``prior``'s)."""
    from policy.loader import as_policy

    if not 0 < have <= samples:
        raise ValueError(f"extend {have} samples to {samples}: need 0 < have <= samples")
    if [t.task_id for t in prior.tasks] != [t.task_id for t in tasks]:
        raise ValueError("the prior result was scored on other tasks")
    if missing := [t.task_id for t in prior.tasks if t.sampled_pass is None]:
        raise ValueError(f"{missing[0]}: the prior result has no samples")
    start = time.perf_counter()
    policy = as_policy(model)
    room = prompt_room(policy.max_seq_len, max_new_tokens)
    stop = _chat_stop(chat)
    outcomes: list[TaskOutcome] = []
    progress = Progress(f"{samples - have} more samples ({len(tasks)} tasks)", total=len(tasks),
                        unit="task")
    for i in range(0, len(tasks), batch_size):
        batch = tasks[i : i + batch_size]
        prompts = [task_prompt_ids(policy, t, room, chat=chat) for t in batch]
        passes = _sampled_passes(policy, checker, batch, prompts, draws=range(have, samples),
                                 temperature=temperature, seed=_sample_seed(seed, i),
                                 max_new_tokens=max_new_tokens, chat=chat, stop=stop)
        for old, p in zip(prior.tasks[i : i + batch_size], passes, strict=True):
            had = round(old.sampled_pass * have)  # type: ignore[operator]
            outcomes.append(old.model_copy(update={"sampled_pass": (had + p) / samples}))
        progress.update(len(batch))
    progress.close()
    return prior.model_copy(update={"tasks": outcomes,
                                    "seconds": prior.seconds + time.perf_counter() - start})
