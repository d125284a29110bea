"""The gate's pieces on a Hugging Face policy (tiny random Qwen3-MoE, local BPE): the suite runs
through the policy's tokenizer and counts its routing, long prompts are cut to the context keeping
BOS, the KL to an identical champion is zero and to a perturbed one positive, and the OPE log
ratio of the behaviour policy itself is zero (fed the logged prompt ids)."""

from __future__ import annotations

import copy

import numpy as np
import pyarrow as pa
import pytest
import torch

from gating.config import SuiteConfig
from gating.health import kl_to_champion
from gating.ope import sequence_log_ratios
from gating.suite import build_suite, fit_prompt_ids, run_suite


@pytest.fixture(scope="module")
def qwen():
    from policy.config import TinyHFSpec
    from policy.hf import HFPolicy
    from policy.tiny import build_model, build_tokenizer

    spec = TinyHFSpec(family="qwen3_moe", vocab=320, hidden=32, heads=2, kv_heads=1,
                      moe_intermediate=32, max_positions=96)
    model, tok = build_model(spec, build_tokenizer(vocab=320, seed=0))
    return HFPolicy(model, tok)


def test_suite_runs_through_the_policy_tokenizer_and_counts_routing(qwen):
    tasks, checker = build_suite(SuiteConfig(size=4, seed=1))
    a = run_suite(qwen, tasks, max_new_tokens=5, seed=0, checker=checker)
    b = run_suite(qwen, tasks, max_new_tokens=5, seed=9, checker=checker)
    assert [t.model_dump() for t in a.tasks] == [t.model_dump() for t in b.tasks]
    tokens = sum(t.completion_tokens for t in a.tasks)
    spec = qwen.moe_spec
    assert len(a.expert_load) == spec.n_moe_layers
    assert [sum(layer) for layer in a.expert_load] == [tokens * spec.top_k] * spec.n_moe_layers
    assert all(0 < t.completion_tokens <= 5 for t in a.tasks)


def test_long_prompt_is_cut_to_its_tail_keeping_bos(qwen):
    ids = fit_prompt_ids(qwen, "x = 1\n" * 200, room=20)
    assert len(ids) == 21 and ids[0] == qwen.tokenizer_info.bos_id
    assert ids[1:] == qwen.encode_prompt("x = 1\n" * 200)[-20:]
    assert fit_prompt_ids(qwen, "x", room=20) == qwen.encode_prompt("x")


def test_kl_to_itself_is_zero_and_to_a_perturbed_champion_positive(qwen):
    prompts = [qwen.encode_prompt(p) for p in ["def f(x):\n", "# add\n1+2 = "]]
    gens = qwen.generate(prompts, max_new_tokens=6, temperature=0.0)
    completions = [g.token_ids for g in gens]
    assert kl_to_champion(qwen, qwen, prompts, completions) == pytest.approx(0.0, abs=1e-6)
    other = copy.deepcopy(qwen)
    with torch.no_grad():
        other.module.get_output_embeddings().weight.mul_(3.0)
    assert kl_to_champion(qwen, other, prompts, completions, chunk=3) > 1e-3


@pytest.mark.parametrize("temperature", [1.0, 0.7])
def test_ope_log_ratio_of_the_behaviour_policy_is_zero(qwen, temperature):
    prompts = ["def f(a, b):\n    return ", "x"]
    ids = [qwen.encode_prompt(p) for p in prompts]
    gens = qwen.generate(ids, max_new_tokens=6, temperature=temperature, seed=2)
    rows = pa.table({
        "prompt": prompts, "prompt_token_ids": ids,
        "response_token_ids": [g.token_ids for g in gens],
        "response_logprobs": [g.logprobs for g in gens], "temperature": [temperature] * 2,
    })
    np.testing.assert_allclose(sequence_log_ratios(qwen, rows), 0.0, atol=1e-3)


