"""A second source of real user turns with human labels: free-text feedback in open dialogue.

Petrak et al., "Learning From Free-Text Human Feedback - Collect New Datasets Or Extend Existing
Ones?" (EMNLP 2023; repository ``UKPLab/emnlp2023-learning-from-free-text-human-feedback``,
Apache-2.0) had three annotators read dialogues and mark, for a user turn that follows a system
turn, whether the system turn was an error (``error_type``), whether the user's turn reacts to it
(``user_correction``: ``C1`` yes, ``C2`` no) and how (``user_reaction``: ``UR1`` ignores it and goes
on, ``UR2`` repeats or rephrases, ``UR3`` makes the system aware and corrects it, ``UR4`` makes it
aware without a correction, ``UR5`` asks what it meant). The dialogues are by people, not written
here: the human-bot split of the Self-Feeding Chatbot (crowd workers chatting with a deployed
bot), Wizard of Wikipedia (an apprentice asking a knowledgeable "wizard") and PersonaChat. The
task-oriented parts (MultiWOZ, SGD) and the synthetic bAbI dialogues are left out: MultiWOZ and
SGD text also appears in an independent satisfaction set kept for evaluation elsewhere.

    python -m ingest.detector.feedback GIT_DIR [--out PATH]

reads ``data/analysis/filtered_dialogs/{SelfFeeding,WoW,Personachat}`` from a local clone (bare
or not) and writes the derived labels (``data/feedback_labels.jsonl``: id, label, split, corpus;
no text). ``load(git_dir)`` joins those labels with the text of the clone; the text itself is not
committed here (the upstream corpora carry their own terms). Label of an annotated user turn: 1
(dissatisfied / correcting) when at least two of its annotators mark ``C1`` with a reaction
``UR2``-``UR5``; 0 otherwise (no reaction, or the user ignored the error and went on: the
follow-up itself is no complaint). User turns of the same dialogues that the study's filter did
not put before the annotators are left out (nobody judged them). The study also had the three
annotators read randomly drawn dialogues (``random_dialogs``); where all three found no reaction to
an error (``C2`` three times), every user turn after the first system turn is a 0.

Deliberately left out: random dialogues with any ``C1`` vote (the annotations name a turn, not
the user's words) and the study's automatic phrase filter.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import re
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

from ingest.detector.real import DATA, split_of

LABELS = DATA / "feedback_labels.jsonl"
CORPORA = ("SelfFeeding", "WoW", "Personachat")
ROOT = "data/analysis/filtered_dialogs"
SOURCE = "UKPLab/emnlp2023-learning-from-free-text-human-feedback"
_REACTS = {"UR2", "UR3", "UR4", "UR5"}
_TURN_NO = re.compile(r"^\d+ ")


@dataclass(frozen=True)
class FeedbackTurn:
    """One annotated user turn, the system turn before it and the user turn before that."""

    id: str
    conversation_id: str
    corpus: str
    text: str
    prompt: str
    response: str
    split: str
    label: int


def _git(git_dir: Path, *args: str) -> str:
    return subprocess.run(["git", "-C", str(git_dir), *args], check=True,
                          capture_output=True).stdout.decode("utf-8")


def _clean(s: str) -> str:
    return _TURN_NO.sub("", (s or "").strip()).strip()


def _label(annotators: list[dict]) -> int | None:
    """1 / 0 by majority of the annotators (None when fewer than two annotated the turn)."""
    votes = [a for a in annotators if a.get("user_correction")]
    if len(votes) < 2:
        return None
    react = sum(a["user_correction"] == "C1" and a.get("user_reaction") in _REACTS for a in votes)
    return int(react * 2 > len(votes))


def _annotated_turns(d: dict) -> list[tuple[int, list[dict]]]:
    """(turn index, annotators) pairs in either of the study's two layouts."""
    ann = d.get("annotations") or []
    if ann and "annotation" in ann[0]:
        return [(int(a["turn"]), a["annotation"]) for a in ann]
    if not ann:
        return []
    # one judgement for the dialogue: it is about the user turn(s) holding the matched phrase
    # (``correction.phrase``: the filter's phrase, then the matched words of the dialogue)
    found = [_norm(p) for p in (d.get("correction") or {}).get("phrase", [])[1:] if _norm(p)]
    hits = [i for i, t in enumerate(d["turns"]) if any(f in _norm(t["utterance"]) for f in found)]
    return [(i, ann) for i in hits]


def _norm(s: str) -> str:
    return " ".join((s or "").lower().split())


_RANDOM = {
    "SelfFeeding": "random_dialogs/SelfFeeding/checked/self_feeding_cold_checked.json",
    "WoW": "random_dialogs/WoW/checked/wow_cold_checked.json",
    "Personachat": "random_dialogs/Personachat/checked/personachat_cold_checked.json",
}
_P = re.compile(r"__p([12])__")


