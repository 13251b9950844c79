"""The Kubernetes Job's container scripts (deploy/kubernetes/job.yaml) run for real with
/bin/sh against the embedded simulator on loopback: the wait step returns once the endpoint
serves, the run writes its folder, and the same script started again (a replaced pod)
resumes that folder without recording a session twice."""

from __future__ import annotations

import asyncio
import os
import sys
from pathlib import Path

import yaml

from agentload.results.jsonl import load_jsonl
from agentload.sim import SimServer

JOB = Path(__file__).resolve().parents[2] / "deploy" / "kubernetes" / "job.yaml"


def _scripts() -> dict[str, str]:
    job = next(d for d in yaml.safe_load_all(JOB.read_text()) if d and d["kind"] == "Job")
    spec = job["spec"]["template"]["spec"]
    return {c["name"]: c["args"][0] for c in spec["initContainers"] + spec["containers"]}


async def _sh(script: str, env: dict[str, str]) -> tuple[int, str]:
    proc = await asyncio.create_subprocess_exec(
        "/bin/sh",
        "-c",
        script,
        env=env,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.STDOUT,
    )
    out, _ = await asyncio.wait_for(proc.communicate(), 90)
    return proc.returncode or 0, out.decode(errors="replace")


async def test_job_scripts_wait_run_and_resume(sim: SimServer, tmp_path: Path) -> None:
    results, etc = tmp_path / "results", tmp_path / "etc"
    results.mkdir()
    etc.mkdir()
    (etc / "config.yaml").write_text(
        yaml.safe_dump(
            {
                "workload": {"tasks": ["airline/000-003"], "trials": 1},
                "load": {"concurrency": 2},
                "metrics": {"enabled": False},
            }
        )
    )
    env = {
        "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}",
        "HOME": str(tmp_path),
        "AGENTLOAD_BASE_URL": sim.base_url,
        "AGENTLOAD_MODEL": "agentload-sim",
        "RUN_NAME": "k8s-run",
    }
    scripts = {
        k: v.replace("/results", str(results)).replace("/etc/agentload", str(etc))
        for k, v in _scripts().items()
    }
    code, out = await _sh(scripts["wait-for-endpoint"], env)
    assert code == 0, out
    assert "waiting for" not in out  # the endpoint served at the first try

    code, out = await _sh(scripts["agentload"], env)
    assert code == 0, out
    run = results / "k8s-run"
    keys = [(s["task_id"], s["trial"]) for s in load_jsonl(run / "sessions.jsonl")]
    assert sorted(keys) == [(f"airline/{i:03d}", 0) for i in range(4)]
    assert (run / "summary.json").is_file()

    # A replaced pod runs the same script: it resumes, finds nothing left, records nothing.
    code, out = await _sh(scripts["agentload"], env)
    assert code == 0, out
    assert "resuming" in out
    again = [(s["task_id"], s["trial"]) for s in load_jsonl(run / "sessions.jsonl")]
    assert again == keys
