"""Property-based: ≥ 10,000 generated good and bad payloads through Kafka and the Beam pipeline.

Hypothesis generates payload specs (a good completion, a good signal for an earlier completion,
or one of the bad shapes, each with the reason it must be dead-lettered with); the test sends
them, runs one drained span, and checks: the pipeline did not crash, every bad payload is in the
dead-letter topic with its reason at its source position, every good completion is a row, and
every good signal is joined into its completion's row.
"""

from __future__ import annotations

import json
from collections import Counter
from datetime import UTC, datetime, timedelta

import pytest
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st

from ingest.config import IngestConfig, ParseConfig
from ingest.kafka_io import (
    EventProducer,
    ensure_topics,
    high_watermarks,
    read_topic,
    start_group_at_end,
)
from ingest.pipeline import run_span
from ingest.schema import DEAD_LETTER_TOPIC, TOPICS
from ingest.spans import read_spans
from ingest.synthetic import completion, feedback, followup, persistence

pytestmark = [pytest.mark.integration, pytest.mark.slow]

N_PAYLOADS = 10_000
N_SPECS = 13_000
MAX_BYTES = 8192
BAD = {
    "negative_latency": "negative_latency",
    "logprob_above_zero": "logprob_above_zero",
    "length_mismatch": "length_mismatch",
    "missing_field": "schema_violation",
    "wrong_type": "schema_violation",
    "extra_field": "schema_violation",
    "unknown_kind": "unknown_kind",
    "truncated": "unparseable_json",
    "invalid_utf8": "invalid_utf8",
    "too_large": "too_large",
    "future": "future_timestamp",
    "stale": "stale_timestamp",
    "wrong_topic": "wrong_topic",
    "ghost_signal": "unknown_response_id",
}
SPEC = st.tuples(
    st.sampled_from(["completion"] * 6 + ["signal"] * 8 + sorted(BAD)),
    st.integers(0, 12),
    st.floats(0, 20_000, allow_nan=False),
    st.text(max_size=30),
    st.integers(0, 2**31),
    st.floats(0, 1, allow_nan=False),
)


def _corpus() -> list[tuple]:
    specs: list[tuple] = []

    @settings(
        max_examples=N_SPECS,
        database=None,
        derandomize=True,
        phases=[Phase.generate],
        suppress_health_check=list(HealthCheck),
        deadline=None,
    )
    @given(SPEC)
    def collect(spec: tuple) -> None:
        specs.append(spec)

    collect()
    return specs