def _exchanges(corpus: str, d: dict) -> tuple[str, list[tuple[str, str]]]:
    """(dialogue id, [(user turn, system turn that follows it)]) of one random dialogue."""
    if corpus == "SelfFeeding":
        parts = _P.split(d["context"])[1:]
        said = [(who, " ".join(txt.split())) for who, txt in zip(parts[::2], parts[1::2])]
        pairs, user = [], None
        for who, txt in said:
            if who == "2":
                user = txt
            elif user is not None:
                pairs.append((user, txt))
                user = None
        if user is not None:
            pairs.append((user, ""))
        return hashlib.sha256(d["context"].encode()).hexdigest()[:12], pairs
    if corpus == "WoW":
        dia = d["turns"]["dialogue"]
        pairs = [(a["text"], b["text"] if b else "") for a, b in
                 zip(dia, [*dia[1:], None]) if a["speaker"].endswith("Apprentice")]
        return str(d["turns"]["dialogue_id"]), pairs
    key = next(k for k in d if k != "annotations")
    lines = [ln for ln in d[key] if "\t" in ln and "persona:" not in ln]
    return key, [tuple(_clean(x) for x in ln.split("\t", 1)) for ln in lines]


def _random_clean(git_dir: Path, corpus: str) -> list[FeedbackTurn]:
    """User turns of the random dialogues all three annotators found free of any reaction."""
    out = []
    for d in json.loads(_git(git_dir, "show", f"HEAD:data/analysis/{_RANDOM[corpus]}")):
        if [a.get("user_correction") for a in d["annotations"]] != ["C2"] * 3:
            continue
        did, pairs = _exchanges(corpus, d)
        conv = f"{corpus}:random:{did}"
        for t in range(1, len(pairs)):
            text = _clean(pairs[t][0])
            if text:
                out.append(FeedbackTurn(f"{conv}:{t}", conv, corpus, text,
                                        _clean(pairs[t - 1][0]), _clean(pairs[t - 1][1]),
                                        split_of(conv), 0))
    return out


def extract(git_dir: Path) -> list[FeedbackTurn]:
    """Every annotated user turn of the three open-dialogue corpora, labelled."""
    out: dict[str, FeedbackTurn] = {}
    for corpus in CORPORA:
        for t in _random_clean(git_dir, corpus):
            out.setdefault(t.id, t)
    for corpus in CORPORA:
        for path in sorted(_git(git_dir, "ls-tree", "-r", "--name-only", "HEAD",
                                f"{ROOT}/{corpus}/checked").split()):
            d = json.loads(_git(git_dir, "show", f"HEAD:{path}"))
            turns = d["turns"]
            conv = f"{corpus}:{d['unique_id']}"
            for t, annotators in _annotated_turns(d):
                label = _label(annotators)
                if label is None or not 1 <= t < len(turns):
                    continue
                text = _clean(turns[t]["utterance"])
                if not text:
                    continue
                key = f"{conv}:{t}"
                out.setdefault(key, FeedbackTurn(
                    key, conv, corpus, text, _clean(turns[t - 1]["utterance"]),
                    _clean(turns[t - 1]["response"]), split_of(conv), label))
    return [out[k] for k in sorted(out)]


def _read_labels(path: Path = LABELS) -> dict[str, dict]:
    return {r["id"]: r for r in (json.loads(x) for x in path.read_text().splitlines() if x)}


def load(git_dir: Path, labels: Path = LABELS) -> list[FeedbackTurn]:
    """The labelled turns of ``labels`` with their text from the clone ``git_dir``.

    Raises ``ValueError`` when the clone's labels differ from the committed ones (another
    upstream revision)."""
    want = _read_labels(labels)
    got = {t.id: t for t in extract(git_dir)}
    missing = sorted(set(want) - set(got))
    changed = sorted(k for k in set(want) & set(got) if got[k].label != want[k]["label"])
    if missing or changed:
        raise ValueError(f"{git_dir}: {len(missing)} labelled turns missing, {len(changed)} with "
                         f"another label than {labels.name} (another upstream revision?)")
    return [got[k] for k in sorted(want)]


def labelled(git_dir: Path, split: str) -> list[FeedbackTurn]:
    if split not in ("dev", "eval"):
        raise ValueError(f"split must be 'dev' or 'eval', got {split!r}")
    return [t for t in load(git_dir) if t.split == split]


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(prog="python -m ingest.detector.feedback")
    ap.add_argument("git_dir", type=Path, help=f"A clone (bare or not) of {SOURCE}.")
    ap.add_argument("--out", type=Path, default=LABELS)
    args = ap.parse_args(argv)
    rows = extract(args.git_dir)
    args.out.write_text("".join(json.dumps({"id": t.id, "corpus": t.corpus, "split": t.split,
                                            "label": t.label}) + "\n" for t in rows))
    summary: dict[str, dict[str, int]] = {}
    for t in rows:
        s = summary.setdefault(f"{t.corpus}/{t.split}", {"n": 0, "dissatisfied": 0})
        s["n"] += 1
        s["dissatisfied"] += t.label
    print(json.dumps(summary), file=sys.stdout)


if __name__ == "__main__":
    main()
