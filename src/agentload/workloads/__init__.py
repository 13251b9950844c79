"""Workloads: live agent episodes (and, beside them, dataset replay)."""

from agentload.workloads.episode import (
    COUNT_KEYS,
    SESSION_SCHEMA,
    TERMINATIONS,
    TRAJECTORY_SCHEMA,
    EpisodeOptions,
    EpisodeResult,
    EpisodeSpec,
    ToolLatency,
    episode_seed,
    run_episode,
)

__all__ = [
    "COUNT_KEYS",
    "SESSION_SCHEMA",
    "TERMINATIONS",
    "TRAJECTORY_SCHEMA",
    "EpisodeOptions",
    "EpisodeResult",
    "EpisodeSpec",
    "ToolLatency",
    "episode_seed",
    "run_episode",
]
