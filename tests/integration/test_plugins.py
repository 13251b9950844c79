"""An outside package adds a domain and an agent strategy through entry points, with no edit
to agentload: built in a temporary folder, installed into a throwaway venv, and run."""

from __future__ import annotations

import json
import os
import site
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

import agentload
from agentload.registry import Registry, UnknownName

PLUGIN = '''
"""A one-task helpdesk domain and a strategy, packaged outside agentload."""

from agentload.agents.strategies import ToolCallingAgent
from agentload.domains.base import Action, Domain, Task, Tool, ToolError, UserScenario


def _reset_password(db, user):
    if user not in db["users"]:
        raise ToolError(f"no user {user}")
    db["users"][user]["resets"] += 1
    return {"user": user, "status": "reset link sent"}


def _find_user(db, email):
    for name, u in db["users"].items():
        if u["email"] == email:
            return {"user": name}
    raise ToolError(f"no user with email {email}")


TOOLS = [
    Tool(
        "find_user",
        "Find a user by email.",
        {
            "type": "object",
            "properties": {"email": {"type": "string"}},
            "required": ["email"],
            "additionalProperties": False,
        },
        False,
        _find_user,
    ),
    Tool(
        "reset_password",
        "Send a password-reset link.",
        {
            "type": "object",
            "properties": {"user": {"type": "string"}},
            "required": ["user"],
            "additionalProperties": False,
        },
        True,
        _reset_password,
    ),
]


class Helpdesk(Domain):
    name = "helpdesk"
    data_version = "helpdesk-1"
    policy = "Verify the user by email before resetting a password."

    def __init__(self):
        self.tools = TOOLS

    def make_db(self, seed=0):
        return {"users": {"ana": {"email": "ana@example.org", "resets": 0}}}

    def tasks(self):
        scen = UserScenario(
            "terse",
            "You forgot your password; your email is ana@example.org.",
            {"email": "ana@example.org"},
            [],
            "I cannot log in.",
        )
        gold = (
            Action("find_user", {"email": "ana@example.org"}),
            Action("reset_password", {"user": "ana"}),
        )
        return [Task("helpdesk/000", "helpdesk", "single_write", scen, gold, ())]


DOMAIN = Helpdesk()


class CarefulAgent(ToolCallingAgent):
    name = "careful"
'''

PYPROJECT = """
[build-system]
requires = ["hatchling"]
build-backend = "hatchling.build"

[project]
name = "agentload-helpdesk"
version = "0.0.1"

[tool.hatch.build.targets.wheel]
include = ["agentload_helpdesk.py"]

[project.entry-points."agentload.domains"]
helpdesk = "agentload_helpdesk:DOMAIN"

[project.entry-points."agentload.agents"]
careful = "agentload_helpdesk:CarefulAgent"
"""


@pytest.fixture(scope="module")
def plugin_venv(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("plugin")
    pkg = root / "pkg"
    pkg.mkdir()
    (pkg / "agentload_helpdesk.py").write_text(textwrap.dedent(PLUGIN))
    (pkg / "pyproject.toml").write_text(PYPROJECT)
    venv = root / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, timeout=120)
    # The throwaway venv sees agentload and its dependencies from this environment (a .pth
    # line starting with "import" runs, so their own .pth files are processed too).
    py = venv / "bin" / "python"
    purelib = subprocess.run(
        [str(py), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
        check=True,
        capture_output=True,
        text=True,
    ).stdout.strip()
    here = [*site.getsitepackages(), str(Path(agentload.__file__).parents[1])]
    lines = [f"import site; site.addsitedir({p!r})" for p in here]
    (Path(purelib) / "agentload_host.pth").write_text("\n".join(lines) + "\n")
    subprocess.run(
        [str(py), "-m", "pip", "install", "-q", "--no-deps", "--no-build-isolation", str(pkg)],
        check=True,
        timeout=300,
        env={**os.environ, "PIP_NO_INDEX": "1"},
    )
    return venv


def _agentload(venv: Path, *args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(venv / "bin" / "python"), "-m", "agentload", *args],
        capture_output=True,
        text=True,
        timeout=180,
        cwd=cwd,
    )


@pytest.mark.slow
def test_outside_package_adds_a_domain_and_a_strategy(plugin_venv: Path, tmp_path: Path) -> None:
    listed = _agentload(
        plugin_venv, "tasks", "list", "--domain", "helpdesk", "--json", cwd=tmp_path
    )
    assert listed.returncode == 0, listed.stderr
    assert [json.loads(line)["id"] for line in listed.stdout.splitlines()] == ["helpdesk/000"]

    helped = _agentload(plugin_venv, "run", "--help", cwd=tmp_path)
    assert "careful" in helped.stdout

    checked = _agentload(plugin_venv, "tasks", "check", "-d", "helpdesk", cwd=tmp_path)
    assert checked.returncode == 0, checked.stdout + checked.stderr

    cfg = tmp_path / "run.yaml"
    cfg.write_text(
        "workload: {tasks: [helpdesk/000], trials: 2, agent: careful, user: scripted}\n"
        "sim: {speedup: 50, behaviour_options: {agent_skill: 1.0}}\n"
    )
    out = tmp_path / "out"
    run = _agentload(
        plugin_venv, "run", "--config", str(cfg), "-o", str(out), "--no-report", "-q", cwd=tmp_path
    )
    assert run.returncode == 0, run.stderr
    sessions = [json.loads(line) for line in (out / "sessions.jsonl").read_text().splitlines()]
    assert [s["task_id"] for s in sessions] == ["helpdesk/000"] * 2
    assert all(s["reward"] == 1.0 for s in sessions), [s["termination"] for s in sessions]
    trajectories = (out / "trajectories.jsonl").read_text().splitlines()
    tool_names = {t["function"]["name"] for t in json.loads(trajectories[0])["tools"]}
    assert tool_names == {"find_user", "reset_password"}

    # Without the package the names are unknown, with the known ones listed.
    bare = subprocess.run(
        [sys.executable, "-m", "agentload", "tasks", "list", "--domain", "helpdesk"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert bare.returncode == 2
    assert "helpdesk" in bare.stderr and "airline" in bare.stderr


def test_registry_loads_lazily_once_and_names_the_known_ones() -> None:
    loads: list[str] = []

    def convert(name: str, obj: object) -> str:
        loads.append(name)
        return f"{name}:{obj!r}"

    reg: Registry[str] = Registry("test_group_none", "gadget", {"a": "json:dumps"}, convert)
    reg.register("b", 42)
    assert reg.names() == ["a", "b"]
    assert reg.get("b") == "b:42" and reg.get("b") == "b:42"
    assert reg.get("a").startswith("a:<function dumps")
    assert loads == ["b", "a"]
    with pytest.raises(UnknownName, match="unknown gadget 'c'; known: a, b"):
        reg.get("c")
    reg.register("broken", "no_such_module_xyz:thing")
    with pytest.raises(ImportError, match="gadget 'broken'"):
        reg.get("broken")
