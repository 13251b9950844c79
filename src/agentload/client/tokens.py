"""Token counting when the server reports no usage.

Counts made here are estimates and every record that uses one says so
(`tokens_estimated: true`). Two counters:

- `HeuristicCounter`: about one token per four characters of English text (the usual rule
  of thumb for BPE vocabularies of 32k-200k entries), never fewer than one token per
  whitespace-separated word piece / 1.3, plus a small per-message overhead for chat markers.
- `TokenizerJsonCounter`: an exact count with a local Hugging Face `tokenizer.json`
  (needs the optional `tokenizers` package; no download is ever attempted).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any, Protocol

import orjson

# Role markers, separators and the assistant prefix a chat template adds per message.
MESSAGE_OVERHEAD_TOKENS = 4


class TokenCounter(Protocol):
    estimated: bool

    def count(self, text: str) -> int: ...


class HeuristicCounter:
    """≈ 4 characters per token; cheap and deterministic."""

    estimated = True

    def count(self, text: str) -> int:
        if not text:
            return 0
        by_chars = (len(text) + 3) // 4
        by_words = int(len(text.split()) / 1.3)
        return max(1, by_chars, by_words)


class TokenizerJsonCounter:
    """Exact counts from a local `tokenizer.json`."""

    estimated = True  # still not the server's own count: its chat template is unknown

    def __init__(self, path: str | Path) -> None:
        try:
            from tokenizers import Tokenizer
        except ImportError as e:  # pragma: no cover - depends on the install
            raise RuntimeError(
                "a tokenizer.json was given but the 'tokenizers' package is not installed; "
                "pip install 'agentload[tokenizer]'"
            ) from e
        p = Path(path)
        if not p.is_file():
            raise FileNotFoundError(f"tokenizer file not found: {p}")
        self._tok = Tokenizer.from_file(str(p))

    def count(self, text: str) -> int:
        if not text:
            return 0
        return len(self._tok.encode(text, add_special_tokens=False).ids)


def message_text(message: Mapping[str, Any]) -> str:
    """All the text a chat template would render for one message."""
    parts: list[str] = []
    content = message.get("content")
    if isinstance(content, str):
        parts.append(content)
    elif isinstance(content, list):
        for p in content:
            if isinstance(p, dict) and isinstance(p.get("text"), str):
                parts.append(p["text"])
    elif content is not None:
        parts.append(orjson.dumps(content).decode())
    for tc in message.get("tool_calls") or ():
        fn = tc.get("function") or {}
        parts.append(str(fn.get("name", "")))
        args = fn.get("arguments", "")
        parts.append(args if isinstance(args, str) else orjson.dumps(args).decode())
    for key in ("reasoning_content", "reasoning"):
        if isinstance(message.get(key), str):
            parts.append(message[key])
    return "\n".join(parts)


def count_prompt_tokens(
    counter: TokenCounter,
    messages: Iterable[Mapping[str, Any]],
    tools: Sequence[Mapping[str, Any]] | None = None,
) -> int:
    n = 0
    for m in messages:
        n += counter.count(message_text(m)) + MESSAGE_OVERHEAD_TOKENS
    if tools:
        n += counter.count(orjson.dumps(tools).decode())
    return n
