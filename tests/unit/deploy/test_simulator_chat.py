"""Chat traffic from suite tasks: the simulator sends each task's messages (never its tests) to
/v1/chat/completions, grades the reply with the hidden asserts in the sandbox and reacts through
the signals API; correct replies are kept, wrong ones edited away and complained about. The
serving side is an in-memory HTTP transport standing in for a replica."""

import json
import re

import httpx

from simulation.signal_policy import SignalPolicy
from simulation.simulator import UserSimulator
from tasks.pyfuncs import BY_FAMILY, instances

RIGHT = "```python\ndef {name}(x):\n    return x + {k}\n```"
WRONG = "```python\ndef {name}(x):\n    return x - {k}\n```"


def _replica(requests: list, signals: list, empty_every: int = 0, cut_every: int = 0):
    def handle(request: httpx.Request) -> httpx.Response:
        body = json.loads(request.content)
        if request.url.path != "/v1/chat/completions":
            signals.append((request.url.path, body))
            return httpx.Response(202, json={"accepted": True})
        requests.append(body)
        m = re.search(r"function (\w+)\(x\) that returns x plus (\d+)",
                      body["messages"][0]["content"])
        name, k = m.group(1), int(m.group(2))
        reply = (RIGHT if k % 2 == 0 else WRONG).format(name=name, k=k)
        if empty_every and len(requests) % empty_every == 0:
            reply = "I'm sorry, I can't help with that." if k % 2 else ""
        finish = "length" if cut_every and len(requests) % cut_every == 0 else "stop"
        return httpx.Response(200, headers={"x-ratchet-created": "2026-11-25T12:00:00+00:00"},
                              json={"id": f"chatcmpl-{len(requests)}", "object": "chat.completion",
                                    "created": 1795000000, "model": "ratchet",
                                    "choices": [{"index": 0, "finish_reason": finish,
                                                 "message": {"role": "assistant",
                                                             "content": reply}}],
                                    "usage": {"prompt_tokens": 40, "completion_tokens": 20,
                                              "total_tokens": 60}})

    return httpx.MockTransport(handle)


def test_chat_traffic_is_graded_by_hidden_tests_and_answered_with_signals():
    tasks = [t.to_json() for t in instances(BY_FAMILY["add_const"], 12, seed=0)]
    requests, signals = [], []
    sim = UserSimulator(urls=["http://replica"], api_key="k", speed=1e6, seed=1, tasks=tasks,
                        max_tokens=64, temperature=0.7,
                        policy=SignalPolicy(long_tokens=64, p_neutral_followup=0.0))
    transport = _replica(requests, signals)
    sim._client = httpx.Client(transport=transport)
    sim._scheduler._client = httpx.Client(transport=transport)
    try:
        stats = sim.run_round(24, concurrency=1)
        assert sim.drain(30)
    finally:
        sim.close()
    assert stats.requests == 24 and stats.errors == 0
    prompts = {t["prompt"]: t for t in tasks}
    right = [int(re.search(r"plus (\d+)", b["messages"][0]["content"]).group(1)) % 2 == 0
             for b in requests]
    for body in requests:
        assert set(body) >= {"messages", "max_tokens", "temperature", "seed"}
        assert body["max_tokens"] == 64 and body["temperature"] == 0.7
        assert body["messages"][0]["content"] in prompts
        assert "assert" not in json.dumps(body)  # the oracle never leaves the user
    assert stats.pass_rate == sum(right) / len(right)
    assert 0 < stats.pass_rate < 1
    # kept vs edited away: mean 600 s persistence follows the verdict
    assert stats.edit_persistence > 0.3
    edits = [b for p, b in signals if p == "/v1/edits"]
    followups = [b for p, b in signals if p == "/v1/followups"]
    assert len(edits) == 4 * 24
    by_id = {f"chatcmpl-{i + 1}": ok for i, ok in enumerate(right)}
    assert all(not by_id[f["response_id"]] for f in followups if f["dissatisfied"])
    assert any(f["dissatisfied"] for f in followups)


def test_an_empty_or_refused_reply_gets_no_persistence_as_from_a_real_editor():
    tasks = [t.to_json() for t in instances(BY_FAMILY["add_const"], 12, seed=0)]
    requests, signals = [], []
    sim = UserSimulator(urls=["http://replica"], api_key="k", speed=1e6, seed=1, tasks=tasks,
                        max_tokens=64, policy=SignalPolicy(p_feedback=1.0))
    transport = _replica(requests, signals, empty_every=3)
    sim._client = httpx.Client(transport=transport)
    sim._scheduler._client = httpx.Client(transport=transport)
    try:
        sim.run_round(12, concurrency=1)
        assert sim.drain(30)
    finally:
        sim.close()
    silent = {f"chatcmpl-{i}" for i in range(3, 13, 3)}  # the 4 empty or refused replies
    edited = {b["response_id"] for p, b in signals if p == "/v1/edits"}
    assert edited == {f"chatcmpl-{i}" for i in range(1, 13)} - silent
    rated = {b["response_id"]: b["label"] for p, b in signals if p == "/v1/feedback"}
    assert {rated[r] for r in silent} <= {"reject", "accept"} and silent <= set(rated)


def _sent(rounds: list[int | None], seed: int = 3) -> list[list[dict]]:
    """The request bodies of each round; ``None``: the next round as it comes, ``k``: round k
    drawn by ``start_round(k)``."""
    tasks = [t.to_json() for t in instances(BY_FAMILY["add_const"], 12, seed=0)]
    sim = UserSimulator(urls=["http://replica"], api_key="k", speed=1e6, seed=seed, tasks=tasks)
    requests, signals, sent = [], [], []
    transport = _replica(requests, signals)
    sim._client = httpx.Client(transport=transport)
    sim._scheduler._client = httpx.Client(transport=transport)
    try:
        for k in rounds:
            if k is not None:
                sim.start_round(k)
            start = len(requests)
            sim.run_round(6, concurrency=1)
            sent.append(requests[start:])
        assert sim.drain(30)
    finally:
        sim.close()
    return sent


def test_a_round_started_at_k_sends_what_an_uninterrupted_run_sends():
    whole = _sent([0, 1, 2])
    assert _sent([2]) == whole[2:]  # a run resumed at its third round
    assert _sent([None]) == whole[:1]  # round 0 is the first round of a plain simulator
    assert whole[1] != whole[2] and _sent([0, 1, 2], seed=4) != whole


def test_chat_requests_ask_to_end_after_the_code_block_and_cut_replies_are_counted():
    """As an IDE: each chat request asks the reply to end once its code block is closed; the
    round reports the share of replies the server still cut at max_tokens."""
    tasks = [t.to_json() for t in instances(BY_FAMILY["add_const"], 12, seed=0)]
    requests, signals = [], []
    sim = UserSimulator(urls=["http://replica"], api_key="k", speed=1e6, seed=1, tasks=tasks)
    transport = _replica(requests, signals, cut_every=4)
    sim._client = httpx.Client(transport=transport)
    sim._scheduler._client = httpx.Client(transport=transport)
    try:
        stats = sim.run_round(12, concurrency=1)
        assert sim.drain(30)
    finally:
        sim.close()
    assert all(body["stop_after_code_block"] is True for body in requests)
    assert stats.length_cut_rate == 3 / 12
