"""A duration is written the same way in every command's --help: SECONDS for a number of
seconds, DURATION for one that also takes a unit (30s, 5m, 500ms), and a DURATION flag
really takes one."""

from __future__ import annotations

from typing import Any

import pytest
import typer.main

from agentload.cli import app
from agentload.cli.options import RunArgs
from agentload.cli.root import _plain_metavars
from agentload.config import RunConfig
from agentload.flags import (
    DURATION,
    SECONDS,
    flag,
    flagged_fields,
    looks_like_duration,
    seconds,
)
from agentload.sim.settings import SimConfig

ROOT: Any = typer.main.get_command(app)
_plain_metavars(ROOT)  # as `agentload` does before parsing its command line


def _options() -> list[tuple[str, Any]]:
    out = []

    def walk(cmd: Any, path: tuple[str, ...]) -> None:
        for p in cmd.params:
            if p.param_type_name == "option" and not p.is_flag and p.name != "help":
                out.append((" ".join(("agentload", *path)), p))
        for name, sub in getattr(cmd, "commands", {}).items():
            walk(sub, (*path, name))

    walk(ROOT, ())
    return out


OPTIONS = _options()


def _duration_ok(metavar: str) -> bool:
    # N|DURATION (--warmup: episodes or a duration) names DURATION as one of its forms.
    return metavar in (SECONDS, DURATION) or DURATION in metavar.split("|")


def test_every_duration_flag_writes_seconds_or_duration() -> None:
    durations = [(where, p) for where, p in OPTIONS if looks_like_duration(p.opts[0], p.help or "")]
    # The walk reaches the durations of every kind of command.
    names = {(w, p.opts[0]) for w, p in durations}
    assert {
        ("agentload run", "--drain-timeout"),
        ("agentload call", "--timeout"),
        ("agentload proxy", "--duration"),
        ("agentload sim", "--fault-stall-s"),
        ("agentload sim calibrate", "--warmup"),
        ("agentload tools serve", "--keepalive-timeout"),
        ("agentload serve", "--startup-timeout"),
        ("agentload metrics", "--watch"),
    } <= names, sorted(names)
    wrong = [f"{w} {p.opts[0]} {p.metavar}" for w, p in durations if not _duration_ok(p.metavar)]
    assert wrong == []


def test_no_other_flag_claims_a_duration_metavar() -> None:
    # SECONDS and DURATION mean a duration; nothing else (a sigma, a rate) is written so.
    for where, p in OPTIONS:
        if p.metavar in (SECONDS, DURATION, "S", "TIME"):
            assert p.metavar in (SECONDS, DURATION), f"{where} {p.opts[0]}: {p.metavar}"
            assert looks_like_duration(p.opts[0], p.help or ""), f"{where} {p.opts[0]}"


def test_a_duration_flag_takes_units_on_every_command() -> None:
    # The typer-declared ones convert on the command line ...
    lines = {
        ("proxy",): ["--upstream", "http://127.0.0.1:8000", "--out", "o", "--duration", "2m"],
        ("tools", "serve"): ["--duration", "2m"],
    }
    typed = {(w, p.opts[0]) for w, p in OPTIONS if p.metavar == DURATION and p.name == "duration"}
    assert typed - {(f"agentload {c}", "--duration") for c in ("run", "sweep", "replay")} == {
        ("agentload proxy", "--duration"),
        ("agentload tools serve", "--duration"),
    }
    for path, argv in lines.items():
        cmd = ROOT
        for name in path:
            cmd = cmd.commands[name]
        assert cmd.make_context("agentload", list(argv)).params["duration"] == 120.0, path
        with pytest.raises(Exception, match="expected a duration like 30s"):
            cmd.make_context("agentload", [*argv[:-1], "soon"])
    # ... the generated ones pass the text to the field, whose validator reads it.
    assert RunArgs.model_validate({"progress_interval": "1m"}).progress_interval == 60.0
    cfg = RunConfig.model_validate(
        {
            "load": {"duration_s": "5m", "drain_timeout_s": "500ms", "outage_timeout_s": "2m"},
            "metrics": {"interval_s": "250ms"},
        }
    )
    assert (cfg.load.duration_s, cfg.load.drain_timeout_s) == (300.0, 0.5)
    assert (cfg.load.outage_timeout_s, cfg.metrics.interval_s) == (120.0, 0.25)


@pytest.mark.parametrize("model", [RunConfig, SimConfig, RunArgs])
def test_declared_duration_flags_use_the_names(model: Any) -> None:
    for path, _, f in flagged_fields(model):
        if looks_like_duration(f.decls[0], f.help if isinstance(f.help, str) else ""):
            assert f.metavar is not None and _duration_ok(f.metavar), (path, f.metavar)
            # A DURATION flag hands its text ("30s") to the field's validator.
            assert (f.metavar == DURATION) == (f.type is not None), (path, f.metavar, f.type)


def test_flag_derives_the_metavar_of_a_duration() -> None:
    assert flag("--drain-timeout", panel="Load").metavar == SECONDS
    assert flag("--drain-timeout", panel="Load", type=str | None).metavar == DURATION
    assert flag("--fault-stall-s", panel="Faults").metavar == SECONDS
    assert flag("--max-body", panel="Server").metavar is None
    assert flag("--warmup", panel="Load", metavar="N|DURATION").metavar == "N|DURATION"
    assert seconds("--stop-after", panel="Load").metavar == SECONDS
    assert looks_like_duration("--think-time") and looks_like_duration("--log-interval")
    assert looks_like_duration("--warmup", "Seconds of probe load before measuring.")
    assert not looks_like_duration("--rate", "Open loop: session arrivals per second.")
    assert not looks_like_duration("--delay-scale") and not looks_like_duration("--tools")
