"""Prometheus scraping: a real vLLM capture served over loopback HTTP, SGLang names, deltas."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest
from aiohttp import web

from agentload.results import Recorder, load_jsonl
from agentload.servermetrics import (
    MetricsScraper,
    counter_delta,
    fetch_metrics,
    parse_metrics,
    summarize_server,
)

CAPTURE = Path(__file__).parents[1] / "data" / "vllm-0.32-cpu" / "real-vllm-metrics.txt"

# A hand-written exposition with SGLang's metric names (two model label sets).
SGLANG_TEXT = """\
# HELP sglang:num_running_reqs The number of running requests.
# TYPE sglang:num_running_reqs gauge
sglang:num_running_reqs{model_name="a"} 3.0
sglang:num_running_reqs{model_name="b"} 2.0
# HELP sglang:num_queue_reqs The number of requests in the waiting queue.
# TYPE sglang:num_queue_reqs gauge
sglang:num_queue_reqs{model_name="a"} 7.0
# HELP sglang:token_usage The token usage.
# TYPE sglang:token_usage gauge
sglang:token_usage{model_name="a"} 0.4
sglang:token_usage{model_name="b"} 0.2
# HELP sglang:cache_hit_rate The prefix cache hit rate.
# TYPE sglang:cache_hit_rate gauge
sglang:cache_hit_rate{model_name="a"} 0.75
# HELP sglang:prompt_tokens_total Number of prefill tokens processed.
# TYPE sglang:prompt_tokens_total counter
sglang:prompt_tokens_total{model_name="a"} 12000.0
# HELP sglang:generation_tokens_total Number of generation tokens processed.
# TYPE sglang:generation_tokens_total counter
sglang:generation_tokens_total{model_name="a"} 800.0
# HELP sglang:num_retracted_requests_total Total retracted requests.
# TYPE sglang:num_retracted_requests_total counter
sglang:num_retracted_requests_total{model_name="a"} 2.0
# HELP sglang:time_to_first_token_seconds Histogram of time to first token in seconds.
# TYPE sglang:time_to_first_token_seconds histogram
sglang:time_to_first_token_seconds_bucket{le="0.1",model_name="a"} 1.0
sglang:time_to_first_token_seconds_bucket{le="+Inf",model_name="a"} 4.0
sglang:time_to_first_token_seconds_sum{model_name="a"} 1.2
sglang:time_to_first_token_seconds_count{model_name="a"} 4.0
"""


def test_parse_real_vllm_capture() -> None:
    s = parse_metrics(CAPTURE.read_text())
    assert s["engine"] == "vllm"
    assert s["running"] == 0.0 and s["waiting"] == 0.0 and s["kv_usage"] == 0.0
    assert s["prefix_queries"] == 88944.0 and s["prefix_hits"] == 43904.0
    assert s["prompt_tokens"] == 88944.0 and s["cached_tokens"] == 43904.0
    assert s["generation_tokens"] == 550.0
    assert s["preemptions"] == 0.0
    assert s["requests_finished"] == 16.0  # summed over finished_reason labels
    assert s["ttft_count"] == 16.0 and s["ttft_sum"] == pytest.approx(29.844319820404053)
    assert s["e2e_count"] == 16.0 and s["e2e_sum"] == pytest.approx(31.84266495704651)
    assert s["itl_count"] == 534.0


def test_parse_sglang_names() -> None:
    s = parse_metrics(SGLANG_TEXT)
    assert s["engine"] == "sglang"
    assert s["running"] == 5.0 and s["waiting"] == 7.0
    assert s["kv_usage"] == pytest.approx(0.3)  # averaged over label sets
    assert s["cache_hit_rate"] == 0.75
    assert s["prompt_tokens"] == 12000.0 and s["generation_tokens"] == 800.0
    assert s["preemptions"] == 2.0
    assert s["ttft_sum"] == 1.2 and s["ttft_count"] == 4.0
    assert "prefix_queries" not in s


def test_counter_delta_handles_resets() -> None:
    assert counter_delta([10, 15, 15, 30]) == 20
    assert counter_delta([10, 15, 3, 8]) == 5 + 3 + 5  # restart at 0 between 15 and 3
    assert counter_delta([None, 4, None, 9]) == 5
    assert counter_delta([]) is None


def _sample(t: float, **kw: Any) -> dict[str, Any]:
    return {"t": t, "endpoint": "e", "ok": True, "engine": "sglang", **kw}


def test_server_summary_sglang_hit_rate_from_gauge() -> None:
    samples = [
        _sample(t, running=float(t), cache_hit_rate=0.5 + 0.1 * t, preemptions=float(t))
        for t in range(5)
    ]
    samples.append({"t": 2.5, "endpoint": "e", "ok": False, "error": "timeout"})
    out = summarize_server(samples, window=(1.0, 3.0))["endpoints"]["e"]
    assert out["samples"] == 6 and out["failed_scrapes"] == 1
    assert out["running"] == {"mean": 2.0, "max": 3.0}
    assert out["prefix_cache_hit_rate"] == pytest.approx(0.7)
    assert out["prefix_cache_hit_rate_source"] == "cache_hit_rate gauge mean"
    assert out["preemptions"] == 2.0  # counter from t=1 to t=3


def test_server_summary_sglang_hit_rate_from_cached_tokens() -> None:
    samples = [_sample(t, prompt_tokens=1000.0 * t, cached_tokens=250.0 * t) for t in range(3)]
    out = summarize_server(samples)["endpoints"]["e"]
    assert out["prefix_cache_hit_rate"] == pytest.approx(0.25)


async def _serve(app: web.Application) -> tuple[web.AppRunner, str]:
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
    return runner, f"http://127.0.0.1:{port}"


async def test_scraper_records_samples_from_a_loopback_server(tmp_path: Path) -> None:
    text = CAPTURE.read_text()
    hits = {"n": 0}

    async def metrics(_: web.Request) -> web.Response:
        hits["n"] += 1
        if hits["n"] == 2:
            return web.Response(status=503, text="busy")
        return web.Response(text=text, content_type="text/plain")

    app = web.Application()
    app.router.add_get("/metrics", metrics)
    runner, base = await _serve(app)
    try:
        assert "vllm:prefix_cache_hits_total" in await fetch_metrics(f"{base}/metrics")
        hits["n"] = 0
        with Recorder(tmp_path) as rec:
            async with MetricsScraper(
                f"{base}/metrics", rec, interval_s=0.05, endpoint="agent"
            ) as sc:
                await asyncio.sleep(0.3)
            assert sc.failures == 1
        samples = load_jsonl(tmp_path / "server_metrics.jsonl")
    finally:
        await runner.cleanup()
    assert len(samples) >= 4
    good = [s for s in samples if s["ok"]]
    bad = [s for s in samples if not s["ok"]]
    assert len(bad) == 1 and "503" in bad[0]["error"]
    assert all(
        s["endpoint"] == "agent" and s["schema"] == "agentload.server_metrics/1" for s in samples
    )
    assert good[0]["prefix_hits"] == 43904.0 and good[0]["engine"] == "vllm"
    ts = [s["t"] for s in samples]
    assert ts == sorted(ts)
    summary = summarize_server(samples)["endpoints"]["agent"]
    assert summary["engine"] == "vllm" and summary["failed_scrapes"] == 1
    assert summary["deltas"]["prefix_hits"] == 0.0  # a static capture: counters do not move


async def test_scraper_with_a_callable_sink_and_unreachable_server() -> None:
    got: list[dict[str, Any]] = []
    sc = MetricsScraper("http://127.0.0.1:9/metrics", got.append, interval_s=1.0, timeout_s=0.5)
    sample = await sc.scrape_once()
    await sc.stop(final_sample=False)
    assert got == [sample] and sample["ok"] is False and sample["error"]


async def test_server_deltas_agree_with_client_records_on_the_simulator(tmp_path: Path) -> None:
    """The engine's own counters, differenced over the run, equal the calls' usage totals."""
    from agentload.client.client import ChatClient
    from agentload.client.endpoint import EndpointConfig
    from agentload.results import summarize
    from agentload.sim import SimConfig, SimServer

    async with SimServer(SimConfig(port=0, profile="instant")) as sim:
        ep = EndpointConfig(name="sim", base_url=sim.base_url, model=sim.config.model)
        with Recorder(tmp_path) as rec:
            async with (
                MetricsScraper(sim.metrics_url, rec, interval_s=0.05, endpoint="sim"),
                ChatClient(ep, on_record=rec.record_call) as client,
            ):

                async def conversation(i: int) -> None:
                    msgs: list[dict[str, Any]] = [
                        {"role": "system", "content": "You are a careful agent. " * 150}
                    ]
                    for t in range(3):
                        msgs.append({"role": "user", "content": f"request {i}.{t} " * 20})
                        res = await client.chat(
                            msgs, max_tokens=12, session_id=f"s{i}", role="agent", turn=t
                        )
                        assert res.ok
                        msgs.append(res.message())

                await asyncio.gather(*(conversation(i) for i in range(3)))
    summary = summarize(tmp_path).dump()  # as summary.json holds it
    tokens = summary["calls"]["all"]["tokens"]
    server = summary["server"]["endpoints"]["sim"]
    assert summary["counts"]["calls"] == 9 and tokens["prompt"] > 0
    assert server["engine"] == "vllm" and server["failed_scrapes"] == 0
    assert server["deltas"]["prompt_tokens"] == tokens["prompt"]
    assert server["deltas"]["generation_tokens"] == tokens["completion"]
    assert server["deltas"]["requests_finished"] == 9
    assert server["prefix_cache_hit_rate"] == pytest.approx(tokens["cached_share"])
    assert tokens["cached_share"] > 0.3  # later turns reuse the system prompt prefix


def test_metrics_command_snapshot_and_watch() -> None:
    import http.server
    import json
    import threading

    from typer.testing import CliRunner

    from agentload.cli import app

    body = CAPTURE.read_bytes()

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            ok = self.path == "/metrics"
            self.send_response(200 if ok else 404)
            self.send_header("Content-Type", "text/plain")
            self.end_headers()
            self.wfile.write(body if ok else b"no")

        def log_message(self, *args: object) -> None:
            pass

    srv = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    url = f"http://127.0.0.1:{srv.server_address[1]}"
    try:
        runner = CliRunner()
        res = runner.invoke(app, ["metrics", f"{url}/metrics", "--json"])
        assert res.exit_code == 0, res.output
        assert json.loads(res.output)["prefix_hits"] == 43904.0
        res = runner.invoke(app, ["metrics", f"{url}/metrics", "-w", "0.05", "--count", "2"])
        assert res.exit_code == 0, res.output
        assert "running 0" in res.output and "over " in res.output
        res = runner.invoke(app, ["metrics", f"{url}/missing"])
        assert res.exit_code == 1 and "cannot scrape" in res.output
    finally:
        srv.shutdown()
        srv.server_close()
