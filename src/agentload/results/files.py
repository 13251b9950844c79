"""The file names of a results folder (docs/results.md), in one place for writers and readers,
and the one error of a folder that cannot be read or written."""

from __future__ import annotations

CALLS = "calls.jsonl"
SESSIONS = "sessions.jsonl"
TRAJECTORIES = "trajectories.jsonl"
SERVER_METRICS = "server_metrics.jsonl"
CONFIG = "config.yaml"
RUN = "run.json"
SUMMARY = "summary.json"
DROPPED_DIR = "dropped"  # what a resume set aside, byte for byte (agentload.results.resume)
RECORD_FILES = (CALLS, SESSIONS, TRAJECTORIES, SERVER_METRICS)


class ResultsError(ValueError):
    """A results folder that cannot be read or written; the message is one line."""
