"""The cycle's durable state machine: which spans a cycle trains on and how far it got.

One JSON file per cycle, ``<spans root>/_cycles/<cycle_id>.json``, written atomically (temp file,
fsync, rename) beside the span manifests it refers to. Stages, in order::

    started -> ingested -> trained -> gated -> deployed
                   \\-> skipped (too few rows: the spans stay unconsumed for the next cycle)
    ingested -> skipped (no trainable rows, e.g. greedy rows with nothing to imitate, or the
                train stage failed ``stage_max_deaths`` times: the spans are consumed, so the
                next cycle moves on)

``ingested`` fixes the cycle's span ids: every committed, validated span with rows that no
earlier cycle has consumed, plus (carry, ``RatchetConfig.carry``) the spans of the finished
cycles that trained a rejected candidate from the same champion; those are re-read, not consumed
again. A span is *consumed* only once a verdict exists for a candidate
trained on it (stage ``gated`` or later), so a cycle killed at any stage is resumed at that stage
with the same spans, and spans that were ingested but never trained go to the next cycle.
At most one cycle is unfinished at a time (the per-model lease, runtime/lease.py, makes sure).

Deliberately left out: running the stages (ratchet/cycle.py) and the span files themselves
(ingest/spans.py).
"""

from __future__ import annotations

import json
import os
import time
import uuid
from dataclasses import asdict, dataclass, field
from pathlib import Path

from ingest.spans import SpanStore, atomic_write_bytes

CYCLES = "_cycles"
STAGES = ("started", "ingested", "trained", "gated", "deployed")
FINAL = ("deployed", "skipped")
CONSUMING = ("gated", "deployed")
DIED = "the process ended inside the stage (killed by a signal or crashed)"
"""A stage attempt's failure when nothing else was written: the process died in it."""
DIE_ENV = "RATCHET_TEST_DIE_AT"
"""Test-only hook: a stage name (``gate``). The cycle SIGKILLs itself when an attempt of that
stage starts, as an answer that kills the grader's parent would (tests/integration/
test_cycle_stage_deaths.py). Unset in production: then it costs nothing."""
PAUSE_ENV = "RATCHET_TEST_PAUSE_AT"
"""Test-only hook: ``ingest`` | ``train`` | ``gate`` | ``deploy``. The cycle writes
``<workdir>/paused-<stage>`` at that point of the stage and sleeps, so a test can SIGKILL it
there (tests/integration/test_cycle_kill.py). Unset in production: then it costs nothing."""


@dataclass
class CycleState:
    """What a cycle has done so far; enough to resume it at its stage."""

    cycle_id: str
    stage: str = "started"
    span_ids: list[str] = field(default_factory=list)
    span_rows: dict[str, int] = field(default_factory=dict)
    """The spans this cycle consumes (no earlier gated candidate was trained on them) -> rows."""
    carried_rows: dict[str, int] = field(default_factory=dict)
    """Spans of earlier rejected candidates of the same champion, trained on again -> rows."""
    champion_version: int | None = None
    """The champion the candidate is trained from and gated against (promotion's CAS value)."""
    candidate_version: int | None = None
    runs: dict[str, str] = field(default_factory=dict)
    """Stage -> MLflow run id of its latest attempt (``cycle`` is the parent run)."""
    verdict: dict | None = None
    """``passed``, ``run_id``, ``failed`` of the gate; ``promoted`` and ``rollout`` once the
    deploy stage rolled out (saved before the lifetime audit, so a resumed stage does not promote
    again); ``audit`` once an audit it made due has a verdict."""
    stage_failures: dict[str, list[str]] = field(default_factory=dict)
    """Stage -> one reason per attempt of it that did not finish, since it last finished: an
    exception's text, or ``DIED`` when the process ended inside the stage (killed, crashed)."""
    attempts: int = 0
    seq: int = 0
    """1, 2, 3, ... per workdir: the number the operator sees (run names, the overview)."""
    note: str = ""
    updated_at: float = 0.0

    @property
    def rows(self) -> int:
        return sum(self.span_rows.values())

    @property
    def train_span_ids(self) -> list[str]:
        """What the candidate is trained on: the consumed spans, then the carried ones."""
        return [*self.span_ids, *self.carried_rows]

    @property
    def train_rows(self) -> int:
        return self.rows + sum(self.carried_rows.values())

    @property
    def finished(self) -> bool:
        return self.stage in FINAL


