"""The gateway serving a Hugging Face policy (a tiny random Qwen3-MoE with its local BPE): prompt
ids as the policy encodes them, processed logprobs recomputed from the model, routed experts of
prompt and response positions equal to a teacher-forced forward, EOS from the tokenizer; the dense
path serves with no routing. A saved HF directory loads through ``load_checked`` and a bad one is
refused naming the file and field."""

from __future__ import annotations

import asyncio
import json

import pytest
import torch
from fastapi.testclient import TestClient

from deploy.replica.engines.base import SamplingRequest
from deploy.replica.engines.hf_step import HFStepModel, step_model
from deploy.replica.engines.torch_engine import TorchEngine, ToyStepModel
from deploy.replica.model_host import ModelLoadError, ServedModel, load_checked
from deploy.replica.server import create_app
from deploy.replica.settings import ServerSettings
from deploy.replica.spool import Spool
from ingest.schema import parse_event
from policy.toy.generate import sampling_logprobs

PROMPT = "def add(a, b):\n    return"


@pytest.fixture(scope="module")
def tokenizer():
    from policy.tiny import build_tokenizer

    return build_tokenizer(vocab=320, seed=0)


def _policy(tokenizer, family: str = "qwen3_moe", **spec):
    from policy.config import TinyHFSpec
    from policy.hf import HFPolicy
    from policy.tiny import build_model

    model, tok = build_model(TinyHFSpec(family=family, vocab=320, hidden=32, heads=2, kv_heads=1,
                                        moe_intermediate=32, intermediate=64, **spec), tokenizer)
    return HFPolicy(model, tok)


@pytest.fixture(scope="module")
def qwen(tokenizer):
    return _policy(tokenizer)


@pytest.fixture
def app_client(tmp_path, qwen):
    settings = ServerSettings(
        tracking_uri="http://127.0.0.1:9", model_name="tiny", admin_token="unit-test-admin-token",
        spool_dir=tmp_path / "spool", cache_dir=tmp_path / "cache",
    )
    app = create_app(settings)
    with TestClient(app) as client:
        app.state.host._current = ServedModel(qwen, 3)
        yield app, client


def _logged(app):
    logger = app.state.behaviour_logger
    assert logger.flush(timeout_s=0.3) is False
    spool = Spool(logger.spool.directory, max_bytes=1 << 30)
    return [parse_event(v) for _, _, v in spool.peek(1000).records]


def test_hf_completion_logs_served_ids_processed_logprobs_and_routes(app_client, qwen):
    app, client = app_client
    body = {"prompt": PROMPT, "max_tokens": 6, "temperature": 0.8, "top_p": 0.9, "seed": 5,
            "n": 2, "logprobs": 0}
    r = client.post("/v1/completions", json=body)
    assert r.status_code == 200, r.text
    events = _logged(app)
    assert len(events) == 2
    for e in events:
        assert e.prompt_token_ids == qwen.encode_prompt(PROMPT)
        assert e.prompt_token_ids[0] == qwen.tokenizer.bos_token_id
        assert e.routed_experts_source == "engine" and e.model_version == 3
        ids = e.prompt_token_ids + e.response_token_ids
        seq = torch.tensor([ids])
        with torch.no_grad():
            hidden = qwen.module.base_model(input_ids=seq).last_hidden_state
            logits = qwen.module.get_output_embeddings()(hidden)[0]
            out = qwen.token_logprobs(seq, seq, torch.ones_like(seq, dtype=torch.bool),
                                      torch.ones(1))
        p = len(e.prompt_token_ids)
        logp = sampling_logprobs(logits[p - 1:-1], 0.8, 0.9)
        want = logp.gather(1, torch.tensor(e.response_token_ids).unsqueeze(1)).squeeze(1)
        assert torch.allclose(want, torch.tensor(e.response_logprobs), atol=1e-4)
        routes = out.routed_experts[0].tolist()
        assert e.prompt_routed_experts == routes[:p]
        assert e.routed_experts == routes[p - 1:p - 1 + len(e.response_token_ids)]
        assert len(e.routed_experts[0]) == qwen.moe_spec.n_moe_layers
        assert len(e.routed_experts[0][0]) == qwen.moe_spec.top_k


def test_hf_batched_rows_equal_single_rows(qwen):
    """Left padding in a batch changes nothing: greedy ids and logprobs equal those of the same
    prompt decoded alone (position ids and attention mask are right)."""
    engine = TorchEngine(lambda: HFStepModel(qwen, 1), max_wait_ms=500)
    engine.start()
    try:
        reqs = [SamplingRequest(PROMPT, 5, 0.0), SamplingRequest("x = 1\n" * 6, 5, 0.0)]

        async def together():
            return await asyncio.gather(*(engine.generate([r]) for r in reqs))

        both = [r[0] for r in asyncio.run(together())]
        alone = [asyncio.run(engine.generate([r]))[0] for r in reqs]
    finally:
        engine.close()
    assert engine.batches == 3
    for a, b in zip(both, alone):
        assert a.token_ids == b.token_ids
        assert a.logprobs == pytest.approx(b.logprobs, abs=1e-4)
        assert a.routed_experts == b.routed_experts


