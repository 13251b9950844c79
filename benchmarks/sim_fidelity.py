"""Calibrate the simulator against a real vLLM and measure how closely profiles reproduce it.

    python benchmarks/sim_fidelity.py --real-python .venv-real/bin/python --out fidelity-out
    python benchmarks/sim_fidelity.py --url http://127.0.0.1:8011 --tokenizer DIR/tokenizer.json

Without --url it builds the real-engine tier's tiny model (tests/real/tiny_model.py), starts
vLLM (CPU build) through agentload's launcher with the tier's arguments, and stops it at the
end. Then it runs `agentload sim calibrate` (profile written to OUT/NAME.yaml) and
`agentload sim fidelity` for that profile and for each --compare profile, recording the load
average around every step. Every command it runs is printed, so a run on a quiet machine
reproduces the table in docs/simulator.md.

    python benchmarks/sim_fidelity.py --real-python .venv-real/bin/python --starts 3 --out DIR

calibrates on three fresh server starts one after another (OUT/NAME-start1.yaml ..., each
with its probe kept), pools the three probes into OUT/NAME.yaml (`sim calibrate --pool`), and
measures fidelity on a fourth fresh start, which none of the probes saw.
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import subprocess
import sys
import time
from pathlib import Path

from agentload.engine_launch import LaunchConfig
from agentload.engines import EngineProcess, EngineSpec
from agentload.util import free_port

ROOT = Path(__file__).resolve().parent.parent
# The real-engine tier's server arguments (tests/real/conftest.py).
VLLM_ARGS = [
    "--max-model-len", "16384", "--dtype", "float32", "--enable-prefix-caching",
    "--enable-prompt-tokens-details", "--enable-auto-tool-choice", "--tool-call-parser",
    "hermes", "--enforce-eager",
]  # fmt: skip


def sh(cmd: list[str], log: Path) -> int:
    line = shlex.join(cmd)
    print(f"$ {line}", flush=True)
    t0 = time.monotonic()
    load = os.getloadavg()[0]
    r = subprocess.run(cmd, capture_output=True, text=True)
    with log.open("a") as f:
        f.write(f"$ {line}\n# load avg 1m before {load:.2f}, after {os.getloadavg()[0]:.2f}, ")
        f.write(f"{time.monotonic() - t0:.0f} s, exit {r.returncode}\n{r.stdout}{r.stderr}\n")
    print(r.stdout, r.stderr[-3000:], sep="\n", flush=True)
    return r.returncode


def start_vllm(python: str, out: Path, log: str = "vllm.log") -> tuple[EngineProcess, Path]:
    model = out / "tiny"
    if not (model / "config.json").is_file():
        subprocess.run(
            [python, str(ROOT / "tests/real/tiny_model.py"), str(model)], check=True, timeout=600
        )
    spec = EngineSpec(
        name="vllm",
        launch=LaunchConfig(
            engine="vllm",
            python=python,
            args=VLLM_ARGS,
            env={"VLLM_CPU_KVCACHE_SPACE": "1"},
            startup_timeout_s=600,
        ),
        model=str(model),
        served_model_name="tiny",
        port=free_port(),
        log_path=out / log,
        cache_dir=out / "vllm-cache",
    )
    proc = EngineProcess(spec).start()
    print(f"vLLM starting on {spec.base_url} (log {spec.log_path})", flush=True)
    proc.wait_ready()
    return proc, model / "tokenizer.json"


def server_args(ap: argparse.ArgumentParser) -> None:
    """The options that say which real vLLM to measure (this script's and round_end.py's)."""
    ap.add_argument("--real-python", help="interpreter with vLLM (to start one)")
    ap.add_argument("--url", help="use a vLLM already running here (http://host:port)")
    ap.add_argument("--model", default="tiny")
    ap.add_argument("--tokenizer", help="tokenizer.json (with --url)")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    server_args(ap)
    ap.add_argument("--out", type=Path, default=Path("sim-fidelity-out"))
    ap.add_argument("--repeats", type=int, default=5, help="probe repeats (calibrate --repeats)")
    ap.add_argument("--compare", action="append", default=[], help="more profiles to check")
    ap.add_argument("--name", default="vllm-cpu-tiny", help="name of the calibrated profile")
    ap.add_argument("--skip-calibrate", action="store_true")
    ap.add_argument(
        "--starts",
        type=int,
        default=1,
        metavar="N",
        help="with 2 or more: calibrate on N fresh server starts, pool their probes into one "
        "profile, and measure fidelity on one more fresh start (needs --real-python)",
    )
    ap.add_argument(
        "--passes",
        type=int,
        default=5,
        help="fidelity --passes: medians over N passes (one pass of 6-16 requests is a small "
        "sample on a real server that moves between minutes)",
    )
    ap.add_argument(
        "--fidelity-warmup",
        type=float,
        default=0.0,
        metavar="S",
        help="fidelity --warmup: seconds of the workloads on the real server first, recorded "
        "nothing (for --skip-calibrate on a freshly started server; the probe warms it otherwise)",
    )
    # vLLM's CPU build serves with these by default (vllm/engine/arg_utils.py) and /metrics
    # shows neither; give the server's own values with --url.
    ap.add_argument("--max-num-batched-tokens", type=int, default=2048)
    ap.add_argument("--max-num-seqs", type=int, default=128)
    args = ap.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    log = args.out / "commands.log"
    if args.starts > 1 and (args.url or not args.real_python or args.skip_calibrate):
        sys.exit("--starts needs --real-python (it starts the servers) and a calibration")
    agentload = [sys.executable, "-m", "agentload", "sim"]
    profile = args.out / f"{args.name}.yaml"

    def calibrate(base: str, tok: str | None, dest: Path) -> None:
        cmd = ["calibrate", "--base-url", base, "--model", args.model, "--repeats"]
        cmd += [str(args.repeats), "--max-num-batched-tokens", str(args.max_num_batched_tokens)]
        cmd += ["--max-num-seqs", str(args.max_num_seqs), "-o", str(dest)]
        if sh([*agentload, *cmd, *(["--tokenizer", tok] if tok else [])], log) != 0:
            sys.exit("calibration failed (see above)")

    if args.starts > 1:
        probes = []
        for k in range(1, args.starts + 1):
            proc, tok_path = start_vllm(args.real_python, args.out, f"vllm-start{k}.log")
            try:
                dest = args.out / f"{args.name}-start{k}.yaml"
                calibrate(proc.spec.base_url, str(tok_path), dest)
                probes += ["--pool", str(dest.with_name(dest.stem + ".probe.json"))]
            finally:
                proc.stop()
        cmd = [*agentload, "calibrate", *probes, "--tokenizer", str(tok_path)]
        cmd += ["--max-num-seqs", str(args.max_num_seqs), "-o", str(profile)]
        if sh(cmd, log) != 0:
            sys.exit("pooling the probes failed (see above)")
    proc = None
    if args.url:
        base, tok = args.url.rstrip("/") + "/v1", args.tokenizer
    else:
        if not args.real_python:
            sys.exit("give --real-python (an interpreter with vLLM) or --url")
        proc, tok_path = start_vllm(args.real_python, args.out)
        base, tok = proc.spec.base_url, str(tok_path)
    common = ["--model", args.model] + (["--tokenizer", tok] if tok else [])
    try:
        if not args.skip_calibrate and args.starts <= 1:
            calibrate(base, tok, profile)
        results = {}
        for p in [str(profile), *args.compare]:
            name = Path(p).stem
            if p != str(profile) and name == args.name:
                name += "-shipped"  # the built-in profile the new one would replace
            dest = args.out / f"fidelity-{name}.json"
            sh(
                [
                    *agentload,
                    "fidelity",
                    "--real",
                    base,
                    *common,
                    "--profile",
                    p,
                    "--passes",
                    str(args.passes),
                    "--warmup",
                    str(args.fidelity_warmup),
                    "-o",
                    str(dest),
                ],
                log,
            )
            if dest.is_file():
                results[name] = json.loads(dest.read_text())
        (args.out / "summary.json").write_text(json.dumps(results, indent=2))
    finally:
        if proc is not None:
            proc.stop()


if __name__ == "__main__":
    main()
