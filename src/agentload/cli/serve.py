"""`agentload serve vllm|sglang`: start a real engine, wait until it serves, stop it on Ctrl-C.

Exit codes: 0 stopped on request (Ctrl-C / SIGTERM); 1 the engine did not come up or died;
2 bad usage (engine not installed, port taken, bad option).
"""

from __future__ import annotations

import shlex
import signal
import sys
import time
from pathlib import Path
from types import FrameType
from typing import Annotated, Any

import orjson
import typer
from pydantic import ValidationError

from agentload.cli.root import app, examples
from agentload.engine_launch import ENGINES, LaunchConfig
from agentload.engines.launch import (
    EngineError,
    EngineProcess,
    EngineSpec,
    EngineStartError,
    redact_args,
    tail_lines,
)
from agentload.flags import SECONDS

DEFAULT_PORTS = {"vllm": 8000, "sglang": 30000}


def _err(msg: str) -> None:
    typer.echo(f"agentload serve: {msg}", err=True)


def _parse_env(items: list[str]) -> dict[str, str]:
    out: dict[str, str] = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise typer.BadParameter(f"{item!r}: expected NAME=VALUE", param_hint="--env")
        out[key] = value
    return out


class _Stop(Exception):
    pass


def _on_sigterm(signum: int, frame: FrameType | None) -> None:
    raise _Stop()


# Options as annotated types, so that the command's signature stays one line per option.
_Engine = Annotated[str, typer.Argument(help="Engine to start: " + " | ".join(ENGINES) + ".")]
_EngineArgs = Annotated[
    list[str] | None,
    typer.Argument(help="Further engine arguments, after `--` (e.g. -- --max-model-len 8192)."),
]
_Model = Annotated[
    str, typer.Option("--model", "-m", help="What the engine loads: a local folder or a hub id.")
]
_Served = Annotated[
    str | None, typer.Option(help="Model name the engine serves (default: --model as given).")
]
_Name = Annotated[
    str | None,
    typer.Option(help="Instance name, used in file names (default: the engine's name)."),
]
_Host = Annotated[str, typer.Option(help="Address to bind (loopback by default).")]
_Port = Annotated[
    int | None,
    typer.Option(min=1, max=65535, help="Port (default: 8000 for vLLM, 30000 for SGLang)."),
]
_Python = Annotated[
    str | None,
    typer.Option(
        help="Python interpreter, or virtual-environment folder, that has the engine "
        "installed (default: the one running agentload)."
    ),
]
_Docker = Annotated[
    str | None,
    typer.Option(help="Run this container image (e.g. vllm/vllm-openai:v0.32.0) instead."),
]
_Gpus = Annotated[
    str, typer.Option(help="With --docker: the --gpus value; 'none' for a CPU image.")
]
_DockerArg = Annotated[
    list[str], typer.Option("--docker-arg", help="Further `docker run` argument (repeatable).")
]
_Env = Annotated[
    list[str], typer.Option("--env", help="NAME=VALUE for the engine's environment (repeatable).")
]
_Out = Annotated[Path, typer.Option(help="Folder for the engine's log (engine-<name>.log).")]
_CacheDir = Annotated[
    Path | None,
    typer.Option(help="Cache folder of this instance (default: <out>/engine-<name>-cache)."),
]
_Startup = Annotated[
    float, typer.Option(min=1, help="Seconds to wait for /health and /v1/models.", metavar=SECONDS)
]
_StopT = Annotated[
    float,
    typer.Option(min=0, help="Seconds between SIGTERM and SIGKILL when stopping.", metavar=SECONDS),
]
_Json = Annotated[
    bool, typer.Option("--json", help="Print one JSON line when ready (and one when stopped).")
]
_DryRun = Annotated[
    bool, typer.Option("--dry-run", help="Print the command line (secrets masked) and exit.")
]


