import pytest
import torch

from policy.toy.model import MoEConfig, MoETransformer

TINY = MoEConfig(d_model=32, n_layers=2, n_heads=2, n_experts=4, top_k=2, d_ff=48, max_seq_len=160)


@pytest.fixture
def tiny_model() -> MoETransformer:
    torch.manual_seed(0)
    return MoETransformer(TINY).eval()


@pytest.fixture(scope="session")
def bpe_tokenizer():
    """The locally trained BPE of policy/tiny.py (trained once per test session)."""
    from policy.tiny import build_tokenizer

    return build_tokenizer(vocab=384, seed=0)


@pytest.fixture(scope="session")
def tiny_hf(bpe_tokenizer):
    """``tiny_hf(family, **spec)`` -> an HFPolicy of a tiny random model (cached per spec)."""
    from policy.config import TinyHFSpec
    from policy.hf import HFPolicy
    from policy.tiny import build_model

    built: dict = {}

    def make(family: str, **spec):
        key = (family, tuple(sorted(spec.items())))
        if key not in built:
            s = TinyHFSpec(family=family, vocab=384, **spec)
            model, tok = build_model(s, bpe_tokenizer)
            built[key] = HFPolicy(model, tok)
        return built[key]

    return make


@pytest.fixture(autouse=True, scope="session")
def _gguf_cache(tmp_path_factory):
    """GGUF conversions made by these tests go to a temporary folder, never the repo's cache."""
    import os

    old = os.environ.get("RATCHET_GGUF_CACHE")
    os.environ["RATCHET_GGUF_CACHE"] = str(tmp_path_factory.mktemp("gguf-cache"))
    yield
    if old is None:
        os.environ.pop("RATCHET_GGUF_CACHE", None)
    else:
        os.environ["RATCHET_GGUF_CACHE"] = old
