"""Tiny random-init Hugging Face models with a locally trained tokenizer: no hub download.

``build_tokenizer(vocab, seed)`` trains a byte-level BPE (``tokenizers``) on the toy tasks'
prompts and answers (tasks/toy.py) and wraps it as a ``PreTrainedTokenizerFast`` with BOS, EOS and
PAD set (prompts get BOS prepended). ``build_model(spec)`` makes the HF config of the family in a
:class:`policy.config.TinyHFSpec` and a random model from it; ``materialize(spec, dir)`` saves both
with ``save_pretrained`` (safetensors + config + tokenizer), the directory every loader reads.
Left out: pretrained weights of any kind.
"""

from __future__ import annotations

from pathlib import Path

from policy.config import TinyHFSpec

BOS, EOS, PAD = "<|bos|>", "<|endoftext|>", "<|pad|>"


def _corpus(seed: int, n: int = 3000) -> list[str]:
    from tasks.toy import generate_tasks

    tasks = generate_tasks(n, seed, "train") + generate_tasks(n // 4, seed, "heldout")
    return [t.prompt + t.reference + "\n" for t in tasks]


def build_tokenizer(vocab: int = 512, seed: int = 0):
    """A ``PreTrainedTokenizerFast``: byte-level BPE of ``vocab`` ids trained on the toy tasks."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors, trainers
    from transformers import PreTrainedTokenizerFast

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=vocab, special_tokens=[PAD, BOS, EOS],
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
                                  show_progress=False)
    tok.train_from_iterator(_corpus(seed), trainer=trainer)
    tok.post_processor = processors.TemplateProcessing(
        single=f"{BOS} $A", special_tokens=[(BOS, tok.token_to_id(BOS))])
    return PreTrainedTokenizerFast(tokenizer_object=tok, bos_token=BOS, eos_token=EOS,
                                   pad_token=PAD, model_max_length=1 << 20)


def hf_config(spec: TinyHFSpec, *, vocab_size: int, special: dict[str, int]):
    """The ``transformers`` config of ``spec.family`` at the tiny shape."""
    import transformers

    common = dict(vocab_size=vocab_size, hidden_size=spec.hidden, num_hidden_layers=spec.layers,
                  num_attention_heads=spec.heads, num_key_value_heads=spec.kv_heads,
                  intermediate_size=spec.intermediate, max_position_embeddings=spec.max_positions,
                  tie_word_embeddings=False, **special)
    moe = dict(num_experts_per_tok=spec.top_k)
    f = spec.family
    if f in ("qwen3_moe", "qwen2_moe"):
        cls = transformers.Qwen3MoeConfig if f == "qwen3_moe" else transformers.Qwen2MoeConfig
        extra = dict(shared_expert_intermediate_size=spec.moe_intermediate) if f == "qwen2_moe" \
            else dict(head_dim=spec.hidden // spec.heads)
        return cls(**common, **moe, **extra, num_experts=spec.experts,
                   moe_intermediate_size=spec.moe_intermediate, norm_topk_prob=spec.norm_topk_prob,
                   mlp_only_layers=list(spec.mlp_only_layers),
                   decoder_sparse_step=spec.decoder_sparse_step)
    if f == "olmoe":
        return transformers.OlmoeConfig(**{**common, "intermediate_size": spec.moe_intermediate},
                                        **moe, num_experts=spec.experts,
                                        norm_topk_prob=spec.norm_topk_prob)
    if f == "mixtral":
        return transformers.MixtralConfig(**{**common, "intermediate_size": spec.moe_intermediate},
                                          **moe, num_local_experts=spec.experts)
    cls = {"llama": transformers.LlamaConfig, "qwen2": transformers.Qwen2Config,
           "qwen3": transformers.Qwen3Config}[f]
    return cls(**common)


def build_model(spec: TinyHFSpec, tokenizer=None):
    """(model, tokenizer): a random-init causal LM of ``spec`` and its local BPE tokenizer."""
    import torch
    from transformers import AutoModelForCausalLM

    tokenizer = tokenizer or build_tokenizer(spec.vocab, spec.seed)
    special = dict(bos_token_id=tokenizer.bos_token_id, eos_token_id=tokenizer.eos_token_id,
                   pad_token_id=tokenizer.pad_token_id)
    config = hf_config(spec, vocab_size=len(tokenizer), special=special)
    torch.manual_seed(spec.seed)
    model = AutoModelForCausalLM.from_config(config, dtype=torch.float32)
    return model.eval(), tokenizer


def materialize(spec: TinyHFSpec, directory: Path) -> Path:
    """Build ``spec`` and ``save_pretrained`` model and tokenizer into ``directory``."""
    directory = Path(directory)
    if (directory / "config.json").exists() and (directory / "model.safetensors").exists():
        return directory
    model, tokenizer = build_model(spec)
    directory.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(directory)
    tokenizer.save_pretrained(directory)
    return directory
