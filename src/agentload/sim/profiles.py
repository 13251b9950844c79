"""Engine timing profiles: the cost figures the simulator's step model uses.

Every figure is in seconds of model time (before ``--speedup``). See docs/simulator.md for the
equations and for the sources of the figures.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import orjson
import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError


class Profile(BaseModel):
    """Timing parameters of one simulated deployment (model + hardware)."""

    model_config = ConfigDict(extra="forbid")

    name: str = "custom"
    description: str = ""
    # step time = step_overhead_s + prefill_token_s * prefill tokens
    #           + decode_seq_s * decoding sequences
    #           + prefill_attention_s * (query, key) pairs attended by prefill tokens
    #           + decode_context_token_s * context tokens read by decoding sequences
    #           + decode_max_context_s * longest context among decoding sequences
    #           + decode_kv_token_s * distinct KV tokens read by decoding sequences
    #           + frontend_step_s if a request is in the front end during the step
    #           + idle_wake_per_s * min(idle seconds, idle_wake_cap_s) on a step after idle
    step_overhead_s: float = Field(default=0.0, ge=0)
    prefill_token_s: float = Field(default=0.0, ge=0)
    decode_seq_s: float = Field(default=0.0, ge=0)
    prefill_attention_s: float = Field(default=0.0, ge=0)
    decode_context_token_s: float = Field(default=0.0, ge=0)
    # × the longest context among the step's decoding sequences: engines whose decode cost
    # follows the longest sequence rather than the sum (measured on vLLM's CPU backend)
    decode_max_context_s: float = Field(default=0.0, ge=0)
    # × the KV tokens the step's decoding sequences read, a block shared by several of them
    # (a cached prefix) counted once: on a CPU, a shared block is read from cache after the
    # first sequence, distinct contexts each come from memory (measured on vLLM's CPU backend)
    decode_kv_token_s: float = Field(default=0.0, ge=0)
    # front end (HTTP, chat template, tokenisation) before a request reaches the queue
    request_overhead_s: float = Field(default=0.0, ge=0)
    frontend_token_s: float = Field(default=0.0, ge=0)
    # the fixed part of each request's front end is lognormal: request_overhead_s is its
    # median and this the sigma of its log (0: every request the same). On vLLM's CPU build
    # the busy front end's bounds fit sigma 0.24-0.34 within one server start (six starts),
    # so requests that finish together reach the queue in one step or over two, as there
    request_overhead_sigma: float = Field(default=0.0, ge=0, le=2)
    # added to every engine step that starts while a request is in the front end: a front end
    # that shares a CPU with the engine's scheduler slows its steps (measured on vLLM's CPU
    # backend, whose API server and engine core share the core its worker leaves free)
    frontend_step_s: float = Field(default=0.0, ge=0)
    # the first step after the engine idled for t seconds (model time) starts
    # idle_wake_s + idle_wake_per_s * min(t, idle_wake_cap_s) late. The constant is what an
    # idle engine pays that a busy one does not (on vLLM's CPU build a request arriving
    # beside decoding streams reached a step ~2 ms sooner than request_overhead_s on an
    # idle engine); the slope is an engine idle for seconds being slower still (0.6-4 ms
    # after 5 s, varying between server starts); the cap is the longest idle the
    # calibration measured
    idle_wake_s: float = Field(default=0.0, ge=0)
    idle_wake_per_s: float = Field(default=0.0, ge=0)
    idle_wake_cap_s: float = Field(default=5.0, ge=0)
    # output coalescing: chance that a token's event waits and leaves with the next one
    # (see agentload.sim.coalesce); grows with the number of running sequences
    coalesce_p: float = Field(default=0.0, ge=0, le=0.95)
    coalesce_per_seq: float = Field(default=0.0, ge=0, le=0.95)
    # a stream's first token held back (a front end that did not run when it came): the share
    # of streams that start held, and the chance that each later token extends the hold
    coalesce_first_p: float = Field(default=0.0, ge=0, le=1)
    coalesce_first_run: float = Field(default=0.0, ge=0, le=0.99)
    # engine defaults (CLI flags override them)
    max_num_seqs: int = Field(default=256, ge=1)
    max_num_batched_tokens: int = Field(default=8192, ge=1)
    kv_blocks: int = Field(default=16384, ge=1)
    block_size: int = Field(default=16, ge=1)
    max_model_len: int = Field(default=32768, ge=16)
    # Where the figures come from: `agentload sim calibrate` writes the engine, its version,
    # the probe, the fit's quality and the load of the machine; None for an estimate.
    calibration: dict[str, Any] | None = None

    @property
    def calibrated(self) -> bool:
        return self.calibration is not None


BUILTIN_PROFILES: dict[str, Profile] = {
    "instant": Profile(
        name="instant",
        description="No model time: each answer leaves in one write as soon as it is planned. "
        "For measuring a client's own capacity.",
        max_num_seqs=4096,
        max_num_batched_tokens=1 << 20,
        kv_blocks=1 << 20,
        block_size=16,
        max_model_len=131072,
    ),
    "tiny-cpu": Profile(
        name="tiny-cpu",
        description="A small model served by vLLM's CPU backend on 2 cores; fitted to measured "
        "TTFT (cold and cached) and single-stream decode speed.",
        step_overhead_s=0.002,
        prefill_token_s=4.6e-5,
        decode_seq_s=0.001,
        prefill_attention_s=5.4e-8,
        decode_context_token_s=5.4e-8,
        request_overhead_s=0.010,
        frontend_token_s=1.5e-6,
        max_num_seqs=256,
        max_num_batched_tokens=4096,
        kv_blocks=16384,
        block_size=128,
        max_model_len=32768,
    ),
    "llama-8b-h100": Profile(
        name="llama-8b-h100",
        description="Llama-3.1-8B-Instruct, BF16, one H100 80GB SXM, vLLM v1 defaults.",
        step_overhead_s=0.0055,
        prefill_token_s=3.5e-5,
        decode_seq_s=2.5e-5,
        prefill_attention_s=1.1e-9,
        decode_context_token_s=4.0e-8,
        request_overhead_s=0.002,
        frontend_token_s=2.0e-7,
        max_num_seqs=1024,
        max_num_batched_tokens=8192,
        kv_blocks=23000,
        block_size=16,
        max_model_len=131072,
    ),
    "llama-70b-4xh100": Profile(
        name="llama-70b-4xh100",
        description="Llama-3.1-70B-Instruct, BF16, four H100 80GB SXM with tensor parallelism 4, "
        "vLLM v1 defaults.",
        step_overhead_s=0.018,
        prefill_token_s=7.5e-5,
        decode_seq_s=8.0e-5,
        prefill_attention_s=1.4e-9,
        decode_context_token_s=2.5e-8,
        request_overhead_s=0.003,
        frontend_token_s=2.0e-7,
        max_num_seqs=1024,
        max_num_batched_tokens=8192,
        kv_blocks=25000,
        block_size=16,
        max_model_len=131072,
    ),
}


# libyaml's C loader when PyYAML has it: the shipped profiles are read at every CLI start.
_YAML_LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)

# Calibrated profiles shipped with agentload (written by `agentload sim calibrate`).
PROFILE_DIR = Path(__file__).parent / "profile_data"


def _load_shipped() -> None:
    for path in sorted(PROFILE_DIR.glob("*.yaml")):
        BUILTIN_PROFILES.setdefault(path.stem, load_profile(str(path)))


def profile_note(profile: Profile | str | dict[str, Any] | None, short: bool = False) -> str:
    """A few words on where a profile's figures come from (for help texts and reports);
    `short`: one word."""
    try:
        if isinstance(profile, dict):
            p = Profile.model_validate(profile)
        elif isinstance(profile, str):
            p = load_profile(profile)
        elif profile is None:
            return ""
        else:
            p = profile
    except ValueError:
        return ""
    if p.name == "instant":
        return "" if short else "no model time"
    cal = p.calibration
    if short:
        return "calibrated" if cal else "uncalibrated"
    if not cal:
        return "timing estimate, not calibrated"
    server = cal.get("server") or {}
    what = " ".join(str(x) for x in (server.get("engine"), server.get("version")) if x)
    when = str(cal.get("created", ""))[:10]
    return f"calibrated against {what or 'a server'}" + (f" on {when}" if when else "")


def load_profile(name_or_path: str) -> Profile:
    """A built-in profile by name, or a profile read from a YAML or JSON file.

    A file may name a built-in profile under ``base:`` and override some of its fields.
    """
    if name_or_path in BUILTIN_PROFILES:
        return BUILTIN_PROFILES[name_or_path].model_copy()
    path = Path(name_or_path)
    if not path.is_file():
        known = ", ".join(sorted(BUILTIN_PROFILES))
        raise ValueError(f"unknown profile {name_or_path!r}: not one of {known}, and no such file")
    try:
        text = path.read_text(encoding="utf-8")
        data: Any = (
            orjson.loads(text) if path.suffix == ".json" else yaml.load(text, Loader=_YAML_LOADER)
        )
    except (OSError, UnicodeDecodeError, orjson.JSONDecodeError, yaml.YAMLError) as exc:
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise ValueError(f"{path}: cannot read the profile: {first}") from None
    if not isinstance(data, dict):
        raise ValueError(f"{path}: a profile file must hold a mapping of profile fields")
    base_name = data.pop("base", None)
    merged: dict[str, Any] = {}
    if base_name is not None:
        if base_name not in BUILTIN_PROFILES:
            raise ValueError(f"{path}: base profile {base_name!r} is not a built-in profile")
        merged = BUILTIN_PROFILES[base_name].model_dump()
    merged.setdefault("name", path.stem)
    merged.update(data)
    try:
        return Profile.model_validate(merged)
    except ValidationError as exc:
        fields = "; ".join(
            f"{'.'.join(str(p) for p in e['loc']) or 'profile'}: {e['msg']}" for e in exc.errors()
        )
        raise ValueError(f"{path}: invalid profile: {fields}") from None


_load_shipped()
