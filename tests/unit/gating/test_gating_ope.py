"""SNIPS off-policy evaluation: known answers on synthetic logs, and ratios from real logprobs."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pytest

from gating.config import OpeConfig
from gating.ope import ope_result, sequence_log_ratios, snips


def _softmax(z):
    e = np.exp(z - z.max())
    return e / e.sum()


def test_snips_on_a_synthetic_bandit_log_covers_the_true_value():
    rng = np.random.default_rng(0)
    k, n = 6, 5000
    p_reward = np.array([0.9, 0.1, 0.5, 0.2, 0.7, 0.3])
    pi_b = _softmax(-1.5 * p_reward + 0.3 * rng.normal(size=k))  # behaviour: the champion
    pi_t = _softmax(2.0 * p_reward)  # target: the candidate prefers high-reward answers
    actions = rng.choice(k, size=n, p=pi_b)
    rewards = (rng.random(n) < p_reward[actions]).astype(np.float64)
    log_ratio = np.log(pi_t[actions]) - np.log(pi_b[actions])
    est = snips(log_ratio, rewards, clip=1e6, n_resamples=1000, seed=1)
    true_value = float(pi_t @ p_reward)
    behaviour_value = float(pi_b @ p_reward)
    assert est.ci_low <= true_value <= est.ci_high
    assert abs(true_value - behaviour_value) > est.ci_high - est.ci_low  # CI tells them apart
    assert est.realised == pytest.approx(rewards.mean())
    assert 0 < est.ess < n and est.clipped_frac == 0.0


def test_identical_policy_gives_realised_reward_and_full_ess():
    r = np.array([1.0, 0.0, 0.5, 1.0])
    est = snips(np.zeros(4), r, clip=10.0, n_resamples=200)
    assert est.value == pytest.approx(0.625) == pytest.approx(est.realised)
    assert est.ess == pytest.approx(4.0)


def test_clipping_and_degenerate_weights():
    lr = np.array([50.0, 0.0, 0.0, 0.0])  # one response the candidate loves
    est = snips(lr, np.array([1.0, 0.0, 0.0, 0.0]), clip=3.0, n_resamples=200)
    assert est.clipped_frac == 0.25
    assert est.value == pytest.approx(3.0 / 6.0)  # w = [3, 1, 1, 1]
    nan = snips(np.array([np.nan, 0.0]), np.array([1.0, 0.0]), clip=3.0, n_resamples=100)
    assert nan.value == 0.0 and nan.ess == pytest.approx(1.0)


def test_ope_gate_needs_enough_effective_samples():
    est = snips(np.zeros(5), np.ones(5), clip=10.0, n_resamples=100)
    assert not ope_result(est, OpeConfig(min_ess=10.0)).passed
    assert ope_result(est, OpeConfig(min_ess=2.0)).passed
    worse = snips(np.zeros(50), np.zeros(50), clip=10.0, n_resamples=100)
    g = ope_result(worse.__class__(**{**worse.__dict__, "realised": 0.9}), OpeConfig(min_ess=2))
    assert not g.passed and g.threshold == pytest.approx(0.8)


@pytest.mark.parametrize("temperature", [1.0, 0.7])
def test_log_ratio_of_the_behaviour_model_itself_is_zero(temperature):
    import torch

    from policy.toy.generate import generate
    from policy.toy.model import MoEConfig, MoETransformer

    torch.manual_seed(0)
    model = MoETransformer(MoEConfig(d_model=32, n_layers=2, n_heads=2, d_ff=64)).eval()
    prompts = ["# evaluate\n1+2 = ", "def f(a, b):\n    return ", "x"]
    gens = generate(model, prompts, max_new_tokens=8, temperature=temperature, seed=3)
    rows = pa.table({
        "prompt": prompts,
        "response_token_ids": [g.token_ids for g in gens],
        "response_logprobs": [g.logprobs for g in gens],
        "temperature": [temperature] * 3,
    })
    lr = sequence_log_ratios(model, rows)
    np.testing.assert_allclose(lr, 0.0, atol=1e-3)
    torch.manual_seed(1)
    other = MoETransformer(MoEConfig(d_model=32, n_layers=2, n_heads=2, d_ff=64)).eval()
    assert np.abs(sequence_log_ratios(other, rows)).max() > 0.1


def _reward_table(model, version: int, temperature: float) -> pa.Table:
    """Reward rows (ingest.schema.REWARD_SCHEMA) as the fleet + ingest would log them."""
    from datetime import UTC, datetime

    from ingest.schema import REWARD_SCHEMA
    from policy.toy.generate import generate
    from tasks.toy import check, generate_tasks

    tasks = generate_tasks(24, 11, "heldout")
    gens = generate(model, [t.prompt for t in tasks], max_new_tokens=8,
                    temperature=temperature, seed=5)
    rewards = [1.0 if check(t, g.text).passed else -1.0 for t, g in zip(tasks, gens)]
    n = len(tasks)
    cols = {
        "schema_version": [1] * n, "response_id": [f"r{i}" for i in range(n)],
        "conversation_id": [f"c{i}" for i in range(n)],
        "event_time": [datetime(2026, 1, 1, tzinfo=UTC)] * n,
        "model_name": ["m"] * n, "model_version": [version] * n,
        "task_kind": [t.kind for t in tasks], "prompt": [t.prompt for t in tasks],
        "response_text": [g.text for g in gens],
        "response_token_ids": [g.token_ids for g in gens],
        "response_logprobs": [g.logprobs for g in gens],
        "routed_experts": [g.routed_experts for g in gens],
        "temperature": [temperature] * n, "finish_reason": [g.finish_reason for g in gens],
        "completion_tokens": [len(g.token_ids) for g in gens], "latency_ms": [1.0] * n,
        "edit_persistence_30": [None] * n, "edit_persistence_120": [None] * n,
        "edit_persistence_300": [None] * n, "edit_persistence_600": [None] * n,
        "followup_dissatisfied": [None] * n, "feedback_accept": [None] * n,
        "reward": rewards, "reward_components": [[("correct", r)] for r in rewards],
        "defaulted_signals": [[] for _ in range(n)],
    }
    return pa.Table.from_pylist(
        [dict(zip(cols, values)) for values in zip(*cols.values())], schema=REWARD_SCHEMA
    )


def test_ope_gate_reads_logged_spans_of_the_champion_only(tmp_path):
    import pyarrow.parquet as pq
    import torch

    from gating.ope import ope_gate
    from policy.toy.model import MoEConfig, MoETransformer

    torch.manual_seed(0)
    champion = MoETransformer(MoEConfig(d_model=32, n_layers=2, n_heads=2, d_ff=64)).eval()
    pq.write_table(_reward_table(champion, 7, 1.0), tmp_path / "span-1.parquet")
    pq.write_table(_reward_table(champion, 6, 1.0), tmp_path / "span-0.parquet")
    gate, figures = ope_gate(champion, OpeConfig(spans=[str(tmp_path)], min_ess=5.0), 7)
    # The champion evaluated on its own traffic: every ratio is 1, the estimate is what it got.
    assert gate.passed and figures["ope.n"] == 24
    assert figures["ope.ess"] == pytest.approx(24.0, rel=1e-3)
    assert gate.value == pytest.approx(figures["ope.realised"], abs=1e-3)
    missing, _ = ope_gate(champion, OpeConfig(spans=[str(tmp_path)]), 99)
    assert not missing.passed and missing.value is None
