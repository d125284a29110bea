import json
from datetime import datetime

from ratchet.replay import _decode_value, _encode_value, _shift_event_time


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


def test_values_that_are_not_utf8_survive_the_round_trip_byte_for_byte():
    raw = b"\xff\xfe not utf-8"
    assert _decode_value(_encode_value(raw), 90.0) == raw
    assert _decode_value(_encode_value(b"plain"), None) == b"plain"


def test_a_finished_recording_drains_and_ends_open_windows_neutral_unless_configured():
    from ratchet.config import RatchetConfig
    from ratchet.replay import finished_recording

    default = finished_recording(RatchetConfig())
    assert default.ingest.drain is True and default.ingest.join.open_at_drain == "neutral"
    assert RatchetConfig().ingest.join.open_at_drain == "pending"  # the config itself is kept
    chosen = finished_recording(RatchetConfig.model_validate(
        {"ingest": {"join": {"open_at_drain": "pending", "allowed_lateness_s": 5.0}}}))
    assert chosen.ingest.join.open_at_drain == "pending"
    assert chosen.ingest.join.allowed_lateness_s == 5.0 and chosen.ingest.drain is True
