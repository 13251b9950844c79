"""Addresses and keys as users write them, replica metrics summed, and the servers' error
messages shown per kind (redacted) in summary.json and the console table."""

from __future__ import annotations

import asyncio
import subprocess
import sys
import time
from collections.abc import AsyncIterator
from pathlib import Path

import orjson
import pytest
import yaml
from aiohttp import web
from rich.console import Console
from test_secrets_canary import CANARIES, _hits
from test_secrets_canary import servers as servers  # a fixture

from agentload.client import EndpointConfig
from agentload.client.endpoint import normalize_base_url
from agentload.config import build_config
from agentload.report import summary_table
from agentload.results.errors import redact_message, top_error_messages
from agentload.runner import execute_run
from agentload.servermetrics.scraper import MetricsScraper
from agentload.sim import SimConfig, SimServer

AGENTLOAD = str(Path(sys.executable).parent / "agentload")


@pytest.mark.parametrize(
    ("given", "expected"),
    [
        ("http://127.0.0.1:8000", "http://127.0.0.1:8000/v1"),
        ("http://127.0.0.1:8000/", "http://127.0.0.1:8000/v1"),
        ("http://127.0.0.1:8000/v1", "http://127.0.0.1:8000/v1"),
        ("http://127.0.0.1:8000/v1/", "http://127.0.0.1:8000/v1"),
        ("http://127.0.0.1:8000/v1/chat/completions", "http://127.0.0.1:8000/v1"),
        ("https://gw.example/openai/v1", "https://gw.example/openai/v1"),
        ("https://gw.example/team-a", "https://gw.example/team-a"),
    ],
)
def test_base_url_forms(given: str, expected: str) -> None:
    assert normalize_base_url(given) == expected
    assert EndpointConfig(base_url=given, model="m").chat_url == expected + "/chat/completions"


def test_bad_base_url_is_one_line() -> None:
    from agentload.config import ConfigError

    with pytest.raises(ConfigError) as exc:
        build_config(
            data={"endpoints": {"agent": {"base_url": "127.0.0.1:8000", "model": "m"}}},
            flags={"endpoints.agent.base_url": "--base-url"},
        )
    assert "flag --base-url" in str(exc.value) and "http://" in str(exc.value)


