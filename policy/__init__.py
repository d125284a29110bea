"""The policy plug: what the loop needs from a model, and the models behind it.

``policy.base`` holds the :class:`~policy.base.Policy` protocol (token log-probs with router
replay, MoE spec, tokenizer ids, generate, save); ``policy.config`` the tagged ``PolicyConfig``
union (``toy`` | ``hf``) and ``checkpoint_format``; ``policy.loader`` picks the implementation
(``load_policy`` for a config or a checkpoint directory, ``as_policy`` for a bare toy model).
Neither the protocol nor the config imports an implementation.
Implementations: ``policy.toy`` (the home-made 1M-parameter MoE: byte tokenizer, own generate loop,
safetensors checkpoint; ``policy.toy.adapter`` puts it behind the protocol) and ``policy.hf``
(Hugging Face causal LMs, dense or MoE: Qwen3-MoE, Qwen2-MoE, OLMoE, Mixtral; GGUF via
``gguf_file``). ``policy.tiny`` builds tiny random HF models with a locally trained BPE tokenizer;
``policy.upcycle`` turns a dense HF model into an MoE. This package sits on the bottom floor:
stages import it, it imports no stage.
"""
