"""Every flag of run, sweep, replay, sim, sim calibrate and sim fidelity is generated from the
model field that declares it (its flag, help, default and bounds in one place)."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest
import typer.main
from pydantic import BaseModel

from agentload.cli import app
from agentload.cli.options import (
    ARGS,
    CONFIG,
    REPLAY_OPTIONS,
    RUN_OPTIONS,
    SWEEP_OPTIONS,
    Opt,
    RunArgs,
    SweepArgs,
    given,
)
from agentload.cli.sim import SIM_OPTIONS, SimArgs
from agentload.cli.sim_calibrate import (
    CALIBRATE_OPTIONS,
    FIDELITY_OPTIONS,
    CalibrateArgs,
    FidelityArgs,
)
from agentload.client.endpoint import EndpointConfig
from agentload.config import RunConfig
from agentload.flags import field_at, flagged_fields, flags_of
from agentload.sim.settings import SimConfig

SRC = Path(__file__).resolve().parents[2] / "src" / "agentload"

# command path -> (its options, the model of its own options, the model of what it configures)
COMMANDS: dict[tuple[str, ...], tuple[list[Opt], type[BaseModel], type[BaseModel]]] = {
    ("run",): (RUN_OPTIONS, RunArgs, RunConfig),
    ("sweep",): (SWEEP_OPTIONS, SweepArgs, RunConfig),
    ("replay",): (REPLAY_OPTIONS, RunArgs, RunConfig),
    ("sim",): (SIM_OPTIONS, SimArgs, SimConfig),
    ("sim", "calibrate"): (CALIBRATE_OPTIONS, CalibrateArgs, CalibrateArgs),
    ("sim", "fidelity"): (FIDELITY_OPTIONS, FidelityArgs, FidelityArgs),
}


def _command(path: tuple[str, ...]) -> Any:
    cmd: Any = typer.main.get_command(app)
    for name in path:
        cmd = cmd.commands[name]
    return cmd


def _field_model(opts_model: type[BaseModel], config: type[BaseModel], o: Opt) -> Any:
    assert o.path is not None, f"{o.decls[0]} sets no field"
    if o.target == ARGS:
        return field_at(opts_model, o.path)
    assert o.target == CONFIG, f"{o.decls[0]}: unknown target {o.target}"
    if o.path.startswith("endpoints."):  # endpoints.<role>.<field>
        return field_at(EndpointConfig, o.path.split(".", 2)[2])
    return field_at(config, o.path)


@pytest.mark.parametrize("path", list(COMMANDS), ids=" ".join)
def test_every_flag_is_a_declared_field(path: tuple[str, ...]) -> None:
    opts, own, config = COMMANDS[path]
    cmd = _command(path)
    on_line = {p.name for p in cmd.params if p.param_type_name == "option" and p.name != "help"}
    assert on_line == {o.name for o in opts}, "an option was added outside the models"
    for o in opts:
        info = _field_model(own, config, o)
        declared = flags_of(info)
        assert declared, f"{o.decls[0]}: the field at {o.path} declares no flag"
        # The option is the declared flag, or the same flag under a prefix (--sim-speedup).
        names = {d.split("/")[0].removeprefix("--") for d in o.decls if d.startswith("--")}
        assert any(
            any(n.endswith(d.split("/")[0].removeprefix("--")) for n in names)
            for f in declared
            for d in f.decls
        ), f"{o.decls} is not what {o.path} declares"


@pytest.mark.parametrize("path", list(COMMANDS), ids=" ".join)
def test_no_flag_is_declared_twice_in_a_command(path: tuple[str, ...]) -> None:
    opts, _, _ = COMMANDS[path]
    decls = [d for o in opts for d in o.decls]
    assert len(decls) == len(set(decls)), sorted({d for d in decls if decls.count(d) > 1})


def test_run_like_options_have_one_declaration() -> None:
    """Each option of run, sweep and replay is declared by exactly one field of the models
    they are built from; the sweep's --concurrency LIST (its load points) is the one flag
    that two fields share, one per command."""
    models: list[tuple[str, type[BaseModel]]] = [
        ("", RunConfig),
        ("endpoints.*.", EndpointConfig),
        ("", RunArgs),
    ]
    declared: dict[str, list[str]] = {}
    for prefix, model in models:
        for fpath, _, f in flagged_fields(model):
            if fpath.startswith("sim."):  # the embedded simulator's, as run shows them
                f = f.renamed("sim-")
            for d in f.decls:
                declared.setdefault(d, []).append(prefix + fpath)
    twice = {d: where for d, where in declared.items() if len(where) > 1}
    assert twice == {}
    sweep_own = {d for n in ("points", "rates", "stop_on_slo_fail") for d in _decls(SweepArgs, n)}
    assert sweep_own & set(declared) == {"--concurrency", "-c"}


def _decls(model: type[BaseModel], name: str) -> tuple[str, ...]:
    return flags_of(model.model_fields[name])[0].decls


def test_the_commands_declare_no_option_by_hand() -> None:
    # The run-like commands build their options from the models only.
    for name in ("run.py", "replay.py", "options.py", "sim.py"):
        text = (SRC / "cli" / name).read_text()
        assert not re.search(r"\bOpt\(\s*\"", text), f"cli/{name} declares an Opt by hand"
        assert "typer.Option(" not in text or name == "options.py", name


@pytest.mark.parametrize("path", list(COMMANDS), ids=" ".join)
def test_help_shows_every_default(path: tuple[str, ...]) -> None:
    opts, own, config = COMMANDS[path]
    for o in opts:
        info = _field_model(own, config, o)
        default = info.get_default(call_default_factory=True)
        scalar = isinstance(default, str | int | float) and not isinstance(default, bool)
        if o.path == "out" and path in (("sweep",), ("replay",)):
            # Each command writes to a folder of its own (cli.run.DEFAULT_OUT).
            assert o.shown == f"results/{path[0]}"
            continue
        if scalar and o.type is not bool:
            assert o.shown is not None, f"{o.decls[0]}: --help shows no default ({default!r})"
            assert (
                float(o.shown) == default if isinstance(default, float) else o.shown == str(default)
            )


def test_a_given_flag_reaches_its_field() -> None:
    # One value per option: the parsed command line sets exactly the declared field.
    line = {o.name: None for o in RUN_OPTIONS}
    line.update(sim_speedup=4.0, concurrency=3, tau2_data="d", user_model="u", no_metrics=True)
    g = given(RUN_OPTIONS, line)
    assert g.values == {
        "sim.speedup": 4.0,
        "load.concurrency": 3,
        "workload.tau2.data": "d",
        "endpoints.user.model": "u",
        "metrics.enabled": False,
    }
    assert g.flags["sim.speedup"] == "--sim-speedup"
