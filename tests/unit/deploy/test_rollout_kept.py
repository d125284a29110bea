"""The canary's edit-persistence metric counts an empty or refused answer as nothing kept."""

from deploy.fleet.rollout import kept_shares


def test_an_answer_with_nothing_to_insert_kept_nothing():
    scores = [0.9, None, None, None, 0.4]
    texts = ["def f(): return 1", "", "I'm sorry, I can't help with that.", "x = 2", "y = 3"]
    # empty and refused count as 0; code without a persistence signal is left out
    assert kept_shares(scores, texts) == [0.9, 0.0, 0.0, 0.4]
