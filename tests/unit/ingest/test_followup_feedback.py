"""The open-dialogue feedback source: the derived labels file, the majority rule, the split."""

from __future__ import annotations

import json

from ingest.detector.feedback import LABELS, _annotated_turns, _label
from ingest.detector.real import split_of


def _ann(*votes: tuple[str, str]) -> list[dict]:
    return [{"user_correction": c, "user_reaction": r} for c, r in votes]


def test_majority_of_reactions_to_an_error_is_a_complaint():
    assert _label(_ann(("C1", "UR5"), ("C1", "UR4"), ("C2", ""))) == 1
    assert _label(_ann(("C1", "UR1"), ("C1", "UR1"), ("C1", "UR5"))) == 0  # ignored and went on
    assert _label(_ann(("C2", ""), ("C2", ""), ("C1", "UR3"))) == 0
    assert _label(_ann(("C1", "UR2"))) is None  # one annotator is not a label


def test_a_dialogue_level_judgement_belongs_to_the_turn_holding_the_phrase():
    d = {"turns": [{"utterance": "hi"}, {"utterance": " what do you mean "},
                   {"utterance": "i like bts"}],
         "correction": {"phrase": ["how do you mean?", "  what do you mean"]},
         "annotations": _ann(("C1", "UR5"), ("C1", "UR5"), ("C1", "UR5"))}
    assert [t for t, _ in _annotated_turns(d)] == [1]


def test_committed_labels_hold_no_text_and_follow_the_conversation_split():
    rows = [json.loads(x) for x in LABELS.read_text().splitlines() if x]
    assert len({r["id"] for r in rows}) == len(rows) >= 400
    for r in rows:
        assert set(r) == {"id", "corpus", "split", "label"}
        conv = r["id"].rsplit(":", 1)[0]
        assert r["split"] == split_of(conv) and r["label"] in (0, 1)
        assert r["corpus"] in ("SelfFeeding", "WoW", "Personachat")
    for split in ("dev", "eval"):
        part = [r for r in rows if r["split"] == split]
        assert sum(r["label"] for r in part) >= 15 and len(part) >= 200
