"""Resuming a replay where it stopped: each conversation at its first unsent turn.

A replayed conversation is a fixed list of client turns. Under `dataset` history every
request is built from the dataset alone, so the turns an interrupted (or duration-capped) run
already sent need not be sent again: their call records stay in calls.jsonl, and the resumed
conversation (same session id) builds its history from the dataset up to its first unsent
turn and goes on from there. Under `live` history the server's earlier answers are part of
every later request and are written only when the conversation ends (its trajectory), so an
unfinished live conversation restarts at its first turn, its calls set aside as for any
unfinished episode.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from agentload.config import ConfigError, read_yaml
from agentload.results.files import CALLS, CONFIG, RUN
from agentload.results.jsonl import read_jsonl
from agentload.safeio import read_regular

log = logging.getLogger("agentload.results")


def _dataset_history_replay(out_dir: Path) -> bool:
    """Whether the folder holds a replay run with dataset history (run.json's kind, the
    history setting of config.yaml; dataset is the default)."""
    import orjson

    try:
        meta = orjson.loads(read_regular(out_dir / RUN))
        cfg = read_yaml(out_dir / CONFIG) if (out_dir / CONFIG).exists() else {}
    except (OSError, ValueError, ConfigError):
        return False
    if not isinstance(meta, dict) or meta.get("kind") != "replay":
        return False
    replay = cfg.get("replay") if isinstance(cfg, dict) else None
    history = replay.get("history", "dataset") if isinstance(replay, dict) else "dataset"
    return bool(history == "dataset")


def sent_call(rec: Mapping[str, Any]) -> bool:
    """A replayed turn the server answered in full: status ok, outside warmup."""
    replay = rec.get("replay")
    sid = rec.get("session_id")
    return (
        isinstance(replay, dict)
        and rec.get("status") == "ok"
        and isinstance(rec.get("turn"), int)
        and sid is not None
        and "-warmup" not in str(sid)
    )


def replay_calls_to_keep(out_dir: Path) -> Callable[[Mapping[str, Any]], bool] | None:
    """For `--resume`: which calls of unfinished sessions stay in calls.jsonl (the answered
    turns of dataset-history replays, which are not sent again); None for every other run."""
    return sent_call if _dataset_history_replay(out_dir) else None


def sent_turns(out_dir: Path) -> dict[tuple[str, int], set[int]]:
    """Per (conversation id, repeat), the replayed turns already answered (calls.jsonl of a
    resumed run); the conversation resumes after the run of them from its first turn."""
    path = out_dir / CALLS
    if not path.exists():
        return {}
    out: dict[tuple[str, int], set[int]] = {}
    for rec in read_jsonl(path).records:
        if not sent_call(rec):
            continue
        replay = rec["replay"]
        cid, repeat = replay.get("conversation_id"), replay.get("repeat")
        if isinstance(cid, str) and isinstance(repeat, int):
            out.setdefault((cid, repeat), set()).add(int(rec["turn"]))
    return out
