"""What a generation request's answer is, token by token, and when its front end is over.

The behaviour for the caller's role says what the answer holds (`behaviour.py`); this turns it
into the tokens the engine emits, picks the seeded randomness the answer follows, places a
mid-stream fault, and draws the request's front-end time.
"""

from __future__ import annotations

import math
import random
import statistics
from collections.abc import Mapping
from typing import Any

from agentload.sim.behaviour import ResponsePlan
from agentload.sim.coalesce import van_der_corput
from agentload.sim.frames import CONTENT, HIDDEN, REASONING, TOOL_ARGS, TOOL_HEADER, Item
from agentload.sim.profiles import Profile
from agentload.sim.seeding import stable_digest
from agentload.sim.tokenizer import split_pieces
from agentload.wire import EPISODE_HEADER, ROLE_HEADER, SESSION_HEADER


def plan_items(
    plan: ResponsePlan, thinking: bool, rng: random.Random
) -> tuple[list[Item], list[str]]:
    """The token sequence of a plan: what each generated token shows on the wire."""
    items: list[Item] = []
    ids: list[str] = []
    if plan.reasoning:
        items.extend((REASONING, piece, 0) for piece in split_pieces(plan.reasoning))
    if thinking:
        items.append((HIDDEN, "</think>", 0))
        items.append((HIDDEN, "\n\n", 0))
    if plan.content:
        items.extend((CONTENT, piece, 0) for piece in split_pieces(plan.content))
    for i, call in enumerate(plan.tool_calls):
        opening = split_pieces(f'<tool_call>\n{{"name": "{call.name}", "arguments": ')
        items.extend((HIDDEN, "", i) for _ in range(max(0, len(opening) - 1)))
        items.append((TOOL_HEADER, call.name, i))
        items.extend((TOOL_ARGS, piece, i) for piece in split_pieces(call.arguments))
        items.extend((HIDDEN, "", i) for _ in split_pieces("}\n</tool_call>"))
        ids.append(f"chatcmpl-tool-{rng.getrandbits(64):016x}")
    return items, ids


def fault_index(items: list[Item], after: int) -> int:
    """Index of the token at which a mid-stream fault strikes: after `after` tokens that show
    on the wire. Hidden tokens (a tool-call parser's `<tool_call>` opening, `</think>`) do not
    count, so a client always sees `after` tokens first, tool-call answers included."""
    if after <= 0:
        return 0
    seen = 0
    for i, (kind, _, _) in enumerate(items):
        if kind != HIDDEN:
            seen += 1
            if seen == after:
                return i + 1
    return len(items)


def answer_rng(
    seed: int,
    body: Mapping[str, Any],
    parts: list[str],
    headers: Mapping[str, str],
    counter: int,
) -> random.Random:
    """The randomness an answer follows: the request's own seed (or temperature 0) with its
    prompt; else the call's place in its episode; else the request counter."""
    temperature = body.get("temperature")
    if body.get("seed") is not None or temperature == 0:
        return random.Random(stable_digest(str(seed), str(body.get("seed")), *parts))
    if key := headers.get(EPISODE_HEADER) or headers.get(SESSION_HEADER):
        # Keyed by the call's place in its episode, not by arrival order: concurrent
        # episodes interleave differently in every run, and a seeded run repeats.
        return random.Random(
            stable_digest(
                str(seed),
                key,
                headers.get(ROLE_HEADER) or "",
                str(len(body.get("messages") or ())),
            )
        )
    return random.Random(stable_digest(str(seed), str(counter)))


_NORMAL = statistics.NormalDist()


def request_overhead(p: Profile, n: int) -> float:
    """The fixed part of the n-th request's front end (n >= 0): lognormal, with median
    `request_overhead_s` and sigma `request_overhead_sigma`. Its quantile is the n-th point of
    the base-3 van der Corput sequence, so a run is reproducible, any 3^k consecutive requests
    cover the distribution evenly, and the draw is independent of the base-2 one that holds a
    stream's first token (coalesce.py)."""
    if p.request_overhead_sigma <= 0:
        return p.request_overhead_s
    z = _NORMAL.inv_cdf(van_der_corput(n + 1, 3))
    return p.request_overhead_s * math.exp(p.request_overhead_sigma * z)
