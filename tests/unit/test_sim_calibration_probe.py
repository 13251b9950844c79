"""The probe's interference pattern: which gap of the decoding stream is the mixed step."""

from __future__ import annotations

from agentload.sim.calibration.probe import Probe
from agentload.sim.calibration.stream import Call


def _decode(step_s: float, steps: int, long_at: int | None = None, long_s: float = 0.0) -> Call:
    times, t = [0.1], 0.1
    for i in range(steps):
        t += long_s if i == long_at else step_s
        times.append(t)
    return Call(start=0.0, times=times, counts=list(range(1, steps + 2)), prompt_tokens=256)


def _prefill(start: float, first: float) -> Call:
    return Call(start=start, times=[first], counts=[1], prompt_tokens=1024, cached_tokens=0)


def test_the_mixed_step_is_the_gap_that_ends_at_the_prefills_first_token() -> None:
    dec = _decode(0.005, 40, long_at=20, long_s=0.06)
    end = dec.times[21]
    found = Probe._mixed_gap(None, dec, _prefill(dec.times[18], end))  # type: ignore[arg-type]
    assert found is not None
    gap, feats = found
    assert gap == dec.times[21] - dec.times[20]
    assert feats[3] == 1024  # the prefill's tokens are in that step


def test_no_sample_when_the_stream_ended_before_the_prefill_ran() -> None:
    # The prefill's first token comes after the stream's last: every gap after the
    # prefill's start is a plain decode step, which must not be fitted as the mixed one.
    dec = _decode(0.005, 40)
    late = _prefill(dec.times[30], dec.times[-1] + 0.08)
    assert Probe._mixed_gap(None, dec, late) is None  # type: ignore[arg-type]
