"""The vLLM tier's plumbing that runs without vLLM: the venv check, the skip of the tier, a managed
engine that cannot start (503 with the reason, never a hang), and the teacher-forced router pass
over an HF policy. The real server is exercised by tests/vllm/ (``make test-vllm``)."""

from __future__ import annotations

import asyncio
import subprocess
import sys
from pathlib import Path

import pytest

from deploy.replica.engines.base import EngineResult, EngineUnavailable, SamplingRequest
from deploy.replica.engines.vllm_engine import ManagedVllm, PolicyRoutes, VllmEngine, _teacher_force
from runtime.vllm_server import READY_MARKER, VllmServer, venv_problem

ROOT = Path(__file__).resolve().parents[3]


def test_venv_problem_names_the_fix(tmp_path):
    assert "make test-vllm" in venv_problem(tmp_path / "absent")
    (tmp_path / "v" / "bin").mkdir(parents=True)
    (tmp_path / "v" / "bin" / "python").touch()
    assert "incomplete" in venv_problem(tmp_path / "v")
    (tmp_path / "v" / READY_MARKER).write_text("{}")
    assert venv_problem(tmp_path / "v") is None


def test_server_start_refuses_a_missing_venv(tmp_path):
    with pytest.raises(FileNotFoundError, match="no vLLM venv"):
        VllmServer.start(tmp_path, tmp_path / "work", venv=tmp_path / "absent")


def test_the_tier_is_skipped_unless_asked_for():
    out = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-rs", "-p", "no:cacheprovider", "tests/vllm"],
        cwd=ROOT, capture_output=True, text=True, timeout=300,
    )
    assert out.returncode == 0, out.stdout[-2000:]
    assert "passed" not in out.stdout and "skipped" in out.stdout
    assert "run `make test-vllm`" in out.stdout


def test_a_managed_engine_that_cannot_start_answers_unavailable(tmp_path):
    def source():
        raise LookupError("alias 'champion' of model 'm' is not set")

    managed = ManagedVllm(source, tmp_path)
    with pytest.raises(LookupError):
        managed.reload()
    engine = VllmEngine.managed(managed)

    async def ask():
        engine._client = object()  # started: only the missing target can refuse
        await engine.generate([SamplingRequest(prompt="x", max_tokens=2, temperature=1.0)])

    with pytest.raises(EngineUnavailable, match="not set"):
        asyncio.run(ask())
    assert engine.served_version() is None


def test_router_pass_over_an_hf_policy_matches_a_fresh_forward(tmp_path):
    from policy.base import teacher_forced_routes
    from policy.config import HFPolicyConfig, TinyHFSpec
    from policy.loader import load_policy

    spec = TinyHFSpec(family="qwen3_moe", hidden=32, heads=2, kv_heads=1, experts=4, top_k=2,
                      moe_intermediate=16, vocab=128, seed=3)
    policy = load_policy(HFPolicyConfig(build=spec), workdir=tmp_path)
    prompt = policy.encode_prompt("def f(x):")
    response = [5, 9, 11, policy.tokenizer_info.eos_ids[0]]
    result = EngineResult(text="", token_ids=response, logprobs=[-1.0] * 4,
                          prompt_token_ids=prompt, finish_reason="stop", model_version=1,
                          time_to_first_token_ms=1.0, latency_ms=2.0, routed_experts_source="none")
    _teacher_force(PolicyRoutes(policy), result)
    assert result.routed_experts_source == "teacher_forced"
    want_prompt, want_response = teacher_forced_routes(policy, prompt, response)
    assert result.prompt_routed_experts == want_prompt
    assert result.routed_experts == want_response
    assert PolicyRoutes(policy).chat_prompt([("user", "a"), ("user", "b")]) == "a\nb"
