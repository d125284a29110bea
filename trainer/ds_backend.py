"""DeepSpeed backend: a ZeRO 1/2 engine around the policy, DeepSpeed MoE layers with expert
parallelism, and export back to the one checkpoint format (safetensors + MoEConfig).

``DeepSpeedTrainer`` owns the engine: ``backward_step(loss)`` is ``engine.backward`` +
``engine.step`` and returns the global gradient norm. With ``ep_size > 1`` every MoE feed-forward
is swapped for ``deepspeed.moe.layer.MoE`` (experts split over the expert-parallel group, router
weights copied), and :func:`export_state_dict` gathers the experts back so the checkpoint loads
into a plain :class:`MoETransformer` for serving. CPU runs use gloo and ``DS_ACCELERATOR=cpu``
(see STACK.md); GPUs use NCCL and bf16.

Router replay: with ``ep_size == 1`` the policy keeps its own MoE layers, so the logged routing
is replayed as without DeepSpeed; DeepSpeed's MoE layers (``ep_size > 1``) have no forced-routing
input, and the recipe refuses ``router_replay=True`` there. Under bf16 the engine casts the
policy to bf16; the recipe casts the frozen reference and anchor alike.

Left out: router replay through DeepSpeed MoE layers, ZeRO 3, pipeline parallelism.
"""

from __future__ import annotations

import os
import socket

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from policy.toy.model import MoEConfig, MoELayer, MoETransformer

CACHE_DIR = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), ".cache",
                         "torch_extensions")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def init_distributed() -> None:
    """Initialise torch.distributed through DeepSpeed (single process if no launcher env)."""
    os.environ.setdefault("TORCH_EXTENSIONS_DIR", CACHE_DIR)
    if not torch.cuda.is_available():
        os.environ.setdefault("DS_ACCELERATOR", "cpu")
    for key, value in (("RANK", "0"), ("LOCAL_RANK", "0"), ("WORLD_SIZE", "1"),
                       ("MASTER_ADDR", "127.0.0.1")):
        os.environ.setdefault(key, value)
    os.environ.setdefault("MASTER_PORT", str(_free_port()))
    if torch.cuda.is_available():  # one GPU per rank, before NCCL binds rank r to a device
        torch.cuda.set_device(int(os.environ["LOCAL_RANK"]))
    import deepspeed

    if not torch.distributed.is_initialized():
        backend = "nccl" if torch.cuda.is_available() else "gloo"
        deepspeed.init_distributed(dist_backend=backend, auto_mpi_discovery=False)


def ds_config(*, batch_size: int, world_size: int, zero_stage: int, lr: float,
              weight_decay: float, grad_clip: float, bf16: bool) -> dict:
    """The engine config: ZeRO stage, torch AdamW (no compiled CPU Adam), clipping, precision."""
    if batch_size % world_size:
        raise ValueError(f"batch_size={batch_size} must divide by world_size={world_size}")
    return {
        "train_batch_size": batch_size,
        "train_micro_batch_size_per_gpu": batch_size // world_size,
        "gradient_accumulation_steps": 1,
        "zero_optimization": {"stage": zero_stage},
        "optimizer": {"type": "AdamW", "params": {"lr": lr, "weight_decay": weight_decay,
                                                   "torch_adam": True}},
        "gradient_clipping": grad_clip,
        "bf16": {"enabled": bf16},
        "steps_per_print": 1 << 30,
        "wall_clock_breakdown": False,
    }


class ExpertMLP(nn.Module):
    """One expert as DeepSpeed's ``Experts`` wants it: a module (N, d) -> (N, d)."""

    def __init__(self, d_model: int, d_ff: int):
        super().__init__()
        self.fc1 = nn.Linear(d_model, d_ff, bias=False)
        self.fc2 = nn.Linear(d_ff, d_model, bias=False)

    def forward(self, x: Tensor) -> Tensor:
        return self.fc2(F.gelu(self.fc1(x)))


