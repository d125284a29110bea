"""A decode KV cache that is allocated once per batch instead of growing by concatenation.

``transformers``' ``DynamicCache`` appends each step's keys and values with ``torch.cat``, which
copies the whole cache of every layer at every step: at batch 16 and a 200-token context that
copy was about a quarter of a decode step's CPU time on a 1-thread CPU (SmolLM2-135M upcycled).
``decode_cache(model, capacity)`` is a ``DynamicCache`` whose full-attention layers write into
buffers of ``capacity`` positions allocated at the first update (the prefill) and hand attention
views of the filled part, so a step writes one position per row and copies nothing else. Sliding
window layers (their own length logic) stay as ``transformers`` builds them. Dropping finished
rows (``batch_select_indices``) copies the buffers once. ``capacity`` is a hint (prompt width plus
token budget when the caller knows them): a layer that runs past it grows by half, copying once.
Everything else (mask sizes, sequence length) is ``DynamicLayer``'s, computed from the views.
Left out: repeating rows (beam search).
"""

from __future__ import annotations

import torch
from transformers import DynamicCache
from transformers.cache_utils import DynamicLayer


class PreallocatedLayer(DynamicLayer):
    """A ``DynamicLayer`` backed by buffers of ``capacity`` positions; see the module docstring."""

    def __init__(self, capacity: int) -> None:
        super().__init__()
        self.capacity = capacity
        self._k: torch.Tensor | None = None
        self._v: torch.Tensor | None = None
        self._len = 0

    def update(self, key_states: torch.Tensor, value_states: torch.Tensor, *args, **kwargs):
        if not self.is_initialized:
            self.lazy_initialization(key_states, value_states)
        if self._k is None:
            b, h, _, d = key_states.shape
            self._k = key_states.new_empty(b, h, self.capacity, d)
            self._v = value_states.new_empty(b, h, self.capacity, value_states.shape[-1])
        t = key_states.shape[-2]
        end = self._len + t
        if end > self.capacity:  # past the hint: grow by half (amortised, rare)
            self.capacity = max(end, self.capacity + self.capacity // 2)
            k, v = self._k, self._v
            self._k = k.new_empty(*k.shape[:2], self.capacity, k.shape[-1])
            self._v = v.new_empty(*v.shape[:2], self.capacity, v.shape[-1])
            self._k[:, :, :self._len], self._v[:, :, :self._len] = k[:, :, :self._len], \
                v[:, :, :self._len]
        self._k[:, :, self._len:end] = key_states
        self._v[:, :, self._len:end] = value_states
        self._len = end
        self.keys, self.values = self._k[:, :, :end], self._v[:, :, :end]
        return self.keys, self.values

    def reset(self) -> None:
        self._k = self._v = None
        self._len = 0
        super().reset()

    def crop(self, tokens_to_remove: int) -> None:
        super().crop(tokens_to_remove)
        if self._k is not None and tokens_to_remove < 0:
            self._len = max(0, self._len + tokens_to_remove)
            self.keys, self.values = self._k[:, :, :self._len], self._v[:, :, :self._len]

    def batch_repeat_interleave(self, repeats: int) -> None:
        raise NotImplementedError("a preallocated KV cache does not repeat rows")

    def batch_select_indices(self, indices: torch.Tensor) -> None:
        if self._k is None:
            return
        self._k, self._v = self._k[indices], self._v[indices]
        self.keys, self.values = self._k[:, :, :self._len], self._v[:, :, :self._len]


def decode_cache(model, capacity: int) -> DynamicCache:
    """A cache for decoding ``model`` with at most ``capacity`` positions per row (prompt width
    plus new tokens); see the module docstring."""
    cache = DynamicCache(config=model.config)
    cache.layers = [PreallocatedLayer(capacity) if type(layer) is DynamicLayer else layer
                    for layer in cache.layers]
    return cache


__all__ = ["PreallocatedLayer", "decode_cache"]
