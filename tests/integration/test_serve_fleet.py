"""A 2-replica fleet from champions registered in a real MLflow server, logging to a real broker.

Completions arrive in Kafka with the sampled tokens' logprobs (checked against a fresh forward
pass), a rolling reload under load drops no request, and the simulator's delayed signals land in
Kafka with event times = completion time + delay.
"""

from __future__ import annotations

import threading
import time
import uuid
from datetime import datetime, timedelta
from pathlib import Path

import httpx
import pytest
import torch

from deploy.fleet.fleet import Fleet
from deploy.replica.toy_models import build_untrained, register_untrained
from ingest.kafka_io import high_watermarks, read_range
from ingest.schema import TOPICS, Completion, parse_event
from policy.toy.tokenizer import EOS

pytestmark = [pytest.mark.integration, pytest.mark.slow]

TOKEN = "fleet-test-token"


def read_events(
    bootstrap: str, topic: str, response_ids: set[str], *, expect: int, timeout_s: float = 30.0
) -> list:
    """Events of ``topic`` whose response_id is in ``response_ids``; waits for ``expect``."""
    deadline = time.monotonic() + timeout_s
    while True:
        events = []
        for partition, hw in high_watermarks(bootstrap, topic).items():
            for _, _, value, _ in read_range(bootstrap, topic, partition, 0, hw):
                try:  # the session broker also holds other tests' deliberately bad events
                    event = parse_event(value)
                except ValueError:
                    continue
                if event.response_id in response_ids:
                    events.append(event)
        if len(events) >= expect or time.monotonic() > deadline:
            return events
        time.sleep(0.5)


@pytest.fixture(scope="module")
def models(mlflow_server, tmp_path_factory):
    from runtime import registry

    name = f"deploy-fleet-{uuid.uuid4().hex[:6]}"
    work = tmp_path_factory.mktemp("deploy-models")
    v1 = register_untrained(mlflow_server.uri, name, seed=1, workdir=work)
    v2 = register_untrained(mlflow_server.uri, name, seed=2, workdir=work)
    registry.set_alias(mlflow_server.uri, name, registry.CHAMPION, v1)
    return name, v1, v2, work


@pytest.fixture(scope="module")
def fleet(models, mlflow_server, broker, tmp_path_factory):
    name, _, _, _ = models
    with Fleet.start(
        n_replicas=2,
        tracking_uri=mlflow_server.uri,
        model_name=name,
        bootstrap=broker.bootstrap,
        workdir=tmp_path_factory.mktemp("fleet"),
        admin_token=TOKEN,
        signal_max_skew_s=900.0,
    ) as f:
        yield f


def complete(url: str, i: int, **kw) -> httpx.Response:
    body = {
        "prompt": "# evaluate\n12+7 = ",
        "max_tokens": 8,
        "temperature": 1.0,
        "seed": i,
        "user": f"user{i % 3}",
        "metadata": {"task_kind": "arith"},
        **kw,
    }
    headers = {"X-Conversation-Id": f"c{i}"}
    return httpx.post(f"{url}/v1/completions", json=body, headers=headers, timeout=60)


def served_version(r: httpx.Response) -> int:
    return int(r.json()["system_fingerprint"].removeprefix("ratchet-v"))


def test_completions_are_logged_with_sampled_logprobs(fleet, models, broker):
    from policy.toy.generate import encode_prompt

    name, v1, _, work = models
    assert fleet.versions() == {"replica-0": v1, "replica-1": v1}
    responses = [complete(fleet.urls[i % 2], i) for i in range(6)]
    assert {r.headers["x-ratchet-replica"] for r in responses} == {"replica-0", "replica-1"}
    ids = {r.json()["id"] for r in responses}
    events = read_events(broker.bootstrap, TOPICS["completion"], ids, expect=6)
    assert len(events) == 6
    by_id = {e.response_id: e for e in events}
    for i, resp in enumerate(responses):
        r = resp.json()
        e: Completion = by_id[r["id"]]
        n = len(e.response_token_ids)
        assert n == len(e.response_logprobs)
        eos = 1 if e.response_token_ids[-1] == EOS else 0  # logged, not shown or counted
        assert r["usage"]["completion_tokens"] == n - eos
        assert len(e.routed_experts) == n and e.model_version == v1 == served_version(resp)
        assert e.response_text == r["choices"][0]["text"] and e.model_name == name
        assert e.user_hash not in {"user0", "user1", "user2"} and len(e.user_hash) == 32
        assert e.event_time == datetime.fromisoformat(resp.headers["x-ratchet-created"])
        assert e.conversation_id == f"c{i}" and e.task_kind == "arith"
        assert e.prompt_token_ids == encode_prompt(e.prompt)
        assert len(e.prompt_routed_experts) == len(e.prompt_token_ids)
        assert e.routed_experts_source == "engine"
        assert 0 < e.time_to_first_token_ms <= e.latency_ms
    _check_logprobs_against_forward(events[0], work)


