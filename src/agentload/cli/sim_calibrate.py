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
from typing import Any

import typer

from agentload.cli.options import Opt, command_options
from agentload.cli.sim import sim_app
from agentload.redact import redact_argv

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

CALIBRATE_OPTIONS = [
    Opt("base_url", ("--base-url",), str | None,
        "The real server's OpenAI base URL, e.g. http://host:8000/v1.", SERVER, metavar="URL"),
    Opt("model", ("--model",), str | None,
        "Model name to send (as /v1/models lists it).", SERVER),
    Opt("api_key", ("--api-key",), str | None,
        "Bearer key for the server (default: $AGENTLOAD_API_KEY).", SERVER, metavar="KEY"),
    Opt("from_dir", ("--from",), Path | None,
        "Fit from a finished run's results directory (calls.jsonl, server_metrics.jsonl) "
        "instead of probing a server: no extra load.", SERVER, metavar="RESULTS_DIR"),
    Opt("pool", ("--pool",), list[Path],
        "Fit from probes kept by earlier calibrations (the NAME.probe.json written beside each "
        "profile) instead of probing: repeat it to pool several server starts, replicas or "
        "days into one profile, each pattern's median over all of them; once, to refit.",
        SERVER, [], metavar="PROBE_JSON"),
    Opt("tokenizer", ("--tokenizer",), str | None,
        "The model's tokenizer.json: probe prompts get exact lengths (recommended).",
        PROBE, metavar="FILE"),
    Opt("base", ("--base",), str,
        "Built-in profile or file whose engine limits (max_num_seqs, ...) the profile keeps "
        "where the server does not report its own.", PROBE, "tiny-cpu", metavar="PROFILE"),
    Opt("max_num_batched_tokens", ("--max-num-batched-tokens",), int | None,
        "The server's token budget per step (its prefill chunk); default: detected from "
        "vllm:iteration_tokens_total, else --base's.", PROBE, metavar="N", min=1),
    Opt("max_num_seqs", ("--max-num-seqs",), int | None,
        "The server's sequence cap (default: --base's).", PROBE, metavar="N", min=1),
    Opt("repeats", ("--repeats",), int, "Rounds of the probe (each pattern once per round); "
        "with two or more, each round's pace against the others shows whether the server held "
        "still.", PROBE, 3, metavar="N", min=1),
    Opt("warmup", ("--warmup",), float | None,
        "Seconds of probe load before measuring, recorded nothing: a freshly started vLLM "
        "runs its first minute or so slower (default 60, 30 with --quick; 0 for a server "
        "that has been serving).", PROBE, metavar="S", min=0),
    Opt("quick", ("--quick",), bool, "A smaller probe (fewer prompt lengths and batch sizes, "
        "one round): about a fifth of the time, a rougher fit.", PROBE, False),
    Opt("wall_clock", ("--wall-clock",), bool,
        "Against an agentload simulator, time on the wall clock instead of its model clock "
        "(measures it as a real server would be).", PROBE, False),
    Opt("out", ("--out", "-o"), Path, "Profile file to write (YAML); a probe's measurements "
        "are kept beside it as NAME.probe.json, for --pool.", OUT, _OUT, metavar="FILE"),
    Opt("name", ("--name",), str | None, "Profile name (default: the file's stem).", OUT),
    Opt("as_json", ("--json",), bool, "Print the profile as JSON on stdout.", OUT, False),
    Opt("quiet", ("--quiet", "-q"), bool, "No progress lines on stderr.", OUT, False),
]  # fmt: skip


@sim_app.command("calibrate")
@command_options(CALIBRATE_OPTIONS)
def calibrate_command(**a: Any) -> None:
    """Fit a simulator timing profile to a real server: probe it (prefill across prompt lengths,
    decode at several batch sizes and contexts, prefix-cache hits, prefill beside decodes,
    arrivals beside decodes, an idle engine's start, chunking) for a few minutes, fit the
    timing model of docs/simulator.md, and write the profile with its fit quality and the
    engine it came from, keeping the probe's measurements beside it (NAME.probe.json).
    --pool fits one profile to kept probes of several server starts, replicas or days.
    Use it with `agentload sim --profile FILE` or a run's `--sim-profile FILE`."""
    from agentload.sim.calibration.calibrate import profile_yaml, summary_lines

    say = _say(a["quiet"])
    _check_file("calibrate", "--tokenizer", a["tokenizer"])
    for path in a["pool"]:
        _check_file("calibrate", "--pool", str(path))
    out: Path = a["out"]
    command = "agentload sim calibrate " + shlex.join(redact_argv(sys.argv[3:]))
    try:
        result = _calibration(a, a["name"] or out.stem, out, say)
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
    if a["as_json"]:
        print(json.dumps(result.profile.model_dump(), indent=2))


