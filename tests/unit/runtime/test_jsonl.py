"""Every JSONL writer/reader pair round-trips any text: C0/C1 controls, U+2028/2029, any Unicode."""

from __future__ import annotations

import json

import pyarrow as pa
from hypothesis import HealthCheck, assume, example, given, settings
from hypothesis import strategies as st

from ingest.join import reward_row
from ingest.kafka_io import KafkaRecord
from ingest.parse import classify, dead_letter
from ingest.pipeline import _Staged
from ingest.schema import REWARD_SCHEMA, TOPICS, Followup
from ingest.spans import SpanStore, manifest_record, span_id_for
from ingest.synthetic import T0, completion
from ingest.transforms import _tag_lines
from ratchet.replay import load_recording
from rewards.config import RewardConfig
from runtime import jsonl

LINE_BREAKERS = [chr(c) for c in range(0x20)] + [chr(c) for c in range(0x7F, 0xA0)]
LINE_BREAKERS += ["\u2028", "\u2029"]
TEXT = st.text(st.one_of(st.characters(), st.sampled_from(LINE_BREAKERS)), min_size=1)
T0_MS = int(T0.timestamp() * 1000)
LIMITS = {"max_event_bytes": 10**6, "max_future_skew_s": 60.0, "max_age_s": 86400.0}
SEPARATORS = "still the same error\u2028TypeError\x85 at\u2029 line 3\x1c\x0b"
FAST = settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow,
                                                                       HealthCheck.function_scoped_fixture])


def _followup_item(text: str, offset: int):
    assume(not any("\ud800" <= ch <= "\udfff" for ch in text))  # refused by the event contract
    event = Followup(event_id=f"fu-{offset}", response_id="r1", event_time=T0, text=text,
                     dissatisfied=True)
    record = KafkaRecord(TOPICS["followup"], 0, offset, None, event.to_json(), T0_MS)
    _, item = classify(record, **LIMITS, now_ms=T0_MS)
    return item


@given(TEXT)
@example(SEPARATORS)
def test_a_line_reader_gets_back_each_record(text):
    values = [{"text": text}, {"n": 1}]
    raw = jsonl.encode([json.dumps(values[0], ensure_ascii=False), jsonl.dumps(values[1])])
    lines = jsonl.split_lines(raw.decode("utf-8"))
    assert [json.loads(line) for line in lines] == values
    assert len(raw.decode("utf-8").splitlines()) == 2  # even str.splitlines sees two lines


def test_files_written_before_the_escaping_still_read_back():
    raw = '{"text": "still\u2028the same\x85error"}\n{"n": 1}\n'
    assert [json.loads(x) for x in jsonl.split_lines(raw)] == [
        {"text": "still\u2028the same\x85error"}, {"n": 1}
    ]


@FAST
@given(TEXT)
@example(SEPARATORS)
def test_span_manifest_files_round_trip(tmp_path_factory, text):
    root = tmp_path_factory.mktemp("spans")
    store = SpanStore(root)
    item = _followup_item(text, 7)
    letter = dead_letter(item, "late_signal", text)
    done = completion("r1", T0).to_json()
    c = classify(KafkaRecord(TOPICS["completion"], 0, 3, None, done, T0_MS), **LIMITS,
                 now_ms=T0_MS)[1]
    table = pa.Table.from_pylist([reward_row("r1", c, [], RewardConfig())], schema=REWARD_SCHEMA)
    rel = store.write_rows(span_id_for(1), table, quarantined=False)
    manifest = manifest_record(
        span_id=span_id_for(1), seq=1, source={"type": "file"}, offsets={"file": {0: (0, 2)}},
        files=[rel], status="ok", counts={"rows": 1}, max_event_time_us=1, watermark_us=1,
        stats={}, validation={},
    )
    store.commit_manifest(manifest, [("r1", item)], {}, [letter], [letter])
    assert store.dead_letters(span_id_for(1), "late") == [letter]
    assert store.dead_letters(span_id_for(1), "dead_letters") == [letter]
    assert store.load_state().pending == [("r1", item)]


@FAST
@given(TEXT)
@example(SEPARATORS)
def test_staged_side_outputs_round_trip(tmp_path_factory, text):
    staging = tmp_path_factory.mktemp("staging")
    item = _followup_item(text, 9)
    letter = dead_letter(item, "late_signal", text)
    late_body = Followup.model_validate_json(item.value).to_json()  # pydantic: raw U+2028 kept
    side = b"\n".join([_tag_lines([letter.to_json()], "dead"), _tag_lines([late_body], "pending")])
    (staging / "side.tsv").write_bytes(side + b"\n")
    staged = _Staged(staging)
    assert staged.dead_letters() == [letter]
    assert staged.side["pending"] == [late_body.decode("utf-8")]


@FAST
@given(TEXT)
@example(SEPARATORS)
def test_replay_recordings_round_trip(tmp_path_factory, text):
    assume(not any("\ud800" <= ch <= "\udfff" for ch in text))  # a file of text holds none
    path = tmp_path_factory.mktemp("rec") / "r.jsonl"
    records = [{"topic": "t", "timestamp_ms": 1, "value": text}, {"topic": "t", "timestamp_ms": 2,
                                                                 "value": "x"}]
    path.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in records))
    assert [r["value"] for r in load_recording(path)] == [text, "x"]
