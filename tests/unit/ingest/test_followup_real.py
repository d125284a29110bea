"""The second-generation follow-up detector: rule families on real phrasings, the polite "no",
the calibration bound on unseen words, and the real labelled set's split.

Every phrasing below is a real follow-up quoted in docs/FOLLOWUP_LABELS.md as a guideline example;
all of them come from the ``dev`` half (a test asserts it), none from ``eval``.
"""

from __future__ import annotations

import json
import re

import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from ingest.detector import RULE_FLOOR, detect
from ingest.detector.real import load, split_of
from ingest.detector.rules import fired_rules
from ingest.detector.scorer import load_scorer

RULE_CASES = {
    "error_pasted": "the code gives this error : NameError: name 'name' is not defined. modify "
                    "the code",
    "still_failing": "The error is still there: AssertionError: expected 0 to equal 1",
    "does_not_work": "it doesnt work",
    "misunderstood": "That wasn't really what I asked.",
    "no_restatement": "no, when you install elementor on wp it comes with a templates menu on the "
                      "wordpress dashboard side menu",
    "ignored_instruction": "3 line limit still applies",
    "doubt": "Are you sure it prints the 5th Fibonacci number?",
    "regenerate": "REGENERATE",
    "unhelpful": "it's not the improvement i was looking for,i want to reduce code if possible",
    "wrong": "Very close, but you're still wrong!",
}


@pytest.mark.parametrize(("rule", "text"), sorted(RULE_CASES.items()))
def test_each_rule_family_fires_on_a_real_phrasing(rule, text):
    assert rule in fired_rules(text, "previous prompt", None)
    v = detect(text, "previous prompt", None)
    if rule in load_scorer().strict_rules:
        assert v.dissatisfied and v.score >= RULE_FLOOR and rule in v.rules
    else:  # kept as a feature, or dropped for want of a held-out gain: never a decision
        assert rule not in v.rules


def test_guideline_examples_come_from_the_dev_half_only():
    rows = {" ".join(f.text.split()).lower(): f.split for f in load()}
    for text in RULE_CASES.values():
        hits = {split for t, split in rows.items() if t.startswith(text.lower()[:40])}
        assert hits == {"dev"}, text


@pytest.mark.parametrize("text", [
    "No, thanks, that's all.", "no thanks, that's all", "Nope, I'm good. Thanks again!",
    "no", "No worries",
])
def test_a_polite_or_bare_no_fires_no_rule(text):
    assert not fired_rules(text, "p", None)


def test_no_answering_the_answers_question_is_not_a_restatement():
    text = "no, keep the keys as they are please"
    assert "no_restatement" in fired_rules(text, "p", "Here it is.")
    assert "no_restatement" not in fired_rules(text, "p", "Should the keys be sorted?")


@pytest.mark.parametrize("text", [
    "Thanks for your help! Please be my frend when you're gonna take over the world:)",
    "spot on, what kind of prompt would produce this?",
    "this is pretty much perfect, I just need a set of prompts",
    "Thanks for your help!", "how to zero a dataframe column", "create another 20",
])
def test_thanks_and_new_requests_score_low(text):
    v = detect(text, "previous prompt", None)
    assert not v.dissatisfied and v.score < 0.5


def test_contrast_turns_praise_into_a_complaint():
    text = "that's nice and all, but what I was getting at is the need for multiple prompts"
    assert detect(text, "p", None).dissatisfied


_KNOWN = set()


def _known_words() -> set[str]:
    """Words VADER has a valence for (the model has no vocabulary of its own)."""
    if not _KNOWN:
        from ingest.detector.lexicon import _analyzer

        _KNOWN.update(_analyzer().lexicon)
    return _KNOWN


@settings(max_examples=300, deadline=None)
@given(st.lists(st.text(alphabet="bcdfghjklmpqrstvwxz", min_size=3, max_size=12), min_size=1,
                max_size=60), st.sampled_from(["", "!", "?", "."]))
def test_unseen_words_cannot_push_a_score_to_point_nine(tokens, end):
    assume(not any(t in _known_words() for t in tokens))
    text = " ".join(tokens) + end
    assume(not fired_rules(text, "p", None))
    assert detect(text, "p", None).score < 0.9
    assert detect(text, "p", "an answer").score < 0.9


def test_the_model_has_no_vocabulary_only_named_features():
    from ingest.detector.scorer import DENSE, MODEL_PATH

    raw = json.loads(MODEL_PATH.read_bytes())
    assert "vocab" not in raw and set(raw["dense"]) <= set(DENSE)


def test_split_is_by_conversation_and_fixed():
    rows = load()
    by_conv: dict[str, set[str]] = {}
    for f in rows:
        by_conv.setdefault(f.conversation_id, set()).add(f.split)
        assert f.split == split_of(f.conversation_id)
        assert re.fullmatch(r"[0-9a-f]{32}:\d+", f.id)
    assert all(len(s) == 1 for s in by_conv.values())
    labelled = [f for f in rows if f.label is not None]
    assert len(labelled) >= 400
    assert sum(f.split == "eval" for f in labelled) >= 200
