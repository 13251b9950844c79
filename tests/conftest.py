"""Shared fixtures. Tests are split into tests/unit (no server, no subprocess) and
tests/integration (real servers on loopback: the embedded simulator, scripted servers, the
CLI end to end); tests/real needs a real engine (`make test-real`)."""

from __future__ import annotations

import os
import sys
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

# Helpers shared by several test modules (scripted_server, recording_server, replay_fixture)
# live beside this file; test_results_helpers' record builders are imported by other modules.
_HERE = Path(__file__).parent
sys.path[:0] = [str(_HERE), str(_HERE / "unit"), str(_HERE / "integration")]

from agentload.sim import SimConfig, SimServer  # noqa: E402

DATA = Path(__file__).parent / "data"
"""Test data: the vLLM 0.32 reference captures and datasets written for the tests."""

TAU2_DATA = Path(
    os.environ.get("AGENTLOAD_TAU2_DATA") or _HERE.resolve().parents[1] / "shared" / "tau2-data"
)
"""τ²-bench's data files (tasks, databases, policies), beside the checkout as `shared/` is in
development and CI, or wherever AGENTLOAD_TAU2_DATA points. They are never shipped here."""
if (TAU2_DATA / "airline" / "tasks.json").is_file():
    # Runs started by the tests (and the simulators they start) find the τ² domains.
    os.environ.setdefault("AGENTLOAD_TAU2_DATA", str(TAU2_DATA))


@pytest.fixture
def tau2_data() -> Path:
    """The τ²-bench data folder; the test is skipped where there is none."""
    if not (TAU2_DATA / "airline" / "tasks.json").is_file():
        pytest.skip("no τ²-bench data folder (set AGENTLOAD_TAU2_DATA)")
    return TAU2_DATA


@pytest.fixture
async def sim() -> AsyncIterator[SimServer]:
    """The embedded simulator in this process, on a free loopback port, with the `instant`
    profile (no model time): for tests of the wire, not of timing."""
    async with SimServer(SimConfig(port=0, profile="instant")) as server:
        yield server


@pytest.fixture
def results_dir(tmp_path: Path) -> Path:
    """A fresh, not yet existing results folder under the test's temporary directory."""
    return tmp_path / "results"
