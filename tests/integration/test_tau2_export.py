"""`agentload export DIR --format tau2`: a τ² run on the embedded simulator (its agent making
mistakes) written as τ²-bench results files, checked against the run's own records."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections import Counter
from datetime import datetime
from pathlib import Path
from typing import Any

import orjson
import pytest
from typer.testing import CliRunner

from agentload.cli import app
from agentload.domains import get_domain
from agentload.domains.tau2 import Tau2Domain, configure
from agentload.results.jsonl import load_jsonl
from agentload.results.tau2_export import Episode
from agentload.results.tau2_export import messages as tau2_messages

# Airline tasks, retail tasks with natural-language assertions (a partial reward without a
# judge), and telecom tasks (the user's own tool calls; ids are names, so the first few).
TASKS = ["tau2-airline/0-7", "tau2-retail/0-5"]
TELECOM_TASKS = 3
TRIALS = 2
RUN_INFO = ("git_commit", "num_trials", "max_steps", "max_errors", "user_info", "agent_info")
SIM_KEYS = {"id", "task_id", "start_time", "end_time", "duration", "termination_reason"}


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    # tests/conftest.py's `tau2_data` place, for a run shared by the module's tests.
    data = Path(
        os.environ.get("AGENTLOAD_TAU2_DATA")
        or Path(__file__).resolve().parents[3] / "shared" / "tau2-data"
    )
    if not (data / "airline" / "tasks.json").is_file():
        pytest.skip("no τ²-bench data folder (set AGENTLOAD_TAU2_DATA)")
    configure(data, "base")
    telecom = [t.id for t in _domain("tau2-telecom").tasks()[:TELECOM_TASKS]]
    root = tmp_path_factory.mktemp("tau2x")
    cfg = root / "run.yaml"
    run_cfg = {
        "sim": {"profile": "instant", "behaviour_options": {"agent_skill": 0.5}},
        "workload": {"tasks": TASKS + telecom},
    }
    cfg.write_text(json.dumps(run_cfg))  # YAML reads JSON
    out = root / "r"
    cmd = [
        sys.executable, "-m", "agentload", "run", "--config", str(cfg), "--trials", str(TRIALS),
        "--tau2-data", str(data), "--concurrency", "8", "--out", str(out), "--progress", "off",
        "--no-report",
    ]  # fmt: skip
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=240)
    assert p.returncode in (0, 3), p.stderr[-2000:]
    return out


def _export(*args: str) -> Any:
    return CliRunner().invoke(app, ["export", *args, "--format", "tau2"])


def _domain(name: str) -> Tau2Domain:
    d = get_domain(name)
    assert isinstance(d, Tau2Domain)
    return d


def test_export_matches_the_run(run_dir: Path) -> None:
    res = _export(str(run_dir), "--json")
    assert res.exit_code == 0, res.output
    paths = [Path(p) for p in json.loads(res.stdout)]
    assert sorted(p.name for p in paths) == [
        "tau2-airline.json",
        "tau2-retail.json",
        "tau2-telecom.json",
    ]
    sessions = {s["session_id"]: s for s in load_jsonl(run_dir / "sessions.jsonl")}
    trajectories = {t["session_id"]: t["tau2"] for t in load_jsonl(run_dir / "trajectories.jsonl")}
    rewards: Counter[float] = Counter()
    seen = partials = 0
    for path in paths:
        doc = orjson.loads(path.read_bytes())
        key = doc["info"]["environment_info"]["domain_name"]
        domain = _domain(f"tau2-{key}")
        assert path.name == f"tau2-{key}.json"
        assert all(k in doc["info"] for k in RUN_INFO)
        assert doc["info"]["num_trials"] == TRIALS and doc["info"]["max_steps"] == 200
        assert doc["info"]["environment_info"]["policy"] == domain.policy
        assert doc["info"]["agent_info"]["implementation"] == "agentload-tool-calling"
        # The tasks are τ²'s own records, each once, in the data file's order.
        tasks = {t["id"]: t for t in doc["tasks"]}
        assert len(tasks) == len(doc["tasks"])
        for tid, t in tasks.items():
            assert t == domain.get_task(f"{domain.name}/{tid}").tau2
        sims = doc["simulations"]
        assert {s["task_id"] for s in sims} == set(tasks)
        assert len(sims) == len(tasks) * TRIALS
        for sim in sims:
            seen += 1
            assert sim.keys() >= SIM_KEYS
            s, traj = sessions[sim["id"]], trajectories[sim["id"]]
            assert s["domain"] == domain.name and sim["task_id"] == traj["task_id"]
            assert sim["trial"] == s["trial"] and sim["seed"] == s["seed"]
            assert sim["termination_reason"] == s["tau2_termination"]
            assert sim["duration"] == pytest.approx(s["durations"]["total_s"])
            ri = sim["reward_info"]
            assert ri["reward"] == s["reward"]
            rewards[ri["reward"]] += 1
            # Without a judge, natural-language assertions leave the reward partial.
            task = domain.get_task(f"{domain.name}/{sim['task_id']}")
            graded = sim["termination_reason"] in ("user_stop", "agent_stop")
            partial = ri["info"]["agentload"]["partial"]
            assert partial == s["reward_partial"] == (task.needs_judge and graded)
            partials += partial
            assert ri["reward_basis"] == traj["reward_info"]["reward_basis"]
            _check_messages(sim["messages"], traj["messages"])
    assert seen == len(sessions) and partials > 0
    # The simulated agent's mistakes fail some episodes and not others.
    assert rewards[1.0] > 0 and rewards[0.0] > 0


def _check_messages(msgs: list[dict[str, Any]], recorded: list[dict[str, Any]]) -> None:
    assert len(msgs) == len(recorded)
    assert [m["turn_idx"] for m in msgs] == list(range(len(msgs)))
    stamps = [datetime.fromisoformat(m["timestamp"]) for m in msgs]
    assert stamps == sorted(stamps) and len(set(stamps)) == len(stamps)
    pending: list[tuple[str, str]] = []
    for m, r in zip(msgs, recorded, strict=True):
        assert m["role"] == r["role"] and m["content"] == r["content"]
        if m["role"] == "tool":
            # τ²'s replay pairs each tool message with the call before it, in order.
            assert pending.pop(0) == (m["id"], m["requestor"])
            assert isinstance(m["error"], bool)
            continue
        assert not pending
        for c in m["tool_calls"] or ():
            assert set(c) == {"id", "name", "arguments", "requestor"}
            assert isinstance(c["arguments"], dict)
            pending.append((c["id"], c["requestor"]))
    assert not pending


def test_one_domain_to_a_file_and_several_need_a_folder(run_dir: Path, tmp_path: Path) -> None:
    target = tmp_path / "airline.json"
    res = _export(str(run_dir), "-o", str(target))
    assert res.exit_code == 2
    lines = [ln for ln in res.output.splitlines() if ln.strip()]
    assert len(lines) == 1 and "3 domains" in lines[0] and "folder" in lines[0]
    assert not target.exists()
    res = _export(str(run_dir), "-o", str(tmp_path / "all"))
    assert res.exit_code == 0, res.output
    assert len(list((tmp_path / "all").glob("tau2-*.json"))) == 3


def test_single_domain_run_to_a_file(run_dir: Path, tmp_path: Path) -> None:
    # A copy of the run holding only its airline episodes.
    one = tmp_path / "one"
    one.mkdir()
    for name in ("sessions.jsonl", "trajectories.jsonl"):
        rows = [r for r in load_jsonl(run_dir / name) if r["domain"] == "tau2-airline"]
        (one / name).write_bytes(b"".join(orjson.dumps(r) + b"\n" for r in rows))
    target = tmp_path / "out" / "airline.json"
    res = _export(str(one), "-o", str(target), "--tau2-data", str(run_dir.parent.parent))
    assert res.exit_code == 2 and "not a τ²-bench data folder" in res.output
    res = _export(str(one), "-o", str(target))  # the data folder from the environment
    assert res.exit_code == 0, res.output
    doc = orjson.loads(target.read_bytes())
    assert doc["info"]["environment_info"]["domain_name"] == "airline"
    assert len(doc["simulations"]) == len(rows)
    # Task files that changed since the run are named in a warning.
    run = {"tau2": {"files": {"tau2-airline": {"airline/tasks.json": "0" * 64}}}}
    (one / "run.json").write_bytes(orjson.dumps(run))
    res = _export(str(one), "-o", str(target))
    assert res.exit_code == 0
    assert "warning: tau2-airline: airline/tasks.json differ from the files the run used" in (
        res.output
    )


def test_a_run_without_tau2_episodes_is_one_line(tmp_path: Path) -> None:
    (tmp_path / "sessions.jsonl").write_text('{"session_id": "s1", "domain": "airline"}\n')
    (tmp_path / "trajectories.jsonl").write_text('{"session_id": "s1", "messages": []}\n')
    res = _export(str(tmp_path))
    assert res.exit_code == 2
    lines = [ln for ln in res.output.splitlines() if ln.strip()]
    assert len(lines) == 1 and "no τ² episodes" in lines[0]
    bad = CliRunner().invoke(app, ["export", str(tmp_path), "--format", "xlsx"])
    assert bad.exit_code == 2 and "tau2" in bad.output


def test_message_history_leads_the_messages() -> None:
    # τ² keeps a task's message history at the start of a simulation's messages (and its
    # evaluator replays it): an episode that does not hold it gets it in front.
    history = [
        {"role": "user", "content": "Create a task."},
        {"role": "assistant", "tool_calls": [{"id": "c1", "name": "create_task", "arguments": {}}]},
        {"role": "tool", "id": "c1", "content": "{}"},
        {"role": "assistant", "content": "Created."},
    ]
    task = {"id": "t", "initial_state": {"message_history": history}}
    episode = [
        {"role": "assistant", "content": "Hi! How can I help you today?", "tool_calls": None},
        {"role": "user", "content": "Done, thanks. ###STOP###", "tool_calls": None},
    ]
    ep = Episode({"session_id": "s"}, {"messages": episode})
    msgs = tau2_messages(task, ep, 1_800_000_000.0, 2.0)
    roles = ["user", "assistant", "tool", "assistant", "assistant", "user"]
    assert [m["role"] for m in msgs] == roles
    assert msgs[1]["tool_calls"][0]["requestor"] == "assistant"
    assert msgs[2]["requestor"] == "assistant" and msgs[2]["error"] is False
    # Already there: not added twice.
    again = Episode({"session_id": "s"}, {"messages": history + episode})
    assert len(tau2_messages(task, again, 1_800_000_000.0, 2.0)) == 6


def test_regrading_an_episode_of_a_history_task(tau2_data: Path) -> None:
    # An episode's own messages do not hold the task's history: re-grading them (the
    # world replayed from the messages) must replay all of their tool calls.
    from agentload.domains.tau2.grading import grade

    configure(tau2_data, "base")
    d = _domain("tau2-mock")
    task = d.get_task("tau2-mock/update_task_with_message_history")
    args = {"task_id": "task_2", "status": "completed"}
    call = {"id": "c1", "name": "update_task_status", "arguments": args, "requestor": "assistant"}
    world = d.task_world(task)
    text, error = world.call("assistant", "update_task_status", args)
    msgs: list[dict[str, Any]] = [
        {"role": "assistant", "content": "Hi! How can I help you today?", "tool_calls": None},
        {"role": "user", "content": "Please mark task_2 completed.", "tool_calls": None},
        {"role": "assistant", "content": None, "tool_calls": [call]},
        {"role": "tool", "id": "c1", "content": text, "requestor": "assistant", "error": error},
        {"role": "assistant", "content": "task_2 is completed.", "tool_calls": None},
        {"role": "user", "content": "Thanks ###STOP###", "tool_calls": None},
    ]
    live = grade(d, task, msgs, "user_stop", world=world)
    assert live["reward"] == 1.0
    assert grade(d, task, msgs, "user_stop")["reward_breakdown"] == live["reward_breakdown"]
    # The same messages behind the history (as exported for τ²) grade the same.
    history: list[dict[str, Any]] = task.tau2["initial_state"]["message_history"]
    assert grade(d, task, history + msgs, "user_stop")["reward"] == 1.0
