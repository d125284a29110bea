"""MLflow "model from code" for a ratchet checkpoint, toy or Hugging Face.

MLflow stores this file beside the checkpoint directory (the toy's safetensors + JSON config, or an
HF directory: safetensors + config + tokenizer); loading the logged model runs this code, which
hands the directory to ``policy.loader.load_policy`` (the format is detected from its files) —
nothing is unpickled. ``predict`` takes a list of prompts (or a DataFrame with a ``prompt`` column)
and returns greedy completions, so the model can be tried from the MLflow UI or
``mlflow.pyfunc.load_model``. The serving fleet does not go through pyfunc: it downloads the
checkpoint directory and loads it directly.
"""

from __future__ import annotations

import mlflow
from mlflow.pyfunc import PythonModel


class RatchetCheckpoint(PythonModel):
    def load_context(self, context):
        from policy.loader import load_policy

        self.policy = load_policy(context.artifacts["checkpoint"])

    def predict(self, context, model_input, params=None):
        prompts = (
            list(model_input["prompt"]) if hasattr(model_input, "columns") else list(model_input)
        )
        max_new_tokens = int((params or {}).get("max_new_tokens", 32))
        ids = [self.policy.encode_prompt(p) for p in prompts]
        gens = self.policy.generate(ids, max_new_tokens=max_new_tokens, temperature=0.0, seed=0)
        return [g.text for g in gens]


mlflow.models.set_model(RatchetCheckpoint())
