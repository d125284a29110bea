"""From a config or a checkpoint directory to a :class:`policy.base.Policy`: the one place that
picks an implementation.

The protocol (policy/base.py) and the config union (policy/config.py) name no implementation;
this module imports them all (``policy.toy.adapter.ToyPolicy``, ``policy.hf.HFPolicy``) lazily,
so importing it costs neither torch nor transformers. Left out: the formats themselves
(``policy.config.checkpoint_format``) and downloading anything.
"""

from __future__ import annotations

from pathlib import Path

from policy.base import Policy
from policy.config import HFPolicyConfig, PolicyLoadError, ToyPolicyConfig, checkpoint_format


def load_policy(config_or_dir: ToyPolicyConfig | HFPolicyConfig | Path | str, *,
                workdir: Path | None = None, dtype: str | None = None):
    """A :class:`policy.base.Policy` from a config or a checkpoint directory.

    ``workdir`` is where an HF ``build`` spec materialises its directory (default: a temporary
    folder); the policy's ``source_dir`` attribute names the directory it was loaded from.
    ``dtype`` overrides :attr:`HFPolicyConfig.dtype` (the trainer asks for "float32": fp32
    master weights under bf16 autocast); the toy is always fp32.
    """
    over = {} if dtype is None else {"dtype": dtype}
    if isinstance(config_or_dir, (str, Path)):
        directory = Path(config_or_dir)
        fmt = checkpoint_format(directory)
        if fmt == "toy":
            from policy.toy.adapter import ToyPolicy

            return ToyPolicy.load(directory)
        gguf = sorted(directory.glob("*.gguf"))[0].name if fmt == "gguf" else None
        config_or_dir = HFPolicyConfig(path=directory, gguf_file=gguf, **over)
    if isinstance(config_or_dir, ToyPolicyConfig):
        if config_or_dir.path is None:
            raise PolicyLoadError("toy policy: field 'path' is required to load a checkpoint")
        return load_policy(config_or_dir.path)
    from policy.hf import HFPolicy

    return HFPolicy.from_config(config_or_dir.model_copy(update=over), workdir=workdir)


def as_policy(model_or_policy) -> Policy:
    """``model_or_policy`` as a :class:`Policy`: a bare toy ``MoETransformer`` is wrapped in
    ``policy.toy.adapter.ToyPolicy``; a policy is returned as it is."""
    if hasattr(model_or_policy, "tokenizer_info"):
        return model_or_policy
    from policy.toy.adapter import ToyPolicy

    return ToyPolicy(model_or_policy)


__all__ = ["as_policy", "load_policy"]
