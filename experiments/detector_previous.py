"""The previous detector generation against the current one on the real evaluation half, paired.

    python experiments/detector_previous.py [--rev 7aabd0d]

Extracts ``ingest/detector`` as it was at ``rev`` (the last commit of the first generation,
``fu-018022c03a14``) into a temporary folder with ``git archive``, scores the ``eval`` half of
the real follow-ups with it and with the current detector, and reports both AUCs and their
paired difference with a 95% bootstrap interval that resamples conversations (2,000
resamples, seed 0). Writes ``bench/results/detector_previous.json``. Measures; chooses nothing.
"""

from __future__ import annotations

import argparse
import io
import json
import random
import subprocess
import sys
import tarfile
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def _auc(s: list[float], y: list[int]) -> float:
    pos = [a for a, b in zip(s, y) if b]
    neg = [a for a, b in zip(s, y) if not b]
    return sum((p > n) + 0.5 * (p == n) for p in pos for n in neg) / (len(pos) * len(neg))


def _previous_scores(rev: str, items) -> tuple[str, list[float]]:
    raw = subprocess.run(["git", "-C", str(ROOT), "archive", rev, "ingest/detector"],
                         check=True, capture_output=True).stdout
    code = (
        "import json, sys\n"
        "from ingest.detector import detect, detector_version\n"
        "items = json.load(sys.stdin)\n"
        "print(json.dumps([detector_version(), [detect(t, p, None).score for t, p in items]]))\n"
    )
    with tempfile.TemporaryDirectory() as d:
        tarfile.open(fileobj=io.BytesIO(raw)).extractall(d, filter="data")
        (Path(d) / "ingest" / "__init__.py").write_text("")
        out = subprocess.run([sys.executable, "-c", code], cwd=d, check=True, text=True,
                             input=json.dumps([[f.text, f.prompt] for f in items]),
                             capture_output=True, env={"PYTHONPATH": d}).stdout
    version, scores = json.loads(out)
    return version, scores


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rev", default="7aabd0d", help="Commit of the previous generation.")
    args = ap.parse_args(argv)
    sys.path.insert(0, str(ROOT))
    from ingest.detector import detect, detector_version
    from ingest.detector.real import labelled

    items = labelled("eval")
    y = [f.label for f in items]
    new = [detect(f.text, f.prompt, None).score for f in items]
    old_version, old = _previous_scores(args.rev, items)
    by: dict[str, list[int]] = {}
    for i, f in enumerate(items):
        by.setdefault(f.conversation_id, []).append(i)
    keys, rng, diffs = sorted(by), random.Random(0), []
    for _ in range(2000):
        idx = [i for _ in keys for i in by[keys[rng.randrange(len(keys))]]]
        ys = [y[i] for i in idx]
        if 0 < sum(ys) < len(ys):
            diffs.append(_auc([new[i] for i in idx], ys) - _auc([old[i] for i in idx], ys))
    diffs.sort()
    out = {"n": len(items), "conversations": len(keys), "positives": sum(y),
           "current": {"detector_version": detector_version(), "auc": round(_auc(new, y), 4)},
           "previous": {"detector_version": old_version, "rev": args.rev,
                        "auc": round(_auc(old, y), 4)},
           "auc_difference": round(_auc(new, y) - _auc(old, y), 4),
           "difference_ci95": [round(diffs[int(0.025 * len(diffs))], 4),
                               round(diffs[int(0.975 * len(diffs)) - 1], 4)]}
    print(json.dumps(out, indent=1))
    (ROOT / "bench/results/detector_previous.json").write_text(json.dumps(out, indent=1) + "\n")


if __name__ == "__main__":
    main()
