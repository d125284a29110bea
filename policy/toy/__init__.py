"""The toy MoE policy: model, byte tokenizer, generation and checkpoint format."""
