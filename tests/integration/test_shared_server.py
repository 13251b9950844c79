"""A server that other clients use during the run: its figures are marked as shared."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import aiohttp

from agentload.config import build_config
from agentload.report.build import SHARED_MARK, build_document
from agentload.report.document import to_markdown
from agentload.runner import execute_run
from agentload.sim import SimConfig, SimServer


async def _run(out: Path, foreign: int) -> dict[str, Any]:
    async with SimServer(SimConfig(port=0, profile="tiny-cpu", speedup=20)) as sim:
        cfg = build_config(
            data={
                "out": str(out),
                "endpoints": {"agent": {"base_url": sim.base_url, "model": "agentload-sim"}},
                "workload": {"tasks": ["airline/000-003"]},
                "load": {"concurrency": 4},
                "metrics": {"interval_s": 0.1},
                "report": False,
            }
        )
        run = asyncio.ensure_future(execute_run(cfg, progress="off", say=lambda _m: None))

        async def other_client() -> None:
            await asyncio.sleep(0.5)  # inside the run's window
            body = {"model": "agentload-sim", "max_tokens": 4, "messages": [
                {"role": "user", "content": "hello from another client"}
            ]}  # fmt: skip
            async with aiohttp.ClientSession() as http:
                for _ in range(foreign):
                    async with http.post(f"{sim.base_url}/chat/completions", json=body) as r:
                        assert r.status == 200
                        await r.read()

        await asyncio.gather(run, other_client())
        outcome = run.result()
        assert outcome.exit_code == 0
        return outcome.summary.dump() if outcome.summary else {}


def test_other_clients_traffic_is_named_beside_the_server_figures(tmp_path: Path) -> None:
    alone = asyncio.run(_run(tmp_path / "alone", foreign=0))
    assert alone["server"]["shared"] is None
    shared_summary = asyncio.run(_run(tmp_path / "shared", foreign=60))
    shared = shared_summary["server"]["shared"]
    calls = shared_summary["counts"]["calls"]
    assert shared is not None and shared["run_calls"] >= calls
    # Some of the other client's requests land inside the window, beyond the slack.
    assert shared["server_requests"] > shared["run_calls"] + 10
    text = to_markdown(build_document(shared_summary))
    section = text[text.index("Server-side metrics") :]
    assert "A shared server" in section and section.count(SHARED_MARK) >= 8
    assert "A shared server" not in to_markdown(build_document(alone))
