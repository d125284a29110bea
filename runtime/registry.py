"""The checkpoint reference: how a checkpoint becomes an MLflow model version and back.

A checkpoint is a directory in its policy's own format: the toy's (``model.safetensors`` +
``config.json`` + ``metadata.json``, policy/toy/checkpoint.py) or a Hugging Face directory
(safetensors + ``config.json`` + tokenizer files, policy/hf.py); policy.loader.load_policy tells
them apart. It is logged as an MLflow "model from code" (runtime/mlflow_model.py) so
that loading it never unpickles, registered as a new version of one registered model, and
addressed by alias: ``champion`` serves, ``candidate`` waits for the gate, ``previous-champion``
is kept for rollback, ``anchor`` is what the holdback serves (set once, to the model's first
champion, and moved only by :func:`move_anchor`, i.e. ``ratchet anchor``; each move recorded).

Deliberately left out: deciding who gets an alias (gating/, deploy/) and the MLflow server's
lifecycle (runtime/services.py). mlflow is imported inside functions (it costs seconds).
"""

from __future__ import annotations

import logging
import os
import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path

CHAMPION = "champion"
CANDIDATE = "candidate"
PREVIOUS_CHAMPION = "previous-champion"
ANCHOR = "anchor"
ANCHOR_HISTORY = "ratchet.anchor.history"
"""Model tag: JSON list of the anchor's settings ({version, at, reason}), oldest first."""
_AUDIT_ANCHOR = "ratchet.audit.anchor"
"""The lifetime audit's record of the first champion (gating/audit.py), when it has one."""

_MODEL_CODE = Path(__file__).with_name("mlflow_model.py")
_REQUIREMENTS = ["torch==2.13.0", "safetensors", "mlflow==3.17.2"]
_HF_REQUIREMENTS = ["transformers==5.23.0", "tokenizers"]

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class CheckpointRef:
    """A registered checkpoint: registry name and version, and the run that logged it."""

    model_name: str
    version: int
    run_id: str | None

    @property
    def uri(self) -> str:
        return f"models:/{self.model_name}/{self.version}"


def _client(tracking_uri: str):
    from mlflow import MlflowClient

    return MlflowClient(tracking_uri=tracking_uri, registry_uri=tracking_uri)


def log_checkpoint(
    checkpoint_dir: Path,
    *,
    model_name: str,
    alias: str | None = None,
    tags: dict[str, str] | None = None,
) -> CheckpointRef:
    """Log ``checkpoint_dir`` in the active MLflow run and register it as a new version."""
    import mlflow

    from policy.config import checkpoint_format

    fmt = checkpoint_format(Path(checkpoint_dir))  # refuses a directory no policy can load
    with _mlflow_prints_off():
        info = mlflow.pyfunc.log_model(
            name="checkpoint",
            python_model=str(_MODEL_CODE),
            artifacts={"checkpoint": str(checkpoint_dir)},
            code_paths=None,
            registered_model_name=model_name,
            pip_requirements=_REQUIREMENTS + (_HF_REQUIREMENTS if fmt != "toy" else []),
        )
    version = int(info.registered_model_version)
    log.debug("registered %s version %d from %s", model_name, version, checkpoint_dir)
    client = _client(mlflow.get_tracking_uri())
    for key, value in (tags or {}).items():
        client.set_model_version_tag(model_name, str(version), key, value)
    if alias is not None:
        client.set_registered_model_alias(model_name, alias, str(version))
    run = mlflow.active_run()
    return CheckpointRef(model_name, version, run.info.run_id if run else None)


def _mlflow_prints_off():
    """Silence MLflow's ``eprint`` lines ("Created version '3' of model …") for a block.

    They are written straight to stderr, past logging, so the terminal would show two of them
    per cycle; the registry logs its own line to the log file instead. MLflow's own counted
    switch is used: a plain ``MLFLOW_LOGGING_STREAM.enabled = False`` is turned back on by
    log_model's inner blocks.
    """
    from mlflow.utils.autologging_utils.logging_and_warnings import (
        MlflowEventsAndWarningsBehaviorGlobally,
    )

    return MlflowEventsAndWarningsBehaviorGlobally(
        disable_event_logs=True, disable_warnings=False, reroute_warnings=False)