def test_humaneval_goes_in_as_a_chat_turn_only_with_a_chat_template(qwen):
    from gating.suite import task_prompt_ids, uses_chat
    from tasks.humaneval import chat_prompt

    config = SuiteConfig(kind="humaneval", size=2, seed=0, max_new_tokens=4)
    tasks, checker = build_suite(config)
    assert not uses_chat(qwen, config)  # no template: the raw prompt, as before
    tok = qwen.tokenizer
    tok.chat_template = "{% for m in messages %}user: {{ m['content'] }}\n{% endfor %}assistant:"
    try:
        assert uses_chat(qwen, config)
        assert not uses_chat(qwen, config.model_copy(update={"chat": "never"}))
        assert not uses_chat(qwen, SuiteConfig(kind="toy"))
        ids = task_prompt_ids(qwen, tasks[0], room=10_000, chat=True)
        assert qwen.decode(ids) == f"user: {chat_prompt(tasks[0].prompt)}\nassistant:"
        seen = []

        def spy(task, answer, chat=False):
            seen.append(chat)
            return checker(task, answer, chat=chat)

        run_suite(qwen, tasks, max_new_tokens=4, seed=0, checker=spy, chat=True)
        assert seen == [True, True]
    finally:
        tok.chat_template = None


def test_kl_health_check_can_be_limited_to_the_first_tasks(qwen, tmp_path):
    from gating.config import GateConfig, HealthConfig
    from gating.gate import GateRunner

    other = copy.deepcopy(qwen)
    with torch.no_grad():
        other.module.get_output_embeddings().weight.mul_(2.0)
    suite = SuiteConfig(size=3, seed=2, max_new_tokens=5)
    tasks, checker = build_suite(suite)
    cand = run_suite(qwen, tasks, max_new_tokens=5, seed=0, checker=checker)

    def kl(limit):
        config = GateConfig(suite=suite, health=HealthConfig(kl_max_tasks=limit))
        runner = GateRunner(tracking_uri="unused", model_name="m", candidate_version=2,
                            champion_version=1, config=config, workdir=tmp_path)
        runner.candidate, runner.champion = qwen, other
        return runner._kl(tasks, cand)

    first = kl_to_champion(qwen, other, [fit_prompt_ids(qwen, tasks[0].prompt, 10_000)],
                           [cand.tasks[0].token_ids])
    assert kl(1) == pytest.approx(first, rel=1e-6)
    assert kl(None) == pytest.approx(kl(3)) and kl(None) != pytest.approx(first)


def test_jsonl_tasks_go_in_as_their_chat_turns_with_a_template(qwen, tmp_path):
    """A JSONL task: its messages through the chat template when the tokenizer has one (chat),
    its raw prompt otherwise (completion); graded in the sandbox either way."""
    from gating.suite import task_prompt_ids, uses_chat
    from tasks.jsonl_suite import dump_tasks

    path = tmp_path / "suite.jsonl"
    dump_tasks([{"task_id": "sq", "prompt": "Write square(x).", "tests": ["assert square(2) == 4"],
                 "messages": [{"role": "system", "content": "Code only."},
                              {"role": "user", "content": "Write square(x)."}]}], path)
    config = SuiteConfig(kind="jsonl", path=str(path), size=1, max_new_tokens=4)
    tasks, checker = build_suite(config)
    assert not uses_chat(qwen, config)
    assert task_prompt_ids(qwen, tasks[0], room=10_000, chat=False) == qwen.encode_prompt(
        "Write square(x).")
    tok = qwen.tokenizer
    tok.chat_template = "{% for m in messages %}{{ m['role'] }}: {{ m['content'] }}\n{% endfor %}>"
    try:
        assert uses_chat(qwen, config)
        ids = task_prompt_ids(qwen, tasks[0], room=10_000, chat=True)
        assert qwen.decode(ids) == "system: Code only.\nuser: Write square(x).\n>"
        result = run_suite(qwen, tasks, max_new_tokens=4, seed=0, checker=checker, chat=True)
        assert len(result.tasks) == 1 and not result.tasks[0].passed  # random weights fail
        assert result.tasks[0].prompt_key
    finally:
        tok.chat_template = None
