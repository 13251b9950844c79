"""`agentload sim calibrate` and `agentload sim fidelity`: fit a simulator profile to a real
server, and measure how closely a profile reproduces one."""

from __future__ import annotations

import asyncio
import json
import shlex
import sys
from pathlib import Path
from typing import Any

import typer

from agentload.cli.sim import sim_app

_OUT = Path("profile.yaml")


def _say(quiet: bool) -> Any:
    def say(line: str) -> None:
        if not quiet:
            print(line, file=sys.stderr, flush=True)

    return say


def _fail(cmd: str, msg: str, code: int) -> typer.Exit:
    print(f"agentload sim {cmd}: {msg}", file=sys.stderr, flush=True)
    return typer.Exit(code)


def _check_file(cmd: str, flag: str, path: str | None) -> None:
    if path is not None and not Path(path).is_file():
        raise _fail(cmd, f"{flag}: no such file: {path}", 2)


@sim_app.command("calibrate")
def calibrate_command(
    base_url: str = typer.Option(
        None, "--base-url", help="The real server's OpenAI base URL, e.g. http://host:8000/v1."
    ),
    model: str = typer.Option(None, "--model", help="Model name to send (as /v1/models lists it)."),
    from_dir: Path = typer.Option(
        None,
        "--from",
        help="Fit from a finished run's results directory (calls.jsonl, server_metrics.jsonl) "
        "instead of probing a server: no extra load.",
        metavar="RESULTS_DIR",
    ),
    out: Path = typer.Option(_OUT, "--out", "-o", help="Profile file to write (YAML)."),
    name: str = typer.Option(None, "--name", help="Profile name (default: the file's stem)."),
    tokenizer: str = typer.Option(
        None,
        "--tokenizer",
        help="The model's tokenizer.json: probe prompts get exact lengths (recommended).",
        metavar="FILE",
    ),
    api_key: str = typer.Option(
        None, "--api-key", envvar="AGENTLOAD_API_KEY", help="Bearer key for the server."
    ),
    base: str = typer.Option(
        "tiny-cpu",
        "--base",
        help="Built-in profile or file whose engine limits (max_num_seqs, ...) the profile "
        "keeps where the server does not report its own.",
        metavar="PROFILE",
    ),
    max_num_batched_tokens: int = typer.Option(
        None,
        "--max-num-batched-tokens",
        min=1,
        help="The server's token budget per step (its prefill chunk); default: --base's. "
        "vLLM does not publish it: pass what the server was started with.",
    ),
    max_num_seqs: int = typer.Option(
        None, "--max-num-seqs", min=1, help="The server's sequence cap (default: --base's)."
    ),
    repeats: int = typer.Option(3, "--repeats", min=1, help="Repeats of each probe pattern."),
    quick: bool = typer.Option(
        False,
        "--quick",
        help="A smaller probe (fewer prompt lengths, batch sizes and repeats): about a fifth "
        "of the time, a rougher fit.",
    ),
    wall_clock: bool = typer.Option(
        False,
        "--wall-clock",
        help="Against an agentload simulator, time on the wall clock instead of its model "
        "clock (checks the probe as a real server would see it).",
    ),
    as_json: bool = typer.Option(False, "--json", help="Print the result as JSON on stdout."),
    quiet: bool = typer.Option(False, "--quiet", "-q", help="No progress lines on stderr."),
) -> None:
    """Fit a simulator timing profile to a real server: probe it (prefill across prompt lengths,
    decode at several batch sizes and contexts, prefix-cache hits, prefill beside decodes) for a
    few minutes, fit the timing model of docs/simulator.md, and write the profile with its fit
    quality and the engine it came from. Use it with `agentload sim --profile FILE` or a run's
    `sim.profile`."""
    from agentload.sim.calibration.calibrate import profile_yaml, summary_lines
    from agentload.sim.calibration.probe import ProbePlan

    say = _say(quiet)
    _check_file("calibrate", "--tokenizer", tokenizer)
    prof_name = name or out.stem
    command = "agentload sim calibrate " + shlex.join(
        a for a in sys.argv[3:] if not a.startswith("--api-key")
    )
    try:
        if from_dir is not None:
            from agentload.sim.calibration.fromrun import calibrate_from_run

            result = calibrate_from_run(
                from_dir, name=prof_name, base=base, budget=max_num_batched_tokens, say=say
            )
        else:
            if not base_url or not model:
                raise _fail("calibrate", "give --base-url and --model (or --from RESULTS_DIR)", 2)
            result = _probe(
                base_url,
                model,
                api_key,
                prof_name,
                base,
                tokenizer,
                max_num_batched_tokens,
                max_num_seqs,
                ProbePlan.quick() if quick else ProbePlan(repeats=repeats),
                wall_clock,
                say,
            )
    except ValueError as exc:
        raise _fail("calibrate", str(exc), 2) from None
    except _probe_errors() as exc:
        raise _fail("calibrate", str(exc), 1) from None
    try:
        out.write_text(profile_yaml(result.profile, command), encoding="utf-8")
    except OSError as exc:
        raise _fail("calibrate", f"--out: cannot write {out}: {exc.strerror}", 2) from None
    say("\n".join(summary_lines(result)))
    say(f"calibrate: wrote {out}; use it with: agentload sim --profile {out}")
    if as_json:
        print(json.dumps(result.profile.model_dump(), indent=2))


