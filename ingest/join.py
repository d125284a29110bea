"""Join delayed signals to their completion, in event time, for one response id.

``join_group`` sees every event of one response id that is in this span or carried over from an
earlier one, and decides:

- duplicates (same ``event_id``) are removed, keeping the copy with the smallest
  (topic, partition, offset), so arrival order changes nothing;
- a signal joins if its event time is within ``[t, t + window_kind + grace_kind]`` (the grace
  lets a checkpoint due exactly at the window's end, or measured a moment late, join); for
  persistence, ``t`` is the acceptance time when an accepting feedback event gives it (the
  checkpoints count from the insertion, which can come minutes after the completion);
- the completion is *final* once each *expected* signal kind has arrived (persistence: every
  checkpoint) or its window has closed against the watermark (largest event time seen less
  the allowed lateness), and, unless every kind is expected, without waiting for the others;
  or once every window has closed, or when draining; it then becomes one reward row. The
  follow-up window also closes at the conversation's next completion (a ``next_completion``
  marker item, made by the pipeline from the completions of each conversation);
- otherwise everything is carried to the next span (pending);
- a signal for an already finalised response id, or outside its window, is *late*;
- one feedback per response: the first in event time joins; each later one with another event
  id is dead-lettered ``contradictory_feedback`` (another label) or ``repeated_feedback``;
- a signal with no completion past the join horizon is dead-lettered ``unknown_response_id``;
  a second completion with another event id for the same response id is
  ``duplicate_response_id``.

Pure: no I/O. Deliberately left out: reading, grouping (Beam does that) and writing.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from pydantic_core import from_json

from ingest.followup import followup_columns
from ingest.parse import EventItem, dead_letter
from ingest.schema import EDIT_WINDOWS_S, SCHEMA_VERSION, DeadLetter
from rewards.answers import answer_kind
from rewards.config import RewardConfig
from rewards.signals import RowSignals, compute_reward, is_trainable

US = 1_000_000
NEXT = "next_completion"
"""Kind of the marker item that carries the time of the conversation's next completion."""
PERSISTENCE_OPEN = "persistence_window_open"
"""Kind of the marker joined to a completion finalised while its persistence window was still
open and some checkpoint had not come (a drain with ``open_at_drain="neutral"``, or expected
signals that leave persistence out): a missing checkpoint then means nothing, whatever the
client declared."""
OPEN_AT_DRAIN = ("pending", "neutral")
"""What a drain does with a completion whose persistence window is still open."""


SIGNAL_KINDS = ("edit_persistence", "followup", "feedback")


@dataclass(frozen=True)
class Windows:
    """Join windows per signal kind (each including its grace) and the horizon, in microseconds
    of event time."""

    edit_persistence_us: int
    followup_us: int
    feedback_us: int

    @property
    def horizon_us(self) -> int:
        return max(self.edit_persistence_us, self.followup_us, self.feedback_us)

    def of(self, kind: str) -> int:
        return {
            "edit_persistence": self.edit_persistence_us,
            "followup": self.followup_us,
            "feedback": self.feedback_us,
        }[kind]

    @classmethod
    def from_seconds(
        cls,
        edit_persistence: float,
        followup: float,
        feedback: float,
        grace: tuple[float, float, float] = (0.0, 0.0, 0.0),
    ) -> Windows:
        """Windows of the given lengths, each extended by its grace (same order)."""
        lengths = (edit_persistence, followup, feedback)
        return cls(*(int(round((w + g) * US)) for w, g in zip(lengths, grace, strict=True)))


@dataclass
class JoinOutcome:
    """What ``join_group`` decided for one response id."""

    row: dict[str, Any] | None = None
    pending: list[EventItem] = field(default_factory=list)
    late: list[DeadLetter] = field(default_factory=list)
    dead: list[DeadLetter] = field(default_factory=list)
    duplicates: int = 0
    finalized_at_us: int | None = None
    final: tuple[EventItem, list[EventItem]] | None = None
    """With ``build_row=False``: the completion and its joined signals, instead of ``row``."""


