"""The policy plug: what the loop needs from a model, and the models behind it.

``policy.toy`` is the home-made 1M-parameter MoE (byte tokenizer, own generate loop, safetensors
checkpoint). This package sits on the bottom floor: stages import it, it imports no stage.
"""
