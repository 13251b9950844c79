"""Run configuration: YAML + flags, validation messages, redaction, CLI usage errors."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml
from typer.testing import CliRunner

from agentload.cli import app
from agentload.cli.options import RUN_OPTIONS, given
from agentload.cli.run import cli_overrides as _cli_overrides
from agentload.config import (
    ConfigError,
    Warmup,
    build_config,
    config_to_dict,
    parse_duration,
    parse_slo,
)


def _flags(params: dict[str, Any], base: dict[str, Any]) -> tuple[dict[str, Any], dict[str, str]]:
    """The overrides a command line with these parameters gives."""
    return _cli_overrides(given(RUN_OPTIONS, params), base)


def _write(tmp_path: Path, data: dict) -> Path:
    p = tmp_path / "run.yaml"
    p.write_text(yaml.safe_dump(data))
    return p


def test_durations_warmup_slo() -> None:
    assert parse_duration("500ms") == 0.5 and parse_duration("2m") == 120 and parse_duration(3) == 3
    assert Warmup.model_validate(5).episodes == 5
    assert Warmup.model_validate("10s").seconds == 10
    assert Warmup.model_validate("7").episodes == 7
    assert parse_slo("ttft_p90=2s,e2e_p99=10s") == {"ttft_p90": 2.0, "e2e_p99": 10.0}
    with pytest.raises(ValueError, match="ttft_p90"):
        parse_slo("latency=2s")


def test_yaml_then_flags_override(tmp_path: Path) -> None:
    path = _write(
        tmp_path,
        {
            "out": "x",
            "endpoints": {
                "agent": {
                    "base_url": "http://h:1/v1",
                    "model": "m",
                    "headers": {"Authorization": "Bearer s3cret"},
                    "api_key_env": "MY_KEY",
                }
            },
            "load": {"concurrency": 4, "warmup": "10s"},
            "workload": {"tasks": "airline/000-004", "trials": 2},
        },
    )
    base = yaml.safe_load(path.read_text())
    ov, flags = _flags({"concurrency": 16, "model": "m2", "user_model": "u"}, base)
    cfg = build_config(path=path, overrides=ov, flags=flags)
    assert cfg.load.concurrency == 16 and cfg.load.warmup.seconds == 10
    assert cfg.endpoints["agent"].model == "m2"
    assert cfg.endpoints["user"].model == "u"
    assert cfg.endpoints["user"].base_url == "http://h:1/v1"
    assert cfg.workload.tasks == ["airline/000-004"]
    saved = config_to_dict(cfg)
    text = yaml.safe_dump(saved)
    assert "s3cret" not in text and "MY_KEY" in text
    # Rate from a flag switches a closed-loop file to open loop.
    ov, flags = _flags({"rate": 2.0}, base)
    cfg = build_config(path=path, overrides=ov, flags=flags)
    assert cfg.load.mode == "open"


def test_shorthand_sets_agent_and_user() -> None:
    ov, flags = _flags({"base_url": "http://a:1/v1", "model": "m"}, {})
    cfg = build_config(overrides=ov, flags=flags)
    assert cfg.endpoints["user"].base_url == "http://a:1/v1" and cfg.endpoints["user"].model == "m"
    assert not cfg.embedded
    ov, flags = _flags(
        {"base_url": "http://a:1/v1", "model": "m", "user_base_url": "http://b:2/v1"}, {}
    )
    cfg = build_config(overrides=ov, flags=flags)
    assert cfg.endpoints["user"].base_url == "http://b:2/v1" and cfg.endpoints["user"].model == "m"
    assert build_config().embedded


def test_errors_name_file_field_and_flag(tmp_path: Path) -> None:
    path = _write(tmp_path, {"load": {"concurrency": 0}})
    with pytest.raises(ConfigError) as e:
        build_config(path=path)
    assert str(path) in str(e.value) and "load.concurrency" in str(e.value)
    path = _write(tmp_path, {"laod": {}})
    with pytest.raises(ConfigError, match="field 'laod': unknown setting"):
        build_config(path=path)
    with pytest.raises(ConfigError, match=r"flag --trials: field 'workload\.trials'"):
        build_config(overrides={"workload.trials": -1}, flags={"workload.trials": "--trials"})
    bad = tmp_path / "bad.yaml"
    bad.write_text("load: [1,\n")
    with pytest.raises(ConfigError, match=r"bad.yaml:\d+:\d+: invalid YAML"):
        build_config(path=bad)
    with pytest.raises(ConfigError, match="not found"):
        build_config(path=tmp_path / "nope.yaml")


def _cli(args: list[str]):
    return CliRunner().invoke(app, args)


def test_cli_bad_config_and_flags_exit_2(tmp_path: Path) -> None:
    path = _write(tmp_path, {"load": {"concurrency": "many"}})
    r = _cli(["run", "--config", str(path), "--out", str(tmp_path / "o")])
    assert r.exit_code == 2
    assert "load.concurrency" in r.output and str(path) in r.output
    assert "Traceback" not in r.output and r.output.count("error") == 1
    r = _cli(["run", "--concurrency", "4", "--rate", "2", "--out", str(tmp_path / "o")])
    assert r.exit_code == 2 and "either concurrency" in r.output
    r = _cli(["run", "--concurrency", "x"])
    assert r.exit_code == 2 and "--concurrency" in r.output
    r = _cli(["run", "--tasks", "airline/900-999", "--out", str(tmp_path / "o2")])
    assert r.exit_code == 2 and "matches no task" in r.output
    r = _cli(["run", "--slo", "speed=3", "--out", str(tmp_path / "o3")])
    assert r.exit_code == 2 and "flag --slo" in r.output
    r = _cli(["sweep", "--out", str(tmp_path / "s")])
    assert r.exit_code == 2 and "exactly one of --concurrency" in r.output
    r = _cli(["run", "--resume", str(tmp_path / "none")])
    assert r.exit_code == 2 and "config.yaml" in r.output


def test_run_help_has_example() -> None:
    r = _cli(["run", "--help"])
    assert r.exit_code == 0
    assert "endpoints:" in r.output and "warmup:" in r.output and "130" in r.output


ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize("path", sorted((ROOT / "examples").glob("*.yaml")), ids=lambda p: p.name)
def test_examples_are_valid(path: Path) -> None:
    build_config(path=path)


def test_documented_example_is_valid(tmp_path: Path) -> None:
    text = (ROOT / "docs" / "run.md").read_text()
    block = text.split("### Annotated example", 1)[1].split("```yaml", 1)[1].split("```", 1)[0]
    cfg = build_config(path=_write(tmp_path, yaml.safe_load(block)))
    assert cfg.workload.budget_s == 900 and cfg.load.warmup.seconds == 10
    assert set(cfg.endpoints) == {"agent", "user"}
    assert "VLLM_API_KEY" in yaml.safe_dump(config_to_dict(cfg))
    from agentload.config import EXAMPLE_CONFIG

    build_config(path=_write(tmp_path, yaml.safe_load(EXAMPLE_CONFIG)))


def test_each_command_has_its_own_default_results_folder(tmp_path: Path) -> None:
    from agentload.cli.options import RUN_OPTIONS, SWEEP_OPTIONS, SweepArgs
    from agentload.cli.run import CommandLine, _configure

    run = _configure(CommandLine.parse(RUN_OPTIONS, {}))
    sweep = _configure(CommandLine.parse(SWEEP_OPTIONS, {}, SweepArgs, command="sweep"))
    assert (run.out, sweep.out) == ("results/run", "results/sweep")
    # A config file's `out`, and --out, still win.
    path = _write(tmp_path, {"out": "mine"})
    line = CommandLine.parse(SWEEP_OPTIONS, {"config": path}, SweepArgs, command="sweep")
    assert _configure(line).out == "mine"
    line = CommandLine.parse(SWEEP_OPTIONS, {"out": "flag"}, SweepArgs, command="sweep")
    assert _configure(line).out == "flag"
