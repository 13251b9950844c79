"""What every LLM call of a run carries besides its messages: stated in run.json (and so in
summary.json's `run.sampling`) so that a result says how it was sampled."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from agentload.client import EndpointConfig
from agentload.config import RunConfig, redact

SERVER_DEFAULT = "server default"


def sampling_block(
    cfg: RunConfig,
    endpoints: Mapping[str, EndpointConfig],
    max_tokens_by_role: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """Per role: max_tokens, temperature, seed and extra body fields, as sent.
    `max_tokens_by_role`: what the workload sends (a replay: each recorded answer's length)."""
    w = cfg.workload
    if w.request_seed == "none":
        seed: Any = "none (not sent)"
    elif w.request_seed == "episode":
        seed = "per episode (derived from workload.seed, task and trial)"
    else:
        seed = w.request_seed
    out: dict[str, Any] = {"request_seed": w.request_seed}
    for role, ep in endpoints.items():
        own = {"agent": w.agent_max_tokens, "user": w.user_max_tokens}
        max_tokens = (max_tokens_by_role if max_tokens_by_role is not None else own).get(role)
        temperature = w.temperature if w.temperature is not None else ep.temperature
        extra = dict(ep.extra_body)
        if w.chat_template_kwargs:
            extra["chat_template_kwargs"] = w.chat_template_kwargs
        out[role] = {
            "max_tokens": max_tokens if max_tokens is not None else ep.max_tokens,
            "temperature": SERVER_DEFAULT if temperature is None else temperature,
            "seed": seed,
            "stream": ep.stream,
            "extra_body": redact(extra),
        }
    return out


def describe(block: Mapping[str, Any]) -> str:
    """One console line: `agent max_tokens 1024, user max_tokens 256; temperature ...`."""
    roles = [r for r in block if r != "request_seed"]
    parts = [f"{r} max_tokens {block[r]['max_tokens'] or SERVER_DEFAULT}" for r in roles]
    temps = {str(block[r]["temperature"]) for r in roles}
    first = block[roles[0]] if roles else {}
    return (
        "requests: "
        + ", ".join(parts)
        + f"; temperature {', '.join(sorted(temps)) or SERVER_DEFAULT}"
        + f"; seed {first.get('seed', 'none')}"
    )
