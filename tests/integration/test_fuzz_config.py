"""Bad config files: every one is refused with exit code 2 and one line naming the problem.

Each case is a file handed to `agentload run --config FILE` in-process; the run must stop
before anything starts, print a single `agentload: error: ...` line that names the field (or
the file's problem), and never a traceback. The count is kept in docs/reliability.md.
"""

from __future__ import annotations

import codecs
from pathlib import Path

import pytest
from typer.testing import CliRunner

from agentload.cli import app

EP = "endpoints: {agent: {base_url: 'http://127.0.0.1:9/v1', model: m"

# (id, file content, text the message must contain)
CASES: list[tuple[str, str | bytes, str]] = [
    # the file itself
    ("binary", bytes(range(256)) * 4, "NUL bytes"),
    ("utf16-bom", codecs.BOM_UTF16_LE + "out: x\n".encode("utf-16-le"), "UTF-16"),
    ("utf16-be-bom", codecs.BOM_UTF16_BE + "out: x\n".encode("utf-16-be"), "UTF-16"),
    ("utf16-no-bom", "out: x\n".encode("utf-16-le"), "UTF-16"),
    ("latin1", "out: caf\xe9\n".encode("latin-1"), "not UTF-8"),
    ("deep-flow-5000", "a: " + "[" * 5000 + "]" * 5000, "nested"),
    ("deep-flow-mapping", "a: " + "{b: " * 5000 + "}" * 5000, "nested"),
    ("deep-block", "\n".join(" " * i + f"k{i}:" for i in range(200)), "nested"),
    ("deep-block-seq", "a:\n" + "- " * 5000 + "x\n", "nested"),
    (
        "alias-bomb",
        "sim:\n  options:\n    a: &a [x,x,x,x,x,x,x,x,x]\n"
        + "".join(
            f"    {chr(98 + i)}: &{chr(98 + i)} [" + ",".join(["*" + chr(97 + i)] * 9) + "]\n"
            for i in range(8)
        ),
        "expands",
    ),
    ("duplicate-key", "out: a\nout: b\n", "duplicate key 'out'"),
    ("duplicate-nested-key", "load:\n  rate: 1\n  rate: 2\n", "duplicate key 'rate'"),
    ("unclosed-bracket", "workload: {tasks: [airline\n", "invalid YAML"),
    ("tab-indent", "load:\n\tconcurrency: 4\n", "invalid YAML"),
    ("two-documents", "out: a\n---\nout: b\n", "invalid YAML"),
    ("top-level-list", "- a\n- b\n", "mapping"),
    ("top-level-scalar", "just text\n", "mapping"),
    ("number-key", "1: x\n", "setting names"),
    ("complex-key", "? [a, b]\n: 1\n", "plain value"),
    ("too-large", "# " + "x" * (5 * 1024 * 1024) + "\n", "too large"),
    ("unknown-setting", "concurrency: 4\n", "field 'concurrency': unknown setting"),
    ("unknown-nested", "load: {concurency: 4}\n", "field 'load.concurency'"),
    # schema, out, run id
    ("schema-99", "schema: 99\n", "field 'schema'"),
    ("schema-2", "schema: agentload.config/2\n", "field 'schema'"),
    ("schema-null", "schema: null\n", "field 'schema'"),
    ("out-empty", "out: ''\n", "field 'out'"),
    ("out-blank", "out: '   '\n", "field 'out'"),
    ("out-number", "out: 5\n", "field 'out'"),
    ("run-id-path", "run_id: ../elsewhere\n", "field 'run_id'"),
    # workload
    ("tasks-comma", "workload: {tasks: ','}\n", "field 'workload.tasks'"),
    ("tasks-empty-string", "workload: {tasks: ''}\n", "field 'workload.tasks'"),
    ("tasks-empty-entry", "workload: {tasks: ['']}\n", "field 'workload.tasks'"),
    ("domains-blank", "workload: {domains: ' , '}\n", "field 'workload.domains'"),
    ("tasks-unknown", "workload: {tasks: [nosuch/000]}\n", "workload.tasks"),
    ("trials-zero", "workload: {trials: 0}\n", "field 'workload.trials'"),
    ("trials-bool", "workload: {trials: true}\n", "field 'workload.trials'"),
    ("trials-float", "workload: {trials: 2.5}\n", "field 'workload.trials'"),
    ("trials-huge", "workload: {trials: 1000001}\n", "field 'workload.trials'"),
    ("seed-2to64", "workload: {seed: 18446744073709551616}\n", "field 'workload.seed'"),
    ("seed-negative", "workload: {seed: -1}\n", "field 'workload.seed'"),
    ("seed-text", "workload: {seed: abc}\n", "field 'workload.seed'"),
    ("agent-unknown", "workload: {agent: nosuch}\n", "field 'workload.agent'"),
    ("user-unknown", "workload: {user: nosuch}\n", "field 'workload.user'"),
    ("max-steps-zero", "workload: {max_steps: 0}\n", "field 'workload.max_steps'"),
    ("max-steps-huge", "workload: {max_steps: 1000000000}\n", "field 'workload.max_steps'"),
    ("budget-negative", "workload: {budget_s: -5}\n", "field 'workload.budget_s'"),
    ("budget-text", "workload: {budget_s: forever}\n", "field 'workload.budget_s'"),
    ("temperature-negative", "workload: {temperature: -1}\n", "field 'workload.temperature'"),
    ("temperature-nan", "workload: {temperature: .nan}\n", "field 'workload.temperature'"),
    (
        "tool-latency-kind",
        "workload: {tool_latency: {kind: gaussian}}\n",
        "field 'workload.tool_latency.kind'",
    ),
    (
        "tool-latency-inf",
        "workload: {tool_latency: {kind: constant, mean_s: .inf}}\n",
        "field 'workload.tool_latency.mean_s'",
    ),
    ("agent-max-tokens-zero", "workload: {agent_max_tokens: 0}\n", "agent_max_tokens"),
    # load
    ("concurrency-bool", "load: {concurrency: true}\n", "field 'load.concurrency'"),
    ("concurrency-1e30-text", "load: {concurrency: 1e30}\n", "field 'load.concurrency'"),
    ("concurrency-1e30-float", "load: {concurrency: 1.0e+30}\n", "field 'load.concurrency'"),
    ("concurrency-zero", "load: {concurrency: 0}\n", "field 'load.concurrency'"),
    ("concurrency-huge", "load: {concurrency: 200000}\n", "field 'load.concurrency'"),
    ("rate-inf", "load: {rate: .inf}\n", "field 'load.rate'"),
    ("rate-nan", "load: {rate: .nan}\n", "field 'load.rate'"),
    ("rate-negative", "load: {rate: -1}\n", "field 'load.rate'"),
    ("rate-and-concurrency", "load: {rate: 1, concurrency: 2}\n", "not both"),
    ("max-concurrency-closed", "load: {max_concurrency: 4}\n", "max_concurrency"),
    ("num-episodes-2to64", "load: {num_episodes: 18446744073709551616}\n", "load.num_episodes"),
    ("num-episodes-zero", "load: {num_episodes: 0}\n", "field 'load.num_episodes'"),
    ("duration-unit", "load: {duration_s: 10 parsecs}\n", "field 'load.duration_s'"),
    ("duration-inf", "load: {duration_s: 1e400s}\n", "field 'load.duration_s'"),
    ("warmup-float", "load: {warmup: 2.5}\n", "field 'load.warmup'"),
    ("warmup-bool", "load: {warmup: true}\n", "field 'load.warmup'"),
    ("drain-negative", "load: {drain_timeout_s: -1}\n", "field 'load.drain_timeout_s'"),
    ("burstiness-zero", "load: {burstiness: 0}\n", "field 'load.burstiness'"),
    ("retry-infra-negative", "load: {retry_infra: -1}\n", "field 'load.retry_infra'"),
    ("infra-share-above-1", "load: {max_infra_error_share: 1.5}\n", "max_infra_error_share"),
    ("outage-timeout-zero", "load: {outage_timeout_s: 0}\n", "field 'load.outage_timeout_s'"),
    ("lag-interval-zero", "load: {lag_interval_s: 0}\n", "field 'load.lag_interval_s'"),
    # slo
    ("slo-p200", "slo: {ttft_p200: 1s}\n", "ttft_p200"),
    ("slo-p0", "slo: {ttft_p0: 1s}\n", "ttft_p0"),
    ("slo-metric", "slo: {latency_p90: 1s}\n", "latency_p90"),
    ("slo-negative", "slo: {ttft_p90: -1s}\n", "field 'slo'"),
    ("slo-inf", "slo: {ttft_p90: .inf}\n", "field 'slo'"),
    ("slo-list", "slo: [ttft_p90]\n", "field 'slo'"),
    # endpoints
    ("endpoint-no-url", "endpoints: {agent: {model: m}}\n", "endpoints.agent.base_url"),
    ("endpoint-ftp", "endpoints: {agent: {base_url: 'ftp://x/v1', model: m}}\n", "base_url"),
    ("endpoint-user-only", EP.replace("agent", "user") + "}}\n", "missing role"),
    ("retry-on-unknown", EP + ", retry: {retry_on: [conect_error]}}}\n", "conect_error"),
    ("retry-attempts-huge", EP + ", retry: {max_attempts: 1000}}}\n", "retry.max_attempts"),
    ("timeout-negative", EP + ", timeouts: {connect: -1}}}\n", "timeouts.connect"),
    ("timeout-inf", EP + ", timeouts: {total: .inf}}}\n", "timeouts.total"),
    ("max-tokens-1e30", EP + ", max_tokens: 1.0e+30}}\n", "max_tokens"),
    ("header-list", EP + ", headers: {X-A: [1]}}}\n", "headers"),
    ("endpoint-extra", EP + ", colour: red}}\n", "endpoints.agent.colour"),
    # simulator, metrics, report
    ("sim-speedup-zero", "sim: {speedup: 0}\n", "field 'sim.speedup'"),
    ("sim-fault-rate-2", "sim: {fault_rate: 2}\n", "field 'sim.fault_rate'"),
    ("sim-seed-float", "sim: {seed: 1.0e+100}\n", "field 'sim.seed'"),
    ("metrics-interval-zero", "metrics: {interval_s: 0}\n", "field 'metrics.interval_s'"),
    ("metrics-interval-tiny", "metrics: {interval_s: 10ms}\n", "field 'metrics.interval_s'"),
    ("report-text", "report: maybe\n", "field 'report'"),
]


