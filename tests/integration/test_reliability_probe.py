"""The reliability probe (benchmarks/reliability_probe.py) in its reduced mode: a few cases of
each row of the table in docs/reliability.md, so that the probe keeps working as the commands
change. The full probe is a benchmark; this only checks that each row still runs and holds."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest

PROBE = Path(__file__).resolve().parents[2] / "benchmarks" / "reliability_probe.py"


def _load():
    spec = importlib.util.spec_from_file_location("reliability_probe", PROBE)
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = mod  # dataclasses look the module up by name
    spec.loader.exec_module(mod)
    return mod


@pytest.mark.timeout(120)
def test_every_row_of_the_probe_holds_in_reduced_mode(tmp_path: Path) -> None:
    probe = _load()
    rows = probe.probe(probe.ROWS, quick=True, jobs=2, tmp=tmp_path)
    assert [r.name for r in rows] == list(probe.ROWS)
    for r in rows:
        assert r.total >= 1, r.name
        assert r.holds, (r.name, r.failures)
    table = probe.table(rows)
    assert table.count("\n") == len(rows) + 1 and "NO" not in table


def test_the_full_probe_has_the_issue_counts() -> None:
    # At least as many cases as the published table: 17 kill moments, two outages, 70
    # shapes, 100 configs, 144 command lines, 144 folder cases, 44 datasets.
    probe = _load()
    assert len(probe.KILL_MOMENTS) >= 17
    assert len({m for m, _ in probe.KILL_MOMENTS}) == len(probe.KILL_MOMENTS)
    assert len(probe.malformed_shapes()) >= 70
    assert len(probe.config_cases()) >= 100
    assert len(probe.flag_cases()) >= 144
    assert len(probe._folder_damage()) * 3 >= 144
    assert len(probe.dataset_cases()) >= 44
