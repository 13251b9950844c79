"""Secrets at rest: the one place that decides what is a secret and how it is hidden.

Three layers, all used before anything reaches the results folder:

- `redact(obj)`: values under secret-looking keys (`api_key`, `Authorization`, `*_token`,
  `password`, ...) become `<redacted>`; every string has its URL userinfo and `Bearer` tokens
  masked. Used for config.yaml, run.json and summary.json.
- `redact_argv(argv)`: the saved command line (`--api-key X`, `--api-key=X`,
  `--extra-body '{"api_key": ...}'`, `-H 'Authorization: Bearer ...'`, URLs with a password).
- `Scrubber`: the known secret *values* of a run (`endpoint_secrets`: the key read from the
  environment, named or the implicit OPENAI_API_KEY; secret headers and extra-body values;
  URL passwords; any configured value that `redact_text` would mask), replaced wherever they
  appear in a record, e.g. in a reply where a server echoed the key back. The results
  folder's recorder holds one and passes every line, config.yaml and run.json through it.

`*_env` keys name an environment variable and are kept: the name is not the secret.
"""

from __future__ import annotations

import base64
import os
import re
from collections.abc import Iterable, Mapping
from typing import Any
from urllib.parse import unquote, urlsplit

import orjson

DEFAULT_KEY_ENV = "OPENAI_API_KEY"
"""The variable a client takes its key from when none is named (as OpenAI's clients do);
a secret wherever it appears."""

REDACTED = "<redacted>"

_SECRET_KEY = re.compile(
    r"(^|[-_])(authorization|cookie|token|bearer|auth)$"
    r"|api[-_]?key|access[-_]?token|refresh[-_]?token|secret|passw(or)?d|credential"
    r"|private[-_]?key|session[-_]?key",
    re.I,
)
# scheme://user[:password]@host -> scheme://***@host
_USERINFO = re.compile(r"(?i)\b([a-z][a-z0-9+.-]*://)[^/\s@'\"]+@")
_BEARER = re.compile(r"(?i)\b(bearer)\s+[A-Za-z0-9._~+/=-]{4,}")
# `api_key=abc`, `"token": "abc"` inside free text (a server quoting a request back), and
# OpenAI-style keys (`sk-...`, `sk-proj-...`) wherever they appear.
_KEY_VALUE = re.compile(
    r"(?i)\b(api[_-]?key|access[_-]?token|token|secret|passw(?:or)?d)"
    r"([\"']?\s*[:=]\s*[\"']?)[^\s\"',;}&]+"
)
_OPENAI_KEY = re.compile(r"\bsk-[A-Za-z0-9_-]{8,}")
# agentload's own configuration fields that look like secrets but are not: a saved
# config.yaml must keep them, or --resume cannot load it back.
_OWN_FIELDS = frozenset({"first_token"})  # timeouts.first_token, seconds
# Values shorter than this are not scrubbed as known secrets: "abc" would mangle records.
MIN_SECRET_LEN = 4
# Keys that local OpenAI-compatible servers document as "any value will do" (vLLM's EMPTY,
# llama.cpp's sk-no-key-required, ...): not secrets, and replacing every "EMPTY" or "dummy"
# in replies and tool data would only mangle the records.
PLACEHOLDER_KEYS = frozenset(
    {"empty", "none", "null", "dummy", "token-abc123", "sk-no-key-required", "ollama",
     "lm-studio", "not-needed", "no-key", "fake", "test"}
)  # fmt: skip


def is_secret_key(key: str) -> bool:
    """Whether a mapping key (config field, header, extra-body key) holds a secret."""
    k = key.strip()
    if k.lower().endswith("_env"):  # the name of an environment variable, not its value
        return False
    if k in _OWN_FIELDS:
        return False
    return bool(_SECRET_KEY.search(k))


def redact_text(text: str) -> str:
    """URL userinfo, `Bearer` credentials, `api_key=...`-style pairs and `sk-...` keys masked
    inside free text."""
    if "@" in text:
        text = _USERINFO.sub(r"\1***@", text)
    if "earer" in text or "EARER" in text:
        text = _BEARER.sub(lambda m: f"{m.group(1)} {REDACTED}", text)
    if "sk-" in text:
        text = _OPENAI_KEY.sub(REDACTED, text)
    if ":" in text or "=" in text:
        text = _KEY_VALUE.sub(lambda m: f"{m.group(1)}{m.group(2)}{REDACTED}", text)
    return text


def redact_url(url: str) -> str:
    """`http://user:pass@host/v1` -> `http://***@host/v1`."""
    return redact_text(url)