class CycleStore:
    """Cycle state files under ``<spans root>/_cycles``."""

    def __init__(self, spans_root: Path) -> None:
        self.spans = SpanStore(spans_root)
        self.dir = Path(spans_root) / CYCLES

    def all(self) -> list[CycleState]:
        if not self.dir.is_dir():
            return []
        states = [CycleState(**json.loads(p.read_text())) for p in self.dir.glob("cycle-*.json")]
        return sorted(states, key=lambda s: s.cycle_id)

    def unfinished(self) -> CycleState | None:
        open_ = [s for s in self.all() if not s.finished]
        return open_[-1] if open_ else None

    def new(self) -> CycleState:
        stamp = time.strftime("%Y%m%dT%H%M%S", time.gmtime())
        seq = max((s.seq for s in self.all()), default=0) + 1
        state = CycleState(cycle_id=f"cycle-{stamp}-{uuid.uuid4().hex[:6]}", seq=seq)
        self.save(state)
        return state

    def save(self, state: CycleState) -> None:
        state.updated_at = time.time()
        data = json.dumps(asdict(state), indent=1).encode()
        atomic_write_bytes(self.dir / f"{state.cycle_id}.json", data)

    def consumed(self) -> set[str]:
        """Span ids a candidate with a verdict was trained on, and those of a cycle skipped at
        the train stage (its rows held nothing to train on: retrying them would skip again)."""
        return {i for s in self.all() if s.stage in CONSUMING or s.stage == "skipped"
                for i in s.span_ids}

    def unconsumed_spans(self) -> dict[str, int]:
        """Validated spans with rows that no gated candidate was trained on: id -> rows."""
        done = self.consumed()
        return {
            m["span_id"]: int(m["rows"])
            for m in self.spans.manifests_list()
            if m["status"] == "ok" and m["rows"] > 0 and m["span_id"] not in done
        }

    def carried_spans(self, champion_version: int, max_rows: int) -> dict[str, int]:
        """Spans of the finished cycles whose candidate, trained from ``champion_version``, was
        not promoted: newest cycle first, whole spans, at most ``max_rows`` rows in all."""
        carried: dict[str, int] = {}
        for s in sorted(self.all(), key=lambda s: s.seq, reverse=True):
            if s.stage != "deployed" or s.champion_version != champion_version:
                continue
            if (s.verdict or {}).get("promoted"):
                break  # a promotion from this champion ends its window
            for span_id, rows in s.span_rows.items():
                if sum(carried.values()) + rows > max_rows:
                    return carried
                carried[span_id] = rows
        return carried

    def span_files(self, span_ids: list[str]) -> list[Path]:
        by_id = {m["span_id"]: m for m in self.spans.manifests_list()}
        return [self.spans.root / f for i in span_ids for f in by_id[i]["files"]]


def pause_point(stage: str, workdir: Path) -> None:
    """Test-only: if ``RATCHET_TEST_PAUSE_AT`` names ``stage``, write a marker and sleep
    (``RATCHET_TEST_PAUSE_S`` seconds, default an hour)."""
    if os.environ.get(PAUSE_ENV) != stage:
        return
    Path(workdir).mkdir(parents=True, exist_ok=True)
    (Path(workdir) / f"paused-{stage}").write_text(str(os.getpid()))
    time.sleep(float(os.environ.get("RATCHET_TEST_PAUSE_S", "3600")))


def die_point(stage: str) -> None:
    """Test-only: if ``RATCHET_TEST_DIE_AT`` names ``stage``, SIGKILL this process."""
    if os.environ.get(DIE_ENV) == stage:
        import signal

        os.kill(os.getpid(), signal.SIGKILL)
