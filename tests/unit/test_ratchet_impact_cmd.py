"""`ratchet impact`: the champion against the holdback, printed from the workdir's files."""

import json
import subprocess
import sys

import pyarrow.parquet as pq

from deploy.fleet.impact import impact_table, write_impact
from ratchet.cli import EXIT_USAGE, main
from tests.unit.deploy.test_impact import _table


def _workdir(tmp_path):
    """A workdir with one committed span of planted rows and the latest cycle's table."""
    from ingest.spans import SpanStore

    rows = _table(400)
    spans = tmp_path / "spans"
    store = SpanStore(spans)
    (store.manifests / "span-000001").mkdir(parents=True)
    pq.write_table(rows, spans / "span-000001.parquet")
    (store.manifests / "span-000001" / "manifest.json").write_text(json.dumps(
        {"span_id": "span-000001", "status": "ok", "files": ["span-000001.parquet"]}))
    write_impact(impact_table(rows, model_name="m", champion_version=3, anchor_version=1),
                 tmp_path / "impact", 1)
    return tmp_path


def test_impact_prints_the_table_without_heavy_imports(tmp_path):
    workdir = _workdir(tmp_path)
    code = ("import sys; from ratchet.cli import main; "
            f"rc = main(['impact', '--workdir', {str(workdir)!r}]); "
            "heavy = [m for m in ('mlflow', 'torch', 'apache_beam') if m in sys.modules]; "
            "assert not heavy, heavy; sys.exit(rc)")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert "champion v3 vs holdback on anchor v1" in proc.stdout
    assert "edit_persistence_600" in proc.stdout and "always-valid" in proc.stdout


def test_impact_without_a_cycle_says_so(tmp_path, capsys):
    assert main(["impact", "--workdir", str(tmp_path)]) == EXIT_USAGE
    assert "no impact table" in capsys.readouterr().err
