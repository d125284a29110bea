"""Real traffic through the router: stable fleet (v1) and canary fleet (v2) behind one router,
the user simulator sending through it, ingest (Beam) turning the logs into reward rows, and the
rollout's data sources reading both sides of the same window.
"""

from __future__ import annotations

import uuid
from datetime import UTC, datetime

import httpx
import pytest

from deploy.fleet.fleet import Fleet, RouterProcess
from deploy.fleet.judge import JudgeConfig, judge
from deploy.fleet.rollout import RewardSpans
from deploy.fleet.router import bucket
from deploy.replica.toy_models import register_untrained
from ingest.config import IngestConfig, JoinConfig, ParseConfig
from simulation.simulator import SIMULATED_SKEW_S, UserSimulator

pytestmark = [pytest.mark.integration, pytest.mark.slow]

TOKEN = "router-e2e-token"


@pytest.fixture(scope="module")
def deployment(mlflow_server, broker, tmp_path_factory):
    work = tmp_path_factory.mktemp("router-e2e")
    name = f"deploy-e2e-{uuid.uuid4().hex[:6]}"
    v1 = register_untrained(mlflow_server.uri, name, seed=1, workdir=work)
    v2 = register_untrained(mlflow_server.uri, name, seed=2, workdir=work)
    common = dict(
        n_replicas=1,
        tracking_uri=mlflow_server.uri,
        model_name=name,
        bootstrap=broker.bootstrap,
        admin_token=TOKEN,
        api_keys_path=work / "api_keys.json",
        signal_max_skew_s=SIMULATED_SKEW_S,
        behind_router=True,
    )
    with (
        Fleet.start(**common, version=v1, workdir=work / "stable", name="stable") as stable,
        Fleet.start(**common, version=v2, workdir=work / "canary", name="canary") as canary,
        RouterProcess.start(
            stable_urls=stable.urls,
            canary_urls=canary.urls,
            admin_token=TOKEN,
            workdir=work / "router",
            canary_weight=0.5,
        ) as router,
    ):
        yield name, v1, v2, router, work, stable


def test_split_is_by_weight_and_sticky(deployment):
    _, v1, v2, router, _, _ = deployment
    seen: dict[str, set[int]] = {}
    for i in range(30):
        conv = f"sticky-{i}"
        for _ in range(2):
            r = httpx.post(
                f"{router.url}/v1/completions",
                timeout=60,
                json={"prompt": "1+1 = ", "max_tokens": 2, "conversation_id": conv, "user_id": "u"},
            )
            assert r.status_code == 200
            expected = "canary" if bucket(conv) < 0.5 else "stable"
            assert r.headers["x-ratchet-arm"] == expected
            fingerprint = r.json()["system_fingerprint"]
            seen.setdefault(conv, set()).add(int(fingerprint.removeprefix("ratchet-v")))
    assert all(len(v) == 1 for v in seen.values())  # a conversation stays on one version
    by_arm = {v.pop() for v in seen.values()}
    assert by_arm == {v1, v2}


def test_both_sides_of_a_window_are_measured(deployment, broker):
    from ingest.pipeline import run_span

    name, v1, v2, router, work, stable = deployment
    start = datetime.now(UTC)
    key = stable.create_api_key("e2e-simulator")
    with UserSimulator(urls=[router.url], api_key=key, speed=600.0, seed=9) as sim:
        stats = sim.run_round(40, concurrency=4)
        assert sim.drain(timeout_s=60)
    end = datetime.now(UTC)
    assert stats.errors == 0
    serving = router.client().serving(start, end)
    assert serving["stable"].requests + serving["canary"].requests == 40
    assert serving["stable"].errors == serving["canary"].errors == 0
    assert 5 <= serving["canary"].requests <= 35

    result = run_span(
        bootstrap=broker.bootstrap,
        group_id=f"e2e-{uuid.uuid4().hex[:6]}",
        output_root=work / "spans",
        drain=True,
        # the other tests' completions got no signals: finalise them at the drain rather than
        # keep them pending (the drain rule is tests/integration/test_ingest_drain_open_windows.py)
        config=IngestConfig(parse=ParseConfig(max_future_skew_s=SIMULATED_SKEW_S),
                            join=JoinConfig(open_at_drain="neutral")),
    )
    assert result.rows >= 40
    spans = RewardSpans(work / "spans", model_name=name, horizon_s=1800.0)
    assert spans.closed_until() is not None and spans.closed_until() >= end
    stable, canary = spans.product(start, end, v1), spans.product(start, end, v2)
    assert len(stable.dissatisfied) == serving["stable"].requests
    assert len(canary.dissatisfied) == serving["canary"].requests
    assert len(stable.edit_persistence) == serving["stable"].requests  # all 4 windows arrived
    # each row records the arm the router chose for it (the header it forwarded to the replica)
    import pyarrow as pa
    import pyarrow.compute as pc

    from ingest.spans import read_spans

    rows = read_spans(work / "spans")
    rows = rows.filter(pc.and_(pc.equal(rows["model_name"], name),
                               pc.greater_equal(rows["event_time"], pa.scalar(start))))
    arms = {arm: rows.filter(pc.equal(rows["arm"], arm)).num_rows for arm in ("stable", "canary")}
    assert arms == {arm: serving[arm].requests for arm in arms}
    assert rows.filter(pc.equal(rows["arm"], "stable"))["model_version"].unique().to_pylist() \
        == [v1]
    verdict = judge(serving["stable"], serving["canary"], JudgeConfig())
    assert verdict.decision == "extend"  # 40 requests are below the minimum sample sizes


def test_openai_client_through_the_router_streams_and_sticks(deployment):
    import openai

    model, v1, v2, router, _, _ = deployment  # the served model's id is the registered name
    client = openai.OpenAI(base_url=f"{router.url}/v1", api_key="local", max_retries=0)
    for conv in ("stream-a", "stream-b", "stream-c", "stream-d"):
        raw = client.chat.completions.with_raw_response.create(
            model=model,
            messages=[{"role": "user", "content": "1+1 = "}],
            max_tokens=4,
            stream=True,
            extra_headers={"X-Conversation-Id": conv},
        )
        expected = "canary" if bucket(conv) < 0.5 else "stable"
        assert raw.headers["x-ratchet-arm"] == expected
        assert raw.headers["x-conversation-id"] == conv
        chunks = list(raw.parse())
        fingerprints = {c.system_fingerprint for c in chunks}
        assert fingerprints == {f"ratchet-v{v2 if expected == 'canary' else v1}"}
        assert chunks[-1].choices[0].finish_reason in ("stop", "length")
    # no conversation id at all: the router generates one and the replica returns it
    raw = client.completions.with_raw_response.create(model=model, prompt="1+1 = ", max_tokens=2)
    assert raw.headers["x-conversation-id"].startswith("conv-")