class DeepSpeedMoEFFN(nn.Module):
    """``deepspeed.moe.layer.MoE`` in place of a MoELayer; forward returns (y, l_aux)."""

    def __init__(self, cfg: MoEConfig, ep_size: int):
        super().__init__()
        from deepspeed.moe.layer import MoE

        self.n_experts, self.ep_size = cfg.n_experts, ep_size
        self.moe = MoE(hidden_size=cfg.d_model, expert=ExpertMLP(cfg.d_model, cfg.d_ff),
                       num_experts=cfg.n_experts, ep_size=ep_size, k=cfg.top_k,
                       capacity_factor=cfg.capacity_factor, drop_tokens=False, use_rts=False,
                       top2_2nd_expert_sampling=False)

    def forward(self, x: Tensor) -> tuple[Tensor, Tensor]:
        y, l_aux, _ = self.moe(x)
        return y, l_aux

    def _local_range(self) -> range:
        n_local = self.n_experts // self.ep_size
        rank = torch.distributed.get_rank(self._ep_group()) if self.ep_size > 1 else 0
        return range(rank * n_local, (rank + 1) * n_local)

    def _ep_group(self):
        return self.moe.deepspeed_moe.ep_group

    @torch.no_grad()
    def load_from(self, layer: MoELayer) -> None:
        """Copy the router and this rank's experts from a plain MoELayer."""
        self.moe.deepspeed_moe.gate.wg.weight.copy_(layer.router.weight)
        experts = self.moe.deepspeed_moe.experts.deepspeed_experts
        for local, e in enumerate(self._local_range()):
            experts[local].fc1.weight.copy_(layer.w_in[e].T)
            experts[local].fc2.weight.copy_(layer.w_out[e].T)

    @torch.no_grad()
    def export(self) -> dict[str, Tensor]:
        """Router and all experts (gathered over the EP group) in MoELayer's parameter layout."""
        experts = self.moe.deepspeed_moe.experts.deepspeed_experts
        w_in = torch.stack([ex.fc1.weight.T for ex in experts])
        w_out = torch.stack([ex.fc2.weight.T for ex in experts])
        if self.ep_size > 1:
            w_in, w_out = _gather(w_in, self._ep_group()), _gather(w_out, self._ep_group())
        return {"router.weight": self.moe.deepspeed_moe.gate.wg.weight.detach().clone(),
                "w_in": w_in.contiguous(), "w_out": w_out.contiguous()}


def _gather(t: Tensor, group) -> Tensor:
    parts = [torch.empty_like(t) for _ in range(torch.distributed.get_world_size(group))]
    torch.distributed.all_gather(parts, t.contiguous(), group=group)
    return torch.cat(parts)


def swap_in_deepspeed_moe(model: MoETransformer, ep_size: int) -> MoETransformer:
    """Replace every MoELayer by a DeepSpeedMoEFFN holding the same weights (in place)."""
    for block in model.blocks:
        if isinstance(block.ffn, MoELayer):
            ds = DeepSpeedMoEFFN(model.config, ep_size)
            ds.load_from(block.ffn)
            block.ffn = ds
    return model


def export_state_dict(model: MoETransformer) -> dict[str, Tensor]:
    """A plain MoETransformer state dict (experts gathered) from a possibly swapped model."""
    state = {k: v.detach().clone() for k, v in model.state_dict().items() if ".moe." not in k}
    for i, block in enumerate(model.blocks):
        if isinstance(block.ffn, DeepSpeedMoEFFN):
            for name, t in block.ffn.export().items():
                state[f"blocks.{i}.ffn.{name}"] = t
    return state


class DeepSpeedTrainer:
    """The engine around a policy. ``backward_step(loss)`` -> global grad norm."""

    def __init__(self, model: MoETransformer, *, zero_stage: int, ep_size: int, bf16: bool,
                 batch_size: int, lr: float, weight_decay: float, grad_clip: float):
        import deepspeed
        from deepspeed.moe.utils import split_params_into_different_moe_groups_for_optimizer

        self._owns_group = not torch.distributed.is_initialized()
        init_distributed()
        self.world_size = torch.distributed.get_world_size()
        self.rank = torch.distributed.get_rank()
        if ep_size > 1:
            swap_in_deepspeed_moe(model, ep_size)
        groups = split_params_into_different_moe_groups_for_optimizer(
            {"params": list(model.parameters()), "name": "params"})
        cfg = ds_config(batch_size=batch_size, world_size=self.world_size, zero_stage=zero_stage,
                        lr=lr, weight_decay=weight_decay, grad_clip=grad_clip, bf16=bf16)
        self.engine, _, _, _ = deepspeed.initialize(model=model, model_parameters=groups,
                                                    config=cfg)
        self.model = model

    def backward_step(self, loss: Tensor) -> float:
        self.engine.backward(loss)
        self.engine.step()
        norm = self.engine.get_global_grad_norm()
        return float(norm) if norm is not None else float("nan")

    def state_dict(self) -> dict[str, Tensor]:
        return export_state_dict(self.model)

    def close(self) -> None:
        """Release the engine and destroy the process group this trainer started: a rank that
        exits with gloo's threads alive can abort, and the launcher then kills the other ranks."""
        self.engine.destroy()
        if self._owns_group and torch.distributed.is_initialized():
            torch.distributed.destroy_process_group()
