"""The dissatisfied-follow-up detector against the checked-in labelled fixture.

``tests/fixtures/followups_labelled.jsonl`` has two splits:

- ``heldout``: written by hand by ratchet devs (2026-11) *after* the training generator
  (ingest/detector/corpus.py) was fixed, in another style (lower case, specific to the code they
  follow, real compiler and runtime messages, complaints without keywords, "no" answering a
  clarifying question). Never used for training, for writing rules or for the threshold.
- ``generated``: 150 examples from the training grammar (seed 7), a sanity check only.

The AUC floor was written here before the detector was first measured on the held-out split,
and is never lowered after seeing a result.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ingest.detector import RULE_FLOOR, detect, detector_version
from ingest.detector.rules import fired_rules
from ingest.detector.scorer import load_scorer

FIXTURE = Path(__file__).parents[2] / "fixtures" / "followups_labelled.jsonl"
HELDOUT_AUC_FLOOR = 0.85
"""Set before measuring (commit 'detector: held-out fixture and AUC floor')."""
GENERATED_AUC_FLOOR = 0.95


def _rows(split: str) -> list[dict]:
    rows = [json.loads(line) for line in FIXTURE.read_text().splitlines() if line.strip()]
    return [r for r in rows if r["split"] == split]


def auc(scores: list[float], labels: list[int]) -> float:
    """P(score of a random positive > score of a random negative), ties count one half."""
    pos = [s for s, y in zip(scores, labels) if y == 1]
    neg = [s for s, y in zip(scores, labels) if y == 0]
    wins = sum((p > n) + 0.5 * (p == n) for p in pos for n in neg)
    return wins / (len(pos) * len(neg))


def test_auc_helper_hand_computed():
    assert auc([0.9, 0.8, 0.1, 0.8], [1, 1, 0, 0]) == pytest.approx((2 + 1.5) / 4)


def test_fixture_has_provenance_and_both_labels():
    for split in ("heldout", "generated"):
        rows = _rows(split)
        assert len(rows) >= 150
        assert {r["label"] for r in rows} == {0, 1}
        assert all(r["source"] for r in rows)


@pytest.mark.xfail(strict=True, reason=(
    "fu4 (no vocabulary, no generated training corpus, rules without a held-out gain dropped) "
    "scores 0.687 on the hand-written heldout split and 0.744 on the generated one; the floors "
    "stay as set before measuring (bench/results/detector.json, MODEL_CARD.md known failures)"))
@pytest.mark.parametrize(("split", "floor"), [("heldout", HELDOUT_AUC_FLOOR),
                                              ("generated", GENERATED_AUC_FLOOR)])
def test_auc_on_fixture_meets_floor(split, floor):
    rows = _rows(split)
    scores = [detect(r["text"], r["prompt"], r["response"]).score for r in rows]
    assert auc(scores, [r["label"] for r in rows]) >= floor


def test_rules_fire_on_code_assistant_complaints():
    answer = "def f(xs):\n    return sorted(xs)"
    cases = {
        "Traceback (most recent call last):\n  File \"x.py\", line 2\nTypeError: x": "error_pasted",
        "still the same error": "still_failing",
        "this is wrong": "wrong",
        "doesn't compile": "does_not_work",
        "No, I meant the keys": "misunderstood",
        "just the code please": "too_long",
        "sort a list of numbers in place": "reask",
    }
    for text, rule in cases.items():
        assert rule in fired_rules(text, "Sort a list of numbers in place.", answer), text


def test_plain_no_to_a_clarifying_question_is_not_a_complaint():
    v = detect("no", "write a dataclass", "Should it be frozen?")
    assert not v.dissatisfied and v.rules == ()


def test_a_kept_strict_rule_hit_scores_at_least_the_floor():
    v = detect("it doesnt work", "p", "a")
    assert v.dissatisfied and v.score >= RULE_FLOOR and "does_not_work" in v.rules


@pytest.mark.xfail(strict=True, reason="too_slow never fires in the fit halves: no held-out gain "
                                       "was measurable, so training dropped it")
def test_rule_hit_scores_at_least_the_floor():
    v = detect("That took far too long.", "p", "a")
    assert v.dissatisfied and v.score >= RULE_FLOOR and "too_slow" in v.rules


def test_version_is_a_content_hash_of_the_fourth_generation():
    assert detector_version().startswith("fu4-") and len(detector_version()) == 16


@settings(max_examples=200, deadline=None)
@given(text=st.text(max_size=4096), prompt=st.none() | st.text(max_size=300),
       response=st.none() | st.text(max_size=300))
def test_any_text_gets_a_bounded_score_and_a_consistent_decision(text, prompt, response):
    v = detect(text, prompt, response)
    assert 0.0 <= v.score <= 1.0
    assert v.dissatisfied == (bool(v.rules) or v.score >= load_scorer().threshold)


@pytest.mark.slow
def test_checked_in_weights_are_what_the_training_script_writes(tmp_path):
    from ingest.detector.scorer import MODEL_PATH
    from ingest.detector.train import feedback_git, main

    git = feedback_git(None)
    if git is None:
        pytest.skip("the open-dialogue feedback source needs its clone ($RATCHET_FEEDBACK_GIT)")
    out = tmp_path / "model.json"
    main(["--out", str(out), "--feedback-git", str(git)])
    assert out.read_bytes() == MODEL_PATH.read_bytes()


def test_trainer_separates_a_tiny_corpus():
    import numpy as np

    from ingest.detector.scorer import DENSE
    from ingest.detector.train import design, featurise, fit

    data = [featurise(t, "p", None, y, t, "s") for t, y in
            [("this is awful, it broke", 1), ("No, the other one. terrible", 1),
             ("thanks a lot", 0), ("great thanks", 0)]]
    x = design(data, DENSE)
    w, b = fit(x, np.array([r.label for r in data], dtype=float), np.ones(len(data)), DENSE,
               l2=1e-4, steps=200)
    assert list(x @ w + b > 0) == [True, True, False, False]
