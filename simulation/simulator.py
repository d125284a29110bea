"""A simulated user population: sends TRAIN-split tasks to the fleet and emits delayed signals.

``UserSimulator.run_round(n)`` sends ``n`` tasks (``tasks.toy.generate_tasks(..., "train")``)
round-robin over the given URLs (replicas or a router), judges each answer with
``tasks.toy.check``, and lets simulation/signal_policy.py decide the user's reaction. The reaction
goes
where an IDE plugin's would: the signals API (deploy/replica/routes/signals.py) of the URL that
served the
completion, over HTTP with a client API key. Each signal's ``created`` is the completion's
``created`` + its delay; it is *posted* ``delay / speed`` wall seconds after the answer arrived
(``speed=600`` makes ten event-minutes cost one second), by a few sender threads. Edits are sent
as text (``edited_texts``: the code served, ``rewards.answers.code_of``, which is what a user
inserts, with a share of its characters rewritten so that the API's persistence equals the
policy's planned score, to within one character). An empty or refused answer gets no
persistence at all, as from a real editor: nothing of it was inserted (its other signals, a
complaint or a reject, still go). ``drain()`` waits until every signal was posted.

With ``tasks=`` (suite tasks in the shared JSONL format, tasks/pyfuncs.py, e.g. a train-traffic
pool) the users are chat users instead: each request is the task's ``messages`` sent to
``/v1/chat/completions``, the reply is graded by running the task's hidden asserts on its code in
the sandbox (``tasks.pyfuncs.grade``), and the verdict drives the same signal policy (keep or edit
the code, complain in a follow-up, sometimes rate it). The verdict stays here: only the signals
reach the serving side, so the trainer never sees the tests.

Deliberately left out: the signal policy itself (pure, in simulation/signal_policy.py), retries of
refused signals (counted in ``signals_failed``), and reading anything back from Kafka.
"""

from __future__ import annotations

import heapq
import itertools
import logging
import random
import statistics
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Self

import httpx

from rewards.answers import answer_kind, code_of
from runtime.progress import Progress
from simulation.signal_policy import Outcome, PlannedSignal, SignalPolicy, plan_signals
from tasks.toy import Task, check, generate_tasks

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class RoundStats:
    """What one round of traffic looked like, from the users' side."""

    requests: int
    errors: int
    pass_rate: float
    edit_persistence: float
    """Mean edit-persistence score at 600 s."""
    dissatisfied_rate: float
    mean_latency_ms: float
    """Mean client-observed request latency (wall clock, queueing included; not judged)."""
    mean_completion_tokens: float
    length_cut_rate: float
    """Share of replies cut at ``max_tokens`` (finish_reason ``length``): replies that never
    finished, whose tokens and length penalty describe a cap rather than the model's answer."""
    signals_scheduled: int
    standard_errors: dict[str, float] = field(default_factory=dict)
    """Standard error of each mean above (``pass_rate``, ``edit_persistence``, …), across the
    round's requests: what a plot's interval is drawn from."""


@dataclass(frozen=True)
class _Served:
    task: Task | dict
    response: dict
    latency_ms: float
    arrived: float
    """time.monotonic() when the answer arrived; signals are due relative to it."""
    url: str
    """Where the completion was served (replica or router); its signals go there too."""


