"""The simulator's emission lag while long cold prompts arrive, with a real tokenizer.

With ``--tokenizer``, the simulator counts prompt tokens with a real ``tokenizer.json``. A
long prompt takes milliseconds to tokenise (about 0.9 ms per 1,000 tokens of a byte-level
BPE); done on the event loop, that time would hold up every stream's output and show as
emission lag. This keeps ``--streams`` streams decoding and sends a cold prompt of about
``--prompt-tokens`` tokens every ``--interval`` seconds, then reads the simulator's own
emission lag (how late each token left against its model time) over the window.

    python benchmarks/sim_tokenise.py                      # 16 streams, 8,000-token prompts
    python benchmarks/sim_tokenise.py --tokenizer tokenizer.json --prompt-tokens 30000

Without ``--tokenizer`` it trains a byte-level BPE tokenizer (8,192 entries) on generated
text first (a few seconds). Prints a JSON summary.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import sys
import tempfile
import time
import urllib.request
from typing import Any

MODEL = "bench"
WORDS = [
    "the",
    "flight",
    "booking",
    "agent",
    "checks",
    "reservation",
    "passenger",
    "baggage",
    "refund",
    "policy",
    "order",
    "return",
    "exchange",
    "item",
    "address",
    "payment",
    "card",
    "status",
    "delivered",
    "cancelled",
    "pending",
    "user",
    "wants",
    "to",
    "change",
    "seat",
    "upgrade",
    "cabin",
    "economy",
    "business",
    "membership",
    "gold",
    "silver",
]


def _text(rng: random.Random, words: int) -> str:
    return " ".join(
        rng.choice(WORDS) + (str(rng.randrange(1000)) if rng.random() < 0.2 else "")
        for _ in range(words)
    )


def _train_tokenizer(path: str) -> None:
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=8192, initial_alphabet=pre_tokenizers.ByteLevel.alphabet()
    )
    rng = random.Random(0)
    tok.train_from_iterator((_text(rng, 200) for _ in range(2000)), trainer)
    tok.save(path)


def _get(url: str) -> Any:
    with urllib.request.urlopen(url, timeout=10) as resp:
        return json.loads(resp.read())


async def _load(base: str, args: argparse.Namespace, words: int) -> dict[str, Any]:
    import aiohttp

    stop_at = time.monotonic() + args.warmup + args.duration
    stats = {"chunks": 0, "prompts": 0, "prompt_tokens": 0, "errors": 0}
    rng = random.Random(1)

    async def stream() -> None:
        body = {
            "model": MODEL,
            "messages": [{"role": "user", "content": "Stream, please."}],
            "max_tokens": 400,
            "ignore_eos": True,
            "stream": True,
        }
        while time.monotonic() < stop_at:
            async with session.post(f"{base}/chat/completions", json=body) as resp:
                if resp.status != 200:
                    stats["errors"] += 1
                    continue
                async for _ in resp.content.iter_any():
                    stats["chunks"] += 1

    async def prompts() -> None:
        while time.monotonic() < stop_at:
            text = _text(rng, words)  # fresh words: a cold prompt every time
            body = {"model": MODEL, "prompt": text, "max_tokens": 1}
            async with session.post(f"{base}/completions", json=body) as resp:
                data = await resp.json()
                if resp.status != 200:
                    stats["errors"] += 1
                else:
                    stats["prompts"] += 1
                    stats["prompt_tokens"] += data["usage"]["prompt_tokens"]
            await asyncio.sleep(args.interval)

    async with aiohttp.ClientSession() as session:
        await asyncio.gather(*(stream() for _ in range(args.streams)), prompts())
    return stats


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--tokenizer", help="tokenizer.json (default: train a byte-level BPE)")
    ap.add_argument("--streams", type=int, default=16, help="streams decoding throughout")
    ap.add_argument("--prompt-tokens", type=int, default=8000, help="about, per cold prompt")
    ap.add_argument("--interval", type=float, default=0.2, help="seconds between cold prompts")
    ap.add_argument("--warmup", type=float, default=3.0)
    ap.add_argument("--duration", type=float, default=15.0)
    ap.add_argument("--json", help="also write the summary to this file")
    ap.add_argument("--no-pin", action="store_true", help="do not pin sim and client to cores")
    args = ap.parse_args()

    sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "src"))
    from agentload.sim import SimConfig, SimProcess
    from agentload.sim.tokenizer import HFTokenizer

    with tempfile.TemporaryDirectory() as tmp:
        tokenizer = args.tokenizer
        if tokenizer is None:
            tokenizer = os.path.join(tmp, "tokenizer.json")
            _train_tokenizer(tokenizer)
        # Words per prompt for the asked token count, from this tokenizer on this text.
        sample = _text(random.Random(2), 2000)
        tok = HFTokenizer(tokenizer)
        per_word = tok.encode_parts([sample], 16)[0] / 2000
        words = max(1, round(args.prompt_tokens / per_word))
        started = time.perf_counter()
        tok.encode_parts([_text(random.Random(3), words)], 16)
        encode_ms = 1e3 * (time.perf_counter() - started)

        profile = os.path.join(tmp, "bench.yaml")
        with open(profile, "w") as f:
            # A small GPU's step: 10 ms plus 20 us per sequence, prefill at 50,000 tokens/s.
            f.write(
                "name: bench\nstep_overhead_s: 0.010\ndecode_seq_s: 2.0e-5\n"
                "prefill_token_s: 2.0e-5\nmax_num_seqs: 256\nmax_num_batched_tokens: 65536\n"
                "kv_blocks: 200000\nblock_size: 16\nmax_model_len: 131072\n"
            )
        config = SimConfig(
            port=0, model=MODEL, profile=profile, tokenizer=tokenizer, log_interval_s=5.0
        )
        with SimProcess(config, log_path=os.path.join(tmp, "sim.log")) as sim:
            if (os.cpu_count() or 1) >= 2 and sim.proc is not None and not args.no_pin:
                # The simulator on core 0, this client on core 1: neither preempts the other.
                os.sched_setaffinity(sim.proc.pid, {0})
                os.sched_setaffinity(0, {1})

            async def run() -> tuple[dict[str, Any], dict[str, Any]]:
                task = asyncio.create_task(_load(sim.base_url, args, words))
                await asyncio.sleep(args.warmup)
                await asyncio.to_thread(_get, f"{sim.url}/sim/stats?reset=1")
                await asyncio.sleep(args.duration)
                after = await asyncio.to_thread(_get, f"{sim.url}/sim/stats")
                return await task, after

            load, after = asyncio.run(run())
    summary = {
        "streams": args.streams,
        "pinned": not args.no_pin,
        "prompt_tokens_mean": load["prompt_tokens"] / max(1, load["prompts"]),
        "prompts": load["prompts"],
        "encode_ms_one_prompt": encode_ms,
        "errors": load["errors"],
        "emission_lag_p50_ms": 1e3 * after["emission_lag_p50_s"],
        "emission_lag_p99_ms": 1e3 * after["emission_lag_p99_s"],
        "emission_lag_p999_ms": 1e3 * after["emission_lag_p999_s"],
        "emission_lag_max_ms": 1e3 * after["emission_lag_max_s"],
        "tokens_in_lag_window": after["emitted_tokens"],
        "load_average_1m": os.getloadavg()[0],
    }
    print(json.dumps(summary, indent=2))
    if args.json:
        with open(args.json, "w") as f:
            json.dump(summary, f, indent=2)


if __name__ == "__main__":
    main()
