"""`agentload sim calibrate` and `agentload sim fidelity`: fit a simulator profile to a real
server, and measure how closely a profile reproduces one."""

from __future__ import annotations

import asyncio
import json
import math
import os
import shlex
import sys
from pathlib import Path
from typing import Annotated, Any, TypeVar

import typer
from pydantic import BaseModel, Field

from agentload.cli.options import ARGS, Opt, command_options, from_model, parse_args
from agentload.cli.root import examples
from agentload.cli.sim import sim_app
from agentload.config import ConfigError
from agentload.flags import SECONDS, flag
from agentload.redact import DEFAULT_KEY_ENV, redact_argv

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


SERVER = "Server"
PROBE = "Probe"
OUT = "Output"


_KEY_ENV_HELP = (
    "Environment variable holding the server's bearer key, as for `agentload run` (default: "
    "OPENAI_API_KEY when set, else AGENTLOAD_API_KEY, else no key)."
)
_KEY_HELP = "The key itself (visible in the process list: prefer --api-key-env)."


class _ServerKey(BaseModel):
    """The real server's key, as calibrate and fidelity both take it."""

    api_key_env: Annotated[str | None, flag("--api-key-env", panel=SERVER, metavar="VAR")] = Field(
        None, description=_KEY_ENV_HELP
    )
    api_key: Annotated[str | None, flag("--api-key", panel=SERVER, metavar="KEY")] = Field(
        None, description=_KEY_HELP
    )

    def server_key(self) -> str | None:
        """--api-key, else the variable --api-key-env names (which must be set), else
        OPENAI_API_KEY or AGENTLOAD_API_KEY, as `agentload run` reads its key."""
        if self.api_key:
            return self.api_key
        if self.api_key_env:
            value = os.environ.get(self.api_key_env)
            if not value:
                raise typer.BadParameter(
                    f"environment variable {self.api_key_env} is not set or empty"
                )
            return value
        return os.environ.get(DEFAULT_KEY_ENV) or os.environ.get("AGENTLOAD_API_KEY") or None


def _in_order(model: type[BaseModel], first: tuple[str, ...]) -> list[str]:
    """The model's fields for --help: `first`, then the key, then the rest as declared."""
    keys = ("api_key_env", "api_key")
    rest = [n for n in model.model_fields if n not in first and n not in keys]
    return [*first, *keys, *rest]


