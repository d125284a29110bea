"""Read a gate verdict back from MLflow: ``ratchet gates show VERSION``.

The model version's ``gate.run_id`` tag points at the gate run; its ``gate/verdict.json``
artifact is parsed into a :class:`~gating.records.GateVerdict` and printed with the same table
the HTML report shows.

Deliberately left out: running a gate (gating/gate.py).
"""

from __future__ import annotations

from gating.records import GateVerdict
from gating.report import format_table


def load_verdict(tracking_uri: str, model_name: str, version: int) -> GateVerdict | None:
    """The verdict recorded for ``version``, or None if it was never gated."""
    import mlflow
    from mlflow import MlflowClient

    client = MlflowClient(tracking_uri=tracking_uri, registry_uri=tracking_uri)
    mv = client.get_model_version(model_name, str(version))
    run_id = mv.tags.get("gate.run_id") if mv.tags else None
    if run_id is None:
        return None
    mlflow.set_tracking_uri(tracking_uri)
    text = mlflow.artifacts.load_text(f"runs:/{run_id}/gate/verdict.json")
    return GateVerdict.model_validate_json(text)


def format_gate_table(tracking_uri: str, model_name: str, version: int) -> str:
    """The gate table of ``version`` (or a line saying it has no verdict yet)."""
    verdict = load_verdict(tracking_uri, model_name, version)
    if verdict is None:
        return f"{model_name} v{version}: no gate verdict recorded"
    return format_table(verdict)
