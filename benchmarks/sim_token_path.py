"""The simulator's CPU per streamed token, in process, without sockets or the engine's clock.

Builds one simulator and drives its stream outputs' `token()` directly, as the engine's
emission loop does, into a transport that only counts bytes: what is left is the Python cost
of turning a token into bytes on the wire. Three paths:

- `chat`: a chat stream on a timed profile (events built at admission, one write per token);
- `gathered`: the same inside bursts of 16 tokens (the `instant` profile's path: events
  gathered per stream and written at the end of a burst, or of the answer);
- `completions`: a completions stream (the general path, every token rendered when it goes).

Each figure is the best of `--repeats` rounds of `--streams` streams of `--tokens` tokens (best
of: the shared machine's noise only ever adds). It runs against the simulator in `src/` or an
older copy with the previous layout (`PYTHONPATH=OLD/src python benchmarks/sim_token_path.py`),
so a change's cost per token can be compared side by side.

    python benchmarks/sim_token_path.py
    python benchmarks/sim_token_path.py --tokens 400 --streams 200 --repeats 7 --json out.json
"""

from __future__ import annotations

import argparse
import asyncio
import json
import time
from typing import Any

from agentload.sim.behaviour import ResponsePlan
from agentload.sim.engine import Seq
from agentload.sim.settings import SimConfig

try:  # the layout split by concern
    from agentload.sim.app import SimApp
    from agentload.sim.outputs import StreamOut
    from agentload.sim.plan import plan_items

    def _burst(sim: Any, on: bool) -> None:
        if on:
            sim.bursts.begin()
        else:
            sim.bursts.end()

except ImportError:  # the previous layout (one sim/server.py)
    from agentload.sim.server import (  # type: ignore[no-redef]
        SimApp,
        StreamOut,
        plan_items,
    )

    def _burst(sim: Any, on: bool) -> None:
        if on:
            sim._gather_begin()
        else:
            sim._gather_end()


BURST = 16
"""Tokens per stream in one burst of the `gathered` path."""


class _CountingTransport(asyncio.Transport):
    """Takes the bytes and counts them (no socket)."""

    def __init__(self) -> None:
        super().__init__()
        self.bytes = 0

    def write(self, data: Any) -> None:
        self.bytes += len(data)

    def is_closing(self) -> bool:
        return False

    def get_extra_info(self, name: str, default: Any = None) -> Any:
        return default


def _round(sim: Any, path: str, tokens: int, streams: int) -> float:
    """CPU seconds per token over one round."""
    rng = __import__("random").Random(1)
    words = " ".join(
        rng.choice(["the", "order", "is", "on", "its", "way", "today"]) for _ in range(tokens)
    )
    items, tool_ids = plan_items(ResponsePlan(content=words), False, rng)
    chat = path != "completions"
    outs = []
    for i in range(streams):
        out = StreamOut(
            sim,
            f"chatcmpl-{i:016x}",
            items,
            tool_ids,
            None,
            _CountingTransport(),
            chat=chat,
            include_usage=True,
            created=1,
        )
        seq = Seq(out.rid, 100, [], len(items), len(items), out, ignore_eos=False, arrival_t=0.0)
        seq.num_output = 0
        outs.append((out, seq))
    n = len(items)
    start = time.process_time()
    for index in range(n):
        if path == "gathered" and index % BURST == 0:
            _burst(sim, True)
        finish = "stop" if index == n - 1 else None
        for out, seq in outs:
            seq.num_output = index + 1
            out.token(seq, index, finish, 0.0)
        if path == "gathered" and (index % BURST == BURST - 1 or index == n - 1):
            _burst(sim, False)
    return (time.process_time() - start) / (n * streams)


async def _main(args: argparse.Namespace) -> dict[str, float]:
    sim = SimApp(SimConfig(port=0, profile="tiny-cpu"))
    result = {}
    for path in ("chat", "gathered", "completions"):
        best = min(_round(sim, path, args.tokens, args.streams) for _ in range(args.repeats))
        result[f"{path}_us_per_token"] = round(best * 1e6, 3)
    return result


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--tokens", type=int, default=400, help="tokens per stream")
    ap.add_argument("--streams", type=int, default=100)
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--json", help="also write the figures to this file")
    args = ap.parse_args()
    result = asyncio.run(_main(args))
    print(json.dumps(result, indent=2))
    if args.json:
        with open(args.json, "w") as f:
            json.dump(result, f, indent=2)


if __name__ == "__main__":
    main()