class Materialiser:
    """Turns specs into (topic, value, expectation) with unique ids and consistent times."""

    def __init__(self, t0: datetime) -> None:
        self.t0 = t0
        self.completions: list[tuple[str, datetime]] = []
        self.used: set[tuple[str, str]] = set()

    def _completion(self, i: int, n: int, latency: float, text: str) -> tuple[str, dict]:
        rid = f"fz{i}"
        t = self.t0 + timedelta(seconds=i)
        c = completion(rid, t, n_tokens=n, latency_ms=latency)
        d = json.loads(c.to_json())
        d["response_text"] = text
        return rid, d

    def make(self, i: int, spec: tuple):
        kind, n, latency, text, misc, score = spec
        if kind == "signal":
            return self._signal(misc + i, score)
        rid, d = self._completion(i, n, latency, text)
        topic = TOPICS["completion"]
        if kind == "completion":
            self.completions.append((rid, datetime.fromisoformat(d["event_time"])))
            return topic, json.dumps(d).encode(), ("row", rid)
        return self._bad(kind, i, d, topic)

    def _bad(self, kind: str, i: int, d: dict, topic: str):
        if kind == "negative_latency":
            d["latency_ms"] = -1.0 - i
        elif kind == "logprob_above_zero":
            d["response_token_ids"], d["response_logprobs"] = [1], [0.25]
            d["routed_experts"] = []
        elif kind == "length_mismatch":
            d["response_logprobs"] = [*d["response_logprobs"], -0.5]
        elif kind == "missing_field":
            del d["usage"]
        elif kind == "wrong_type":
            d["model_version"] = "seven"
        elif kind == "extra_field":
            d["surprise"] = True
        elif kind == "unknown_kind":
            d["kind"] = "telemetry"
        elif kind == "too_large":
            d["prompt"] = "x" * (MAX_BYTES + 10)
        elif kind == "future":
            d["event_time"] = (datetime.now(UTC) + timedelta(hours=2)).isoformat()
        elif kind == "stale":
            d["event_time"] = (datetime.now(UTC) - timedelta(days=30)).isoformat()
        elif kind == "wrong_topic":
            topic = TOPICS["feedback"]
        elif kind == "ghost_signal":
            s = feedback(f"ghost{i}", self.t0, True)
            return TOPICS["feedback"], s.to_json(), ("dead", BAD[kind])
        raw = json.dumps(d).encode()
        if kind == "truncated":
            raw = raw[: len(raw) // 2]
        elif kind == "invalid_utf8":
            raw = raw.replace(b'"prompt": "', b'"prompt": "\xff\xfe', 1)
        return topic, raw, ("dead", BAD.get(kind, "unparseable_json"))

    def _signal(self, misc: int, score: float):
        if not self.completions:
            return None
        rid, t = self.completions[-1 - (misc // 6) % min(50, len(self.completions))]
        slot = ("ep30", "ep120", "ep300", "ep600", "followup", "feedback")[misc % 6]
        if (rid, slot) in self.used:
            return None
        self.used.add((rid, slot))
        if slot.startswith("ep"):
            w = int(slot[2:])
            e = persistence(rid, t, w, score)
            return (
                TOPICS["edit_persistence"],
                e.to_json(),
                ("signal", rid, f"edit_persistence_{w}", e.score),
            )
        if slot == "followup":
            e = followup(rid, t + timedelta(seconds=10), score < 0.5)
            return (
                TOPICS["followup"],
                e.to_json(),
                ("signal", rid, "followup_dissatisfied", e.dissatisfied),
            )
        e = feedback(rid, t + timedelta(seconds=3), score < 0.5)
        return (
            TOPICS["feedback"],
            e.to_json(),
            ("signal", rid, "feedback_accept", e.label == "accept"),
        )


def test_generated_payloads_never_crash_and_every_one_is_accounted_for(broker, tmp_path):
    specs = _corpus()
    assert len(specs) >= N_SPECS
    ensure_topics(broker.bootstrap)
    start_group_at_end(broker.bootstrap, "fuzz", TOPICS.values())  # the broker is shared
    dlq_before = high_watermarks(broker.bootstrap, DEAD_LETTER_TOPIC)
    m = Materialiser(datetime.now(UTC) - timedelta(hours=6))
    expected_dead: dict[tuple[str, int, int], str] = {}
    rows: set[str] = set()
    signals: list[tuple] = []
    with EventProducer(broker.bootstrap) as p:
        futures = []
        for i, spec in enumerate(specs):
            made = m.make(i, spec)
            if made is not None:
                topic, value, expect = made
                futures.append((p.send_raw(topic, None, value), topic, expect))
        p.flush()
        for fut, topic, expect in futures:
            md = fut.get(timeout=30)
            if expect[0] == "dead":
                expected_dead[(topic, md.partition, md.offset)] = expect[1]
            elif expect[0] == "row":
                rows.add(expect[1])
            else:
                signals.append(expect)
    sent = len(futures)

    # finalise everything now, open persistence windows too (neutral): this is about parsing
    cfg = IngestConfig(parse=ParseConfig(max_event_bytes=MAX_BYTES), drain=True,
                       join={"open_at_drain": "neutral"})
    r = run_span(
        bootstrap=broker.bootstrap, group_id="fuzz", output_root=tmp_path / "out", config=cfg
    )

    got_dead = {}
    for _, _, _, v in read_topic(broker.bootstrap, DEAD_LETTER_TOPIC, dlq_before):
        d = json.loads(v)
        got_dead[(d["topic"], d["partition"], d["offset"])] = d["reason"]
    table = read_spans(tmp_path / "out")
    by_id = {row["response_id"]: row for row in table.to_pylist()}
    print(
        "fuzz figures:",
        json.dumps(
            {
                "payloads_sent": sent,
                "good_completions": len(rows),
                "good_signals": len(signals),
                "bad": len(expected_dead),
                "rows_out": table.num_rows,
                "dead_letters_out": len(got_dead),
                "bad_by_reason": Counter(expected_dead.values()),
            }
        ),
    )
    assert sent >= N_PAYLOADS
    assert got_dead == expected_dead
    assert set(by_id) == rows and table.num_rows == len(rows)
    assert r.late == 0 and r.pending == 0
    for _, rid, column, value in signals:
        assert by_id[rid][column] == pytest.approx(value, abs=1e-6), (rid, column)