def _probe_errors() -> tuple[type[Exception], ...]:
    from agentload.sim.calibration.stream import ProbeError

    return (ProbeError, OSError)


def _probe(
    base_url: str,
    model: str,
    api_key: str | None,
    name: str,
    base: str,
    tokenizer: str | None,
    budget: int | None,
    max_num_seqs: int | None,
    plan: Any,
    wall_clock: bool,
    say: Any,
) -> Any:
    from agentload.sim.calibration.calibrate import calibrate
    from agentload.sim.calibration.stream import Target

    return asyncio.run(
        calibrate(
            Target(base_url, model, api_key=api_key),
            name=name,
            base=base,
            tokenizer=tokenizer,
            budget=budget,
            max_num_seqs=max_num_seqs,
            plan=plan,
            wall_clock=wall_clock,
            say=say,
        )
    )


@sim_app.command("fidelity")
def fidelity_command(
    real: str = typer.Option(..., "--real", help="The real server's OpenAI base URL."),
    model: str = typer.Option(..., "--model", help="Model name on the real server."),
    profile: str = typer.Option(
        ..., "--profile", help="Profile to check: a built-in name or a file.", metavar="NAME|FILE"
    ),
    tokenizer: str = typer.Option(
        None,
        "--tokenizer",
        help="The model's tokenizer.json, for exact prompt lengths and for the simulator's "
        "token counts (recommended).",
        metavar="FILE",
    ),
    api_key: str = typer.Option(
        None, "--api-key", envvar="AGENTLOAD_API_KEY", help="Bearer key for the real server."
    ),
    workload: list[str] = typer.Option(
        None,
        "--workload",
        "-w",
        help="Only these workloads (repeatable): prefill-heavy, decode-heavy, shared-prefix, "
        "concurrent.",
    ),
    seed: int = typer.Option(None, "--seed", help="Prompt salt (default: the time)."),
    out: Path = typer.Option(None, "--out", "-o", help="Also write the result as JSON here."),
    as_json: bool = typer.Option(False, "--json", help="Print the result as JSON on stdout."),
    quiet: bool = typer.Option(False, "--quiet", "-q", help="No progress lines on stderr."),
) -> None:
    """Run fixed workloads (prefill-heavy, decode-heavy, shared-prefix, concurrent) against the
    real server and against a simulator with PROFILE, and print the simulator's error on TTFT
    p50/p90, mean TPOT and ITL, output throughput and tokens per chunk. Exit code 0 when TTFT
    and TPOT are within 10 % on every workload, 3 when not."""
    from agentload.sim.calibration.fidelity import WORKLOADS, fidelity, table
    from agentload.sim.calibration.stream import Target
    from agentload.sim.profiles import load_profile

    say = _say(quiet)
    _check_file("fidelity", "--tokenizer", tokenizer)
    try:
        prof = load_profile(profile)
    except ValueError as exc:
        raise _fail("fidelity", f"--profile: {exc}", 2) from None
    by_name = {w.name: w for w in WORKLOADS}
    unknown = [w for w in workload or [] if w not in by_name]
    if unknown:
        raise _fail(
            "fidelity", f"--workload: unknown {unknown[0]!r} (known: {', '.join(by_name)})", 2
        )
    if not prof.calibrated:
        say(f"fidelity: profile {prof.name!r} is not calibrated (an estimate)")
    chosen = [by_name[w] for w in workload] if workload else None
    try:
        result = asyncio.run(
            fidelity(
                Target(real, model, api_key=api_key),
                profile,
                tokenizer=tokenizer,
                workloads=chosen,
                say=say,
                seed=seed,
            )
        )
    except _probe_errors() as exc:
        raise _fail("fidelity", str(exc), 1) from None
    except RuntimeError as exc:
        raise _fail("fidelity", str(exc), 1) from None
    if out is not None:
        out.write_text(json.dumps(result, indent=2), encoding="utf-8")
    if as_json:
        print(json.dumps(result, indent=2))
    else:
        print(table(result["rows"]))
        lb, la = result["load_before"], result["load_after"]
        print(
            f"\nload average (1 min) {lb['load_avg_1m']} before, {la['load_avg_1m']} after; "
            f"prompt salt {result['salt']}"
        )
    if not result["within_goal"]:
        raise typer.Exit(3)