@pytest.fixture(scope="module")
def runner() -> CliRunner:
    return CliRunner()


def test_the_table_is_large_and_unique() -> None:
    ids = [c[0] for c in CASES]
    assert len(ids) == len(set(ids))
    assert len(CASES) >= 69


@pytest.mark.parametrize(("name", "content", "needle"), CASES, ids=[c[0] for c in CASES])
def test_bad_config_is_one_line(
    runner: CliRunner,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    name: str,
    content: str | bytes,
    needle: str,
) -> None:
    monkeypatch.chdir(tmp_path)  # a case that wrongly passed would write here, not in the tree
    path = tmp_path / f"{name}.yaml"
    path.write_bytes(content if isinstance(content, bytes) else content.encode())
    res = runner.invoke(app, ["run", "--config", str(path), "--progress", "off"])
    _assert_one_line_error(res, needle)
    assert not (tmp_path / "results").exists()


def test_config_that_is_a_directory(runner: CliRunner, tmp_path: Path) -> None:
    res = runner.invoke(app, ["run", "--config", str(tmp_path)])
    _assert_one_line_error(res, "cannot read")


def test_missing_config_file(runner: CliRunner, tmp_path: Path) -> None:
    res = runner.invoke(app, ["run", "--config", str(tmp_path / "nope.yaml")])
    _assert_one_line_error(res, "config file not found")


def _assert_one_line_error(res: object, needle: str) -> None:
    exit_code = res.exit_code  # type: ignore[attr-defined]
    out = res.stdout + res.stderr  # type: ignore[attr-defined]
    assert exit_code == 2, out
    assert "Traceback" not in out
    assert res.exception is None or isinstance(res.exception, SystemExit), repr(res.exception)  # type: ignore[attr-defined]
    lines = [ln for ln in res.stderr.splitlines() if ln.strip()]  # type: ignore[attr-defined]
    assert len(lines) == 1, lines
    assert lines[0].startswith("agentload: error: "), lines[0]
    assert needle in lines[0], lines[0]
    assert len(lines[0]) < 1000, lines[0]
