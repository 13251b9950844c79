"""The pace of a measurement's rounds: how each round compared with the others, quantity by
quantity, so a server that moved during a probe or between fidelity passes shows it."""

from __future__ import annotations

import pytest

from agentload.calibration.calibrate import pace_text, pace_warning
from agentload.stats import moved, pace


def test_each_quantity_is_judged_against_itself() -> None:
    # a 20 ms TTFT and a 3 ms step, both 20 % slower in the second round
    rounds = [
        {"ttft": 0.020, "step": 0.003},
        {"ttft": 0.024, "step": 0.0036},
        {"ttft": 0.020, "step": 0.003},
    ]
    assert pace(rounds) == pytest.approx([1.0, 1.2, 1.0])
    assert moved(pace(rounds)) == pytest.approx(0.2)


def test_one_odd_quantity_does_not_move_a_round() -> None:
    rounds = [
        {"a": 1.0, "b": 2.0, "c": 3.0},
        {"a": 1.0, "b": 2.0, "c": 30.0},  # one quantity spiked
        {"a": 1.0, "b": 2.0, "c": 3.0},
    ]
    assert pace(rounds) == pytest.approx([1.0, 1.0, 1.0])


def test_a_round_with_nothing_to_compare_has_no_pace() -> None:
    rounds = [{"a": 1.0}, {"a": 1.1}, {"b": 5.0}, {"a": float("nan")}]
    got = pace(rounds)
    assert got[0] == pytest.approx(1 / 1.05) and got[1] == pytest.approx(1.1 / 1.05)
    assert got[2] is None and got[3] is None
    assert moved(got) == pytest.approx(0.1 / 1.05)
    assert moved([None, 1.0]) is None and pace([]) == []


def test_the_warning_names_the_rounds_and_a_slow_first_round() -> None:
    assert pace_warning([1.02, 0.97, 1.0]) is None  # 5 % apart: steady enough
    assert pace_warning([]) is None
    line = pace_warning([1.0, 1.15, 0.98])
    assert line is not None and "1.00 1.15 0.98 (apart by 17 %)" in line
    assert "--warmup" not in line
    line = pace_warning([1.2, 1.0, 0.98, 1.01])
    assert line is not None and "first round was the slowest: a longer --warmup" in line
    assert pace_text([1.0, None, 0.9]) == "1.00 ? 0.90 (apart by 10 %)"


@pytest.mark.parametrize(
    ("median", "said"),
    [(-0.2, "-20 % (beyond 10%: the real server as a whole ran slower"), (-0.04, "-4 %\n")],
)
def test_fidelity_says_when_the_server_as_a_whole_ran_at_another_speed(
    median: float, said: str, capsys: pytest.CaptureFixture[str]
) -> None:
    from agentload.calibration.fidelity import table
    from agentload.cli.sim_calibrate import _show_fidelity

    result = {
        "rows": [],
        "load_before": {"load_avg_1m": 1.0},
        "load_after": {"load_avg_1m": 1.0},
        "salt": 1,
        "median_error": median,
        "pace": {"real": [1.1, 0.95, 1.0], "sim": [1.0, 1.0, 1.0]},
        "within_goal": True,
    }
    _show_fidelity(result, None, False, table)
    out = capsys.readouterr().out
    assert f"median error over the goal metrics {said}" in out
    assert "the real server's pace by pass: 1.10 0.95 1.00 (apart by 15 %)" in out
    assert "the simulator's pace by pass: 1.00 1.00 1.00 (apart by 0 %)" in out


def test_a_slow_first_fidelity_pass_suggests_a_warm_up() -> None:
    from agentload.calibration.calibrate import first_pass_hint

    assert first_pass_hint([1.2, 1.0, 0.98], 0.0) == (
        "the real server's first pass was its slowest: --warmup 60 may steady it"
    )
    assert "(this run had 30 s)" in (first_pass_hint([1.2, 1.0, 0.98], 30.0) or "")
    assert first_pass_hint([1.0, 1.2, 0.98], 0.0) is None  # the slowest came later
    assert first_pass_hint([1.05, 1.0, 0.98], 0.0) is None  # within 10 %
    assert first_pass_hint([1.2, 1.0], 0.0) is None  # two passes mirror each other
