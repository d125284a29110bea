"""The simulator's edited texts: the signals API's persistence of each equals the policy's planned
score to within one character, and edits accumulate from one checkpoint to the next."""

import random

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from deploy.replica.routes.signals import persistence
from simulation.signal_policy import SignalPolicy, edit_persistence_scores
from simulation.simulator import edited_texts


@settings(max_examples=200, deadline=None)
@given(
    # the code the simulator edits (``code_of`` of the reply, without blank space around it)
    served=st.text(min_size=1, max_size=200).map(str.strip).filter(lambda s: s and "`" not in s),
    passed=st.booleans(),
    seed=st.integers(0, 2**31),
)
def test_persistence_of_edited_text_matches_the_plan(served, passed, seed):
    rng = random.Random(seed)
    scores = edit_persistence_scores(passed, SignalPolicy(), rng)
    texts = edited_texts(served, scores, rng)
    assert set(texts) == set(scores)
    for window, (text, achieved) in texts.items():
        assert achieved == pytest.approx(persistence(served, text))  # what the API will compute
        assert abs(achieved - scores[window]) <= 0.5 / len(served) + 1e-12
        assert len(text) == len(served)
    windows = sorted(texts)
    for early, late in zip(windows, windows[1:]):  # what was rewritten stays rewritten
        changed = {i for i, (a, b) in enumerate(zip(served, texts[early][0])) if a != b}
        assert all(texts[late][0][i] == texts[early][0][i] for i in changed)


def test_empty_response_gets_no_text():
    assert edited_texts("", {30: 0.2}, random.Random(0)) == {}
