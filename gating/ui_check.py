"""Check in a real headless browser that the MLflow UI shows a gate's verdict.

Opens the gate run page and the model version page of the MLflow UI in headless Chromium
(Debian's ``chromium`` package), lets the single-page app render, and checks the rendered DOM:
the run page must show the run name and the ``gate.verdict`` tag with its value; the model
version page must show the ``gate.verdict`` tag and the verdict line of the description. A
screenshot of each page is written to ``--out`` (default ``screenshots/``, ignored by git).

Usage::

    python -m gating.ui_check --tracking-uri http://127.0.0.1:5000 --model toy --version 3

Deliberately left out: clicking through the UI (no WebDriver session; ``--dump-dom`` and
``--screenshot`` of the rendered page are enough to prove what a reviewer sees).
"""

from __future__ import annotations

import argparse
import shutil
import subprocess
import sys
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

FLAGS = (
    "--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
    "--disable-component-update", "--disable-sync", "--no-first-run",
    "--disable-dev-shm-usage", "--hide-scrollbars",
)


def find_chromium() -> str | None:
    for name in ("chromium", "chromium-browser", "google-chrome"):
        path = shutil.which(name)
        if path:
            return path
    return None


@dataclass
class PageCheck:
    """What one page showed: which expected strings were found and where the screenshot is."""

    url: str
    expected: list[str]
    missing: list[str] = field(default_factory=list)
    screenshot: Path | None = None

    @property
    def ok(self) -> bool:
        return not self.missing


def _chromium(binary: str, args: list[str], url: str, timeout_s: float) -> str:
    with tempfile.TemporaryDirectory(prefix="chromium-profile-") as profile:
        argv = [binary, *FLAGS, f"--user-data-dir={profile}", "--virtual-time-budget=20000",
                *args, url]
        proc = subprocess.run(argv, capture_output=True, timeout=timeout_s, text=True)
    if proc.returncode != 0:
        raise RuntimeError(f"chromium exited {proc.returncode}: {proc.stderr[-500:]}")
    return proc.stdout


def check_page(binary: str, url: str, expected: list[str], screenshot: Path, *,
               timeout_s: float = 90.0) -> PageCheck:
    """Render ``url``, look for every ``expected`` string in the DOM, save a screenshot."""
    dom = _chromium(binary, ["--dump-dom"], url, timeout_s)
    screenshot.parent.mkdir(parents=True, exist_ok=True)
    _chromium(binary, [f"--screenshot={screenshot}", "--window-size=1400,1800"], url, timeout_s)
    return PageCheck(url=url, expected=expected, missing=[s for s in expected if s not in dom],
                     screenshot=screenshot if screenshot.exists() else None)


def check_gate_in_ui(tracking_uri: str, model_name: str, version: int, *, out: Path,
                     chromium: str | None = None) -> list[PageCheck]:
    """Check the gate run page and the model version page of ``version``."""
    from mlflow import MlflowClient

    binary = chromium or find_chromium()
    if binary is None:
        raise FileNotFoundError("no chromium binary on PATH (apt-get install -y chromium)")
    client = MlflowClient(tracking_uri=tracking_uri, registry_uri=tracking_uri)
    mv = client.get_model_version(model_name, str(version))
    run_id, verdict = mv.tags["gate.run_id"], mv.tags["gate.verdict"]
    run = client.get_run(run_id)
    base = tracking_uri.rstrip("/")
    run_url = f"{base}/#/experiments/{run.info.experiment_id}/runs/{run_id}"
    mv_url = f"{base}/#/models/{model_name}/versions/{version}"
    headline = f"Gate {verdict.upper()}"
    return [
        check_page(binary, run_url, [run.info.run_name, "gate.verdict", verdict],
                   out / f"gate-run-{run_id[:8]}.png"),
        check_page(binary, mv_url, ["gate.verdict", headline, run_id],
                   out / f"{model_name}-v{version}.png"),
    ]


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--tracking-uri", required=True)
    p.add_argument("--model", required=True)
    p.add_argument("--version", type=int, required=True)
    p.add_argument("--out", type=Path, default=Path("screenshots"))
    args = p.parse_args(argv)
    pages = check_gate_in_ui(args.tracking_uri, args.model, args.version, out=args.out)
    for page in pages:
        status = "ok" if page.ok else f"MISSING {page.missing}"
        print(f"{status}: {page.url} (screenshot {page.screenshot})")
    return 0 if all(p.ok for p in pages) else 1


if __name__ == "__main__":
    sys.exit(main())