def test_eos_from_the_tokenizer_stops_the_row(qwen):
    """Make EOS the likeliest token: the row stops at once with finish_reason 'stop'."""
    step = HFStepModel(qwen, 1)
    eos = qwen.tokenizer.eos_token_id
    assert step.eos_ids == (eos,)

    def favour_eos(_module, _args, out):
        return out.index_add(-1, torch.tensor([eos]), torch.full_like(out[..., :1], 100.0))

    handle = qwen.module.get_output_embeddings().register_forward_hook(favour_eos)
    engine = TorchEngine(lambda: step, max_wait_ms=0)
    engine.start()
    try:
        (res,) = asyncio.run(engine.generate([SamplingRequest(PROMPT, 8, 0.0)]))
    finally:
        engine.close()
        handle.remove()
    assert res.finish_reason == "stop" and res.token_ids == [eos] and res.text == ""


def test_dense_hf_policy_serves_without_routes(tokenizer):
    dense = _policy(tokenizer, family="llama", experts=0)
    engine = TorchEngine(lambda: step_model(dense, 1), max_wait_ms=0)
    engine.start()
    try:
        (res,) = asyncio.run(engine.generate([SamplingRequest(PROMPT, 4, 1.0, seed=1)]))
    finally:
        engine.close()
    assert res.routed_experts_source == "none" and res.routed_experts == []
    assert res.prompt_routed_experts == [] and len(res.token_ids) >= 1


def test_step_model_picks_the_adapter(qwen):
    from deploy.replica.toy_models import build_untrained

    assert isinstance(step_model(qwen, 1), HFStepModel)
    assert isinstance(step_model(ServedModel(build_untrained(0), 1).policy, 1), ToyStepModel)


def test_saved_hf_directory_loads_and_bad_one_is_refused(tmp_path, qwen):
    directory = qwen.save(tmp_path / "ckpt")
    policy = load_checked(directory)
    assert policy.type == "hf" and policy.moe_spec == qwen.moe_spec
    config = json.loads((directory / "config.json").read_text())
    config["hidden_size"] = 64
    (directory / "config.json").write_text(json.dumps(config))
    with pytest.raises(ModelLoadError, match="config.json|safetensors"):
        load_checked(directory)


REPLY = "Here:\n```python\nx = 1\n```\nMore text after the block."
"""A chat reply with prose after its code block, as small instruct models write them."""


@pytest.fixture
def scripted(qwen):
    """The model writes ``REPLY`` (greedy): each forward makes the script's next token the
    likeliest; the prompt's ids are the first forward's."""
    script = qwen.tokenizer(REPLY, add_special_tokens=False)["input_ids"]
    step = {"n": 0}

    def favour_next(_module, _args, out):
        tok = script[min(step["n"], len(script) - 1)]
        step["n"] += 1
        return out.index_add(-1, torch.tensor([tok]), torch.full_like(out[..., :1], 100.0))

    handle = qwen.module.get_output_embeddings().register_forward_hook(favour_next)
    yield script, step
    handle.remove()


def test_chat_reply_ends_after_its_code_block_when_asked(app_client, qwen, scripted):
    """``stop_after_code_block``: the reply ends right after the closing fence, finish_reason
    'stop', and the logged completion is that reply (its tokens, its finish_reason); the gate's
    decode with ``stop_when=reply_complete`` samples exactly the same tokens."""
    from tasks.humaneval import reply_complete

    script, step = scripted
    app, client = app_client
    body = {"messages": [{"role": "user", "content": PROMPT}], "max_tokens": len(script) + 4,
            "temperature": 0.0, "stop_after_code_block": True}
    r = client.post("/v1/chat/completions", json=body)
    assert r.status_code == 200, r.text
    choice, usage = r.json()["choices"][0], r.json()["usage"]
    assert choice["message"]["content"] == "Here:\n```python\nx = 1\n```"
    assert choice["finish_reason"] == "stop"
    shown = qwen.tokenizer(choice["message"]["content"], add_special_tokens=False)["input_ids"]
    assert usage["completion_tokens"] == len(shown) < len(script)
    (event,) = _logged(app)
    assert event.finish_reason == "stop"
    assert event.response_text == choice["message"]["content"]
    assert len(event.response_token_ids) == event.usage.output_tokens == usage["completion_tokens"]

    step["n"] = 0
    (gate,) = qwen.generate([event.prompt_token_ids], max_new_tokens=len(script) + 4,
                            temperature=0.0, stop_when=reply_complete)
    assert gate.token_ids == event.response_token_ids and gate.finish_reason == "stop"


def test_chat_reply_runs_on_after_its_code_block_by_default(app_client, qwen, scripted):
    script, _ = scripted
    app, client = app_client
    body = {"messages": [{"role": "user", "content": PROMPT}], "max_tokens": len(script),
            "temperature": 0.0}
    choice = client.post("/v1/chat/completions", json=body).json()["choices"][0]
    assert choice["message"]["content"] == REPLY and choice["finish_reason"] == "length"
