"""The progress line: the agent's TTFT, 'draining' instead of an ETA of 0 s, and a line that
fits a terminal."""

from __future__ import annotations

from dataclasses import dataclass

from agentload.scheduler.progress import ProgressTracker, progress_line


@dataclass
class Call:
    status: str
    completion_tokens: int | None
    ttft_s: float | None
    role: str | None = None


def test_ttft_is_the_agents() -> None:
    t = ProgressTracker(total=10)
    for _ in range(50):
        t.on_call(Call("ok", 10, 0.5, "agent"))
        t.on_call(Call("ok", 10, 0.05, "user"))  # shorter prompts: would halve the figure
    s = t.snapshot()
    assert s["ttft_p50"] == 0.5 and s["ttft_p90"] == 0.5
    assert "agent TTFT p50 500ms" in progress_line(s)


def test_a_run_past_its_duration_is_draining_not_at_eta_zero() -> None:
    t = ProgressTracker(total=None, duration_s=0.0)
    t.active = lambda: 3
    s = t.snapshot()
    assert s["eta_s"] is None and s["draining"]
    assert "ETA draining" in progress_line(s)
    t.active = lambda: 0
    done = t.snapshot()
    assert not done["draining"] and done["eta_s"] == 0.0 and "ETA 0s" in progress_line(done)


def test_the_line_fits_the_terminal() -> None:
    t = ProgressTracker(total=40)
    t.on_call(Call("ok", 10, 0.1, "agent"))
    s = t.snapshot()
    full = progress_line(s)
    assert len(full) > 120 and "loop lag" in full
    short = progress_line(s, width=80)
    assert len(short) <= 80 and short.startswith("episodes 0/40") and "loop lag" not in short
