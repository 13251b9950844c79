"""Session and trajectory records as their writers build them (agentload.results.records):
every field a writer always writes is required, a written line decodes as its writer's record,
and the run's stamp makes a new record instead of editing the one built."""

from __future__ import annotations

import asyncio
import pickle
from pathlib import Path

import msgspec
import orjson
import pytest

from agentload.proxy.sessions import ProxySession
from agentload.results.recorder import Recorder
from agentload.results.records import (
    STAMP,
    EpisodeSessionLine,
    EpisodeTrajectoryLine,
    ProxySessionLine,
    ReplaySessionLine,
    parse_session,
    parse_trajectory,
)
from agentload.scheduler.plan import WorkItem
from agentload.session.host import line_of, stamp_session
from agentload.workloads.episode import EpisodeOptions, EpisodeSpec, episode_seed, run_episode

TASK = "airline/000"


def _episode() -> tuple[EpisodeSessionLine, EpisodeTrajectoryLine]:
    # The oracle agent and the scripted user call no model: a real episode, no server.
    spec = EpisodeSpec(TASK, 0, episode_seed(7, TASK, 0), "run1-airline-000-t0")
    res = asyncio.run(run_episode(spec, {}, EpisodeOptions(agent="oracle", user="scripted")))
    assert isinstance(res.session, EpisodeSessionLine)
    assert isinstance(res.trajectory, EpisodeTrajectoryLine)
    return res.session, res.trajectory


def _lines(path: Path) -> list[bytes]:
    return path.read_bytes().splitlines()


def test_written_episode_lines_decode_as_their_writer_records(tmp_path: Path) -> None:
    session, traj = _episode()
    item = WorkItem(TASK, 0, False, 0)
    stamped = stamp_session(session, "run1", item, 2, 1_000, 1_500_000_000 + 1_000)
    with Recorder(tmp_path) as rec:
        rec.record_episode(line_of(stamped), line_of(traj))
    (s_line,) = _lines(tmp_path / "sessions.jsonl")
    (t_line,) = _lines(tmp_path / "trajectories.jsonl")
    # strict: every required field is there with its type (an int where a float is due fails)
    s = msgspec.json.decode(s_line, type=EpisodeSessionLine, strict=True)
    t = msgspec.json.decode(t_line, type=EpisodeTrajectoryLine, strict=True)
    assert s.line() == stamped.line() and t.line() == traj.line()
    obj = orjson.loads(s_line)
    # the contract's field order: schema first, the run's stamp last
    assert list(obj)[:3] == ["schema", "schema_version", "session_id"]
    assert list(obj)[-5:] == list(STAMP)
    assert obj["sched_delay_s"] == 1.5 and obj["attempt"] == 2 and obj["warmup"] is False
    assert obj["termination"] == "user_stop" and obj["reward"] == 1.0
    # the readers take the same lines
    r = parse_session(obj)
    assert r.reward == 1.0 and r.run_id == "run1" and r.db_seed == session.db_seed
    assert parse_trajectory(orjson.loads(t_line)).messages[0].role == "system"


def test_stamping_builds_a_new_record_and_leaves_the_built_one_alone() -> None:
    session, _ = _episode()
    before = session.line()
    item = WorkItem(TASK, -1, True, 0)
    stamped = stamp_session(session, "run1", item, 1, 10, 20)
    assert stamped is not session and session.line() == before
    assert "run_id" not in before and session.get("run_id") is None
    assert stamped["run_id"] == "run1" and stamped["warmup"] is True
    assert stamped["sched_delay_s"] == pytest.approx(1e-8)
    # a record is frozen: nothing edits it after it is built
    with pytest.raises(AttributeError):
        session.reward = 0.0  # type: ignore[misc]
    # another workload's mapping: a new dict, the given one unchanged
    given = {"session_id": "x", "termination": "ok"}
    out = stamp_session(given, "run1", item, 1, 10, 20)
    assert given == {"session_id": "x", "termination": "ok"}
    assert out["run_id"] == "run1" and out is not given


def test_a_writer_cannot_leave_out_a_field_it_always_writes() -> None:
    session, _ = _episode()
    fields = session.line()
    del fields["schema"], fields["termination"]
    with pytest.raises(TypeError, match="termination"):
        EpisodeSessionLine(**fields)
    with pytest.raises(TypeError, match="Unexpected keyword"):
        ReplaySessionLine(**session.line())


def test_records_travel_to_the_driver_as_they_are() -> None:
    session, traj = _episode()
    # worker processes send records pickled
    assert pickle.loads(pickle.dumps(session)) == session
    assert pickle.loads(pickle.dumps(traj)) == traj


def test_a_proxy_session_writes_the_same_fields_as_before() -> None:
    ps = ProxySession("s1", started_at=1.0, start_ns=5, end_ns=2_000_000_005)
    ps.models.add("m")
    session, traj = ps.records("run9")
    assert isinstance(session, ProxySessionLine)
    assert list(session.line()) == [
        "schema",
        "schema_version",
        "kind",
        "run_id",
        "session_id",
        "task_id",
        "trial",
        "warmup",
        "termination",
        "error",
        "models",
        "counts",
        "durations",
        "started_at",
        "start_ns",
        "end_ns",
    ]
    assert session["termination"] == "error" and session["durations"]["total_s"] == 2.0
    assert traj.line()["termination"] == "error" and traj["messages"] == []


def test_an_old_line_still_reads() -> None:
    # written before most fields existed: the reader's view fills the rest
    old = {"schema": "agentload.session/1", "task_id": "retail/1", "trial": 0, "reward": 1}
    r = parse_session(old)
    assert r.key == ("retail/1", 0) and r.reward == 1.0 and r.durations is None