def resolve_alias(tracking_uri: str, model_name: str, alias: str) -> int | None:
    """The version an alias points to, or None if the alias is not set."""
    from mlflow.exceptions import MlflowException

    try:
        mv = _client(tracking_uri).get_model_version_by_alias(model_name, alias)
    except MlflowException:
        return None
    return int(mv.version)


def version_exists(tracking_uri: str, model_name: str, version: int) -> bool:
    """Whether ``model_name`` has version ``version`` (other registry errors are raised)."""
    from mlflow.exceptions import MlflowException

    try:
        _client(tracking_uri).get_model_version(model_name, str(version))
    except MlflowException as exc:
        if exc.error_code in ("RESOURCE_DOES_NOT_EXIST", "INVALID_PARAMETER_VALUE"):
            return False
        raise
    return True


EXPERIMENT_KIND = "mlflow.experimentKind"


def runs_page(tracking_uri: str, experiment: str) -> str:
    """The address of ``experiment``'s runs table in MLflow's UI. MLflow 3 opens an experiment in
    the browser's remembered workflow (GenAI by default: overview and traces); the
    ``workflowType`` parameter opens it on the runs instead.

    The experiment is looked up over MLflow's REST API, so ``ratchet ui`` prints the address
    without importing mlflow (seconds); a server that refuses the plain request (one with
    authentication) is asked through ``MlflowClient``, which knows the credentials."""
    import json
    import urllib.error
    import urllib.parse
    import urllib.request

    query = urllib.parse.urlencode({"experiment_name": experiment})
    url = f"{tracking_uri}/api/2.0/mlflow/experiments/get-by-name?{query}"
    try:
        with urllib.request.urlopen(url, timeout=30) as resp:
            experiment_id = json.load(resp)["experiment"]["experiment_id"]
    except urllib.error.HTTPError as e:
        if e.code == 404:  # RESOURCE_DOES_NOT_EXIST: no run has been logged yet
            return tracking_uri
        from mlflow import MlflowClient

        exp = MlflowClient(tracking_uri=tracking_uri).get_experiment_by_name(experiment)
        if exp is None:
            return tracking_uri
        experiment_id = exp.experiment_id
    return f"{tracking_uri}/#/experiments/{experiment_id}?workflowType=machine_learning"


def use_experiment(tracking_uri: str, name: str) -> str:
    """Make ``name`` the active experiment (created if missing) and return its id. It is marked
    a model-development experiment, so MLflow's UI opens it on its runs table (not on the GenAI
    overview and traces pages it shows an experiment of unknown kind)."""
    import mlflow

    mlflow.set_tracking_uri(tracking_uri)
    exp = mlflow.set_experiment(name)
    if exp.tags.get(EXPERIMENT_KIND) is None:
        _client(tracking_uri).set_experiment_tag(exp.experiment_id, EXPERIMENT_KIND,
                                                 "custom_model_development")
    return exp.experiment_id


def set_alias(tracking_uri: str, model_name: str, alias: str, version: int) -> None:
    _client(tracking_uri).set_registered_model_alias(model_name, alias, str(version))


ABANDONED = "ratchet.abandoned"
"""Version tag of a candidate whose cycle will never gate it; such a version is never promoted."""
AUDIT_VERDICT = "audit.verdict"
"""Version tag of the lifetime audit's outcome (gating/audit.py): a version whose audit failed
(``fail``) is never promoted again."""


class PromotionRefused(RuntimeError):
    """``promote`` refused to move ``champion``."""


class ChampionMoved(PromotionRefused):
    """``promote(expected=...)`` found ``champion`` on another version than expected."""


class VersionAbandoned(PromotionRefused):
    """``promote`` was asked to promote a version tagged ``ratchet.abandoned``."""