def next_completion_marker(response_id: str, t_next_us: int) -> EventItem:
    """Marker: the completion after ``response_id`` in its conversation came at ``t_next_us``."""
    return EventItem(NEXT, f"next:{response_id}", t_next_us, "", -1, -1, b"", -1)


def next_in_conversation(entries: Iterable[tuple[str, int]]) -> list[tuple[str, EventItem]]:
    """``(response_id, marker)`` for each completion ``(response_id, t_us)`` of one conversation
    but the last, in event-time order."""
    ordered = sorted(entries, key=lambda e: (e[1], e[0]))
    return [(a[0], next_completion_marker(a[0], b[1])) for a, b in zip(ordered, ordered[1:])]


def window_ends(
    t_us: int, windows: Windows, t_next_us: int | None, t_accept_us: int | None = None
) -> dict[str, int]:
    """Event time at which each signal kind's window closes for a completion made at ``t_us``.

    Persistence is measured 30 / 120 / 300 / 600 s after the suggestion was *accepted*
    (inserted), which can be minutes after the completion: with an acceptance time
    ``t_accept_us`` (an accepting feedback event's time) the persistence window counts from it.
    """
    followup = t_us + windows.followup_us
    start = t_us if t_accept_us is None else max(t_us, t_accept_us)
    return {
        "edit_persistence": start + windows.edit_persistence_us,
        "followup": followup if t_next_us is None else min(followup, t_next_us),
        "feedback": t_us + windows.feedback_us,
    }


def acceptance_time(t_us: int, signals: Iterable[EventItem], windows: Windows) -> int | None:
    """Event time of the first accepting feedback inside the feedback window (None: none)."""
    accepts = [s.event_time_us for s in signals if s.kind == "feedback" and s.signal == 1.0
               and t_us <= s.event_time_us <= t_us + windows.feedback_us]
    return min(accepts, default=None)


def dedup(items: Iterable[EventItem]) -> tuple[list[EventItem], int]:
    """One item per event id (smallest source position wins); returns (items, removed)."""
    best: dict[str, EventItem] = {}
    n = 0
    for it in items:
        n += 1
        cur = best.get(it.event_id)
        if cur is None or (it.topic, it.partition, it.offset) < (
            cur.topic,
            cur.partition,
            cur.offset,
        ):
            best[it.event_id] = it
    kept = sorted(best.values(), key=lambda i: (i.event_time_us, i.event_id))
    return kept, n - len(kept)