def test_key_sources(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    monkeypatch.delenv("MY_KEY", raising=False)
    ep = EndpointConfig(base_url="http://h:1", model="m")
    assert (
        ep.api_key() is None
        and ep.key_source is None
        and "Authorization" not in (ep.auth_headers())
    )
    monkeypatch.setenv("OPENAI_API_KEY", "sk-from-openai-env")
    assert ep.api_key() == "sk-from-openai-env" and ep.key_source == "OPENAI_API_KEY"
    named = EndpointConfig(base_url="http://h:1", model="m", api_key_env="MY_KEY")
    with pytest.raises(KeyError):
        named.api_key()  # a named variable must be set: OPENAI_API_KEY does not stand in
    monkeypatch.setenv("MY_KEY", "k2")
    assert named.auth_headers()["Authorization"] == "Bearer k2"


@pytest.fixture
async def keyed_sim() -> AsyncIterator[SimServer]:
    async with SimServer(SimConfig(port=0, speedup=50, api_key="sk-test-0123456789abcdef")) as s:
        yield s


async def test_openai_api_key_is_used_and_never_written(
    keyed_sim: SimServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test-0123456789abcdef")
    out = tmp_path / "run"
    cfg = build_config(
        data={
            "out": str(out),
            "endpoints": {"agent": {"base_url": keyed_sim.url, "model": "agentload-sim"}},
            "workload": {"tasks": ["airline/000"], "user": "scripted"},
            "load": {"concurrency": 1},
            "metrics": {"interval_s": 0.5},
        }
    )
    res = await execute_run(cfg, progress="off", say=lambda _m: None, install_signals=False)
    assert res.exit_code == 0
    calls = [orjson.loads(x) for x in (out / "calls.jsonl").read_bytes().splitlines()]
    assert calls and all(c["status"] == "ok" for c in calls)
    for f in out.rglob("*"):
        if f.is_file():
            assert b"sk-test-0123456789abcdef" not in f.read_bytes(), f
    run = orjson.loads((out / "run.json").read_bytes())
    assert run["endpoints_detected"]["agent"]["key_from_env"] == "OPENAI_API_KEY"


def test_dead_server_exits_2_within_seconds(tmp_path: Path) -> None:
    # A dead address: the run stops before any episode with exit code 2 and one line.
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    t0 = time.perf_counter()
    proc = subprocess.run(
        [
            *(AGENTLOAD, "run", "--base-url", f"http://127.0.0.1:{port}", "--model", "m"),
            *("--out", str(tmp_path / "r"), "--progress", "off"),
        ],
        capture_output=True,
        text=True,
        timeout=60,
    )
    # 10 s for a new user's mistake; most of it is the interpreter starting on a loaded box
    assert time.perf_counter() - t0 < 10
    assert proc.returncode == 2, proc.stderr
    lines = [ln for ln in proc.stderr.splitlines() if ln.startswith("agentload: error:")]
    assert len(lines) == 1 and f"127.0.0.1:{port}/v1" in lines[0]
    assert "cannot connect" in lines[0] and "Traceback" not in proc.stderr
    # nothing written: the same --out works for the next try
    assert not (tmp_path / "r").exists()


# ---- replicas ------------------------------------------------------------------------------


def _exposition(running: int, hits: int, kv: float) -> bytes:
    return (
        "# TYPE vllm:num_requests_running gauge\n"
        f'vllm:num_requests_running{{model_name="m"}} {running}\n'
        "# TYPE vllm:prefix_cache_hits counter\n"
        f'vllm:prefix_cache_hits_total{{model_name="m"}} {hits}\n'
        "# TYPE vllm:kv_cache_usage_perc gauge\n"
        f'vllm:kv_cache_usage_perc{{model_name="m"}} {kv}\n'
    ).encode()


@pytest.fixture
async def replicas() -> AsyncIterator[list[str]]:
    runners, urls = [], []
    for body in (_exposition(2, 10, 0.2), _exposition(3, 20, 0.4)):

        async def metrics(request: web.Request, body: bytes = body) -> web.Response:
            return web.Response(body=body, content_type="text/plain")

        app = web.Application()
        app.router.add_get("/metrics", metrics)
        r = web.AppRunner(app)
        await r.setup()
        site = web.TCPSite(r, "127.0.0.1", 0)
        await site.start()
        port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
        runners.append(r)
        urls.append(f"http://127.0.0.1:{port}/metrics")
    try:
        yield urls
    finally:
        for r in runners:
            await r.cleanup()


async def test_replicas_are_scraped_and_summed(replicas: list[str]) -> None:
    got: list[dict] = []
    sc = MetricsScraper(replicas, got.append, endpoint="agent")
    sample = await sc.scrape_once()
    assert sample["ok"] and sample["replicas"] == 2
    assert sample["running"] == 5 and sample["prefix_hits"] == 30
    assert sample["kv_usage"] == pytest.approx(0.3)  # a share: averaged, not summed
    # one replica down: the sample fails rather than reporting half the fleet
    bad = MetricsScraper([replicas[0], "http://127.0.0.1:9/metrics"], got.append, timeout_s=2)
    sample = await bad.scrape_once()
    assert sample["ok"] is False and "running" not in sample
    await sc.stop(final_sample=False)
    await bad.stop(final_sample=False)


def test_metrics_url_flag_takes_a_list() -> None:
    from agentload.cli.options import RUN_OPTIONS, given
    from agentload.cli.run import cli_overrides

    a = {"base_url": "http://h:8000", "model": "m", "metrics_url": "http://a/metrics,http://b/m"}
    ov, _ = cli_overrides(given(RUN_OPTIONS, a), {})
    cfg = build_config(overrides=ov)
    assert cfg.endpoints["agent"].all_metrics_urls == ["http://a/metrics", "http://b/m"]


# ---- errors shown ----------------------------------------------------------------------------


def test_messages_are_grouped_counted_and_redacted() -> None:
    calls = (
        [
            {
                "status": "error",
                "error_kind": "http_404",
                "error_message": "The model `x` does not exist.",
            }
        ]
        * 5
        + [
            {
                "status": "error",
                "error_kind": "context_overflow",
                "error_message": f"This model's maximum context length is 32768 tokens. However, "
                f"you requested {n} tokens.",
            }
            for n in (33000, 34000, 35000)
        ]
        + [
            {
                "status": "error",
                "error_kind": "http_401",
                "error_message": "bad Bearer sk-abcdefghijk123",
            },
            {"status": "error", "error_kind": "http_401", "error_message": None},
            {"status": "ok", "error_kind": None},
        ]
    )
    msgs = top_error_messages(calls)
    assert list(msgs) == ["http_404", "context_overflow", "http_401"]  # by frequency
    assert msgs["http_404"] == [{"message": "The model `x` does not exist.", "count": 5}]
    # differing only in numbers: one entry, shown by its first occurrence
    assert msgs["context_overflow"] == [
        {
            "message": "This model's maximum context length is 32768 tokens. However, you "
            "requested 33000 tokens.",
            "count": 3,
        }
    ]
    texts = {m["message"] for m in msgs["http_401"]}
    assert texts == {"bad Bearer <redacted>", "(no message)"}
    assert "sk-abc" not in orjson.dumps(msgs).decode()
    long = redact_message("x " * 500)
    assert len(long) == 200 and long.endswith("…")
    assert redact_message('{"api_key": "abc123"}') == '{"api_key": "<redacted>"}'
    assert redact_message("Incorrect API key provided: sk-proj-abcdef123456") == (
        "Incorrect API key provided: <redacted>"
    )
    assert redact_message("max_tokens: 1024 and 30 tokens: fine") == (
        "max_tokens: 1024 and 30 tokens: fine"
    )


async def test_run_summary_and_console_show_the_messages(tmp_path: Path) -> None:
    out = tmp_path / "faults"
    cfg = build_config(
        data={
            "out": str(out),
            "sim": {
                "profile": "tiny-cpu",
                "speedup": 50,
                "fault_rate": 0.2,
                "fault_kinds": ["http_500"],
            },
            "workload": {"tasks": "airline/000-003"},
            "load": {"concurrency": 4},
            "report": False,
        }
    )
    res = await execute_run(cfg, progress="off", say=lambda _m: None, install_signals=False)
    errors = res.summary.dump()["errors"]
    assert errors["by_kind"]["http_500"] > 0
    (entry,) = errors["messages"]["http_500"]
    assert entry["message"] == "Internal server error (injected by agentload sim)"
    assert entry["count"] == errors["by_kind"]["http_500"]
    console = Console(width=200, record=True)
    console.print(summary_table(res.summary))
    text = console.export_text()
    assert "agentload: errors" in text
    assert "Internal server error (injected by agentload sim)" in text


async def test_preflight_failure_leaks_no_secret(tmp_path: Path, servers: tuple[str, str]) -> None:
    # The gateway answers 401 echoing the key, headers and body; preflight quotes the server's
    # words, without any of the planted secrets.
    echo, sim = servers
    cfg = {
        "endpoints": {
            "agent": {
                "base_url": f"http://{echo}",
                "model": "agentload-sim",
                "api_key_env": "AGENTLOAD_CANARY_KEY",
                "headers": {"X-Api-Key": CANARIES["header"], "Cookie": CANARIES["cookie"]},
                "extra_body": {"api_key": CANARIES["extra_cli"]},
                "metrics_url": f"http://m:{CANARIES['metrics_pass']}@{sim}/metrics",
            }
        }
    }
    (tmp_path / "run.yaml").write_text(yaml.safe_dump(cfg))
    proc = await asyncio.create_subprocess_exec(
        *(AGENTLOAD, "run", "--config", str(tmp_path / "run.yaml"), "--out", str(tmp_path / "r")),
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
        env={"AGENTLOAD_CANARY_KEY": CANARIES["env"], "PATH": "/usr/bin:/bin"},
    )
    stdout, stderr = await asyncio.wait_for(proc.communicate(), timeout=60)
    err = stderr.decode()
    assert proc.returncode == 2, err
    assert "(http_401)" in err and "invalid credentials" in err and "<redacted>" in err
    assert _hits(stdout) == [] and _hits(stderr) == []
