"""Pooling `sim fidelity` results of several server starts: each result one vote."""

from __future__ import annotations

import re
from typing import Any

import pytest

from agentload.calibration.fidelity import METRICS, pool


def _figures(ttft: float, tpot: float) -> dict[str, float]:
    f = dict.fromkeys(METRICS, 1.0)
    f |= {"ttft_p50_s": ttft, "ttft_p90_s": 1.5 * ttft, "tpot_mean_s": tpot}
    return f | {"ttft_p50_shift": 0.01, "ttft_p90_shift": 0.02}


def _result(
    real: tuple[float, float], sim: tuple[float, float], profile: str = "vllm-cpu-tiny"
) -> dict[str, Any]:
    """A result as `sim fidelity -o` writes it, of one workload (decode-heavy)."""
    return {
        "profile": profile,
        "real_url": "http://127.0.0.1:8000/v1",
        "passes": 5,
        "rows": [{"workload": "decode-heavy", "real": _figures(*real), "sim": _figures(*sim)}],
    }


def test_each_result_is_one_vote_and_the_median_server_is_the_reference() -> None:
    # The simulator as measured beside three server starts: one fast, one as the profile,
    # one slow. The fast and slow starts miss the goal on their own; pooled, the profile
    # is held against the median start, and the range of the starts judges the rest.
    sim = (0.100, 0.0030)
    results = [
        ("fast.json", _result((0.080, 0.0024), sim)),
        ("usual.json", _result((0.104, 0.0029), sim)),
        ("slow.json", _result((0.130, 0.0036), (0.101, 0.0030))),
    ]
    got = pool(results)
    (row,) = got["rows"]
    assert row["real"]["ttft_p50_s"] == 0.104 and row["real"]["tpot_mean_s"] == 0.0029
    assert row["sim"]["ttft_p50_s"] == 0.100
    assert row["error"]["ttft_p50_s"] == pytest.approx(0.100 / 0.104 - 1)
    assert row["real_range"]["ttft_p50_s"] == [0.080, 0.130]
    assert row["real_spread"]["tpot_mean_s"] == pytest.approx((0.0036 - 0.0024) / 0.0029)
    assert row["verdict"] == {"ttft_p50_s": "goal", "ttft_p90_s": "goal", "tpot_mean_s": "goal"}
    assert got["within_goal"] and got["off"] == []
    assert got["unresolved"] == ["decode-heavy ttft_p50", "decode-heavy ttft_p90",
                                 "decode-heavy tpot_mean"]  # fmt: skip
    assert row["shift"]["ttft_p50_s"] == {"real": 0.01, "sim": 0.01}
    # each result judged on its own figures, and its pace against the others
    fast, usual, slow = got["pooled"]
    assert [q["source"] for q in got["pooled"]] == ["fast.json", "usual.json", "slow.json"]
    assert (fast["within_goal"], usual["within_goal"], slow["within_goal"]) == (0, 3, 0)
    assert fast["goal_metrics"] == 3 and got["passes"] == 15
    assert fast["median_error"] == pytest.approx(0.100 / 0.080 - 1)
    assert slow["median_error"] == pytest.approx(0.101 / 0.130 - 1)  # TTFT p50 and p90
    assert fast["pace"] < usual["pace"] < slow["pace"]
    assert usual["pace"] == pytest.approx(1.0, abs=0.04)
    assert got["pace"]["sim"][0] == pytest.approx(got["pace"]["sim"][1])


def test_a_profile_off_on_every_start_stays_off() -> None:
    # Every start decodes at 3 ms; the profile at 2 ms is outside the goal and the range.
    results = [(f"{k}.json", _result((0.1, 0.0030 + k * 1e-4), (0.1, 0.0020))) for k in range(3)]
    got = pool(results)
    assert got["rows"][0]["verdict"]["tpot_mean_s"] == "off"
    assert got["off"] == ["decode-heavy tpot_mean"] and not got["within_goal"]


def test_a_profile_named_by_file_pools_with_its_name() -> None:
    got = pool(
        [
            ("a.json", _result((0.1, 0.003), (0.1, 0.003), "/data/vllm-cpu-tiny.yaml")),
            ("b.json", _result((0.1, 0.003), (0.1, 0.003), "vllm-cpu-tiny")),
        ]
    )
    assert got["profile"] == "/data/vllm-cpu-tiny.yaml"


@pytest.mark.parametrize(
    ("second", "said"),
    [
        (_result((0.1, 0.003), (0.1, 0.003), "tiny-cpu"),
         "b.json: profile 'tiny-cpu', but a.json has 'vllm-cpu-tiny'"),
        ({"rows": []}, "b.json: not a result of agentload sim fidelity"),
        ([1, 2], "b.json: not a result of agentload sim fidelity"),
        ({"rows": _result((0.1, 0.003), (0.1, 0.003))["rows"]},
         "b.json: not a result of agentload sim fidelity (no profile)"),
        ({"profile": "vllm-cpu-tiny", "rows": [{"real": {}, "sim": {}}]},
         "b.json: rows[0]: no workload"),
        ({"profile": "vllm-cpu-tiny",
          "rows": [{"workload": "decode-heavy", "real": {"ttft_p50_s": 0.1}, "sim": {}}]},
         "b.json: rows[0].real: missing or not a number"),
        ({"profile": "vllm-cpu-tiny", "rows": [{"workload": "decode-heavy", "real": _figures(
            0.1, 0.003) | {"tpot_mean_s": "x"}, "sim": _figures(0.1, 0.003)}]},
         "b.json: rows[0].real: missing or not a number"),
        ({**_result((0.1, 0.003), (0.1, 0.003)), "pooled": []}, "b.json: already a pool"),
        ({**_result((0.1, 0.003), (0.1, 0.003)), "rows": [
            {"workload": "concurrent", "real": _figures(0.1, 0.003),
             "sim": _figures(0.1, 0.003)}]},
         "b.json: workloads concurrent, but a.json has decode-heavy"),
    ],
)  # fmt: skip
def test_results_that_do_not_pool_are_named(second: Any, said: str) -> None:
    with pytest.raises(ValueError, match="^" + re.escape(said)):
        pool([("a.json", _result((0.1, 0.003), (0.1, 0.003))), ("b.json", second)])


def test_one_result_is_not_a_pool() -> None:
    with pytest.raises(ValueError, match="two or more"):
        pool([("a.json", _result((0.1, 0.003), (0.1, 0.003)))])
