"""Which parameters an update trains: all of them, or the top N decoder layers.

A real model on a 2-core CPU trains at tens of tokens per CPU-second with every parameter
(bench/results/train_cpu.json); training only the top layers cuts the backward pass and the
optimizer state to those layers. ``top_layers``: every parameter is frozen, then the last N
decoder layers — attention, norms, the MLP or its experts and router — and the final norm are
trained; the token (and position) embeddings and the output head stay frozen unless
``train_embeddings`` (a head tied to the embeddings shares their weight, so it follows them).
Layers are found as the model's ``ModuleList`` of blocks (HF ``model.layers``, the toy's
``blocks``), embeddings by type, the head by name (``lm_head``).

Left out: LoRA adapters (scope ``lora``: trainer/lora.py, wired by the recipe), per-layer
learning rates.
"""

from __future__ import annotations

from torch import nn


def decoder_layers(model: nn.Module) -> tuple[str, nn.ModuleList]:
    """(qualified name, the ModuleList) of the model's decoder blocks: the longest ModuleList
    named ``layers`` or ``blocks``."""
    found = [(name, m) for name, m in model.named_modules()
             if isinstance(m, nn.ModuleList) and name.rsplit(".", 1)[-1] in ("layers", "blocks")]
    if not found:
        raise ValueError(f"{type(model).__name__} has no ModuleList named 'layers' or 'blocks'")
    return max(found, key=lambda x: len(x[1]))


def select_trainable(model: nn.Module, *, scope: str, top_layers: int,
                     train_embeddings: bool) -> dict[str, int]:
    """Set ``requires_grad`` per ``scope`` ("all" | "top_layers"); returns parameter counts
    (``params_total``, ``params_trainable``, ``layers_trainable``). Shared (tied) tensors are
    counted once."""
    params = dict(model.named_parameters())  # tied weights appear once, under their first name
    if scope == "all":  # as the model came: nothing frozen here
        return _counts(model, len(decoder_layers(model)[1]) if _has_layers(model) else 0)
    if scope != "top_layers":
        raise ValueError(f"scope must be 'all' or 'top_layers', got {scope!r}")
    name, layers = decoder_layers(model)
    if not 1 <= top_layers <= len(layers):
        raise ValueError(f"top_layers={top_layers}: the model has {len(layers)} layers")
    for p in params.values():
        p.requires_grad_(False)
    first = len(layers) - top_layers
    frozen_modules = {id(m) for m in model.modules() if isinstance(m, nn.Embedding)}
    head = getattr(model, "lm_head", None)
    if head is not None:
        frozen_modules.add(id(head))
    frozen = {id(p) for m in model.modules() if id(m) in frozen_modules
              for p in m.parameters(recurse=False)}
    for i, layer in enumerate(layers):
        if i >= first:
            layer.requires_grad_(True)
    in_layers = {id(p) for p in layers.parameters()}
    for p in params.values():  # outside the blocks: the final norm (and embeddings if asked)
        if id(p) in in_layers:
            continue
        if id(p) not in frozen or train_embeddings:
            p.requires_grad_(True)
    return _counts(model, top_layers)


def _has_layers(model: nn.Module) -> bool:
    try:
        decoder_layers(model)
    except ValueError:
        return False
    return True


def _counts(model: nn.Module, layers: int) -> dict[str, int]:
    ps = list(model.parameters())  # de-duplicated by torch
    return {"params_total": sum(p.numel() for p in ps),
            "params_trainable": sum(p.numel() for p in ps if p.requires_grad),
            "layers_trainable": layers}