@app.command(
    "serve",
    epilog=examples(
        "agentload serve vllm --model Qwen/Qwen3-8B -- --max-model-len 32768",
        "agentload serve sglang --model Qwen/Qwen3-8B --docker lmsysorg/sglang",
        "# print the command line it would run, and stop",
        "agentload serve vllm --model Qwen/Qwen3-8B --port 8001 --dry-run",
    ),
    context_settings={"help_option_names": ["-h", "--help"]},
)
def serve_command(
    engine: _Engine,
    model: _Model,
    engine_args: _EngineArgs = None,
    served_model_name: _Served = None,
    name: _Name = None,
    host: _Host = "127.0.0.1",
    port: _Port = None,
    python: _Python = None,
    docker: _Docker = None,
    gpus: _Gpus = "all",
    docker_arg: _DockerArg = [],  # noqa: B006 - typer copies defaults
    env: _Env = [],  # noqa: B006
    out: _Out = Path("results/serve"),
    cache_dir: _CacheDir = None,
    startup_timeout: _Startup = 900.0,
    stop_timeout: _StopT = 30.0,
    json_out: _Json = False,
    dry_run: _DryRun = False,
) -> None:
    """Start a vLLM or SGLang server (subprocess or container), wait until it serves the
    model, and keep it running until Ctrl-C; then stop its whole process group."""
    if engine not in ENGINES:
        _err(f"unknown engine {engine!r}; choose one of {', '.join(ENGINES)}")
        raise typer.Exit(2)
    try:
        launch = LaunchConfig(
            engine=engine,
            model=model,
            served_model_name=served_model_name,
            host=host,
            port=port,
            python=python,
            docker=docker,
            gpus=None if gpus.lower() in ("none", "") else gpus,
            docker_args=docker_arg,
            args=engine_args or [],
            env=_parse_env(env),
            cache_dir=str(cache_dir) if cache_dir else None,
            startup_timeout_s=startup_timeout,
            stop_timeout_s=stop_timeout,
        )
    except ValidationError as e:
        first = e.errors()[0]
        _err(f"{'.'.join(str(p) for p in first['loc'])}: {first['msg']}")
        raise typer.Exit(2) from None
    spec = _spec(launch, model, name or engine, out, cache_dir)
    if dry_run:
        _print_command(spec, json_out)
        raise typer.Exit(0)
    raise typer.Exit(_serve(spec, json_out=json_out))


def _spec(
    launch: LaunchConfig, model: str, inst: str, out: Path, cache_dir: Path | None
) -> EngineSpec:
    return EngineSpec(
        name=inst,
        launch=launch,
        model=model,
        served_model_name=launch.served_model_name or model,
        port=launch.port or DEFAULT_PORTS[launch.engine],
        host=launch.host,
        log_path=out / f"engine-{inst}.log",
        cache_dir=cache_dir or out / f"engine-{inst}-cache",
    )


def _print_command(spec: EngineSpec, json_out: bool) -> None:
    cmd = redact_args(spec.command())
    if json_out:
        typer.echo(orjson.dumps({"command": cmd, "log": str(spec.log_path)}).decode())
    else:
        typer.echo(shlex.join(cmd))


def _emit(json_out: bool, event: dict[str, Any], text: str) -> None:
    if json_out:
        typer.echo(orjson.dumps(event).decode())
    else:
        typer.echo(text, err=True)


def _serve(spec: EngineSpec, *, json_out: bool) -> int:
    proc = EngineProcess(spec)
    previous = signal.signal(signal.SIGTERM, _on_sigterm)
    try:
        try:
            proc.start()
            _emit(
                json_out,
                {
                    "event": "starting",
                    "engine": spec.engine,
                    "pid": proc.proc.pid if proc.proc else None,
                },
                f"starting {spec.engine} on {spec.base_url} (log: {spec.log_path})",
            )
            ready_s = proc.wait_ready()
        except EngineError as e:
            _err(str(e))
            return 2
        except EngineStartError as e:
            _err(str(e))
            return 1
        _emit(
            json_out,
            {
                "event": "ready",
                "engine": spec.engine,
                "base_url": spec.base_url,
                "model": spec.served_model_name,
                "metrics_url": spec.metrics_url,
                "log": str(spec.log_path),
                "ready_s": round(ready_s, 3),
            },
            f"{spec.engine} ready after {ready_s:.1f} s: base URL {spec.base_url}, model "
            f"{spec.served_model_name!r}, metrics {spec.metrics_url}. Ctrl-C stops it.",
        )
        while proc.running:
            time.sleep(0.5)
        assert proc.proc is not None
        code = proc.proc.returncode
        _err(
            f"{spec.engine} engine '{spec.name}' exited with status {code}; log: "
            f"{spec.log_path}\n--- last lines ---\n{tail_lines(spec.log_path)}"
        )
        return 1
    except (KeyboardInterrupt, _Stop):
        _emit(json_out, {"event": "stopping"}, f"stopping {spec.engine} ...")
        return 0
    finally:
        signal.signal(signal.SIGTERM, previous)
        code = proc.stop()
        if code is not None:
            _emit(json_out, {"event": "stopped", "status": code}, f"stopped (status {code})")
        sys.stderr.flush()
