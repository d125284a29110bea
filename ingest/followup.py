"""The follow-up columns of a reward row: the detector's decision on the user's next message.

``followup_columns(value, prompt, response)`` reads a Followup event's JSON payload (or ``None``
when no follow-up joined) and returns the reward-row columns ``followup_dissatisfied`` (the
detector's decision: what the reward uses), ``followup_text``, ``followup_flag`` (the producer's
own optional flag, kept only to compare), ``dissatisfied_score`` and ``detector_version``.

Deliberately left out: choosing which follow-up joins (ingest/join.py) and the detector itself
(ingest/detector/).
"""

from __future__ import annotations

from typing import Any

from pydantic_core import from_json

from ingest.detector import detect, detector_version

EMPTY: dict[str, Any] = {
    "followup_dissatisfied": None,
    "followup_text": None,
    "followup_flag": None,
    "dissatisfied_score": None,
    "detector_version": None,
}
"""The columns when no follow-up arrived (missing is not neutral)."""


def followup_columns(value: bytes | None, prompt: str, response: str) -> dict[str, Any]:
    """Reward-row follow-up columns for the Followup payload ``value`` (None: none joined)."""
    if value is None:
        return dict(EMPTY)
    event = from_json(value)
    text = event["text"]
    verdict = detect(text, prompt, response)
    return {
        "followup_dissatisfied": verdict.dissatisfied,
        "followup_text": text,
        "followup_flag": event.get("dissatisfied"),
        "dissatisfied_score": verdict.score,
        "detector_version": detector_version(),
    }