def _calibration(a: dict[str, Any], name: str, out: Path, say: Any) -> Any:
    sources = [f for f, given in (("--base-url", a["base_url"]), ("--from", a["from_dir"]),
                                  ("--pool", a["pool"])) if given]  # fmt: skip
    if len(sources) > 1:
        raise ValueError(f"give one of {', '.join(sources)}: each is a way to calibrate")
    if a["from_dir"] is not None:
        from agentload.sim.calibration.fromrun import calibrate_from_run

        return calibrate_from_run(
            a["from_dir"], name=name, base=a["base"], budget=a["max_num_batched_tokens"], say=say
        )
    if a["pool"]:
        from agentload.sim.calibration.calibrate import pool

        if a["max_num_batched_tokens"] is not None:
            raise ValueError("--max-num-batched-tokens: the pooled probes carry their own")
        return asyncio.run(
            pool(
                a["pool"],
                name=name,
                base=a["base"],
                tokenizer=a["tokenizer"],
                max_num_seqs=a["max_num_seqs"],
                say=say,
            )
        )
    if not a["base_url"] or not a["model"]:
        raise ValueError(
            "give --base-url and --model (or --from RESULTS_DIR, or --pool PROBE_JSON)"
        )
    from agentload.sim.calibration.calibrate import calibrate, probe_path
    from agentload.sim.calibration.stream import Target

    key = a["api_key"] or os.environ.get("AGENTLOAD_API_KEY")
    return asyncio.run(
        calibrate(
            Target(a["base_url"], a["model"], api_key=key),
            name=name,
            base=a["base"],
            tokenizer=a["tokenizer"],
            budget=a["max_num_batched_tokens"],
            max_num_seqs=a["max_num_seqs"],
            plan=_plan(a),
            wall_clock=a["wall_clock"],
            say=say,
            save_probe=probe_path(out),
        )
    )


def _plan(a: dict[str, Any]) -> Any:
    from agentload.sim.calibration.probe import ProbePlan

    plan = ProbePlan.quick() if a["quick"] else ProbePlan(repeats=a["repeats"])
    if a["warmup"] is not None:
        plan.warmup_s = a["warmup"]
    return plan


def _probe_errors() -> tuple[type[Exception], ...]:
    """A server that failed (not the user's input): exit code 1."""
    from agentload.sim.calibration.stream import ProbeError

    return (ProbeError, OSError, RuntimeError)


FIDELITY_OPTIONS = [
    Opt("real", ("--real",), str | None, "The real server's OpenAI base URL.", SERVER,
        metavar="URL"),
    Opt("model", ("--model",), str | None, "Model name on the real server.", SERVER),
    Opt("api_key", ("--api-key",), str | None,
        "Bearer key for the real server (default: $AGENTLOAD_API_KEY).", SERVER, metavar="KEY"),
    Opt("pool", ("--pool",), list[Path],
        "Instead of measuring: combine results this command wrote (-o) for one profile, one "
        "per server start, replica or day (repeat it), into one comparison against the median "
        "of their real servers, each result one vote.", SERVER, [], metavar="RESULT_JSON"),
    Opt("profile", ("--profile",), str | None, "Profile to check: a built-in name or a file.",
        PROBE, metavar="NAME|FILE"),
    Opt("tokenizer", ("--tokenizer",), str | None,
        "The model's tokenizer.json, for exact prompt lengths and for the simulator's token "
        "counts (recommended).", PROBE, metavar="FILE"),
    Opt("workload", ("--workload", "-w"), list[str],
        "Only these workloads (repeatable): prefill-heavy, decode-heavy, shared-prefix, "
        "concurrent.", PROBE, [], metavar="NAME"),
    Opt("seed", ("--seed",), int | None, "Prompt salt (default: the time).", PROBE, metavar="N"),
    Opt("passes", ("--passes",), int,
        "Run every workload N times on both sides and compare medians; the table then shows "
        "how far the real server moved between passes.", PROBE, 1, metavar="N", min=1),
    Opt("warmup", ("--warmup",), float, "Seconds of the workloads on the real server first, "
        "recorded nothing: a freshly started vLLM runs its first minute or so slower.",
        PROBE, 0.0, metavar="S", min=0),
    Opt("out", ("--out", "-o"), Path | None, "Also write the result as JSON here.", OUT,
        metavar="FILE"),
    Opt("as_json", ("--json",), bool, "Print the result as JSON on stdout.", OUT, False),
    Opt("quiet", ("--quiet", "-q"), bool, "No progress lines on stderr.", OUT, False),
]  # fmt: skip


