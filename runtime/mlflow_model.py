"""MLflow "model from code" for a ratchet checkpoint.

MLflow stores this file beside the checkpoint (safetensors + JSON config); loading the logged model
runs this code, which reads the weights with safetensors — nothing is unpickled. ``predict`` takes
a list of prompts (or a DataFrame with a ``prompt`` column) and returns greedy completions, so the
model can be tried from the MLflow UI or ``mlflow.pyfunc.load_model``. The serving fleet does not
go through pyfunc: it downloads the checkpoint directory and loads it directly.
"""

from __future__ import annotations

import mlflow
from mlflow.pyfunc import PythonModel


class RatchetCheckpoint(PythonModel):
    def load_context(self, context):
        from policy.toy.checkpoint import load_checkpoint

        self.model = load_checkpoint(context.artifacts["checkpoint"])

    def predict(self, context, model_input, params=None):
        from policy.toy.generate import generate

        prompts = (
            list(model_input["prompt"]) if hasattr(model_input, "columns") else list(model_input)
        )
        max_new_tokens = int((params or {}).get("max_new_tokens", 32))
        gens = generate(self.model, prompts, max_new_tokens=max_new_tokens, temperature=0.0, seed=0)
        return [g.text for g in gens]


mlflow.models.set_model(RatchetCheckpoint())