def redact(obj: Any) -> Any:
    """A copy of `obj` with secret-looking keys' values replaced and strings cleaned."""
    if isinstance(obj, Mapping):
        out: dict[Any, Any] = {}
        for k, v in obj.items():
            if isinstance(k, str) and is_secret_key(k) and v not in (None, ""):
                out[k] = REDACTED
            else:
                out[k] = redact(v)
        return out
    if isinstance(obj, list | tuple):
        return [redact(v) for v in obj]
    if isinstance(obj, str):
        return redact_text(obj)
    return obj


def _redact_json_arg(value: str) -> str:
    try:
        parsed = orjson.loads(value)
    except orjson.JSONDecodeError:
        # Not JSON: mask anything shaped like "secret_key": "value" all the same.
        return re.sub(
            r"""(?i)(["']?[\w-]*(?:api[-_]?key|token|secret|passw(?:or)?d|authorization)["']?"""
            r"""\s*[:=]\s*)("[^"]*"|'[^']*'|[^\s,}]+)""",
            rf"\1{REDACTED}",
            redact_text(value),
        )
    if isinstance(parsed, dict | list):
        return orjson.dumps(redact(parsed)).decode()
    return redact_text(value)


def _redact_header_arg(value: str) -> str:
    name, sep, _ = value.partition(":")
    if sep and is_secret_key(name):
        return f"{name}: {REDACTED}"
    return redact_text(value)


def redact_argv(argv: Iterable[str]) -> list[str]:
    """The command line with secret option values, headers, JSON bodies and URLs masked."""
    out: list[str] = []
    pending: str | None = None  # the option whose value is the next argument
    for arg in argv:
        arg = str(arg)
        if pending is not None:
            out.append(_redact_value(pending, arg))
            pending = None
            continue
        if arg.startswith("-") and "=" in arg:
            name, _, value = arg.partition("=")
            out.append(f"{name}={_redact_value(name, value)}")
            continue
        if arg.startswith("-") and len(arg) > 1 and not arg[1:2].isdigit():
            pending = arg
            out.append(arg)
            continue
        # A positional argument or a flag without value: only URLs / bearer tokens.
        out.append(_redact_positional(arg))
    return out


def _redact_positional(arg: str) -> str:
    if arg.lstrip().startswith(("{", "[")):
        return _redact_json_arg(arg)
    name, sep, _ = arg.partition(":")
    if sep and is_secret_key(name) and " " not in name:
        return _redact_header_arg(arg)
    return redact_text(arg)


def _redact_value(option: str, value: str) -> str:
    name = option.lstrip("-")
    if name.lower().endswith("-env") or name.lower().endswith("_env"):
        return value  # an environment variable's name
    if is_secret_key(name.replace("-", "_")):
        return REDACTED if value else value
    if name in ("H", "header", "headers"):
        return _redact_header_arg(value)
    if value.lstrip().startswith(("{", "[")):
        return _redact_json_arg(value)
    return _redact_positional(value)


def redact_meta(meta: Mapping[str, Any]) -> dict[str, Any]:
    """run.json content: the saved command line by `redact_argv`, the rest by `redact`."""
    out = dict(meta)
    if isinstance(out.get("command"), list | tuple):
        out["command"] = redact_argv(out["command"])
    return redact(out)


# ---- known secret values -------------------------------------------------------------------


def _leaf_secrets(obj: Any, secret: bool = False) -> Iterable[str]:
    if isinstance(obj, Mapping):
        for k, v in obj.items():
            yield from _leaf_secrets(v, secret or (isinstance(k, str) and is_secret_key(k)))
    elif isinstance(obj, list | tuple):
        for v in obj:
            yield from _leaf_secrets(v, secret)
    elif secret and isinstance(obj, str | int) and not isinstance(obj, bool):
        yield str(obj)


def text_secrets(text: str) -> Iterable[str]:
    """The parts of `text` that `redact_text` masks (a URL's userinfo, a `Bearer` token, an
    `sk-...` key, the value of `api_key=...`): a value the saved configuration hides is also
    a value to scrub from every record, wherever the run sent it."""
    for m in _USERINFO.finditer(text):
        yield from _url_secrets(text[m.start() : m.end()] + "h")
    for m in _BEARER.finditer(text):
        yield m.group(0).split(None, 1)[1]
    yield from _OPENAI_KEY.findall(text)
    for m in _KEY_VALUE.finditer(text):
        yield m.group(0)[m.end(2) - m.start() :]


def url_secrets(url: str | None) -> set[str]:
    """A URL's credentials in every form a server could echo them back (as written, decoded,
    and as an `Authorization: Basic` value); empty without `user:pass@`."""
    return {s for s in _url_secrets(url) if len(s) >= MIN_SECRET_LEN}