class VersionFailedAudit(PromotionRefused):
    """``promote`` was asked to promote a version whose lifetime audit failed."""


_UNSET = object()


def promote(
    tracking_uri: str, model_name: str, version: int, *, expected: object = _UNSET
) -> int | None:
    """Move ``champion`` to ``version``; the old champion becomes ``previous-champion``.

    With ``expected`` (a version, or None for "no champion yet") this is compare-and-set: the
    alias is re-read right before it moves and ``ChampionMoved`` is raised if it no longer points
    at ``expected`` (a candidate gated against one champion never replaces another). MLflow has
    no server-side CAS: the re-read and the write are two calls (see runtime/lease.py).
    A version tagged ``ratchet.abandoned`` is never promoted (``VersionAbandoned``), nor one
    whose lifetime audit failed (``VersionFailedAudit``; the audit records its verdict on the
    version before it moves ``champion`` back, so no order of crashes lets it return).
    """
    tags = version_tags(tracking_uri, model_name, version)
    if ABANDONED in tags:
        raise VersionAbandoned(f"{model_name}: v{version} is tagged abandoned ({tags[ABANDONED]})")
    if tags.get(AUDIT_VERDICT) == "fail":
        raise VersionFailedAudit(f"{model_name}: v{version} failed the lifetime audit (run "
                                 f"{tags.get('audit.run_id', '?')})")
    old = resolve_alias(tracking_uri, model_name, CHAMPION)
    if expected is not _UNSET and old != expected and old != version:
        raise ChampionMoved(
            f"{model_name}: champion is v{old}, not v{expected} that v{version} was gated against"
        )
    client = _client(tracking_uri)
    if old is not None and old != version:
        client.set_registered_model_alias(model_name, PREVIOUS_CHAMPION, str(old))
    client.set_registered_model_alias(model_name, CHAMPION, str(version))
    return old


def roll_back(
    tracking_uri: str, model_name: str, *, canary: int, stable: int, previous: int | None
) -> None:
    """Undo ``promote(canary)``: ``champion`` back to ``stable``, ``previous-champion`` to
    ``previous`` (removed if None). Compare-and-set: ``ChampionMoved`` if ``champion`` is neither
    the canary nor already the stable version (someone else promoted meanwhile)."""
    current = resolve_alias(tracking_uri, model_name, CHAMPION)
    if current not in (canary, stable):
        raise ChampionMoved(
            f"{model_name}: champion is v{current}, not the canary v{canary} being rolled back"
        )
    client = _client(tracking_uri)
    client.set_registered_model_alias(model_name, CHAMPION, str(stable))
    if previous is None:
        if resolve_alias(tracking_uri, model_name, PREVIOUS_CHAMPION) is not None:
            client.delete_registered_model_alias(model_name, PREVIOUS_CHAMPION)
    else:
        client.set_registered_model_alias(model_name, PREVIOUS_CHAMPION, str(previous))


def version_tags(tracking_uri: str, model_name: str, version: int) -> dict[str, str]:
    mv = _client(tracking_uri).get_model_version(model_name, str(version))
    return dict(mv.tags)


def versions_of_run(tracking_uri: str, model_name: str, run_id: str) -> list[int]:
    """Versions of ``model_name`` registered from run ``run_id`` (oldest first)."""
    found = _client(tracking_uri).search_model_versions(f"run_id = '{run_id}'")
    return sorted(int(mv.version) for mv in found if mv.name == model_name)


def delete_alias(tracking_uri: str, model_name: str, alias: str) -> None:
    _client(tracking_uri).delete_registered_model_alias(model_name, alias)


def set_version_tags(
    tracking_uri: str, model_name: str, version: int, tags: dict[str, str],
    description: str | None = None,
) -> None:
    client = _client(tracking_uri)
    for key, value in tags.items():
        client.set_model_version_tag(model_name, str(version), key, value)
    if description is not None:
        client.update_model_version(model_name, str(version), description=description)