class CalibrateArgs(_ServerKey):
    """The options of `agentload sim calibrate`."""

    base_url: Annotated[str | None, flag("--base-url", panel=SERVER, metavar="URL")] = Field(
        None, description="The real server's OpenAI base URL, e.g. http://host:8000/v1."
    )
    model: Annotated[str | None, flag("--model", panel=SERVER, metavar="MODEL")] = Field(
        None, description="Model name to send (as /v1/models lists it)."
    )
    from_dir: Annotated[Path | None, flag("--from", panel=SERVER, metavar="RESULTS_DIR")] = Field(
        None,
        description="Fit from a finished run's results directory (calls.jsonl, "
        "server_metrics.jsonl) instead of probing a server: no extra load.",
    )
    pool: Annotated[list[Path], flag("--pool", panel=SERVER, metavar="PROBE_JSON")] = Field(
        default_factory=list,
        description="Fit from probes kept by earlier calibrations (the NAME.probe.json written "
        "beside each profile) instead of probing: repeat it to pool several server starts, "
        "replicas or days into one profile, each pattern's median over all of them; once, to "
        "refit.",
    )
    tokenizer: Annotated[str | None, flag("--tokenizer", panel=PROBE, metavar="FILE")] = Field(
        None,
        description="The model's tokenizer.json: probe prompts get exact lengths (recommended).",
    )
    base: Annotated[str, flag("--base", panel=PROBE, metavar="PROFILE")] = Field(
        "tiny-cpu",
        description="Built-in profile or file whose engine limits (max_num_seqs, ...) the "
        "profile keeps where the server does not report its own.",
    )
    max_num_batched_tokens: Annotated[
        int | None, flag("--max-num-batched-tokens", panel=PROBE, metavar="N")
    ] = Field(
        None,
        ge=1,
        description="The server's token budget per step (its prefill chunk); default: detected "
        "from vllm:iteration_tokens_total, else --base's.",
    )
    max_num_seqs: Annotated[int | None, flag("--max-num-seqs", panel=PROBE, metavar="N")] = Field(
        None, ge=1, description="The server's sequence cap (default: --base's)."
    )
    repeats: Annotated[int, flag("--repeats", panel=PROBE, metavar="N")] = Field(
        3,
        ge=1,
        description="Rounds of the probe (each pattern once per round); with two or more, each "
        "round's pace against the others shows whether the server held still.",
    )
    warmup: Annotated[float | None, flag("--warmup", panel=PROBE, metavar=SECONDS)] = Field(
        None,
        ge=0,
        description="Seconds of probe load before measuring, recorded nothing: a freshly "
        "started vLLM runs its first minute or so slower (default 60, 30 with --quick; 0 for a "
        "server that has been serving).",
    )
    quick: Annotated[bool, flag("--quick", panel=PROBE, sets=True)] = Field(
        False,
        description="A smaller probe (fewer prompt lengths and batch sizes, one round): about "
        "a fifth of the time, a rougher fit.",
    )
    wall_clock: Annotated[bool, flag("--wall-clock", panel=PROBE, sets=True)] = Field(
        False,
        description="Against an agentload simulator, time on the wall clock instead of its "
        "model clock (measures it as a real server would be).",
    )
    out: Annotated[Path, flag("--out", "-o", panel=OUT, metavar="FILE")] = Field(
        _OUT,
        description="Profile file to write (YAML); a probe's measurements are kept beside it "
        "as NAME.probe.json, for --pool.",
    )
    name: Annotated[str | None, flag("--name", panel=OUT, metavar="NAME")] = Field(
        None, description="Profile name (default: the file's stem)."
    )
    as_json: Annotated[bool, flag("--json", panel=OUT, sets=True)] = Field(
        False, description="Print the profile as JSON on stdout."
    )
    quiet: Annotated[bool, flag("--quiet", "-q", panel=OUT, sets=True)] = Field(
        False, description="No progress lines on stderr."
    )


CALIBRATE_OPTIONS = from_model(
    CalibrateArgs, *_in_order(CalibrateArgs, ("base_url", "model")), target=ARGS
)
M = TypeVar("M", bound=BaseModel)


def _args(cmd: str, model: type[M], opts: list[Opt], a: dict[str, Any]) -> M:
    try:
        return parse_args(model, opts, a)
    except ConfigError as e:
        raise _fail(cmd, str(e).removeprefix("invalid configuration: "), 2) from None


@sim_app.command(
    "calibrate",
    epilog=examples(
        "agentload sim calibrate --base-url http://127.0.0.1:8000/v1 \\",
        "  --model Qwen/Qwen3-8B --tokenizer tokenizer.json -o qwen3-8b.yaml",
        "# fit from a finished run instead of probing",
        "agentload sim calibrate --from results/demo -o fitted.yaml",
    ),
)
@command_options(CALIBRATE_OPTIONS)
def calibrate_command(**a: Any) -> None:
    """Fit a simulator timing profile to a real server: probe it (prefill across prompt lengths,
    decode at several batch sizes and contexts, prefix-cache hits, prefill beside decodes,
    arrivals beside decodes, an idle engine's start, chunking) for a few minutes, fit the
    timing model of docs/simulator.md, and write the profile with its fit quality and the
    engine it came from, keeping the probe's measurements beside it (NAME.probe.json).
    --pool fits one profile to kept probes of several server starts, replicas or days.
    Use it with `agentload sim --profile FILE` or a run's `--sim-profile FILE`."""
    # lazy: start-up: a command's machinery loads when it runs, not for --help
    from agentload.calibration.calibrate import profile_yaml, summary_lines

    args = _args("calibrate", CalibrateArgs, CALIBRATE_OPTIONS, a)
    say = _say(args.quiet)
    _check_file("calibrate", "--tokenizer", args.tokenizer)
    for path in args.pool:
        _check_file("calibrate", "--pool", str(path))
    out = args.out
    command = "agentload sim calibrate " + shlex.join(redact_argv(sys.argv[3:]))
    try:
        result = _calibration(args, args.name or out.stem, out, say)
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
    if args.as_json:
        print(json.dumps(result.profile.model_dump(), indent=2))


