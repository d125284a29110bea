"""The vLLM engine's ``stop_after_code_block``: a reply sampled to its budget is cut after the
token that closes its first code block, as the embedded engine would have stopped it."""

from __future__ import annotations

import asyncio

import pytest

from deploy.replica.engines.base import EngineInputError, EngineResult, SamplingRequest
from deploy.replica.engines.vllm_engine import VllmEngine, cut_after_code_block

PIECES = ["Here", ":\n", "```", "python\n", "x = 1\n", "``", "`\n", "More", " text", "."]


def _result(pieces: list[str], finish: str = "length") -> EngineResult:
    n = len(pieces)
    return EngineResult(text="".join(pieces), token_ids=list(range(10, 10 + n)),
                        logprobs=[-0.5] * n, prompt_token_ids=[1, 2], finish_reason=finish,
                        model_version=1, time_to_first_token_ms=1.0, latency_ms=2.0,
                        token_texts=list(pieces))


def test_cut_ends_on_the_token_that_closes_the_block():
    result = _result(PIECES)
    cut_after_code_block(result)
    assert result.text == "Here:\n```python\nx = 1\n```\n"
    assert result.token_ids == list(range(10, 17)) and len(result.logprobs) == 7
    assert result.finish_reason == "stop" and not result.ends_with_eos


@pytest.mark.parametrize("pieces,finish", [(PIECES[:5], "length"), (PIECES[:2], "stop")])
def test_cut_leaves_a_reply_without_a_closed_block(pieces, finish):
    result = _result(pieces, finish)
    cut_after_code_block(result)
    assert result.text == "".join(pieces) and result.finish_reason == finish
    assert len(result.token_ids) == len(pieces)


def test_streaming_with_the_flag_is_refused():
    engine = VllmEngine(url="http://127.0.0.1:9", served_model="m")
    engine.start()
    req = SamplingRequest("p", 8, 0.0, stop_after_code_block=True)
    with pytest.raises(EngineInputError, match="stop_after_code_block"):
        asyncio.run(engine.generate([req], on_delta=lambda i, t: None))
