"""What `agentload` imports: `--version`, `run --help`, and a small one-process run, each in a fresh
interpreter under `python -X importtime`.

Counts the modules imported (deterministic) and sums their import time (wall clock, noisy on
a loaded machine), in total and for `agentload.distributed` (the driver of runs over worker
processes, which a one-process run does not need). With `--baseline-src DIR` (the `src`
folder of another agentload tree, e.g. `git archive main src | tar -x -C /tmp/base`) the
same commands run on that code too, alternating round by round, for a paired comparison.

    python benchmarks/run_imports.py --rounds 5 --baseline-src /tmp/base/src

The run: one airline task, oracle agent and scripted user (no model call is needed, so the
figures are the harness's own), against a simulator started once for all rounds.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path
from typing import Any

from agentload.util import free_port


def importtime(cmd: list[str], src: str | None) -> dict[str, Any]:
    """Run `python -X importtime <cmd>`; the modules it imported and their self times."""
    env = dict(os.environ)
    if src is not None:
        env["PYTHONPATH"] = src + os.pathsep + env.get("PYTHONPATH", "")
    proc = subprocess.run(
        [sys.executable, "-X", "importtime", *cmd], capture_output=True, text=True, env=env
    )
    if proc.returncode != 0:
        raise SystemExit(f"{' '.join(cmd)} failed ({proc.returncode}): {proc.stderr[-500:]}")
    mods: dict[str, int] = {}
    for line in proc.stderr.splitlines():
        if not line.startswith("import time:") or "self [us]" in line:
            continue
        self_us, _cum, name = line[len("import time:") :].split("|")
        mods[name.strip()] = int(self_us)
    dist = {m: us for m, us in mods.items() if m.startswith("agentload.distributed")}
    return {
        "modules": len(mods),
        "import_ms": sum(mods.values()) / 1e3,
        "distributed_modules": len(dist),
        "distributed_ms": sum(dist.values()) / 1e3,
        "driver_imported": "agentload.distributed.driver" in mods,
    }


def start_sim() -> tuple[subprocess.Popen[bytes], str]:
    port = free_port()
    cmd = [sys.executable, "-m", "agentload", "sim", "--port", str(port), "--profile", "instant"]
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    url = f"http://127.0.0.1:{port}/v1"
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        try:
            urllib.request.urlopen(f"{url}/models", timeout=1).close()
            return proc, url
        except OSError:
            time.sleep(0.2)
    proc.kill()
    raise SystemExit("the simulator did not start within 60 s")


def run_cmd(url: str, out: Path) -> list[str]:
    return [
        "-m", "agentload", "run", "--base-url", url, "--model", "agentload-sim",
        "--tasks", "airline/000", "--agent", "oracle", "--user", "scripted",
        "--no-preflight", "--no-metrics", "--no-report", "-q", "--out", str(out),
    ]  # fmt: skip


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--baseline-src", help="src folder of the code to compare with")
    ap.add_argument("--json", action="store_true", help="print the raw figures as JSON")
    a = ap.parse_args()
    variants = {"current": None} | ({"baseline": a.baseline_src} if a.baseline_src else {})
    sim, url = start_sim()
    rows: dict[str, dict[str, list[dict[str, Any]]]] = {
        v: {"version": [], "help": [], "run": []} for v in variants
    }
    try:
        with tempfile.TemporaryDirectory() as tmp:
            for r in range(a.rounds):
                order = list(variants.items())
                if r % 2:
                    order.reverse()  # alternate which goes first
                for name, src in order:
                    rows[name]["version"].append(importtime(["-m", "agentload", "--version"], src))
                    rows[name]["help"].append(importtime(["-m", "agentload", "run", "--help"], src))
                    out = Path(tmp) / f"{name}-{r}"
                    rows[name]["run"].append(importtime(run_cmd(url, out), src))
    finally:
        sim.terminate()
        sim.wait(10)
    if a.json:
        print(json.dumps(rows, indent=2))
        return
    print(f"{a.rounds} rounds, load average {os.getloadavg()[0]:.1f}")
    print("variant   command  modules  import ms (median)  distributed modules / ms  driver")
    for name in variants:
        for what in ("version", "help", "run"):
            rs = rows[name][what]
            print(
                f"{name:9} {what:7} {statistics.median(x['modules'] for x in rs):8.0f} "
                f"{statistics.median(x['import_ms'] for x in rs):19.1f} "
                f"{statistics.median(x['distributed_modules'] for x in rs):10.0f} / "
                f"{statistics.median(x['distributed_ms'] for x in rs):6.1f}   "
                f"{any(x['driver_imported'] for x in rs)}"
            )


if __name__ == "__main__":
    main()
