"""What a run's end means: its exit code and final status, decided from what was measured.

Exit 0 says "episodes completed and the numbers mean something". A run that measured no
episode, whose every call failed, or where more than `load.max_infra_error_share` of the
episodes ended on infrastructure errors is a failure (exit 1) whatever made it stop. The same
verdict goes into run.json (`status`, `exit_code`) so files and exit code never disagree.
"""

from __future__ import annotations

import logging
import sys
from collections.abc import Mapping
from dataclasses import dataclass

log = logging.getLogger("agentload.run")

EXIT_OK, EXIT_FAILED, EXIT_USAGE, EXIT_INTERRUPTED = 0, 1, 2, 130


class RunFailed(Exception):
    """The run could not proceed (exit code 1), whichever executor ran it."""


def say_stderr(msg: str) -> None:
    """The default `say` of a run: one line on stderr."""
    print(msg, file=sys.stderr, flush=True)


INFRA = "infra_error"


@dataclass
class Verdict:
    code: int
    status: str
    """run.json `status`: completed | duration | interrupted | failed: <why>."""


def judge(
    *,
    stop_reason: str,
    error: str | None,
    sessions: int,
    calls: int,
    failed_calls: int,
    failed_by_kind: Mapping[str, int],
    infra_episodes: int,
    max_infra_share: float,
) -> Verdict:
    """The exit code and status of a run that got as far as its summary: its measured
    sessions and calls, and the calls that failed (by kind)."""
    if stop_reason == "interrupted":
        return Verdict(EXIT_INTERRUPTED, "interrupted")
    if stop_reason == "failed":
        return Verdict(EXIT_FAILED, f"failed: {error or 'the run failed'}")
    if sessions == 0:
        return Verdict(EXIT_FAILED, "failed: 0 episodes measured")
    if calls and failed_calls >= calls:
        kinds = ", ".join(f"{k} {n}" for k, n in failed_by_kind.items())
        why = f"failed: every one of the {calls} calls failed"
        return Verdict(EXIT_FAILED, f"{why} ({kinds})" if kinds else why)
    if sessions and infra_episodes / sessions > max_infra_share:
        return Verdict(
            EXIT_FAILED,
            f"failed: {infra_episodes} of {sessions} episodes ended on infrastructure errors "
            f"(more than {max_infra_share:.0%}; --max-infra-error-share); "
            "`agentload run --resume` redoes them",
        )
    return Verdict(EXIT_OK, stop_reason)


def concurrency_cap(mode: str, concurrency: int, episodes: int | None) -> tuple[int, str | None]:
    """More workers than episodes only costs memory: cap at the episodes planned."""
    if episodes is None or mode != "closed" or concurrency <= max(episodes, 1):
        return concurrency, None
    cap = max(episodes, 1)
    return cap, (
        f"concurrency {concurrency} is more than the {episodes} episodes planned; using {cap}"
    )
