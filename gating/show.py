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
        raise NoStore(f"{workdir} holds no MLflow store ({root / 'mlflow.db'} is missing)")
    return f"sqlite:///{root / 'mlflow.db'}", root / "artifacts"


def load_verdict(
    tracking_uri: str, model_name: str, version: int, artifacts_root: Path | None = None
) -> GateVerdict | None:
    """The verdict recorded for ``version``, or None if it was never gated. With
    ``artifacts_root`` (a local store), artifacts are read from that folder directly. Neither
    path imports mlflow (about 10 s): a local store is read with sqlite3, a server over its REST
    API, so the answer comes in about a second."""
    if tracking_uri.startswith("sqlite:///"):
        return _load_local(Path(tracking_uri.removeprefix("sqlite:///")), model_name, version,
                           artifacts_root)
    check_reachable(tracking_uri)
    return _load_remote(tracking_uri.rstrip("/"), model_name, version)


class VersionNotFound(GateLookupError):
    """The registry has no such model version (the command exits 2: a bad argument)."""


class NoStore(GateLookupError):
    """The workdir given holds no MLflow store (the operator's mistake: exit code 2)."""


def _load_local(db: Path, model_name: str, version: int,
                artifacts_root: Path | None) -> GateVerdict | None:
    import sqlite3

    try:
        con = sqlite3.connect(f"file:{db}?mode=ro", uri=True)
    except sqlite3.Error as e:
        raise GateLookupError(f"{db} is not a readable MLflow store ({e})") from None
    try:
        return _read_local(con, db, model_name, version, artifacts_root)
    except sqlite3.Error as e:
        raise GateLookupError(f"{db} is not a readable MLflow store ({e})") from None
    finally:
        con.close()


def _read_local(con, db: Path, model_name: str, version: int,
                artifacts_root: Path | None) -> GateVerdict | None:
    if con.execute("SELECT 1 FROM model_versions WHERE name = ? AND version = ?",
                   (model_name, version)).fetchone() is None:
        raise VersionNotFound(f"{model_name} has no version {version}")
    tag = con.execute("SELECT value FROM model_version_tags WHERE name = ? AND version = ? "
                      "AND key = 'gate.run_id'", (model_name, version)).fetchone()
    if tag is None:
        return None
    row = con.execute("SELECT artifact_uri FROM runs WHERE run_uuid = ?", tag).fetchone()
    if row is None:
        raise GateLookupError(f"{model_name} v{version}: gate run {tag[0]} is not in {db}")
    root = Path(artifacts_root) if artifacts_root is not None else db.parent / "artifacts"
    # mlflow-artifacts:/EXP/RUN/artifacts, served from the root
    path = root / row[0].removeprefix("mlflow-artifacts:/") / "gate" / "verdict.json"
    return GateVerdict.model_validate_json(path.read_text())


def _get(url: str) -> bytes | None:
    """The body of a GET, None on a 404."""
    import urllib.error
    import urllib.request

    try:
        with urllib.request.urlopen(url, timeout=REACH_TIMEOUT_S * 6) as r:
            return r.read()
    except urllib.error.HTTPError as e:
        if e.code == 404:
            return None
        raise GateLookupError(f"{url}: HTTP {e.code}") from None


def _load_remote(base: str, model_name: str, version: int) -> GateVerdict | None:
    import json
    from urllib.parse import urlencode

    body = _get(f"{base}/api/2.0/mlflow/model-versions/get?"
                + urlencode({"name": model_name, "version": str(version)}))
    if body is None:
        raise VersionNotFound(f"{model_name} has no version {version}")
    tags = {t["key"]: t["value"] for t in json.loads(body)["model_version"].get("tags", [])}
    run_id = tags.get("gate.run_id")
    if run_id is None:
        return None
    text = _get(f"{base}/get-artifact?"
                + urlencode({"path": "gate/verdict.json", "run_uuid": run_id}))
    if text is None:
        raise GateLookupError(f"{model_name} v{version}: gate run {run_id} has no verdict.json")
    return GateVerdict.model_validate_json(text)


def format_gate_table(
    tracking_uri: str, model_name: str, version: int, artifacts_root: Path | None = None
) -> str:
    """The gate table of ``version`` (or a line saying it has no verdict yet)."""
    verdict = load_verdict(tracking_uri, model_name, version, artifacts_root)
    if verdict is None:
        return f"{model_name} v{version}: no gate verdict recorded"
    return format_table(verdict)
