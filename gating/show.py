"""Read a gate verdict back from MLflow: ``ratchet gates show VERSION``.

The model version's ``gate.run_id`` tag points at the gate run; its ``gate/verdict.json``
artifact is parsed into a :class:`~gating.records.GateVerdict` and printed with the same table
the HTML report shows. From a tracking server, or straight from a local store that
``runtime.services.MlflowServer`` wrote (its sqlite database and artifacts folder: no server).

Deliberately left out: running a gate (gating/gate.py).
"""

from __future__ import annotations

from pathlib import Path

from gating.records import GateVerdict
from gating.report import format_table


class GateLookupError(LookupError):
    """The server cannot be reached or has no such version; the message is one line."""


REACH_TIMEOUT_S = 5.0


def check_reachable(tracking_uri: str, timeout_s: float = REACH_TIMEOUT_S) -> None:
    """Fail in seconds (not after MLflow's minutes of retries) when the server is not there."""
    import urllib.error
    import urllib.request

    if not tracking_uri.startswith(("http://", "https://")):
        return  # a file or database store: nothing to reach
    try:
        with urllib.request.urlopen(tracking_uri.rstrip("/") + "/health", timeout=timeout_s):
            pass
    except (urllib.error.URLError, OSError) as e:
        reason = getattr(e, "reason", e)
        raise GateLookupError(f"MLflow at {tracking_uri} is not reachable ({reason})") from None


def local_store(workdir: Path) -> tuple[str, Path]:
    """The tracking URI and artifacts folder of the MLflow store under ``workdir`` (as
    ``ratchet demo`` leaves it in ``WORKDIR/mlflow``)."""
    root = Path(workdir) / "mlflow"
    if not (root / "mlflow.db").exists():
        raise GateLookupError(f"{workdir} holds no MLflow store ({root / 'mlflow.db'} is missing)")
    return f"sqlite:///{root / 'mlflow.db'}", root / "artifacts"


def load_verdict(
    tracking_uri: str, model_name: str, version: int, artifacts_root: Path | None = None
) -> GateVerdict | None:
    """The verdict recorded for ``version``, or None if it was never gated. With
    ``artifacts_root`` (a local store), artifacts are read from that folder directly."""
    check_reachable(tracking_uri)  # before importing mlflow: a refusal costs no import
    import mlflow
    from mlflow import MlflowClient
    from mlflow.exceptions import MlflowException

    client = MlflowClient(tracking_uri=tracking_uri, registry_uri=tracking_uri)
    try:
        mv = client.get_model_version(model_name, str(version))
    except MlflowException as e:
        if e.error_code in ("RESOURCE_DOES_NOT_EXIST", "INVALID_PARAMETER_VALUE"):
            raise GateLookupError(f"{model_name} has no version {version}") from None
        raise
    run_id = mv.tags.get("gate.run_id") if mv.tags else None
    if run_id is None:
        return None
    if artifacts_root is not None:  # mlflow-artifacts:/EXP/RUN/artifacts, served from the root
        uri = client.get_run(run_id).info.artifact_uri
        path = Path(artifacts_root) / uri.removeprefix("mlflow-artifacts:/") / "gate/verdict.json"
        return GateVerdict.model_validate_json(path.read_text())
    mlflow.set_tracking_uri(tracking_uri)
    text = mlflow.artifacts.load_text(f"runs:/{run_id}/gate/verdict.json")
    return GateVerdict.model_validate_json(text)


def format_gate_table(
    tracking_uri: str, model_name: str, version: int, artifacts_root: Path | None = None
) -> str:
    """The gate table of ``version`` (or a line saying it has no verdict yet)."""
    verdict = load_verdict(tracking_uri, model_name, version, artifacts_root)
    if verdict is None:
        return f"{model_name} v{version}: no gate verdict recorded"
    return format_table(verdict)
