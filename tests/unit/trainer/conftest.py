import pytest
import torch

from policy.toy.model import MoEConfig, MoETransformer

TINY = MoEConfig(d_model=32, n_layers=2, n_heads=2, n_experts=4, top_k=2, d_ff=48, max_seq_len=160)


@pytest.fixture
def tiny_model() -> MoETransformer:
    torch.manual_seed(0)
    return MoETransformer(TINY).eval()