def _url_secrets(url: str | None) -> Iterable[str]:
    if not url:
        return
    try:
        parts = urlsplit(url)
    except ValueError:
        return
    if parts.password:
        yield parts.password  # as written (percent-encoded) and as sent
        yield unquote(parts.password)
    if "@" in parts.netloc:
        userinfo = parts.netloc.rpartition("@")[0]
        yield userinfo
        # as sent in an `Authorization: Basic` header, which a server may echo back
        yield base64.b64encode(unquote(userinfo).encode()).decode()


def _header_secrets(headers: Mapping[str, Any]) -> Iterable[str]:
    """The secret values in request headers that a server could echo back. A header named
    like a secret (Authorization, X-Api-Key, Cookie...): its whole value, its token without
    the scheme, and for Basic credentials the decoded pair and password. Any other header:
    the parts that look like a secret (`text_secrets`: a `Bearer` token, an `sk-...` key),
    the same ones config.yaml hides."""
    for name, value in headers.items():
        if not isinstance(value, str):
            continue
        if not is_secret_key(str(name)):
            yield from text_secrets(value)
            continue
        yield value
        scheme, _, token = value.partition(" ")
        if not token:
            continue
        yield token
        if scheme.lower() == "basic":
            try:
                pair = base64.b64decode(token, validate=True).decode()
            except (ValueError, UnicodeDecodeError):
                continue
            yield pair
            yield pair.partition(":")[2]


def _implicit_key_env() -> str:
    return DEFAULT_KEY_ENV


def endpoint_secrets(endpoint: Any, env: Mapping[str, str] | None = None) -> set[str]:
    """Secret values of one endpoint config (pydantic model or mapping), in every form a
    server could echo them back: the API key it sends (from the variable `api_key_env`
    names, or from OPENAI_API_KEY when it names none), secret headers, extra-body values,
    URL credentials, and any value elsewhere in it that looks like a secret. Values too short
    to be keys are left out."""
    env = os.environ if env is None else env
    d = endpoint.model_dump() if hasattr(endpoint, "model_dump") else dict(endpoint)
    found: set[str] = set()
    name = d.get("api_key_env") or _implicit_key_env()
    if env.get(name):
        found.add(env[name])
    found.update(_header_secrets(d.get("headers") or {}))
    found.update(_leaf_secrets(d.get("extra_body") or {}))
    rest = {k: v for k, v in d.items() if k not in ("headers",)}
    found.update(_leaf_secrets(rest))
    found.update(s for leaf in _leaf_strings(rest) for s in text_secrets(leaf))
    for key in ("base_url", "metrics_url"):
        found.update(_url_secrets(d.get(key)))
    for url in d.get("metrics_urls") or ():
        found.update(_url_secrets(url))
    return {
        s for s in found if len(s) >= MIN_SECRET_LEN and s.strip().lower() not in PLACEHOLDER_KEYS
    }


def _leaf_strings(obj: Any) -> Iterable[str]:
    if isinstance(obj, Mapping):
        for v in obj.values():
            yield from _leaf_strings(v)
    elif isinstance(obj, list | tuple):
        for v in obj:
            yield from _leaf_strings(v)
    elif isinstance(obj, str):
        yield obj


class Scrubber:
    """Replaces known secret values inside serialised records (bytes) or text."""

    def __init__(self, secrets: Iterable[str] = ()) -> None:
        self._values: list[bytes] = []
        self.add(secrets)

    def add(self, secrets: Iterable[str]) -> None:
        vals = set(self._values)
        for s in secrets:
            if not s or len(s) < MIN_SECRET_LEN or s == REDACTED:
                continue
            if s.strip().lower() in PLACEHOLDER_KEYS:
                continue
            vals.add(s.encode())
            # The same value as it appears inside a JSON string (escaped quotes, backslashes).
            vals.add(orjson.dumps(s)[1:-1])
        # Longest first, so a value containing another is replaced whole.
        self._values = sorted(vals, key=len, reverse=True)

    def __bool__(self) -> bool:
        return bool(self._values)

    def bytes(self, data: bytes) -> bytes:
        for v in self._values:
            if v in data:
                data = data.replace(v, REDACTED.encode())
        return data

    def text(self, text: str) -> str:
        return self.bytes(text.encode()).decode(errors="replace") if self._values else text


def redacted_paths(obj: Any, path: str = "") -> list[str]:
    """Dotted paths of the values `redact` replaced (the marker, or a URL's `***@`): a saved
    configuration with any of them cannot be sent to a server again as it stands."""
    if isinstance(obj, Mapping):
        return [
            p for k, v in obj.items() for p in redacted_paths(v, f"{path}.{k}" if path else str(k))
        ]
    if isinstance(obj, list | tuple):
        return [p for i, v in enumerate(obj) for p in redacted_paths(v, f"{path}[{i}]")]
    if isinstance(obj, str) and (obj == REDACTED or "://***@" in obj):
        return [path]
    return []
