"""The follow-up detector in general dialogue: corrections that negate or restate the previous
answer, acceptances that are no complaint, and the sentiment prior the score may not go against.

The phrasings are of the kinds a user types to a booking, recommendation or chat assistant; none
is taken from any labelled set.
"""

from __future__ import annotations

import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ingest.detector import RULE_FLOOR, detect
from ingest.detector.features import cues, negated_correction
from ingest.detector.lexicon import sentiment
from ingest.detector.scorer import MODEL_PATH, SENTIMENT_SIGNS, Scorer, load_scorer

CORRECTIONS = [
    ("No, it's the 11th", "I have booked the table for the 12th. Anything else?"),
    ("No, find some other movies", "How about Up or Cars?"),
    ("no, I said Friday", "Your train leaves on Monday at 9:00."),
    ("No, that's not what I asked", "The museum opens at 10."),
    ("Nope, not that one, the cheaper one", "The Grand hotel is 4 stars."),
    ("No, the restaurant was in the north", "I found 3 restaurants in the south."),
    ("that's not what I asked", None),
    ("I said two people, not four", "Booked for four people."),
]


@pytest.mark.parametrize(("text", "response"), CORRECTIONS)
def test_corrections_score_above_acceptances_and_closing_noes(text, response):
    v = detect(text, "book something", response)
    for other, resp in [("That is correct.", None), ("Great, thank you!", "Booked."),
                        ("No, thanks, that's all.", "Anything else?")]:
        assert v.score > detect(other, "book something", resp).score, (text, other)


@pytest.mark.xfail(strict=False, reason=(
    "the no_correction rule never fires in the fit halves and was dropped; a 'No' correction "
    "scores about 0.26, under the 0.39 threshold (ranked above acceptances, not flagged)"))
@pytest.mark.parametrize(("text", "response"), CORRECTIONS)
def test_corrections_that_negate_or_restate_are_complaints(text, response):
    v = detect(text, "book something", response)
    assert v.dissatisfied and v.score >= RULE_FLOOR, (text, v)


@pytest.mark.parametrize(("text", "response"), [
    ("That is correct.", "So that is a table for 2 on Friday, is that correct?"),
    ("That is correct.", None),
    ("Yes, that's right.", "You want the 11th?"),
    ("Correct, thanks", "It is the 11th."),
    ("Great, thank you!", "Booked."),
])
def test_an_acceptance_scores_low(text, response):
    v = detect(text, "book something", response)
    assert not v.dissatisfied and v.score < 0.2, (text, v)
    assert cues(text).get("cue:affirm") == 1.0


@pytest.mark.parametrize(("text", "response"), [
    ("No, thanks, that's all.", "Anything else I can help with?"),
    ("No, I just need the address", "Would you like me to book it?"),
    ("no, other than that I am fine", "Anything else?"),
    ("No, not this time", "Shall I reserve a taxi too?"),
])
def test_a_no_that_answers_or_closes_is_not_a_complaint(text, response):
    assert not negated_correction(text)
    v = detect(text, "book something", response)
    assert not v.dissatisfied and v.score < 0.3, (text, v)


def test_a_no_after_a_question_is_still_a_correction_when_it_corrects():
    assert cues("No, it's the 11th") == {"cue:no_correction": 1.0}
    assert cues("No, I need a cheaper one") == {"cue:no_correction": 1.0}
    assert cues("No, thanks, that's all.") == {}


def test_checked_in_weights_keep_the_sentiment_prior_direction():
    dense = json.loads(MODEL_PATH.read_bytes())["dense"]
    for name, sign in SENTIMENT_SIGNS.items():
        assert dense.get(name, 0.0) * sign >= 0, name
    assert dense["vader:compound"] < 0


def test_weights_against_the_prior_are_refused():
    raw = json.loads(MODEL_PATH.read_bytes())
    raw["dense"]["vader:compound"] = 0.5
    with pytest.raises(ValueError, match="prior"):
        Scorer.from_json(json.dumps(raw).encode())


def test_training_projects_sentiment_weights_onto_the_prior():
    import numpy as np

    from ingest.detector.scorer import DENSE
    from ingest.detector.train import design, featurise, fit

    # labels that reward positive words and punish a "No" opening: unconstrained, compound
    # would get a positive weight and open:no a negative one
    data = [featurise(t, "p", None, y, t, "s") for t, y in
            [("great wonderful", 1), ("lovely and great", 1), ("no, awful terrible", 0),
             ("nope horrible bad", 0)]]
    w, _ = fit(design(data, DENSE), np.array([r.label for r in data], dtype=float),
               np.ones(len(data)), DENSE, l2=1e-4, steps=200)
    for name, sign in SENTIMENT_SIGNS.items():
        assert w[DENSE.index(name)] * sign >= 0, name


_WORDS = ["thanks", "great", "good", "fine", "bad", "awful", "terrible", "useless", "love",
          "hate", "the", "room", "movie", "table", "is", "was", "very", "so", "really", "nice",
          "annoying", "perfect", "broken", "happy", "sad", "cheap", "friday", "hotel"]


@settings(max_examples=200, deadline=None)
@given(st.lists(st.sampled_from(_WORDS), min_size=2, max_size=8),
       st.lists(st.sampled_from(_WORDS), min_size=2, max_size=8))
def test_without_other_evidence_the_score_follows_the_sentiment_prior(a, b):
    """Two follow-ups that differ only in their words' sentiment (same length bucket, no rule,
    no cue, no question) are ordered as VADER orders them: the detector never inverts the prior
    where nothing else speaks. The dense part (the sentiment prior's sign-constrained weights) is
    ordered whenever the sentiment is (the model has no word weights of its own)."""
    scorer = load_scorer()
    ta, tb = " ".join(a), " ".join(b)
    from ingest.detector.scorer import dense_features

    fa, fb = dense_features(ta, "p", "ok."), dense_features(tb, "p", "ok.")
    other = {k for k in (*fa, *fb) if not k.startswith("vader:")}
    if {k for k in fa if k in other} != {k for k in fb if k in other}:
        return
    sa, sb = sentiment(ta), sentiment(tb)
    if sa.contrast or sb.contrast or not (sa.compound < sb.compound and sa.neg >= sb.neg
                                          and sa.pos <= sb.pos
                                          and max(0, -sa.tail) >= max(0, -sb.tail)):
        return
    assert scorer.logit(ta, "p", "ok.") >= scorer.logit(tb, "p", "ok.")
    assert scorer.probability(ta, "p", "ok.") >= scorer.probability(tb, "p", "ok.")
