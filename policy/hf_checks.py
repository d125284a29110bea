"""Checks and loaders for a Hugging Face model directory, failing early with the file and field.

Before any weight is read: ``config.json`` must parse and describe a causal LM of a known family
(an MoE whose ``model_type`` has no router replay here is refused), the safetensors tensors must
have the shapes the config implies, and the tokenizer must define an EOS token. A GGUF file must
parse (``gguf.GGUFReader``) before ``transformers`` de-quantises it. Every failure is a
:class:`policy.config.PolicyLoadError` naming the file and the field. Left out: repairing anything.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import tempfile
from pathlib import Path

from policy.config import PolicyLoadError

MOE_FAMILIES = {"qwen3_moe": "softmax_topk", "qwen2_moe": "softmax_topk", "olmoe": "softmax_topk",
                "mixtral": "topk_softmax"}
"""The MoE families whose routers policy/hf.py can hook and replay, with their gate norm
(:data:`policy.base.GateNorm`)."""
EXPERT_FIELDS = ("num_experts", "num_local_experts", "n_routed_experts", "moe_num_experts")
CAUSAL_SUFFIXES = ("ForCausalLM", "LMHeadModel")


def check_dir(directory: Path) -> None:
    """config.json -> causal LM of a known family; weights present with the config's shapes."""
    config_path = directory / "config.json"
    if not config_path.exists():
        raise PolicyLoadError(f"{config_path}: missing")
    try:
        raw = json.loads(config_path.read_text())
    except json.JSONDecodeError as e:
        raise PolicyLoadError(f"{config_path}: not JSON ({e})") from e
    check_config_dict(raw, config_path)
    check_weight_shapes(directory, _auto_config(directory))


def check_config_dict(raw: dict, where: Path | str) -> None:
    from transformers.models.auto.modeling_auto import MODEL_FOR_CAUSAL_LM_MAPPING_NAMES

    model_type = raw.get("model_type")
    if not model_type:
        raise PolicyLoadError(f"{where}: field 'model_type' missing")
    archs = raw.get("architectures") or []
    if archs and not any(a.endswith(CAUSAL_SUFFIXES) for a in archs):
        raise PolicyLoadError(f"{where}: field 'architectures' = {archs} is not a causal LM")
    if model_type not in MODEL_FOR_CAUSAL_LM_MAPPING_NAMES:
        raise PolicyLoadError(f"{where}: field 'model_type' = '{model_type}' is not a causal LM "
                              "known to transformers")
    experts = [f for f in EXPERT_FIELDS if (raw.get(f) or 0) > 0]
    if experts and model_type not in MOE_FAMILIES:
        raise PolicyLoadError(f"{where}: field 'model_type' = '{model_type}' is an MoE "
                              f"({experts[0]}={raw[experts[0]]}) of an unknown family; supported: "
                              f"{sorted(MOE_FAMILIES)}")


def _auto_config(directory: Path):
    from transformers import AutoConfig

    try:
        return AutoConfig.from_pretrained(directory)
    except (ValueError, KeyError, TypeError, OSError) as e:
        raise PolicyLoadError(f"{directory / 'config.json'}: {e}") from e


def check_weight_shapes(directory: Path, config) -> None:
    """Every saved tensor that the config's model also names must have the model's shape."""
    import torch
    from safetensors import safe_open
    from transformers import AutoModelForCausalLM

    files = sorted(directory.glob("*.safetensors"))
    if not files:
        raise PolicyLoadError(f"{directory}: no *.safetensors weights next to config.json")
    with torch.device("meta"):
        expected = {k: tuple(v.shape) for k, v in
                    AutoModelForCausalLM.from_config(config).state_dict().items()}
    for path in files:
        with safe_open(str(path), "pt") as f:
            for key in f.keys():
                got = tuple(f.get_slice(key).get_shape())
                want = expected.get(key)
                if want is not None and got != want:
                    raise PolicyLoadError(
                        f"{path}: tensor '{key}' has shape {list(got)} but config.json "
                        f"({_fields_for(config, want, got)}) implies {list(want)}")


def _fields_for(config, want: tuple, got: tuple) -> str:
    """Config fields whose value is a dimension that differs between the shapes."""
    dims = {w for w, g in zip(want, got) if w != g} | set(want) - set(got)
    names = [k for k, v in config.to_dict().items()
             if isinstance(v, int) and not isinstance(v, bool) and v in dims]
    return ", ".join(f"{k}={config.to_dict()[k]}" for k in names[:4]) or "shape fields"


