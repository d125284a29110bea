"""Real human follow-ups: extraction from a public study's release, the labelled set, its split.

The follow-ups come from CodeChat (SEAL Lab, MIT licence; its text is drawn from WildChat,
real user conversations with ChatGPT released under ODC-BY): two of its result tables pair a
user's prompt with the same user's *next* prompt in the same conversation. Nobody working on
this repository wrote any of them. See docs/FOLLOWUP_LABELS.md for the source, the licence, the
labelling guideline and the agreement figure.

    python -m ingest.detector.real extract GIT_DIR [--n 480] [--out PATH]

reads the two tables from a local clone (bare or not) of the CodeChat repository and writes
``data/followups.jsonl``: one row per follow-up, keyed by a stable id
(``<conversation_id>:<turn>``), with the previous prompt as context, the split and the source.
Labels live apart, keyed by the same ids (``data/labels.jsonl``, ``data/labels_pass2.jsonl``).

The split is by conversation and depends only on a hash of the conversation id and a fixed
seed string (``SPLIT_SEED``): ``dev`` (fitting and tuning) or ``eval`` (reported, never fitted
on). Deliberately left out: the answer each follow-up came after, which the tables do not carry
(the previous prompt stands in as context; ``response`` is ``None``), and non-English turns.
"""

from __future__ import annotations

import argparse
import csv
import hashlib
import io
import json
import random
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

DATA = Path(__file__).with_name("data")
FOLLOWUPS = DATA / "followups.jsonl"
LABELS = DATA / "labels.jsonl"
LABELS_PASS2 = DATA / "labels_pass2.jsonl"
SPLIT_SEED = "ratchet-followup-split-2026-11-25"
"""Salt of the conversation hash that assigns ``dev`` / ``eval`` (never change it)."""
SOURCE_TABLES = (
    "RQ1/rq1_results/RQ1_labelled.csv",
    "RQ2/rq2_results/1_topic7_gap_labeled.csv",
)
MAX_CHARS = 4000
"""Longer texts are cut to their first ``MAX_CHARS`` characters (pasted files, logs)."""


@dataclass(frozen=True)
class RealFollowup:
    """One real follow-up and, when labelled, the label."""

    id: str
    conversation_id: str
    text: str
    prompt: str
    split: str
    label: int | None


def split_of(conversation_id: str) -> str:
    """``dev`` or ``eval``, by the parity of sha256(SPLIT_SEED:conversation_id)."""
    digest = hashlib.sha256(f"{SPLIT_SEED}:{conversation_id}".encode()).digest()
    return "eval" if digest[0] % 2 else "dev"


def _english(text: str) -> bool:
    return sum(c.isascii() for c in text) >= 0.97 * max(1, len(text))


def _read_table(git_dir: Path, path: str) -> list[dict]:
    raw = subprocess.run(["git", "-C", str(git_dir), "show", f"HEAD:{path}"], check=True,
                         capture_output=True).stdout.decode("utf-8")
    return list(csv.DictReader(io.StringIO(raw)))


def extract(git_dir: Path, n: int, seed: int = 0) -> list[dict]:
    """``n`` English follow-ups sampled (seeded) from the two tables, one row each."""
    rows: dict[str, dict] = {}
    for table in SOURCE_TABLES:
        for r in _read_table(git_dir, table):
            text, prompt = r["prompt2"].strip(), r["prompt1"].strip()
            if not text or not _english(text) or not _english(prompt[:MAX_CHARS]):
                continue
            key = f"{r['conversation_id']}:{int(r['turn2_number'])}"
            rows.setdefault(key, {
                "id": key, "conversation_id": r["conversation_id"],
                "text": text[:MAX_CHARS], "prompt": prompt[:MAX_CHARS],
                "split": split_of(r["conversation_id"]), "source": f"CodeChat {table}",
            })
    keys = sorted(rows)
    random.Random(seed).shuffle(keys)
    return [rows[k] for k in sorted(keys[:n])]


def _read_jsonl(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def load(labels: Path = LABELS) -> list[RealFollowup]:
    """Every extracted follow-up with its label from ``labels`` (``None`` if unlabelled)."""
    lab = {r["id"]: int(r["label"]) for r in _read_jsonl(labels)} if labels.exists() else {}
    return [RealFollowup(r["id"], r["conversation_id"], r["text"], r["prompt"], r["split"],
                         lab.get(r["id"])) for r in _read_jsonl(FOLLOWUPS)]


def labelled(split: str) -> list[RealFollowup]:
    """The labelled follow-ups of one split (``dev`` or ``eval``)."""
    if split not in ("dev", "eval"):
        raise ValueError(f"split must be 'dev' or 'eval', got {split!r}")
    return [f for f in load() if f.split == split and f.label is not None]


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(prog="python -m ingest.detector.real")
    sub = ap.add_subparsers(dest="cmd", required=True)
    ex = sub.add_parser("extract", help="Write data/followups.jsonl from a CodeChat clone.")
    ex.add_argument("git_dir", type=Path, help="A clone (bare or not) of the CodeChat repository.")
    ex.add_argument("--n", type=int, default=480, help="How many follow-ups to sample.")
    ex.add_argument("--out", type=Path, default=FOLLOWUPS)
    args = ap.parse_args(argv)
    rows = extract(args.git_dir, args.n)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows))
    n_eval = sum(r["split"] == "eval" for r in rows)
    print(json.dumps({"rows": len(rows), "eval": n_eval, "dev": len(rows) - n_eval,
                      "conversations": len({r["conversation_id"] for r in rows})}),
          file=sys.stdout)


if __name__ == "__main__":
    main()
