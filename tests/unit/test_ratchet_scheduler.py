import pytest

from ratchet.scheduler import parse_duration, run_every


@pytest.mark.parametrize(
    ("text", "seconds"), [("5h", 18000), ("15m", 900), ("90s", 90), ("1h30m", 5400), ("1d", 86400)]
)
def test_parse_duration(text, seconds):
    assert parse_duration(text) == seconds


@pytest.mark.parametrize("text", ["", "5", "5x", "h5", "5h junk"])
def test_parse_duration_rejects_garbage(text):
    with pytest.raises(ValueError, match="cannot parse duration"):
        parse_duration(text)


def test_run_every_keeps_going_after_a_failed_cycle_and_anchors_ticks():
    now = [0.0]
    sleeps: list[float] = []
    ran: list[int] = []

    def tick(i):
        ran.append(i)
        now[0] += 3.0  # each cycle takes 3 s
        if i == 1:
            raise RuntimeError("bad span")

    def sleep(s):
        sleeps.append(s)
        now[0] += s

    n = run_every(10.0, tick, max_cycles=3, sleep=sleep, clock=lambda: now[0])
    assert n == 3 and ran == [0, 1, 2]
    assert sleeps == [7.0, 7.0]  # next tick at 10 and 20, not 13 and 26
