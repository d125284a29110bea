import random
import statistics

import pytest

from ingest.schema import EDIT_WINDOWS_S
from simulation import followup_texts
from simulation.signal_policy import (
    WRONG_INTENTS,
    Outcome,
    SignalPolicy,
    edit_persistence_scores,
    feedback,
    followup,
    followup_intent,
    perceived_latency_ms,
    plan_signals,
)

CORRECT = Outcome(passed=True, malformed=False, no_edit=False, latency_ms=50.0, completion_tokens=4)
WRONG = Outcome(passed=False, malformed=False, no_edit=False, latency_ms=50.0, completion_tokens=4)


@pytest.mark.parametrize("seed", range(20))
def test_correct_answer_persists_high_and_decays_slowly(seed):
    policy = SignalPolicy()
    scores = edit_persistence_scores(True, policy, random.Random(seed))
    assert list(scores) == list(EDIT_WINDOWS_S)
    values = list(scores.values())
    assert values == sorted(values, reverse=True)
    assert values[0] >= 0.85
    assert values[-1] >= 0.85 * 0.97**3  # lowest start times the slowest three decays


@pytest.mark.parametrize("seed", range(20))
def test_wrong_answer_is_reverted(seed):
    scores = edit_persistence_scores(False, SignalPolicy(), random.Random(seed))
    values = list(scores.values())
    assert values == sorted(values, reverse=True)
    assert values[0] <= 0.3
    assert values[-1] <= 0.3 * 0.4**3


def test_certain_policy_is_deterministic():
    policy = SignalPolicy(
        p_dissatisfied_wrong=1.0, p_feedback=1.0, p_feedback_noise=0.0, p_neutral_followup=0.0
    )
    rng = random.Random(0)
    assert followup_intent(WRONG, policy, random.Random(0)) in WRONG_INTENTS
    text, dissatisfied = followup(WRONG, policy, rng)
    assert dissatisfied and text
    assert followup(CORRECT, policy, rng) is None
    assert feedback(CORRECT, policy, rng) == "accept"
    assert feedback(WRONG, policy, rng) == "reject"


def test_slow_correct_answer_can_annoy():
    policy = SignalPolicy(p_annoyed_slow=1.0, slow_latency_ms=1000.0, decode_tokens_per_s=20.0)
    slow = Outcome(True, False, False, latency_ms=50.0, completion_tokens=40)  # 2 s of decode
    assert followup_intent(slow, policy, random.Random(1)) == "slow"
    text, dissatisfied = followup(slow, policy, random.Random(1))
    assert dissatisfied and text
    assert (
        followup(CORRECT, policy.model_copy(update={"p_neutral_followup": 0.0}), random.Random(1))
        is None
    )


def test_rates_match_the_policy_over_many_users():
    policy = SignalPolicy()
    rng = random.Random(7)
    wrong = [followup(WRONG, policy, rng) for _ in range(4000)]
    rate = statistics.fmean(bool(r and r[1]) for r in wrong)
    assert 0.67 < rate < 0.73
    correct = [followup(CORRECT, policy, rng) for _ in range(4000)]
    assert not any(r and r[1] for r in correct)  # fast, short and right: never a complaint


def test_plan_is_sorted_and_complete():
    policy = SignalPolicy(p_dissatisfied_wrong=1.0, p_feedback=1.0)
    plan = plan_signals(WRONG, policy, random.Random(3))
    kinds = [p.kind for p in plan]
    assert kinds.count("edit_persistence") == 4
    assert kinds.count("followup") == 1 and kinds.count("feedback") == 1
    delays = [p.delay_s for p in plan]
    assert delays == sorted(delays)
    assert {p.window_s for p in plan if p.kind == "edit_persistence"} == set(EDIT_WINDOWS_S)


def test_same_seed_same_plan():
    a = plan_signals(WRONG, SignalPolicy(), random.Random(11))
    b = plan_signals(WRONG, SignalPolicy(), random.Random(11))
    assert a == b


def test_malformed_answer_draws_a_pasted_error_and_neutral_texts_vary():
    policy = SignalPolicy(p_dissatisfied_wrong=1.0)
    malformed = Outcome(False, True, False, latency_ms=50.0, completion_tokens=4)
    assert followup_intent(malformed, policy, random.Random(0)) == "error"
    chatty = SignalPolicy(p_neutral_followup=1.0)
    rng = random.Random(2)
    replies = [followup(CORRECT, chatty, rng) for _ in range(300)]
    assert not any(r[1] for r in replies)
    assert len({r[0] for r in replies}) >= 100
    intents = {followup_intent(CORRECT, chatty, rng) for _ in range(200)}
    assert intents == set(followup_texts.NEUTRAL)


def test_a_correct_answers_complaints_do_not_move_with_server_load():
    """The same answers judged with the wall clock of an idle server (0.1 s) and of a loaded one
    (40 s) draw the same signals from the same random draws: the user judges the model."""
    rng = random.Random(5)
    answers = [Outcome(True, False, False, latency_ms=0.0, completion_tokens=rng.randint(1, 64))
               for _ in range(300)]

    def plans(latency_ms: float) -> list:
        draws = random.Random(9)
        return [plan_signals(Outcome(a.passed, a.malformed, a.no_edit, latency_ms,
                                     a.completion_tokens), SignalPolicy(), draws)
                for a in answers]

    idle, loaded = plans(100.0), plans(40_000.0)
    assert idle == loaded
    complaints = [p.text for plan in idle for p in plan if p.dissatisfied]
    assert complaints  # long answers still draw some: what the model writes is judged


def test_perceived_latency_is_the_tokens_at_the_stated_speed():
    policy = SignalPolicy(decode_tokens_per_s=20.0, slow_latency_ms=2000.0, p_annoyed_slow=1.0,
                          p_annoyed_long=0.0, p_neutral_followup=0.0)
    assert perceived_latency_ms(Outcome(True, False, False, 1.0, 50), policy) == 2500.0
    assert followup_intent(Outcome(True, False, False, 1.0, 41), policy, random.Random(0)) == "slow"
    assert followup_intent(Outcome(True, False, False, 9e9, 40), policy, random.Random(0)) is None
