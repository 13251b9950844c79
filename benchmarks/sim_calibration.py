"""The timing profiles' figures: cold and cached TTFT, and single-stream decode speed.

Steps the simulator's engine model directly (no HTTP, no clock), so the numbers are the model's
own; compare them with measurements of a real deployment when writing a profile.

    python benchmarks/sim_calibration.py
    python benchmarks/sim_calibration.py --profile my-profile.yaml --prompts 1000 4000
"""

from __future__ import annotations

import argparse
import random

from agentload.sim.engine import Engine, Seq
from agentload.sim.metrics import SimMetrics
from agentload.sim.profiles import BUILTIN_PROFILES, Profile, load_profile


class _Sink:
    def token(self, seq: Seq, index: int, finish: str | None, now: float) -> None:
        pass

    def aborted(self, seq: Seq | None) -> None:
        pass


def measure(profile: Profile, prompt: int, new_tokens: int = 50) -> dict[str, float]:
    """Model-time TTFT (cold, then the same prompt again) and decode ms/token."""
    metrics = SimMetrics(
        "calibration",
        block_size=profile.block_size,
        kv_blocks=profile.kv_blocks,
        prefix_caching=True,
    )
    engine = Engine(profile, metrics)
    rng = random.Random(prompt)
    hashes = [rng.getrandbits(62) for _ in range(prompt // profile.block_size)]
    out: dict[str, float] = {}
    for label in ("cold", "cached"):
        seq = Seq(label, prompt, hashes, new_tokens, new_tokens, _Sink(), ignore_eos=True)
        engine.add(seq)
        t = profile.request_overhead_s + profile.frontend_token_s * prompt
        ttft = None
        while not seq.finished:
            scheduled, dt = engine.schedule()
            t += dt
            engine.complete(scheduled, 0.0)
            if ttft is None and seq.num_output:
                ttft = t
        assert ttft is not None
        out[f"ttft_{label}_s"] = ttft
        out["decode_ms_per_token"] = 1e3 * (t - ttft) / (new_tokens - 1)
        out[f"cached_tokens_{label}"] = seq.cached_tokens
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument(
        "--profile",
        action="append",
        help="profile name or file (repeatable); default: the built-in ones",
    )
    ap.add_argument("--prompts", type=int, nargs="+", default=[2000, 8000, 30000])
    args = ap.parse_args()
    names = args.profile or [n for n in BUILTIN_PROFILES if n != "instant"]
    print(
        f"{'profile':<18} {'prompt':>7} {'cold TTFT':>10} {'cached TTFT':>12} "
        f"{'cached tok':>10} {'decode ms/tok':>14} {'tok/s':>7}"
    )
    for name in names:
        profile = load_profile(name)
        for prompt in args.prompts:
            if prompt + 50 > profile.max_model_len:
                continue
            r = measure(profile, prompt)
            print(
                f"{profile.name:<18} {prompt:>7} {r['ttft_cold_s']:>9.3f}s "
                f"{1e3 * r['ttft_cached_s']:>10.1f}ms {int(r['cached_tokens_cached']):>10} "
                f"{r['decode_ms_per_token']:>14.2f} {1e3 / r['decode_ms_per_token']:>7.0f}"
            )


if __name__ == "__main__":
    main()