def _check_logprobs_against_forward(event: Completion, work: Path) -> None:
    """The logged logprobs are log pi(token) at temperature 1 under the served weights."""
    from policy.toy.generate import encode_prompt
    from policy.toy.model import sequence_logprobs

    model = build_untrained(1)  # version 1 was built from seed 1
    ids = encode_prompt(event.prompt) + event.response_token_ids
    tokens = torch.tensor([ids])
    with torch.no_grad():
        out = model(tokens[:, :-1])
    lp = sequence_logprobs(out.logits, tokens[:, 1:])[0, -len(event.response_token_ids) :]
    assert torch.allclose(lp, torch.tensor(event.response_logprobs), atol=1e-4)
    # the served routing (prompt positions, then each sampled token's position) is the routing a
    # teacher-forced pass over the same ids computes
    p = len(event.prompt_token_ids)
    routes = out.routed_experts[0].tolist()
    assert event.prompt_routed_experts == routes[:p]
    assert event.routed_experts == routes[p - 1 :]


def test_simulator_signals_arrive_in_event_time(fleet, broker):
    from simulation.simulator import UserSimulator

    key = fleet.create_api_key("fleet-test-simulator")
    with UserSimulator(urls=fleet.urls, api_key=key, speed=600.0, seed=5) as sim:
        start = time.monotonic()
        stats = sim.run_round(8, concurrency=4)
        assert sim.drain(timeout_s=30)
        drained = time.monotonic() - start
        assert sim.signals_failed == [] and sim.signals_sent == stats.signals_scheduled
    assert stats.requests == 8 and stats.errors == 0
    assert 0.0 <= stats.pass_rate <= 1.0 and stats.mean_completion_tokens > 0
    assert drained >= 600 / 600.0 * 0.9  # the 600 s window costs about a second at speed 600
    completions = _completions_since(broker.bootstrap, stats)
    ids = {c.response_id for c in completions}
    signals = []
    for kind in ("edit_persistence", "followup", "feedback"):
        signals += read_events(broker.bootstrap, TOPICS[kind], ids, expect=1, timeout_s=5)
    assert len(signals) == stats.signals_scheduled
    created = {c.response_id: c.event_time for c in completions}
    edits = [s for s in signals if s.kind == "edit_persistence"]
    assert len(edits) == 4 * 8
    for s in edits:
        assert s.event_time == created[s.response_id] + timedelta(seconds=s.window_s)
    at_600 = [s.score for s in edits if s.window_s == 600]
    assert abs(sum(at_600) / len(at_600) - stats.edit_persistence) < 1e-9


def _completions_since(bootstrap: str, stats) -> list[Completion]:
    """The simulator's completions: the last ``stats.requests`` with conversation ids conv-5-*."""
    topic = TOPICS["completion"]
    out = []
    for partition, hw in high_watermarks(bootstrap, topic).items():
        for _, _, value, _ in read_range(bootstrap, topic, partition, 0, hw):
            try:  # the session broker also holds other tests' deliberately bad events
                event = parse_event(value)
            except ValueError:
                continue
            if event.conversation_id.startswith("conv-5-1-"):
                out.append(event)
    assert len(out) == stats.requests
    return out


def test_rolling_reload_drops_no_request(fleet, models):
    _, v1, v2, _ = models
    failures, versions, stop = [], [], threading.Event()

    def load(worker: int) -> None:
        i = 0
        while not stop.is_set():
            try:
                r = complete(fleet.urls[(worker + i) % 2], 1000 * worker + i, max_tokens=4)
            except httpx.HTTPError as exc:
                failures.append(repr(exc))
            else:
                if r.status_code != 200:
                    failures.append(r.status_code)
                else:
                    versions.append(served_version(r))
            i += 1

    threads = [threading.Thread(target=load, args=(w,)) for w in range(3)]
    for t in threads:
        t.start()
    time.sleep(1.0)
    results = fleet.rolling_reload(v2)
    time.sleep(1.0)
    stop.set()
    for t in threads:
        t.join()
    assert failures == []
    assert [r.version for r in results] == [v2, v2]
    assert fleet.versions() == {"replica-0": v2, "replica-1": v2}
    assert v1 in versions and v2 in versions
    assert versions[-1] == v2
