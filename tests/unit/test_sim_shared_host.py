"""The note calibrate and fidelity give when the server shares a small machine with them."""

from __future__ import annotations

import pytest

from agentload.calibration import calibrate
from agentload.calibration.calibrate import shared_host_note
from agentload.util import is_loopback_url


@pytest.mark.parametrize(
    ("url", "local"),
    [
        ("http://127.0.0.1:8000/v1", True),
        ("http://127.3.2.1:8000/v1", True),
        ("http://[::1]:8000/v1", True),
        ("http://localhost:8000/v1", True),
        ("http://10.0.0.7:8000/v1", False),
        ("https://vllm.internal.example/v1", False),
        ("http://[2001:db8::1]:8000/v1", False),
    ],
)
def test_is_loopback_url(url: str, local: bool) -> None:
    assert is_loopback_url(url) is local


def test_note_only_for_a_local_server_on_few_cpus(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(calibrate.os, "cpu_count", lambda: 2)
    note = shared_host_note("http://127.0.0.1:8000/v1")
    assert note is not None and "2 CPUs" in note
    assert shared_host_note("http://10.0.0.7:8000/v1") is None
    monkeypatch.setattr(calibrate.os, "cpu_count", lambda: calibrate.SHARED_HOST_CPUS)
    assert shared_host_note("http://127.0.0.1:8000/v1") is None