class _SignalScheduler:
    """Posts signals to the signals API at their due wall time, in due order, from ``senders``
    threads (a signal carries its own ``created``, so two in flight at once need no order).

    Each signal goes to the URL (replica or router) that served its completion, with the client
    API key, and carries ``created`` = the completion's time + the signal's delay: in simulated
    time the user acts at that moment (the replica accepts it within its ``signal_max_skew_s``
    and stamps the Kafka record with it).
    """

    def __init__(self, api_key: str, timeout_s: float, senders: int = 4) -> None:
        self._client = httpx.Client(
            timeout=timeout_s, headers={"Authorization": f"Bearer {api_key}"}
        )
        self._heap: list[tuple[float, int, tuple[str, dict]]] = []
        self._seq = itertools.count()
        self._cond = threading.Condition()
        self._stop = False
        self._sending = 0
        self.sent = 0
        self.failed: list[tuple[str, int, str]] = []
        """(path, status, body) of every signal the API refused (status 0: unreachable)."""
        self._threads = [
            threading.Thread(target=self._run, name=f"signal-sender-{i}", daemon=True)
            for i in range(senders)
        ]
        for thread in self._threads:
            thread.start()

    def schedule(self, due: float, url: str, body: dict) -> None:
        with self._cond:
            heapq.heappush(self._heap, (due, next(self._seq), (url, body)))
            self._cond.notify()

    def _run(self) -> None:
        while True:
            with self._cond:
                while not self._stop and (not self._heap or self._heap[0][0] > time.monotonic()):
                    timeout = self._heap[0][0] - time.monotonic() if self._heap else None
                    self._cond.wait(timeout)
                if self._stop and not self._heap:
                    return
                _, _, (url, body) = heapq.heappop(self._heap)
                self._sending += 1
            ok = self._post(url, body)
            with self._cond:
                self._sending -= 1
                self.sent += ok
                self._cond.notify_all()

    def _post(self, url: str, body: dict) -> bool:
        path = _PATHS[body.pop("_kind")]
        try:
            resp = self._client.post(f"{url}{path}", json=body)
        except httpx.TransportError as exc:
            self.failed.append((path, 0, repr(exc)))
            return False
        if resp.status_code != 202:
            self.failed.append((path, resp.status_code, resp.text[:500]))
            return False
        return True

    def drain(self, timeout_s: float | None) -> bool:
        deadline = None if timeout_s is None else time.monotonic() + timeout_s
        with self._cond:
            while self._heap or self._sending:
                left = None if deadline is None else deadline - time.monotonic()
                if left is not None and left <= 0:
                    return False
                self._cond.wait(0.05 if left is None else min(left, 0.05))
        return True

    def close(self) -> None:
        with self._cond:
            self._stop = True
            self._cond.notify_all()
        for thread in self._threads:
            thread.join()
        self._client.close()


SIMULATED_SKEW_S = 900.0
"""How far a compressed-time signal's ``created`` can run ahead of the wall clock: the longest
delay (the 600 s edit checkpoint, posted about a second after its completion at speed 600) plus a
margin. Replicas (``signal_max_skew_s``) and ingest (``parse.max_future_skew_s``) that take this
simulator's traffic must allow it; production keeps their tighter defaults."""

_PATHS = {"edit_persistence": "/v1/edits", "followup": "/v1/followups", "feedback": "/v1/feedback"}


