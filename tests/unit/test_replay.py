import json
from datetime import datetime

from ratchet.replay import _shift_event_time


def test_shift_moves_event_time_and_keeps_the_rest():
    value = json.dumps({"kind": "followup", "event_time": "2026-01-01T00:00:00+00:00", "x": 1})
    shifted = json.loads(_shift_event_time(value, 90.0))
    assert datetime.fromisoformat(shifted["event_time"]) == datetime.fromisoformat(
        "2026-01-01T00:01:30+00:00"
    )
    assert shifted["x"] == 1 and shifted["kind"] == "followup"


def test_malformed_values_replay_untouched():
    for raw in ["{not json", json.dumps({"no_time": 1}), json.dumps({"event_time": "garbage"})]:
        assert _shift_event_time(raw, 90.0) == raw