@sim_app.command("fidelity")
@command_options(FIDELITY_OPTIONS)
def fidelity_command(**a: Any) -> None:
    """Run fixed workloads (prefill-heavy, decode-heavy, shared-prefix, concurrent) against the
    real server and against a simulator with PROFILE, and print the simulator's error on TTFT
    p50/p90, mean TPOT and ITL, output throughput and tokens per chunk, with a note on a TTFT
    percentile that lies between bands of TTFTs a prefill apart. --pool combines results of
    several server starts or replicas. Exit code 0 when TTFT and TPOT are within 10 % on every
    workload, 3 when not."""
    from agentload.sim.calibration.fidelity import WORKLOADS, fidelity, table
    from agentload.sim.calibration.stream import Target
    from agentload.sim.profiles import load_profile

    say = _say(a["quiet"])
    if a["pool"]:
        _show_fidelity(_pooled(a), a["out"], a["as_json"], table)
        return
    missing = [f for f, k in (("--real", "real"), ("--model", "model"), ("--profile", "profile"))
               if not a[k]]  # fmt: skip
    if missing:
        raise _fail("fidelity", f"give {', '.join(missing)} (or --pool RESULT_JSON ...)", 2)
    _check_file("fidelity", "--tokenizer", a["tokenizer"])
    try:
        prof = load_profile(a["profile"])
    except ValueError as exc:
        raise _fail("fidelity", f"--profile: {exc}", 2) from None
    by_name = {w.name: w for w in WORKLOADS}
    unknown = [w for w in a["workload"] if w not in by_name]
    if unknown:
        known = ", ".join(by_name)
        raise _fail("fidelity", f"--workload: unknown {unknown[0]!r} (known: {known})", 2)
    if not prof.calibrated:
        say(f"fidelity: profile {prof.name!r} is not calibrated (an estimate)")
    key = a["api_key"] or os.environ.get("AGENTLOAD_API_KEY")
    try:
        result = asyncio.run(
            fidelity(
                Target(a["real"], a["model"], api_key=key),
                a["profile"],
                tokenizer=a["tokenizer"],
                workloads=[by_name[w] for w in a["workload"]] or None,
                say=say,
                seed=a["seed"],
                passes=a["passes"],
                warmup_s=a["warmup"],
            )
        )
    except _probe_errors() as exc:
        raise _fail("fidelity", str(exc), 1) from None
    _show_fidelity(result, a["out"], a["as_json"], table)


def _pooled(a: dict[str, Any]) -> dict[str, Any]:
    from agentload.sim.calibration.fidelity import pool

    measuring = [flag for flag, given in (
        ("--real", a["real"]), ("--model", a["model"]), ("--api-key", a["api_key"]),
        ("--profile", a["profile"]), ("--tokenizer", a["tokenizer"]),
        ("--workload", a["workload"]), ("--seed", a["seed"] is not None),
        ("--passes", a["passes"] != 1), ("--warmup", a["warmup"] != 0),
    ) if given]  # fmt: skip
    if measuring:
        raise _fail(
            "fidelity",
            f"--pool combines results already measured: drop {', '.join(measuring)}",
            2,
        )
    results = []
    for path in a["pool"]:
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
    from agentload.sim.calibration.calibrate import first_pass_hint, pace_text
    from agentload.sim.calibration.fidelity import GOAL

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
