"""Span lineage in MLflow: log the spans a run used as ``mlflow.data`` inputs.

Each span becomes a ``MetaDataset`` (no data is copied): its source is the span's Parquet file,
its digest the file's SHA-256, and its tags carry what the span's manifest says it covers (the
offset range per topic partition, schema version, rows, validation status). A checkpoint's
training run thus traces back to the exact Kafka offsets of its events.

mlflow is imported inside the function (its import costs seconds). Deliberately left out:
starting runs (the caller's), and reading the rows (ingest/spans.py).
"""

from __future__ import annotations

import hashlib
import json
import warnings
from pathlib import Path


def file_digest(path: Path) -> str:
    """SHA-256 of a file, or of a folder's files in name order (a span's parts), hex, first 16
    characters."""
    h = hashlib.sha256()
    path = Path(path)
    files = sorted(p for p in path.iterdir() if p.is_file()) if path.is_dir() else [path]
    for file in files:
        with open(file, "rb") as f:
            for block in iter(lambda f=f: f.read(1 << 20), b""):
                h.update(block)
    return h.hexdigest()[:16]


def span_tags(manifest_dir: Path) -> dict[str, str]:
    """Tags describing one span, from its manifest."""
    m = json.loads((Path(manifest_dir) / "manifest.json").read_text())
    return {
        "ratchet.span_id": m["span_id"],
        "ratchet.schema_version": str(m["schema_version"]),
        "ratchet.rows": str(m["rows"]),
        "ratchet.status": m["status"],
        "ratchet.offsets": json.dumps(m["offsets"], separators=(",", ":"))[:5000],
    }


def log_span_input(span_file: Path, manifest_dir: Path, context: str = "training") -> None:
    """Log one span as an input of the active MLflow run (``SpanResult.path``/``.manifest``)."""
    import mlflow
    from mlflow.data.dataset_source_registry import resolve_dataset_source
    from mlflow.data.meta_dataset import MetaDataset

    span_file = Path(span_file).resolve()
    tags = span_tags(manifest_dir)
    with warnings.catch_warnings():  # two equivalent local sources are registered
        warnings.simplefilter("ignore", UserWarning)
        source = resolve_dataset_source(str(span_file))
    dataset = MetaDataset(
        source=source, name=tags["ratchet.span_id"], digest=file_digest(span_file)
    )
    mlflow.log_input(dataset, context=context, tags=tags)
