"""Message normalisation for servers whose chat templates cannot take OpenAI's full shape."""

from __future__ import annotations

import copy
from collections.abc import Iterable, Mapping
from typing import Any

import orjson


def _flatten(content: Any) -> Any:
    if isinstance(content, list):
        texts: list[str] = []
        for part in content:
            if isinstance(part, str):
                texts.append(part)
            elif isinstance(part, Mapping):
                if isinstance(part.get("text"), str):
                    texts.append(part["text"])
                elif part.get("type") not in ("image_url", "input_audio", "image", "audio"):
                    texts.append(orjson.dumps(part, default=str).decode())
        return "\n".join(texts)
    if isinstance(content, Mapping):
        # A single part given as an object instead of a list.
        if isinstance(content.get("text"), str):
            return content["text"]
        return orjson.dumps(content, default=str).decode()
    return content


def normalize_messages(
    messages: Iterable[Mapping[str, Any]],
    *,
    flatten_content: bool = True,
    parse_tool_arguments: bool = False,
) -> list[dict[str, Any]]:
    """Return normalised deep copies of `messages`; the input is never modified.

    - `flatten_content`: list-of-parts (or a single part object) becomes one text string;
      `None` content stays `None`.
    - `parse_tool_arguments`: `tool_calls[].function.arguments` JSON strings become objects
      (templates such as some Qwen and Llama ones iterate over them); strings that are not
      JSON objects are left as they are.
    """
    out: list[dict[str, Any]] = []
    for m in messages:
        msg = copy.deepcopy(dict(m))
        if flatten_content and "content" in msg:
            msg["content"] = _flatten(msg["content"])
        if parse_tool_arguments and msg.get("tool_calls"):
            for tc in msg["tool_calls"]:
                fn = tc.get("function") if isinstance(tc, dict) else None
                if not isinstance(fn, dict) or not isinstance(fn.get("arguments"), str):
                    continue
                try:
                    parsed = orjson.loads(fn["arguments"])
                except orjson.JSONDecodeError:
                    continue
                if isinstance(parsed, dict):
                    fn["arguments"] = parsed
        out.append(msg)
    return out
