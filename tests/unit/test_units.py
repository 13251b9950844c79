"""Each shared rule pinned once: durations, SLO keys, seconds formatting, percentiles; and the
commands that use them agree."""

from __future__ import annotations

import math

import numpy as np
import pytest

from agentload.fmt import eta, secs
from agentload.stats import percentile_sorted
from agentload.units import check_slo_key, parse_duration, parse_slo


@pytest.mark.parametrize(
    ("text", "seconds"),
    [
        ("90", 90.0),
        (90, 90.0),
        ("90s", 90.0),
        ("1.5m", 90.0),
        ("1min", 60.0),
        ("500ms", 0.5),
        ("250us", 250e-6),
        ("2h", 7200.0),
        (" 3 sec ", 3.0),
        ("1e-3s", 1e-3),
    ],
)
def test_durations(text: object, seconds: float) -> None:
    assert parse_duration(text) == pytest.approx(seconds)


@pytest.mark.parametrize("bad", ["", "fast", "-1s", "inf", "nan", True, float("inf"), -2, "1 d"])
def test_bad_durations_are_refused(bad: object) -> None:
    with pytest.raises(ValueError, match="duration"):
        parse_duration(bad)


def test_slo_keys_and_specs() -> None:
    assert check_slo_key("ttft_p99.9") == ("ttft", "p99.9")
    assert check_slo_key("e2e_mean") == ("e2e", "mean")
    for bad in ("ttft_p200", "ttft_p0", "latency_p90", "ttft", "ttft_median", "itl_p"):
        with pytest.raises(ValueError, match="SLO key"):
            check_slo_key(bad)
    expected = {"ttft_p90": 2.0, "e2e_p99": 60.0}
    assert parse_slo("ttft_p90=2s, e2e_p99=1min") == expected
    assert parse_slo(["ttft_p90=2s", "e2e_p99=1min"]) == expected
    assert parse_slo({"ttft_p90": "2s", "e2e_p99": 60}) == expected
    with pytest.raises(ValueError, match="key=value"):
        parse_slo("ttft_p90")


def test_the_run_config_reads_slos_by_the_same_rule() -> None:
    from agentload.config import build_config

    cfg = build_config(data={"slo": "e2e_p99=1min"})
    assert cfg.slo == {"e2e_p99": 60.0} == parse_slo("e2e_p99=1min")
    with pytest.raises(Exception, match="p200"):
        build_config(data={"slo": {"ttft_p200": "1s"}})


@pytest.mark.parametrize(
    ("v", "text", "compact"),
    [
        (None, "–", "–"),
        (0.0925, "92.5 ms", "92.5ms"),
        (0.25, "250 ms", "250ms"),
        (2.5e-4, "250 µs", "250µs"),
        (3.14159, "3.14 s", "3.14s"),
        (250.0, "250 s", "250s"),
    ],
)
def test_seconds_formatting(v: float | None, text: str, compact: str) -> None:
    assert secs(v) == text
    assert secs(v, compact=True) == compact


def test_eta() -> None:
    assert [eta(None), eta(5), eta(185), eta(7800)] == ["?", "5s", "3m05s", "2h10m"]


def test_percentile_matches_numpy_linear() -> None:
    rng = np.random.default_rng(1)
    for n in (1, 2, 7, 100):
        vals = sorted(rng.lognormal(size=n).tolist())
        for q in (0.0, 0.5, 0.9, 0.99, 1.0):
            got = percentile_sorted(vals, q)
            assert got is not None and math.isclose(got, float(np.percentile(vals, 100 * q)))
    assert percentile_sorted([], 0.5) is None