class UserSimulator:
    """Users sending tasks to ``urls`` and reacting through the signals API (with ``api_key``);
    randomness from ``seed``."""

    def __init__(
        self,
        *,
        urls: list[str],
        api_key: str,
        speed: float,
        seed: int,
        policy: SignalPolicy | None = None,
        max_tokens: int = 32,
        temperature: float = 1.0,
        n_users: int = 50,
        request_timeout_s: float = 60.0,
        tasks: list[dict] | None = None,
        stop_after_code_block: bool = True,
    ) -> None:
        if not urls:
            raise ValueError("urls must not be empty")
        if speed <= 0:
            raise ValueError(f"speed must be > 0, got {speed}")
        self.urls = list(urls)
        self.speed = speed
        self.seed = seed
        self.policy = policy or SignalPolicy()
        self.max_tokens = max_tokens
        self.temperature = temperature
        self.n_users = n_users
        self.stop_after_code_block = stop_after_code_block
        if tasks is not None and not tasks:
            raise ValueError("tasks must not be empty (None = toy tasks)")
        self.tasks = tasks
        self._rng = random.Random(seed)
        self._round = 0
        self._client = httpx.Client(timeout=request_timeout_s)
        self._scheduler = _SignalScheduler(api_key, request_timeout_s)

    def start_round(self, k: int) -> None:
        """Draw the next round's randomness (tasks, request seeds, users, signals) from
        ``(seed, k)`` alone, whatever ran before, and number it ``k + 1``: a run resumed at round
        ``k`` sends what an uninterrupted one would. Round 0 draws from ``seed``, as the first
        round of a simulator that never calls this does."""
        if k < 0:
            raise ValueError(f"k must be >= 0, got {k}")
        self._rng = random.Random(self.seed if k == 0 else f"{self.seed}:{k}")
        self._round = k

    def run_round(self, n_requests: int, concurrency: int = 4) -> RoundStats:
        """Send ``n_requests`` train tasks with ``concurrency`` callers; schedule their signals."""
        self._round += 1
        if self.tasks is None:
            tasks = generate_tasks(n_requests, seed=self._rng.randrange(2**31), split="train")
        else:
            tasks = [self._rng.choice(self.tasks) for _ in range(n_requests)]
        seeds = [self._rng.randrange(2**31) for _ in tasks]
        users = [f"user-{self._rng.randrange(self.n_users)}" for _ in tasks]
        results = []
        with ThreadPoolExecutor(max_workers=concurrency) as pool, \
                Progress("traffic", total=n_requests, unit="req") as progress:
            for result in pool.map(self._call, range(n_requests), tasks, seeds, users):
                results.append(result)
                progress.update()
        served = [r for r in results if r is not None]
        return self._judge(served, errors=n_requests - len(served))

    def drain(self, timeout_s: float | None = None) -> bool:
        """Wait until every scheduled signal has been sent; False on timeout."""
        return self._scheduler.drain(timeout_s)

    @property
    def signals_sent(self) -> int:
        """Signals the API accepted (202)."""
        return self._scheduler.sent

    @property
    def signals_failed(self) -> list[tuple[str, int, str]]:
        """(path, status, body) of each signal the API refused; status 0: unreachable."""
        return list(self._scheduler.failed)

    def close(self) -> None:
        """Send what is still scheduled (waiting for it), then close the HTTP clients."""
        self._scheduler.drain(None)
        self._scheduler.close()
        self._client.close()

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- one request --------------------------------------------------------------------------
    def _call(self, i: int, task: Task | dict, seed: int, user: str) -> _Served | None:
        """One OpenAI request (``/v1/completions`` for a toy task, ``/v1/chat/completions`` for
        a suite task); the answer in the fields ``_judge`` reads."""
        url = self.urls[i % len(self.urls)]
        body = {
            "max_tokens": self.max_tokens,
            "temperature": self.temperature,
            "top_p": 1.0,
            "seed": seed,
            "user": user,
        }
        if isinstance(task, dict):
            route = "/v1/chat/completions"
            body["messages"] = task.get("messages") or [{"role": "user",
                                                         "content": task["prompt"]}]
            body["metadata"] = {"task_kind": task.get("family") or "suite"}
            if self.stop_after_code_block:  # an IDE inserts the block; the prose after it is noise
                body["stop_after_code_block"] = True
        else:
            route = "/v1/completions"
            body["prompt"] = task.prompt
            body["metadata"] = {"task_kind": task.kind}
        headers = {"X-Conversation-Id": f"conv-{self.seed}-{self._round}-{i}"}
        start = time.perf_counter()
        try:
            resp = self._client.post(f"{url}{route}", json=body, headers=headers)
        except httpx.TransportError:
            return None
        if resp.status_code != 200:
            return None
        latency_ms = (time.perf_counter() - start) * 1000.0
        data = resp.json()
        created = resp.headers.get("x-ratchet-created")
        choice = data["choices"][0]
        answer = {
            "id": data["id"],
            "text": choice["message"]["content"] if "message" in choice else choice["text"],
            "latency_ms": latency_ms,
            "usage": {"output_tokens": data["usage"]["completion_tokens"]},
            "finish_reason": choice.get("finish_reason"),
            "created": created or datetime.fromtimestamp(data["created"], UTC).isoformat(),
        }
        return _Served(task, answer, latency_ms, time.monotonic(), url)

    # -- judging and scheduling ---------------------------------------------------------------
    def _judge(self, served: list[_Served], errors: int) -> RoundStats:
        passed, persist, dissatisfied, scheduled = [], [], [], 0
        for s in served:
            text = _text(s.response)
            result = _check(s.task, text)
            outcome = Outcome(
                result.passed,
                result.malformed,
                result.no_edit,
                s.response.get("latency_ms", s.latency_ms),
                _output_tokens(s.response),
            )
            plan = plan_signals(outcome, self.policy, self._rng)
            code = code_of(text).strip() if answer_kind(text) == "code" else ""
            if not code:  # nothing to insert: a real client reports no persistence
                plan = [p for p in plan if p.kind != "edit_persistence"]
            created = _created(s.response)
            edits = edited_texts(code, {p.window_s: p.score for p in plan if p.window_s}, self._rng)
            for signal in plan:
                body = _body(signal, s.response["id"], created, edits.get(signal.window_s))
                self._scheduler.schedule(s.arrived + signal.delay_s / self.speed, s.url, body)
            scheduled += len(plan)
            passed.append(result.passed)
            persist.append(edits[600][1] if 600 in edits else 0.0)  # nothing inserted, none kept
            dissatisfied.append(any(p.dissatisfied for p in plan if p.kind == "followup"))
        samples = {
            "pass_rate": passed, "edit_persistence": persist,
            "dissatisfied_rate": dissatisfied,
            "mean_latency_ms": [s.latency_ms for s in served],
            "mean_completion_tokens": [_output_tokens(s.response) for s in served],
            "length_cut_rate": [s.response.get("finish_reason") == "length" for s in served],
        }
        return RoundStats(
            requests=len(served) + errors,
            errors=errors,
            **{name: _mean(values) for name, values in samples.items()},
            signals_scheduled=scheduled,
            standard_errors={name: _sem(values) for name, values in samples.items()},
        )


