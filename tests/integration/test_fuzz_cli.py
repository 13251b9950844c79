"""Bad command lines: every one is refused with exit code 2 and one line naming the flag.

Run in-process (typer's CliRunner); nothing starts, nothing is written. The count is kept in
docs/reliability.md.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from typer.testing import CliRunner

from agentload.cli import app

RUN = ["run", "--progress", "off"]
URL = ["--base-url", "http://127.0.0.1:9/v1", "--model", "m"]

# (id, arguments after `agentload`, text the message must contain); RESUMED stands for a
# results folder with a saved config.
CASES: list[tuple[str, list[str], str]] = [
    # load
    ("concurrency-text", [*RUN, "--concurrency", "abc"], "--concurrency"),
    ("concurrency-zero", [*RUN, "-c", "0"], "--concurrency"),
    ("concurrency-negative", [*RUN, "-c", "-5"], "--concurrency"),
    ("concurrency-huge", [*RUN, "-c", "2000000"], "--concurrency"),
    ("concurrency-1e30", [*RUN, "-c", "1e30"], "--concurrency"),
    ("concurrency-2to64", [*RUN, "-c", str(2**64)], "--concurrency"),
    ("rate-inf", [*RUN, "--rate", "inf"], "--rate"),
    ("rate-nan", [*RUN, "--rate", "nan"], "--rate"),
    ("rate-negative", [*RUN, "--rate", "-1"], "--rate"),
    ("rate-zero", [*RUN, "--rate", "0"], "--rate"),
    ("rate-text", [*RUN, "--rate", "fast"], "--rate"),
    ("rate-overflow", [*RUN, "--rate", "1e400"], "--rate"),
    ("rate-and-concurrency", [*RUN, "--rate", "1", "-c", "2"], "not both"),
    ("burstiness-zero", [*RUN, "--rate", "1", "--burstiness", "0"], "--burstiness"),
    ("max-concurrency-closed", [*RUN, "--max-concurrency", "5"], "--max-concurrency"),
    ("max-concurrency-zero", [*RUN, "--rate", "1", "--max-concurrency", "0"], "--max-concurrency"),
    ("num-episodes-zero", [*RUN, "-n", "0"], "--num-episodes"),
    ("num-episodes-2to64", [*RUN, "-n", str(2**64)], "--num-episodes"),
    ("num-episodes-text", [*RUN, "-n", "many"], "--num-episodes"),
    ("duration-unit", [*RUN, "--duration", "forever"], "--duration"),
    ("duration-negative", [*RUN, "--duration", "-5s"], "--duration"),
    ("duration-zero", [*RUN, "--duration", "0"], "--duration"),
    ("warmup-unit", [*RUN, "--warmup", "2.5x"], "--warmup"),
    ("warmup-negative", [*RUN, "--warmup", "-1"], "--warmup"),
    ("drain-timeout-text", [*RUN, "--drain-timeout", "x"], "--drain-timeout"),
    ("retry-infra-negative", [*RUN, "--retry-infra", "-1"], "--retry-infra"),
    ("retry-infra-huge", [*RUN, "--retry-infra", "1000"], "--retry-infra"),
    ("infra-share-2", [*RUN, "--max-infra-error-share", "2"], "--max-infra-error-share"),
    ("infra-share-nan", [*RUN, "--max-infra-error-share", "nan"], "--max-infra-error-share"),
    ("outage-timeout-zero", [*RUN, "--outage-timeout", "0"], "--outage-timeout"),
    # slo
    ("slo-p200", [*RUN, "--slo", "ttft_p200=1s"], "ttft_p200"),
    ("slo-no-value", [*RUN, "--slo", "ttft_p90"], "--slo"),
    ("slo-bad-value", [*RUN, "--slo", "ttft_p90=abc"], "--slo"),
    ("slo-metric", [*RUN, "--slo", "latency_p90=1s"], "latency_p90"),
    ("slo-zero", [*RUN, "--slo", "ttft_p90=0"], "--slo"),
    # workload
    ("seed-2to64", [*RUN, "--seed", str(2**64)], "--seed"),
    ("seed-negative", [*RUN, "--seed", "-1"], "--seed"),
    ("seed-text", [*RUN, "--seed", "x"], "--seed"),
    ("trials-zero", [*RUN, "--trials", "0"], "--trials"),
    ("trials-float", [*RUN, "-k", "1.5"], "--trials"),
    ("tasks-comma", [*RUN, "--tasks", ","], "--tasks"),
    ("tasks-empty", [*RUN, "--tasks", ""], "--tasks"),
    ("tasks-blank", [*RUN, "--tasks", " , "], "--tasks"),
    ("tasks-unknown-domain", [*RUN, "--tasks", "nosuch/001"], "nosuch"),
    ("domains-comma", [*RUN, "--domains", ","], "--domains"),
    ("agent-unknown", [*RUN, "--agent", "nosuch"], "--agent"),
    ("user-unknown", [*RUN, "--user", "nosuch"], "--user"),
    ("max-steps-zero", [*RUN, "--max-steps", "0"], "--max-steps"),
    ("tool-latency-kind", [*RUN, "--tool-latency", "gaussian:1s"], "--tool-latency"),
    ("tool-latency-mean", [*RUN, "--tool-latency", "constant:abc"], "--tool-latency"),
    # endpoint
    ("extra-body-json", [*RUN, *URL, "--extra-body", "{"], "--extra-body"),
    ("extra-body-list", [*RUN, *URL, "--extra-body", "[1]"], "--extra-body"),
    ("header-no-colon", [*RUN, *URL, "--header", "NoColon"], "--header"),
    ("base-url-ftp", [*RUN, "--base-url", "ftp://x/v1", "--model", "m"], "--base-url"),
    ("model-without-url", [*RUN, "--model", "m"], "--base-url"),
    ("user-url-without-url", [*RUN, "--user-base-url", "http://127.0.0.1:9/v1"], "--base-url"),
    ("max-tokens-zero", [*RUN, *URL, "--max-tokens", "0"], "--max-tokens"),
    ("temperature-negative", [*RUN, *URL, "--temperature", "-1"], "--temperature"),
    ("temperature-nan", [*RUN, *URL, "--temperature", "nan"], "--temperature"),
    # simulator, output
    ("sim-speedup-zero", [*RUN, "--sim-speedup", "0"], "--sim-speedup"),
    ("sim-fault-rate-2", [*RUN, "--sim-fault-rate", "2"], "--sim-fault-rate"),
    ("sim-seed-negative", [*RUN, "--sim-seed", "-1"], "--sim-seed"),
    ("metrics-interval-zero", [*RUN, "--metrics-interval", "0"], "--metrics-interval"),
    ("metrics-interval-tiny", [*RUN, "--metrics-interval", "1ms"], "--metrics-interval"),
    ("progress-interval-zero", [*RUN, "--progress-interval", "0"], "--progress-interval"),
    ("progress-interval-negative", [*RUN, "--progress-interval", "-1"], "--progress-interval"),
    ("progress-interval-tiny", [*RUN, "--progress-interval", "1e-9"], "--progress-interval"),
    ("progress-interval-nan", [*RUN, "--progress-interval", "nan"], "--progress-interval"),
    ("progress-mode", ["run", "--progress", "fancy"], "--progress"),
    ("out-empty", [*RUN, "--out", ""], "--out"),
    ("out-blank", [*RUN, "--out", "  "], "--out"),
    ("run-id-path", [*RUN, "--run-id", "a/b"], "--run-id"),
    ("config-missing", [*RUN, "--config", "nope.yaml"], "nope.yaml"),
    ("unknown-flag", [*RUN, "--bogus"], "--bogus"),
    ("extra-argument", [*RUN, "surplus"], "surplus"),
    ("flag-without-value", [*RUN, "--concurrency"], "--concurrency"),
    # resume
    ("resume-missing", [*RUN, "--resume", "nowhere"], "nowhere"),
    ("resume-with-config-flag", [*RUN, "--resume", "RESUMED", "-c", "4"], "--concurrency"),
    ("resume-with-config", [*RUN, "--resume", "RESUMED", "--config", "x.yaml"], "--config"),
    ("resume-with-overwrite", [*RUN, "--resume", "RESUMED", "--overwrite"], "--overwrite"),
    (
        "resume-metrics-interval",
        [*RUN, "--resume", "RESUMED", "--metrics-interval", "0"],
        "--metrics-interval",
    ),
    # sweep
    ("sweep-no-points", ["sweep", "--progress", "off"], "--concurrency"),
    ("sweep-both", ["sweep", "-c", "1,2", "--rates", "1"], "--concurrency"),
    ("sweep-bad-point", ["sweep", "-c", "1,x"], "--concurrency"),
    ("sweep-zero-point", ["sweep", "-c", "0,2"], "--concurrency"),
    ("sweep-fraction", ["sweep", "-c", "1.5"], "--concurrency"),
    ("sweep-negative-rate", ["sweep", "--rates", "-1"], "--rates"),
    ("sweep-rate-inf", ["sweep", "--rates", "1,inf"], "--rates"),
    ("sweep-huge-point", ["sweep", "-c", "1,1e30"], "--concurrency"),
    ("unknown-command", ["launch"], "launch"),
]


def test_the_table_is_large_and_unique() -> None:
    ids = [c[0] for c in CASES]
    assert len(ids) == len(set(ids))
    assert len(CASES) >= 67


@pytest.fixture(scope="module")
def resumed(tmp_path_factory: pytest.TempPathFactory) -> Path:
    d = tmp_path_factory.mktemp("resumed")
    (d / "config.yaml").write_text(
        "schema: agentload.config/1\nout: x\nworkload: {tasks: [airline/000]}\n"
    )
    return d


@pytest.mark.parametrize(("name", "args", "needle"), CASES, ids=[c[0] for c in CASES])
def test_bad_invocation_is_one_line(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    resumed: Path,
    name: str,
    args: list[str],
    needle: str,
) -> None:
    monkeypatch.chdir(tmp_path)  # a case that wrongly passed would write here
    args = [str(resumed) if a == "RESUMED" else a for a in args]
    res = CliRunner().invoke(app, args)
    out = res.stdout + res.stderr
    assert res.exit_code == 2, out
    assert "Traceback" not in out
    assert res.exception is None or isinstance(res.exception, SystemExit), repr(res.exception)
    lines = [ln for ln in res.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1, lines
    assert "error: " in lines[0] and lines[0].startswith("agentload"), lines[0]
    assert needle in lines[0], lines[0]
    assert not (tmp_path / "results").exists()
