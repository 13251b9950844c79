"""Memory and time of reading public trace files for replay.

ShareGPT: writes a pretty-printed JSON array in ShareGPT_V3's shape (`{id, conversations:
[{from, value}]}`, text of realistic lengths) of about `--sharegpt-mb` MB, then, each in a
fresh interpreter, measures the peak resident memory (ru_maxrss) and the time of
(a) `index_dataset` (what `dataset validate` and `replay` do: the streamed array scan, every
conversation checked, one span kept each), (b) `dataset stats` (every conversation parsed
once more, token estimates), and (c) for contrast, `orjson.loads` of the whole file. The
figure reported is the growth over the interpreter's memory after imports.

Mooncake: writes a trace of `--mooncake-rows` rows shaped like the FAST'25 conversation trace
(a shared first block, ~12k-token prompts, 3 s between groups of requests) and measures the
index and the time to build prompts from hash ids.

    .venv/bin/python benchmarks/trace_files.py --sharegpt-mb 200 --mooncake-rows 20000

Results: benchmarks/README.md, "Trace files".
"""

from __future__ import annotations

import argparse
import json
import random
import subprocess
import sys
import tempfile
from pathlib import Path

_WORD_TEXT = (
    "the model answers each question with care and the user asks again about cache "
    "memory prefix tokens server engine batch latency request stream output python code"
)
WORDS = _WORD_TEXT.split()

PROBE = """
import json, resource, sys, time
from pathlib import Path
import orjson
from agentload.workloads.dataset import index_dataset
from agentload.workloads.dataset_tools import dataset_stats
path, what = Path(sys.argv[1]), sys.argv[2]
base = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
t = time.perf_counter()
if what == "index":
    ds = index_dataset(path)
    out = {"conversations": len(ds.spans), "client_turns": ds.client_turns}
elif what == "stats":
    doc = dataset_stats(path)
    out = {"conversations": doc["conversations"], "client_turns": doc["client_turns"]}
elif what == "loads":
    out = {"conversations": len(orjson.loads(path.read_bytes()))}
elif what == "prompts":
    ds = index_dataset(path)
    t = time.perf_counter()
    n = 0
    for cid in ds.ids:
        n += len(ds.load(cid).turns[0].messages[0]["content"])
    out = {"prompts": len(ds.ids), "prompt_chars": n}
out["seconds"] = time.perf_counter() - t
out["peak_growth_mb"] = (resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - base) / 1024
out["baseline_mb"] = base / 1024
print(json.dumps(out))
"""


def text(rng: random.Random, words: int) -> str:
    return " ".join(rng.choices(WORDS, k=words))


def write_sharegpt(path: Path, megabytes: int) -> int:
    """A pretty-printed array (as ShareGPT_V3 is) written element by element."""
    rng = random.Random(0)
    n = 0
    with path.open("w") as f:
        f.write("[\n")
        while f.tell() < megabytes * 1e6:
            conv = []
            for _ in range(rng.randint(1, 6)):
                conv.append({"from": "human", "value": text(rng, rng.randint(5, 300))})
                conv.append({"from": "gpt", "value": text(rng, rng.randint(50, 600))})
            item = json.dumps({"id": f"c{n}_0", "conversations": conv}, indent=2)
            f.write((",\n" if n else "") + "  " + item.replace("\n", "\n  "))
            n += 1
        f.write("\n]\n")
    return n


def write_mooncake(path: Path, rows: int) -> int:
    rng = random.Random(0)
    next_id = 1
    with path.open("w") as f:
        for i in range(rows):
            n_in = int(min(120_000, rng.lognormvariate(9.0, 0.8)))
            blocks = -(-n_in // 512)
            ids = [0, *range(next_id, next_id + blocks - 1)]
            next_id += blocks - 1
            row = {"timestamp": (i // 10) * 3000, "input_length": n_in}
            row |= {"output_length": rng.randint(1, 900), "hash_ids": ids}
            f.write(json.dumps(row) + "\n")
    return rows


def probe(path: Path, what: str) -> dict[str, float]:
    r = subprocess.run(
        [sys.executable, "-c", PROBE, str(path), what], capture_output=True, text=True, check=True
    )
    return json.loads(r.stdout)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--sharegpt-mb", type=int, default=200)
    ap.add_argument("--mooncake-rows", type=int, default=20000)
    ap.add_argument("--skip-loads", action="store_true", help="skip the whole-file contrast")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as d:
        sg = Path(d) / "sharegpt.json"
        n = write_sharegpt(sg, args.sharegpt_mb)
        print(f"sharegpt: {sg.stat().st_size / 1e6:.0f} MB, {n} conversations", flush=True)
        for what in ("index", "stats", *(() if args.skip_loads else ("loads",))):
            print(f"  {what}: {probe(sg, what)}", flush=True)
        sg.unlink()
        mc = Path(d) / "trace.jsonl"
        write_mooncake(mc, args.mooncake_rows)
        print(f"mooncake: {mc.stat().st_size / 1e6:.1f} MB, {args.mooncake_rows} rows")
        for what in ("index", "prompts"):
            print(f"  {what}: {probe(mc, what)}", flush=True)


if __name__ == "__main__":
    main()
