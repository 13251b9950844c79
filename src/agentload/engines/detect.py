"""What engine serves an address: vLLM, SGLang, the embedded simulator or something else.

Evidence, strongest first: the metric-name prefix of `/metrics` (`vllm:` or `sglang:`), the
simulator's `/version` (`"server": "agentload-sim"`), SGLang's `/get_server_info`, vLLM's
`/version`, and the `owned_by` of the served models. The version comes from `/version`
(vLLM) or `/get_server_info` (SGLang).
"""

from __future__ import annotations

import asyncio
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import aiohttp
import orjson

from agentload.client.safety import without_userinfo

ENGINES = ("vllm", "sglang", "agentload-sim", "other")
_METRIC_PREFIX = re.compile(r"^(vllm|sglang):", re.MULTILINE)


@dataclass
class Fetched:
    """One GET: the status and body, or the error that stopped it."""

    url: str
    status: int | None = None
    body: bytes = b""
    error: str | None = None

    @property
    def ok(self) -> bool:
        return self.status == 200

    def json(self) -> Any:
        try:
            return orjson.loads(self.body)
        except orjson.JSONDecodeError:
            return None

    def describe(self) -> str:
        """Why it failed, in a few words (`HTTP 404`, `cannot connect: ...`)."""
        if self.error:
            return self.error
        return f"HTTP {self.status}"


async def fetch(
    session: aiohttp.ClientSession,
    url: str,
    *,
    headers: Mapping[str, str] | None = None,
    timeout_s: float = 5.0,
) -> Fetched:
    """GET `url`; never raises for network or HTTP failures."""
    out = Fetched(url)
    target, headers = without_userinfo(url, headers)
    try:
        async with session.get(
            target, headers=headers, timeout=aiohttp.ClientTimeout(total=timeout_s)
        ) as resp:
            out.status = resp.status
            out.body = await resp.read()
    except TimeoutError:
        out.error = f"no answer within {timeout_s:g} s"
    except aiohttp.ClientConnectorError as e:
        out.error = f"cannot connect ({e.os_error.strerror or e})"
    except aiohttp.ClientError as e:
        out.error = f"{type(e).__name__}: {e}"
    except ValueError as e:  # e.g. a password in the URL and an Authorization header
        out.error = str(e)
    return out


@dataclass
class ServerIdentity:
    engine: str  # one of ENGINES
    version: str | None
    evidence: str  # what the engine was recognised by
    metrics: Fetched  # the GET of <root>/metrics (reused to derive the metrics URL)

    @property
    def metrics_ok(self) -> bool:
        """`/metrics` answered with a Prometheus exposition."""
        return self.metrics.ok and is_exposition(self.metrics.body)

    def to_dict(self) -> dict[str, Any]:
        return {"engine": self.engine, "version": self.version, "evidence": self.evidence}


def is_exposition(body: bytes) -> bool:
    """Whether a body looks like Prometheus text (not a gateway's 200 HTML page)."""
    return b"# TYPE" in body or b"# HELP" in body


def metrics_engine(text: str) -> str | None:
    m = _METRIC_PREFIX.search(text)
    return m.group(1) if m else None


async def detect_server(
    session: aiohttp.ClientSession,
    root: str,
    *,
    owned_by: Sequence[str] = (),
    timeout_s: float = 5.0,
    headers: Mapping[str, str] | None = None,
) -> ServerIdentity:
    """Identify the server at `root` (`scheme://host:port`); never raises."""
    version, info, metrics = await asyncio.gather(
        fetch(session, f"{root}/version", headers=headers, timeout_s=timeout_s),
        fetch(session, f"{root}/get_server_info", headers=headers, timeout_s=timeout_s),
        fetch(session, f"{root}/metrics", headers=headers, timeout_s=timeout_s),
    )
    vjson = version.json() if version.ok else None
    vjson = vjson if isinstance(vjson, dict) else {}
    ijson = info.json() if info.ok else None
    ijson = ijson if isinstance(ijson, dict) else {}
    by_metrics = (
        metrics_engine(metrics.body[:200_000].decode("utf-8", "replace")) if metrics.ok else None
    )
    engine, evidence = "other", "no engine-specific endpoint answered"
    if vjson.get("server") == "agentload-sim":
        engine, evidence = "agentload-sim", "/version"
    elif by_metrics:
        engine, evidence = by_metrics, f"{by_metrics}: metric names on /metrics"
    elif ijson.get("version") is not None:
        engine, evidence = "sglang", "/get_server_info"
    elif vjson.get("version") is not None:
        engine, evidence = "vllm", "/version"
    else:
        owners = {o.lower() for o in owned_by}
        for name in ("vllm", "sglang"):
            if name in owners:
                engine, evidence = name, f"owned_by {name} in /v1/models"
                break
    ver: Any = None
    if engine in ("vllm", "agentload-sim"):
        ver = vjson.get("version")
    elif engine == "sglang":
        ver = ijson.get("version") or vjson.get("version")
    return ServerIdentity(engine, None if ver is None else str(ver), evidence, metrics)
