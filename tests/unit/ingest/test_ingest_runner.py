"""The in-process runner's settings for one Beam run are scoped to the run."""

from __future__ import annotations

from apache_beam.runners.worker import statesampler

from ingest.pipeline import _brief_state_sampling


def test_state_sampling_is_brief_during_a_run_and_restored_after():
    defaults = statesampler.StateSampler.__init__.__defaults__
    assert defaults == (200,)  # Beam 2.77's DEFAULT_SAMPLING_PERIOD_MS
    with _brief_state_sampling(10):
        sampler = statesampler.StateSampler("test", None)
        assert sampler.sampling_period_ms == 10
    assert statesampler.StateSampler.__init__.__defaults__ == defaults
    assert statesampler.StateSampler("test", None).sampling_period_ms == 200
