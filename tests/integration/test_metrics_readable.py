"""`agentload metrics` takes a server's base URL and shows derived figures readably."""

from __future__ import annotations

import http.server
import threading

from test_servermetrics import CAPTURE
from typer.testing import CliRunner

from agentload.cli import app
from agentload.servermetrics.derived import metrics_url, rate_rows, snapshot_rows
from agentload.servermetrics.parse import parse_metrics


def test_metrics_url_from_base_url() -> None:
    assert metrics_url("http://h:8000") == "http://h:8000/metrics"
    assert metrics_url("http://h:8000/v1/") == "http://h:8000/metrics"
    assert metrics_url("http://h:8000/metrics") == "http://h:8000/metrics"
    assert metrics_url("http://h/gw/v1") == "http://h/gw/metrics"


def test_derived_figures_of_a_real_vllm_capture() -> None:
    s = parse_metrics(CAPTURE.read_text())
    rows = dict(snapshot_rows(s))
    hit = s["prefix_hits"] / s["prefix_queries"]
    assert rows["prefix-cache hit rate"] == f"{hit * 100:.1f}%"
    ttft = s["ttft_sum"] / s["ttft_count"]
    assert rows["mean TTFT"].endswith(("ms", "s", "µs")) and ttft > 0
    assert rows["prompt tokens"] == f"{int(s['prompt_tokens']):,}"
    later = dict(s, t=11.0, prompt_tokens=s["prompt_tokens"] + 500)
    assert ("prompt tok/s", "50.0") in rate_rows(dict(s, t=1.0), later)


def test_metrics_command_with_base_url() -> None:
    body = CAPTURE.read_bytes()

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            ok = self.path == "/metrics"
            self.send_response(200 if ok else 404)
            self.end_headers()
            self.wfile.write(body if ok else b"no")

        def log_message(self, *args: object) -> None:
            pass

    srv = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    try:
        base = f"http://127.0.0.1:{srv.server_address[1]}/v1"
        res = CliRunner().invoke(app, ["metrics", base], env={"COLUMNS": "120"})
        assert res.exit_code == 0, res.output
        assert "prefix-cache hit rate" in res.output and "mean TTFT" in res.output
        assert "prefix_hits" not in res.output  # raw names only with --raw
        raw = CliRunner().invoke(app, ["metrics", base, "--raw"], env={"COLUMNS": "120"})
        assert "prefix_hits" in raw.output
    finally:
        srv.shutdown()
        srv.server_close()