def _calibration(a: CalibrateArgs, name: str, out: Path, say: Any) -> Any:
    sources = [f for f, given in (("--base-url", a.base_url), ("--from", a.from_dir),
                                  ("--pool", a.pool)) if given]  # fmt: skip
    if len(sources) > 1:
        raise ValueError(f"give one of {', '.join(sources)}: each is a way to calibrate")
    if a.from_dir is not None:
        # lazy: start-up: a command's machinery loads when it runs, not for --help
        from agentload.calibration.fromrun import calibrate_from_run

        return calibrate_from_run(
            a.from_dir, name=name, base=a.base, budget=a.max_num_batched_tokens, say=say
        )
    if a.pool:
        # lazy: start-up: a command's machinery loads when it runs, not for --help
        from agentload.calibration.calibrate import pool

        if a.max_num_batched_tokens is not None:
            raise ValueError("--max-num-batched-tokens: the pooled probes carry their own")
        return asyncio.run(
            pool(
                a.pool,
                name=name,
                base=a.base,
                tokenizer=a.tokenizer,
                max_num_seqs=a.max_num_seqs,
                say=say,
            )
        )
    if not a.base_url or not a.model:
        raise ValueError(
            "give --base-url and --model (or --from RESULTS_DIR, or --pool PROBE_JSON)"
        )
    # lazy: start-up: a command's machinery loads when it runs, not for --help
    from agentload.calibration.calibrate import calibrate, probe_path
    from agentload.calibration.stream import Target

    key = a.server_key()
    return asyncio.run(
        calibrate(
            Target(a.base_url, a.model, api_key=key),
            name=name,
            base=a.base,
            tokenizer=a.tokenizer,
            budget=a.max_num_batched_tokens,
            max_num_seqs=a.max_num_seqs,
            plan=_plan(a),
            wall_clock=a.wall_clock,
            say=say,
            save_probe=probe_path(out),
        )
    )


def _plan(a: CalibrateArgs) -> Any:
    # lazy: start-up: a command's machinery loads when it runs, not for --help
    from agentload.calibration.probe import ProbePlan

    plan = ProbePlan.quick() if a.quick else ProbePlan(repeats=a.repeats)
    if a.warmup is not None:
        plan.warmup_s = a.warmup
    return plan


def _probe_errors() -> tuple[type[Exception], ...]:
    """A server that failed (not the user's input): exit code 1."""
    # lazy: start-up: a command's machinery loads when it runs, not for --help
    from agentload.calibration.stream import ProbeError

    return (ProbeError, OSError, RuntimeError)


class FidelityArgs(_ServerKey):
    """The options of `agentload sim fidelity`."""

    real: Annotated[str | None, flag("--real", panel=SERVER, metavar="URL")] = Field(
        None, description="The real server's OpenAI base URL."
    )
    model: Annotated[str | None, flag("--model", panel=SERVER, metavar="MODEL")] = Field(
        None, description="Model name on the real server."
    )
    pool: Annotated[list[Path], flag("--pool", panel=SERVER, metavar="RESULT_JSON")] = Field(
        default_factory=list,
        description="Instead of measuring: combine results this command wrote (-o) for one "
        "profile, one per server start, replica or day (repeat it), into one comparison "
        "against the median of their real servers, each result one vote.",
    )
    profile: Annotated[str | None, flag("--profile", panel=PROBE, metavar="NAME|FILE")] = Field(
        None, description="Profile to check: a built-in name or a file."
    )
    tokenizer: Annotated[str | None, flag("--tokenizer", panel=PROBE, metavar="FILE")] = Field(
        None,
        description="The model's tokenizer.json, for exact prompt lengths and for the "
        "simulator's token counts (recommended).",
    )
    workload: Annotated[list[str], flag("--workload", "-w", panel=PROBE, metavar="NAME")] = Field(
        default_factory=list,
        description="Only these workloads (repeatable): prefill-heavy, decode-heavy, "
        "shared-prefix, concurrent.",
    )
    seed: Annotated[int | None, flag("--seed", panel=PROBE, metavar="N")] = Field(
        None, description="Prompt salt (default: the time)."
    )
    passes: Annotated[int, flag("--passes", panel=PROBE, metavar="N")] = Field(
        1,
        ge=1,
        description="Run every workload N times on both sides and compare medians; the table "
        "then shows how far the real server moved between passes.",
    )
    warmup: Annotated[float, flag("--warmup", panel=PROBE, metavar=SECONDS)] = Field(
        0.0,
        ge=0,
        description="Seconds of the workloads on the real server first, recorded nothing: a "
        "freshly started vLLM runs its first minute or so slower.",
    )
    out: Annotated[Path | None, flag("--out", "-o", panel=OUT, metavar="FILE")] = Field(
        None, description="Also write the result as JSON here."
    )
    as_json: Annotated[bool, flag("--json", panel=OUT, sets=True)] = Field(
        False, description="Print the result as JSON on stdout."
    )
    quiet: Annotated[bool, flag("--quiet", "-q", panel=OUT, sets=True)] = Field(
        False, description="No progress lines on stderr."
    )