def download_checkpoint(tracking_uri: str, model_name: str, version: int, dst: Path) -> Path:
    """Download version ``version`` into ``dst`` and return the checkpoint directory in it."""
    os.environ.setdefault("MLFLOW_ENABLE_ARTIFACTS_PROGRESS_BAR", "false")
    import mlflow

    target = dst / f"{model_name}-v{version}"
    if found := _checkpoint_in(target):
        return found
    # Several replicas may share ``dst``: each downloads into its own temporary folder and the
    # first complete one is renamed into place (a rename onto a non-empty folder fails).
    dst.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{model_name}-v{version}.", dir=dst))
    try:
        mlflow.set_tracking_uri(tracking_uri)
        mlflow.artifacts.download_artifacts(
            artifact_uri=f"models:/{model_name}/{version}", dst_path=str(tmp)
        )
        try:
            tmp.rename(target)
        except OSError:
            if _checkpoint_in(target) is None:
                raise
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    found = _checkpoint_in(target)
    if found is None:
        raise FileNotFoundError(f"models:/{model_name}/{version} holds no checkpoint "
                                "(config.json + safetensors)")
    return found


def _checkpoint_in(model_dir: Path) -> Path | None:
    """MLflow keeps the logged directory's own name under ``artifacts/``; a checkpoint has a
    config.json and safetensors weights (one file, or shards for a large HF model)."""
    hits = sorted(p.parent for p in model_dir.glob("artifacts/*/config.json")
                  if any(p.parent.glob("*.safetensors")))
    return hits[0] if hits else None


def model_tags(tracking_uri: str, model_name: str) -> dict[str, str]:
    """Tags of the registered model (state that outlives any one version, e.g. alpha spending)."""
    return dict(_client(tracking_uri).get_registered_model(model_name).tags or {})


def set_model_tags(tracking_uri: str, model_name: str, tags: dict[str, str]) -> None:
    client = _client(tracking_uri)
    for key, value in tags.items():
        client.set_registered_model_tag(model_name, key, value)


def ensure_anchor(tracking_uri: str, model_name: str) -> int | None:
    """The ``anchor`` version; when the model has none yet it becomes the model's first champion
    (the lifetime audit's record of it, else the current ``champion``). None without a champion.
    """
    version = resolve_alias(tracking_uri, model_name, ANCHOR)
    if version is not None:
        return version
    first = model_tags(tracking_uri, model_name).get(_AUDIT_ANCHOR)
    version = int(first) if first else resolve_alias(tracking_uri, model_name, CHAMPION)
    if version is None:
        return None
    _record_anchor(tracking_uri, model_name, version, "the model's first champion")
    return version


def move_anchor(tracking_uri: str, model_name: str, version: int, reason: str) -> int | None:
    """Point ``anchor`` at ``version`` (an explicit act, recorded with ``reason`` in the model's
    :data:`ANCHOR_HISTORY`); returns the version it pointed at before."""
    if not version_exists(tracking_uri, model_name, version):
        raise ValueError(f"{model_name} has no version {version}")
    if not reason.strip():
        raise ValueError("moving the anchor needs a reason")
    before = resolve_alias(tracking_uri, model_name, ANCHOR)
    _record_anchor(tracking_uri, model_name, version, reason)
    return before


def _record_anchor(tracking_uri: str, model_name: str, version: int, reason: str) -> None:
    import json
    from datetime import UTC, datetime

    history = json.loads(model_tags(tracking_uri, model_name).get(ANCHOR_HISTORY) or "[]")
    history.append({"version": version, "at": datetime.now(UTC).isoformat(timespec="seconds"),
                    "reason": reason[:500]})
    text = json.dumps(history)
    while len(text) > 4900 and len(history) > 2:  # a tag holds 5,000 characters: keep the first
        del history[1]
        text = json.dumps(history)
    set_model_tags(tracking_uri, model_name, {ANCHOR_HISTORY: text})
    set_alias(tracking_uri, model_name, ANCHOR, version)
