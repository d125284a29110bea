"""Byte-level tokenizer: one token per UTF-8 byte plus three specials.

No merges, no vocabulary file: ids 0-255 are bytes, then BOS, EOS and PAD. Left out on purpose:
anything learned (BPE) — the toy tasks are short and a byte vocabulary keeps the model tiny.
"""

from __future__ import annotations

from collections.abc import Iterable

BOS = 256
EOS = 257
PAD = 258
VOCAB_SIZE = 259
SPECIALS = frozenset((BOS, EOS, PAD))


def encode(text: str) -> list[int]:
    """UTF-8 bytes of ``text`` as ids (no BOS/EOS added)."""
    return list(text.encode("utf-8"))


def decode(ids: Iterable[int]) -> str:
    """Inverse of :func:`encode`; special ids are dropped, invalid UTF-8 becomes U+FFFD."""
    return bytes(i for i in ids if 0 <= i < 256).decode("utf-8", errors="replace")