FIDELITY_OPTIONS = from_model(
    FidelityArgs, *_in_order(FidelityArgs, ("real", "model")), target=ARGS
)


@sim_app.command(
    "fidelity",
    epilog=examples(
        "agentload sim fidelity --real http://127.0.0.1:8000/v1 \\",
        "  --model Qwen/Qwen3-8B --profile qwen3-8b.yaml",
        "agentload sim fidelity --real http://127.0.0.1:8000/v1 \\",
        "  --profile qwen3-8b.yaml --passes 3 --out fidelity.json",
    ),
)
@command_options(FIDELITY_OPTIONS)
def fidelity_command(**kw: Any) -> None:
    """Run fixed workloads (prefill-heavy, decode-heavy, shared-prefix, concurrent) against the
    real server and against a simulator with PROFILE, and print the simulator's error on TTFT
    p50/p90, mean TPOT and ITL, output throughput and tokens per chunk, with a note on a TTFT
    percentile that lies between bands of TTFTs a prefill apart. --pool combines results of
    several server starts or replicas. Exit code 0 when TTFT and TPOT are within 10 % on every
    workload, 3 when not."""
    # lazy: start-up: a command's machinery loads when it runs, not for --help
    from agentload.calibration.fidelity import WORKLOADS, fidelity, table
    from agentload.calibration.stream import Target
    from agentload.sim.profiles import load_profile

    args = _args("fidelity", FidelityArgs, FIDELITY_OPTIONS, kw)
    say = _say(args.quiet)
    if args.pool:
        _show_fidelity(_pooled(args), args.out, args.as_json, table)
        return
    real, model, profile = args.real, args.model, args.profile
    if not (real and model and profile):
        named = (("--real", real), ("--model", model), ("--profile", profile))
        missing = ", ".join(f for f, v in named if not v)
        raise _fail("fidelity", f"give {missing} (or --pool RESULT_JSON ...)", 2)
    _check_file("fidelity", "--tokenizer", args.tokenizer)
    try:
        prof = load_profile(profile)
    except ValueError as exc:
        raise _fail("fidelity", f"--profile: {exc}", 2) from None
    by_name = {w.name: w for w in WORKLOADS}
    unknown = [w for w in args.workload if w not in by_name]
    if unknown:
        known = ", ".join(by_name)
        raise _fail("fidelity", f"--workload: unknown {unknown[0]!r} (known: {known})", 2)
    if not prof.calibrated:
        say(f"fidelity: profile {prof.name!r} is not calibrated (an estimate)")
    key = args.server_key()
    try:
        result = asyncio.run(
            fidelity(
                Target(real, model, api_key=key),
                profile,
                tokenizer=args.tokenizer,
                workloads=[by_name[w] for w in args.workload] or None,
                say=say,
                seed=args.seed,
                passes=args.passes,
                warmup_s=args.warmup,
            )
        )
    except _probe_errors() as exc:
        raise _fail("fidelity", str(exc), 1) from None
    _show_fidelity(result, args.out, args.as_json, table)