def join_group(
    response_id: str,
    items: Iterable[EventItem],
    *,
    watermark_us: int,
    finalized: Mapping[str, int],
    windows: Windows,
    reward_config: RewardConfig,
    drain: bool = False,
    expected: Iterable[str] = SIGNAL_KINDS,
    early: bool = True,
    build_row: bool = True,
    open_at_drain: str = "pending",
) -> JoinOutcome:
    """Decide the fate of every event of ``response_id`` (see the module docstring).

    ``watermark_us`` is the real watermark (largest event time less the lateness) also when
    ``drain``: the drain decides what it finalises (``open_at_drain``), the watermark decides
    which persistence windows are still open.

    ``early=False`` finalises a completion only once every window has closed (never on the
    expected signals having arrived): what a chunk of a span that is not its last uses, so that
    the span's later chunks can still add signals, exactly as one pass over the span would.
    ``build_row=False`` leaves ``row`` empty and sets ``final`` (the caller builds rows for many
    completions at once: ingest/rows.py).
    """
    items = list(items)
    t_next = min((i.event_time_us for i in items if i.kind == NEXT), default=None)
    kept, removed = dedup(i for i in items if i.kind != NEXT)
    out = JoinOutcome(duplicates=removed)
    completions = [i for i in kept if i.kind == "completion"]
    signals = [i for i in kept if i.kind != "completion"]
    if response_id in finalized:
        out.duplicates += len(completions)
        out.late = [
            dead_letter(s, "late_signal", f"{response_id} already finalised") for s in signals
        ]
        return out
    if not completions:
        for s in signals:
            if drain or s.event_time_us + windows.horizon_us <= watermark_us:
                out.dead.append(
                    dead_letter(s, "unknown_response_id", f"no completion {response_id}")
                )
            else:
                out.pending.append(s)
        return out
    completion, extra = completions[0], completions[1:]
    out.dead = [
        dead_letter(c, "duplicate_response_id", f"{response_id} already has {completion.event_id}")
        for c in extra
    ]
    t = completion.event_time_us
    ends = window_ends(t, windows, t_next, acceptance_time(t, signals, windows))
    in_window = [s for s in signals if s.event_time_us <= ends[s.kind]]
    outside = [s for s in signals if s.event_time_us > ends[s.kind]]
    if open_at_drain not in OPEN_AT_DRAIN:
        raise ValueError(f"open_at_drain must be one of {OPEN_AT_DRAIN}, got {open_at_drain!r}")
    closed = max(ends.values()) <= watermark_us
    complete = early and _complete(in_window, set(expected), ends, watermark_us)
    no_code = False
    if early and not complete and "edit_persistence" in expected and not _has_code(completion):
        # nothing of an empty or refused answer was inserted: no persistence will come for it
        no_code = True
        complete = _complete(in_window, set(expected) - {"edit_persistence"}, ends, watermark_us)
    persistence_open = (ends["edit_persistence"] > watermark_us and not no_code
                        and not _all_checkpoints(in_window))
    drained = drain and (not persistence_open or open_at_drain == "neutral")
    if not (drained or closed or complete):
        out.pending = [completion, *signals]
        return out
    out.late = [dead_letter(s, "late_signal", f"outside the {s.kind} window") for s in outside]
    in_window, refused = _first_feedback(in_window)
    out.dead += refused
    if persistence_open:
        in_window.append(EventItem(PERSISTENCE_OPEN, f"open:{response_id}", watermark_us, "",
                                   -1, -1, b"", -1))
    if build_row:
        out.row = reward_row(response_id, completion, in_window, reward_config)
    else:
        out.final = (completion, in_window)
    out.finalized_at_us = completion.event_time_us
    return out


def _has_code(completion: EventItem) -> bool:
    """Whether the completion's answer holds code a user could insert (rewards/answers.py)."""
    return answer_kind(from_json(completion.value)["response_text"]) == "code"


def _all_checkpoints(signals: list[EventItem]) -> bool:
    """Every persistence checkpoint (``EDIT_WINDOWS_S``) is among ``signals``."""
    return {s.window_s for s in signals if s.kind == "edit_persistence"} >= set(EDIT_WINDOWS_S)


def _complete(
    signals: list[EventItem], expected: set[str], ends: Mapping[str, int], watermark_us: int
) -> bool:
    """Every expected signal kind has arrived (persistence: every checkpoint) or can no longer
    arrive in its window; kinds that are not expected are not waited for."""
    kinds = {s.kind for s in signals}
    arrived = {
        "edit_persistence": _all_checkpoints(signals),
        "followup": "followup" in kinds,
        "feedback": "feedback" in kinds,
    }
    return all(arrived[k] or ends[k] <= watermark_us for k in expected)


def _first_feedback(signals: list[EventItem]) -> tuple[list[EventItem], list[DeadLetter]]:
    """``signals`` with only the first feedback (event time, then event id) kept, and a dead
    letter for each later one: a response gets one verdict from its user."""
    feedback = sorted((s for s in signals if s.kind == "feedback"),
                      key=lambda s: (s.event_time_us, s.event_id))
    if len(feedback) < 2:
        return signals, []
    first, later = feedback[0], feedback[1:]
    letters = [
        dead_letter(
            s,
            "repeated_feedback" if s.signal == first.signal else "contradictory_feedback",
            f"{first.event_id} already gave this response its feedback",
        )
        for s in later
    ]
    dropped = {id(s) for s in later}
    return [s for s in signals if id(s) not in dropped], letters


