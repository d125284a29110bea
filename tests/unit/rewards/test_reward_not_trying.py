"""Trying and failing never loses to not trying: properties of the reward over every signal an
answer can get, and of persistence measured over the code the user kept."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from rewards.answers import answer_kind, code_of, persistence
from rewards.config import RewardConfig
from rewards.signals import RowSignals, compute_reward, is_trainable

NON_ANSWERS = ["", "   \n", "```python\n```", "I'm sorry, I can't help with that.",
               "I cannot write that function.", "Sorry, as an AI I am unable to help."]
ATTEMPTS = ["```python\ndef f(x):\n    return x - 1\n```", "x * 3", "def f(xs):\n    return 0",
            "Here you go:\n```python\ndef f(x):\n    raise ValueError\n```\nHope it helps."]

scores = st.dictionaries(st.sampled_from([30, 120, 300, 600]), st.floats(0, 1), max_size=4)
labels = st.none() | st.sampled_from(["accept", "reject"])
followups = st.none() | st.booleans()
weights = st.fixed_dictionaries({k: st.floats(0, 10) for k in
                                 ("edit_persistence", "followup", "feedback", "length")})


def _row(text: str, tokens: int, p, fu, label, declares, window_open) -> RowSignals:
    return RowSignals(tokens, p, fu, label, declares, window_open, answer_kind(text) == "code")


@settings(max_examples=400, deadline=None)
@given(
    non=st.sampled_from(NON_ANSWERS), non_tokens=st.integers(0, 64), non_p=scores,
    non_fu=followups, non_label=labels, non_declares=st.booleans(), non_open=st.booleans(),
    attempt=st.sampled_from(ATTEMPTS), tokens=st.integers(1, 4096), p=scores, fu=followups,
    label=labels, declares=st.booleans(), window_open=st.booleans(), w=weights,
    max_penalty=st.floats(0.01, 1.0), scale=st.integers(1, 512),
)
def test_an_empty_or_refused_answer_never_scores_above_an_attempt(
    non, non_tokens, non_p, non_fu, non_label, non_declares, non_open,
    attempt, tokens, p, fu, label, declares, window_open, w, max_penalty, scale,
):
    # whatever signals each got (a user may even "accept" a refusal), under any weights
    cfg = RewardConfig.model_validate({"weights": w, "length_max_penalty": max_penalty,
                                       "length_scale_tokens": scale})
    empty = _row(non, non_tokens, non_p, non_fu, non_label, non_declares, non_open)
    tried = _row(attempt, tokens, p, fu, label, declares, window_open)
    r_empty = compute_reward(empty, cfg)[0]
    r_tried = compute_reward(tried, cfg)[0]
    assert is_trainable(empty, cfg)  # never left out: it is trained on, at the floor
    assert r_empty == pytest.approx(cfg.bounds()[0])
    if is_trainable(tried, cfg):
        assert r_empty <= r_tried + 1e-9


@pytest.mark.parametrize("declares", [False, True])
def test_silence_is_never_half_kept(declares):
    # no checkpoint, no feedback: a declaring client's silence is a rejection (scored below any
    # answer the user inserted), anyone else's is unknown (left out, never a free 0)
    cfg = RewardConfig.model_validate(
        {"clients": {"ide": {"reports_persistence_for_inserted": True}}})
    silent = RowSignals(16, {}, None, None, cfg.client("ide" if declares else None)
                        .reports_persistence_for_inserted)
    wrong = RowSignals(16, {30: 0.2, 120: 0.06, 300: 0.02, 600: 0.0}, True, None)
    assert is_trainable(silent, cfg) is declares
    if declares:
        assert compute_reward(silent, cfg)[0] < compute_reward(wrong, cfg)[0]
    # a window still open is no rejection either: unknown, left out
    still_open = RowSignals(16, {}, None, None, declares, persistence_window_open=True)
    assert not is_trainable(still_open, cfg)


def test_answer_kinds():
    assert [answer_kind(t) for t in NON_ANSWERS] == ["empty"] * 3 + ["refused"] * 3
    assert {answer_kind(t) for t in ATTEMPTS} == {"code"}
    # an apology around code is still an answer
    assert answer_kind("Sorry for the wait.\n```python\ndef f():\n    return 1\n```") == "code"
    assert answer_kind("I can't see why, but:\nreturn x + 1") == "code"


def test_code_of_takes_every_fenced_block_or_the_whole_text():
    reply = "Intro.\n```python\na = 1\n```\nand\n```\nb = 2\n```\nBye."
    assert code_of(reply) == "a = 1\nb = 2"
    assert code_of("x + 1") == "x + 1"
    assert code_of("```python\ndef f(): pass") == "def f(): pass"  # unclosed: to the end


def test_padding_prose_earns_no_persistence():
    # the user rewrites a fixed 12-character fix; prose around the code must not dilute it
    code = "def f(x):\n    return x + 1\n"
    fixed = code.replace("return x + 1", "return x - 2")
    tight = f"```python\n{code}```"
    padded = "Certainly! Here is a careful, well-documented solution. " * 20 + tight \
        + "\nThis runs in constant time and handles every case. " * 20
    kept_tight = persistence(tight, fixed)
    kept_padded = persistence(padded, fixed)
    assert kept_padded == pytest.approx(kept_tight)
    assert kept_tight < 0.95
    # the user's file holds the code, whether the client sends it bare or as the edited reply
    assert persistence(padded, padded.replace(code, fixed)) == pytest.approx(kept_tight)


def test_no_persistence_for_an_answer_without_code():
    with pytest.raises(ValueError, match="no code"):
        persistence("", "")
    with pytest.raises(ValueError, match="no code"):
        persistence("```python\n```", "anything")


def test_every_shipped_config_charges_length_in_the_gates_proportion():
    from pathlib import Path

    from ratchet.config import load_config

    files = sorted((Path(__file__).resolve().parents[3] / "configs").glob("*.json"))
    assert files
    for path in files:
        cfg = load_config(path, check_paths=False)  # the models need not be installed
        rewards = cfg.ingest.rewards
        # the gate scores a passed task 1 - token_penalty * tokens / max_new_tokens; the reward
        # charges weight * tokens / length_scale_tokens from the first token
        assert rewards.length_free_tokens == 0, path.name
        assert rewards.length_scale_tokens == cfg.gate.suite.max_new_tokens, path.name
        assert rewards.weights.length == cfg.gate.suite.token_penalty, path.name