def _pooled(args: FidelityArgs) -> dict[str, Any]:
    # lazy: start-up: a command's machinery loads when it runs, not for --help
    from agentload.calibration.fidelity import pool

    measuring = [flag for flag, given in (
        ("--real", args.real), ("--model", args.model), ("--api-key", args.api_key),
        ("--api-key-env", args.api_key_env),
        ("--profile", args.profile), ("--tokenizer", args.tokenizer),
        ("--workload", args.workload), ("--seed", args.seed is not None),
        ("--passes", args.passes != 1), ("--warmup", args.warmup != 0),
    ) if given]  # fmt: skip
    if measuring:
        raise _fail(
            "fidelity",
            f"--pool combines results already measured: drop {', '.join(measuring)}",
            2,
        )
    results = []
    for path in args.pool:
        try:
            results.append((str(path), json.loads(path.read_text(encoding="utf-8"))))
        except OSError as exc:
            raise _fail("fidelity", f"--pool: cannot read {path}: {exc.strerror}", 2) from None
        except ValueError as exc:
            raise _fail("fidelity", f"--pool: {path}: not JSON: {exc}", 2) from None
    try:
        return pool(results)
    except ValueError as exc:
        raise _fail("fidelity", f"--pool: {exc}", 2) from None


def _show_fidelity(result: dict[str, Any], out: Path | None, as_json: bool, table: Any) -> None:
    # lazy: start-up: a command's machinery loads when it runs, not for --help
    from agentload.calibration.calibrate import first_pass_hint, pace_text
    from agentload.calibration.fidelity import GOAL

    pooled = result.get("pooled")
    between, unit = ("between the results", "result") if pooled else ("between passes", "pass")
    if out is not None:
        out.write_text(json.dumps(result, indent=2), encoding="utf-8")
    if as_json:
        print(json.dumps(result, indent=2))
    else:
        print(table(result["rows"]))
        if pooled:
            print(f"\n{len(pooled)} results of profile {result['profile']} pooled, each one vote:")
            for q in pooled:
                print(
                    f"  {q['source']}: {q['within_goal']} of {q['goal_metrics']} goal metrics "
                    f"within {GOAL:.0%}, median error {100 * q['median_error']:+.0f} %, "
                    f"{q['passes']} pass{'es' if q['passes'] != 1 else ''}"
                )
        else:
            lb, la = result["load_before"], result["load_after"]
            print(
                f"\nload average (1 min) {lb['load_avg_1m']} before, {la['load_avg_1m']} "
                f"after; prompt salt {result['salt']}"
            )
        if result.get("unresolved"):
            print(
                f"note: the real server moved by more than {GOAL:.0%} {between} on "
                + ", ".join(result["unresolved"])
                + ": an error of that size there is within its own swings"
            )
        if pace_ := result.get("pace"):
            print(f"the real server's pace by {unit}: {pace_text(pace_['real'])}")
            if not pooled and (
                hint := first_pass_hint(pace_["real"], result.get("warmup", {}).get("seconds"))
            ):
                print(f"note: {hint}")
            print(f"the simulator's pace by {unit}: {pace_text(pace_['sim'])}")
        med = result.get("median_error")
        if med is not None and math.isfinite(med):
            print(
                f"median error over the goal metrics {100 * med:+.0f} %"
                + (
                    f" (beyond {GOAL:.0%}: the real server as a whole ran "
                    f"{'slower' if med < 0 else 'faster'} than the profile, more than any "
                    "one workload's shape is off)"
                    if abs(med) > GOAL
                    else ""
                )
            )
        for e in result.get("band_edges", []):
            print(
                f"note: {e['workload']} TTFT {e['metric'].split('_')[1]} lies "
                "between bands of TTFTs (one request crossing it moves it by "
                f"{100 * e['real']:.0f} % on the real server, {100 * e['sim']:.0f} % on the "
                "simulator): its error counts requests that waited for one prefill more or "
                'less, not how long each waited (docs/simulator.md, "Bands of TTFT")'
            )
        verdicts = [v for r in result["rows"] for v in r.get("verdict", {}).values()]
        if verdicts:
            print(
                f"goal metrics: {verdicts.count('goal')} of {len(verdicts)} within "
                f"{GOAL:.0%}, {verdicts.count('swings')} outside it but inside the range the "
                f"real server covered {between}, {verdicts.count('off')} outside both"
                + (": " + ", ".join(result["off"]) if result.get("off") else "")
            )
    if not result["within_goal"]:
        raise typer.Exit(3)