def load_dir(directory: Path, dtype):
    """(model, tokenizer) from a checked HF directory."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    try:
        tokenizer = AutoTokenizer.from_pretrained(directory)
    except (ValueError, OSError, TypeError, json.JSONDecodeError) as e:
        raise PolicyLoadError(f"{directory / 'tokenizer_config.json'}: tokenizer does not load "
                              f"({e})") from e
    try:
        model = AutoModelForCausalLM.from_pretrained(directory, dtype=dtype)
    except (ValueError, OSError, RuntimeError) as e:
        raise PolicyLoadError(f"{directory}: model weights do not load ({e})") from e
    return model, tokenizer


def check_tokenizer(tokenizer, directory: Path) -> None:
    if tokenizer.eos_token_id is None:
        raise PolicyLoadError(f"{directory / 'tokenizer_config.json'}: field 'eos_token' is not "
                              "set: generation could never stop")


def gguf_cache_root() -> Path:
    """Where de-quantised GGUF models are kept: ``$RATCHET_GGUF_CACHE``, else
    ``<repo>/.cache/gguf``."""
    env = os.environ.get("RATCHET_GGUF_CACHE")
    return Path(env) if env else Path(__file__).resolve().parents[1] / ".cache" / "gguf"


def converted_gguf_dir(path: Path) -> Path:
    """The cache directory of the GGUF file ``path``: named by the SHA-256 of its bytes, so an
    edited or replaced file never reads a stale conversion."""
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 22), b""):
            digest.update(block)
    return gguf_cache_root() / f"{path.stem}-{digest.hexdigest()[:20]}"


def load_gguf(directory: Path, gguf_file: str, dtype, *, cache: bool = True):
    """(model, tokenizer) from ``directory/gguf_file``, parsed first so a broken file is named.

    De-quantising takes tens of seconds, so the first load saves the fp32 model (safetensors,
    config, tokenizer) under :func:`converted_gguf_dir` and later loads read that instead
    (``cache=False`` skips both). The cache is written to a temporary folder and renamed into
    place, so a crashed or concurrent writer never leaves a half-written model to read."""
    path = directory / gguf_file
    if not path.is_file():
        raise PolicyLoadError(f"{path}: GGUF file missing (field 'gguf_file')")
    if not cache:
        return _read_gguf(directory, gguf_file, dtype)
    target = converted_gguf_dir(path)
    if (target / "config.json").is_file():
        return load_dir(target, dtype)
    import logging

    import torch

    logging.getLogger(__name__).info("de-quantising %s (once: the fp32 model is cached in %s)",
                                     path.name, target)
    model, tokenizer = _read_gguf(directory, gguf_file, torch.float32)  # the cache keeps fp32
    try:
        target.parent.mkdir(parents=True, exist_ok=True)
        tmp = Path(tempfile.mkdtemp(prefix=f".{target.name}-", dir=target.parent))
        # the tensors are de-quantised already: saved as a plain model, without the GGUF
        # quantizer (which refuses to serialise) or its config entry
        model.hf_quantizer = None
        if hasattr(model.config, "quantization_config"):
            del model.config.quantization_config
        model.save_pretrained(tmp)
        tokenizer.save_pretrained(tmp)
        try:
            tmp.rename(target)
        except OSError:  # another process got there first: its copy is the same model
            shutil.rmtree(tmp, ignore_errors=True)
    except OSError as e:  # an unwritable cache slows later loads, nothing more
        logging.getLogger(__name__).warning("GGUF cache %s not written: %s", target, e)
    return model.to(dtype), tokenizer


def _read_gguf(directory: Path, gguf_file: str, dtype):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    path = directory / gguf_file
    try:
        from gguf import GGUFReader

        reader = GGUFReader(str(path))
        arch = reader.fields.get("general.architecture")
    except (ValueError, OSError, KeyError, IndexError) as e:
        raise PolicyLoadError(f"{path}: not a valid GGUF file ({e})") from e
    if arch is None:
        raise PolicyLoadError(f"{path}: field 'general.architecture' missing")
    try:
        tokenizer = AutoTokenizer.from_pretrained(directory, gguf_file=gguf_file)
        model = AutoModelForCausalLM.from_pretrained(directory, gguf_file=gguf_file, dtype=dtype)
    except (ValueError, OSError, RuntimeError, KeyError) as e:
        raise PolicyLoadError(f"{path}: transformers cannot read this GGUF ({e})") from e
    return model, tokenizer