def _check(task: Task | dict, text: str):
    """The user's own verdict: the toy checker, or a suite task's hidden asserts in the sandbox."""
    if isinstance(task, dict):
        from tasks.pyfuncs import grade

        return grade(task, text)
    return check(task, text)


def _mean(values: list) -> float:
    return float(statistics.fmean(values)) if values else 0.0


def _sem(values: list) -> float:
    """Standard error of the mean (0 for fewer than two values)."""
    if len(values) < 2:
        return 0.0
    return float(statistics.stdev(float(v) for v in values) / len(values) ** 0.5)


def _text(response: dict) -> str:
    """The served text: ratchet's own shape (``text``) or OpenAI's (``choices[0].text``)."""
    if "text" in response:
        return response["text"]
    choice = response["choices"][0]
    return choice.get("text") or (choice.get("message") or {}).get("content") or ""


def _output_tokens(response: dict) -> int:
    usage = response["usage"]
    return int(usage.get("output_tokens", usage.get("completion_tokens", 0)))


def _created(response: dict) -> datetime:
    created = response["created"]
    if isinstance(created, int | float):  # OpenAI: whole seconds since the epoch
        return datetime.fromtimestamp(created, UTC)
    return datetime.fromisoformat(created)


def edited_texts(
    served: str, scores: dict[int, float], rng: random.Random
) -> dict[int, tuple[str, float]]:
    """Per window, the text as the user left it and its persistence (rapidfuzz, as the API).

    Edits accumulate: the characters rewritten by a window stay rewritten later. A share ``1 -
    score`` of the characters (rounded) is replaced by characters absent from ``served``, so the
    normalised Levenshtein distance is exactly that share. An empty response cannot be edited
    into a given score: it gets no entry (the planned score is sent instead).
    """
    from rapidfuzz.distance import Levenshtein

    if not served:
        return {}
    fresh = [c for c in _REPLACEMENTS if c not in served] or ["\u2063"]
    order = list(range(len(served)))
    rng.shuffle(order)
    out = {}
    for window, score in sorted(scores.items()):
        k = round((1.0 - score) * len(served))
        chars = list(served)
        for i in order[:k]:
            chars[i] = fresh[i % len(fresh)]
        text = "".join(chars)
        out[window] = (text, float(Levenshtein.normalized_similarity(served, text)))
    return out


_REPLACEMENTS = "qzjxkvwQZJXKVW#@$~^|"  # no backtick: an edit never makes a fence


def _body(
    signal: PlannedSignal, response_id: str, created: datetime, edit: tuple[str, float] | None
) -> dict:
    common = {
        "_kind": signal.kind,
        "response_id": response_id,
        "created": (created + timedelta(seconds=signal.delay_s)).isoformat(),
    }
    if signal.kind == "edit_persistence":
        if edit is None:
            return {**common, "window_s": signal.window_s, "score": signal.score}
        return {**common, "window_s": signal.window_s, "text": edit[0]}
    if signal.kind == "followup":
        return {**common, "text": signal.text, "dissatisfied": signal.dissatisfied}
    return {**common, "label": signal.label}