def _pick_signals(
    signals: list[EventItem],
) -> tuple[dict[int, float], bytes | None, str | None]:
    """Persistence per checkpoint and feedback: the latest; follow-up: the first (its payload,
    for the detector)."""
    persistence: dict[int, tuple[tuple[int, str], float]] = {}
    followup: tuple[tuple[int, str], bytes] | None = None
    feedback: tuple[tuple[int, str], str] | None = None
    for s in signals:
        order = (s.event_time_us, s.event_id)
        if s.kind == "edit_persistence":
            w = s.window_s
            if w not in persistence or order > persistence[w][0]:
                persistence[w] = (order, s.signal)
        elif s.kind == "followup":
            if followup is None or order < followup[0]:
                followup = (order, s.value)
        elif s.kind == "feedback":
            if feedback is None or order > feedback[0]:
                feedback = (order, "accept" if s.signal == 1.0 else "reject")
    return (
        {w: v for w, (_, v) in persistence.items()},
        None if followup is None else followup[1],
        None if feedback is None else feedback[1],
    )


def reward_row(
    response_id: str, completion: EventItem, signals: list[EventItem], reward_config: RewardConfig
) -> dict[str, Any]:
    """One ``REWARD_SCHEMA`` row (``event_time`` as microseconds since the epoch, UTC)."""
    c = from_json(completion.value)
    n_tokens = len(c["response_token_ids"])
    row = {
        "schema_version": SCHEMA_VERSION,
        "response_id": response_id,
        "conversation_id": c["conversation_id"],
        "event_time": completion.event_time_us,
        "model_name": c["model_name"],
        "model_version": int(c["model_version"]),
        "task_kind": c["task_kind"],
        "prompt": c["prompt"],
        "response_text": c["response_text"],
        "response_token_ids": c["response_token_ids"],
        "response_logprobs": c["response_logprobs"],
        "routed_experts": c["routed_experts"],
        "temperature": float(c["sampling"]["temperature"]),
        "top_p": float(c["sampling"]["top_p"]),
        "prompt_token_ids": c.get("prompt_token_ids") or None,
        "prompt_routed_experts": c.get("prompt_routed_experts") or None,
        "routed_experts_source": c.get("routed_experts_source", "engine"),
        "finish_reason": c["finish_reason"],
        "completion_tokens": n_tokens,
        "latency_ms": float(c["latency_ms"]),
        "client_id": c.get("client_id"),
        "arm": c.get("arm"),
    }
    row.update(
        signal_columns(
            signals,
            reward_config,
            prompt=c["prompt"],
            response_text=c["response_text"],
            n_tokens=n_tokens,
            client_id=c.get("client_id"),
        )
    )
    return row


def signal_columns(
    signals: list[EventItem],
    reward_config: RewardConfig,
    *,
    prompt: str,
    response_text: str,
    n_tokens: int,
    client_id: str | None = None,
) -> dict[str, Any]:
    """The reward row's columns that come from the joined signals: the chosen signals, the
    follow-up detector's columns, the reward, its components, the defaulted signals, what the
    completion's client declared it reports (``RewardConfig.clients``) and whether the row is
    trained on (``is_trainable``)."""
    persistence, followup, label = _pick_signals(signals)
    declares = reward_config.client(client_id).reports_persistence_for_inserted
    fu = followup_columns(followup, prompt, response_text)
    dissatisfied = fu["followup_dissatisfied"]  # the detector's decision, never the flag
    row_signals = RowSignals(
        completion_tokens=n_tokens,
        edit_persistence=persistence,
        followup_dissatisfied=dissatisfied,
        feedback_label=label,  # type: ignore[arg-type]
        reports_persistence_for_inserted=declares,
        persistence_window_open=any(s.kind == PERSISTENCE_OPEN for s in signals),
        answered=answer_kind(response_text) == "code",
    )
    reward, components, defaulted = compute_reward(row_signals, reward_config)
    cols = {
        "followup_dissatisfied": dissatisfied,
        "feedback_accept": None if label is None else label == "accept",
        "reward": float(reward),
        "reward_components": list(components.items()),
        "defaulted_signals": defaulted,
        "client_reports_persistence": None if client_id is None else declares,
        "trainable": is_trainable(row_signals, reward_config),
        **fu,
    }
    for w in EDIT_WINDOWS_S:
        cols[f"edit_persistence_{w}"] = persistence.get(w)
    return cols
