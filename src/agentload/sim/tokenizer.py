"""Token counting for the simulator: a fast deterministic approximation or a real tokenizer.

The approximation splits text with one regular expression into pieces of at most seven
letters (with an optional leading space), at most three digits, one or two other symbols,
or a run of whitespace; chat-template markers such as ``<|im_start|>`` are one token each.
On English prose this gives about four characters per token, close to the BPE vocabularies
of current models. The pieces are also what the simulator streams as output tokens.
"""

from __future__ import annotations

import re
from collections import OrderedDict
from collections.abc import Sequence
from typing import Any, Protocol

import orjson

_PIECE_RE = re.compile(r"<\|[a-z_]+\|>| ?[A-Za-z]{1,7}| ?\d{1,3}| ?[^\sA-Za-z\d]{1,2}|\s+")

IM_START = "<|im_start|>"
IM_END = "<|im_end|>"


def split_pieces(text: str) -> list[str]:
    """The approximate tokenizer's pieces; ``"".join(split_pieces(t)) == t``."""
    return _PIECE_RE.findall(text)


class TokenCounter(Protocol):
    """What the server needs from a tokenizer."""

    # Whether encode_parts lets other threads run while it works, so that the server can
    # tokenise a long prompt off its event loop without stalling the streams it is emitting.
    releases_gil: bool

    def encode_parts(self, parts: Sequence[str], block_size: int) -> tuple[int, list[int]]:
        """Token count of the concatenated parts and the chained hashes of its full blocks."""
        ...

    def count(self, text: str) -> int: ...


class _LRU:
    def __init__(self, capacity: int) -> None:
        self.capacity = capacity
        self.data: OrderedDict[Any, Any] = OrderedDict()

    def get(self, key: Any) -> Any:
        value = self.data.get(key)
        if value is not None:
            self.data.move_to_end(key)
        return value

    def put(self, key: Any, value: Any) -> None:
        self.data[key] = value
        if len(self.data) > self.capacity:
            self.data.popitem(last=False)


class ApproxTokenizer:
    """The regex approximation, with an incremental cache over a conversation's parts.

    A request's parts are its rendered messages; a growing conversation repeats all of its
    earlier parts on every call, and every conversation of a domain starts with the same
    system part. The cache maps (state before a part, the part) to (state after it, the block
    hashes it completed), where a state is (chain hash, pieces not yet in a full block, token
    count): a repeated prefix then costs one dictionary look-up per part instead of
    re-splitting and re-hashing the whole prompt.

    The cache must hold the parts of every active conversation (about two per turn): below
    that, a round of conversations evicts each other's parts and every call re-tokenises its
    whole prompt. 131,072 entries hold 1,000 conversations of 60 turns (a few tens of MB).
    """

    releases_gil = False  # pure Python: a thread would hold the lock the loop needs

    def __init__(self, cache_size: int = 131072) -> None:
        self._cache = _LRU(cache_size)

    def count(self, text: str) -> int:
        return len(_PIECE_RE.findall(text))

    def encode_parts(self, parts: Sequence[str], block_size: int) -> tuple[int, list[int]]:
        state: tuple[int, tuple[str, ...], int] = (0, (), 0)
        hashes: list[int] = []
        cache = self._cache
        for part in parts:
            key = (block_size, state, part)
            hit = cache.get(key)
            if hit is None:
                hit = _advance(state, part, block_size)
                cache.put(key, hit)
            state, new = hit
            hashes.extend(new)
        return state[2], hashes


def _advance(
    state: tuple[int, tuple[str, ...], int], part: str, block_size: int
) -> tuple[tuple[int, tuple[str, ...], int], list[int]]:
    h, left, n = state
    pieces = [*left, *_PIECE_RE.findall(part)]
    new: list[int] = []
    full = len(pieces) - len(pieces) % block_size
    for start in range(0, full, block_size):
        h = hash((h, "".join(pieces[start : start + block_size])))
        new.append(h)
    return (h, tuple(pieces[full:]), n + len(pieces) - len(left)), new


class HFTokenizer:
    """A real ``tokenizer.json`` through the ``tokenizers`` package (imported lazily)."""

    releases_gil = True

    def __init__(self, path: str) -> None:
        try:
            from tokenizers import Tokenizer
        except ImportError as exc:  # pragma: no cover - depends on the environment
            raise RuntimeError(
                "--tokenizer needs the 'tokenizers' package: pip install 'agentload[tokenizer]'"
            ) from exc
        self._tok = Tokenizer.from_file(path)

    def count(self, text: str) -> int:
        return len(self._tok.encode(text, add_special_tokens=False).ids)

    def encode_parts(self, parts: Sequence[str], block_size: int) -> tuple[int, list[int]]:
        # encode_batch, not encode: only the batch call releases the GIL while the Rust
        # tokenizer works (9 ms held per 10,000 tokens by encode, measured), the same ids.
        ids = self._tok.encode_batch(["".join(parts)], add_special_tokens=False)[0].ids
        n = len(ids)
        hashes: list[int] = []
        h = 0
        for start in range(0, n - block_size + 1, block_size):
            h = hash((h, tuple(ids[start : start + block_size])))
            hashes.append(h)
        return n, hashes


def make_tokenizer(path: str | None) -> TokenCounter:
    return HFTokenizer(path) if path else ApproxTokenizer()


def _text_of(content: Any) -> str:
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        out = []
        for item in content:
            if isinstance(item, dict):
                if item.get("type") == "text":
                    out.append(str(item.get("text", "")))
                else:
                    out.append(f"<{item.get('type', 'part')}>")
            else:
                out.append(str(item))
        return "".join(out)
    return str(content)


def _dumps(value: Any) -> str:
    return orjson.dumps(value).decode()


def render_chat_parts(
    messages: Sequence[dict[str, Any]],
    tools: Sequence[dict[str, Any]] | None,
    *,
    thinking: bool = False,
) -> list[str]:
    """An approximate ChatML/Hermes rendering of a chat request, one part per message.

    Tool schemas go into the system turn as JSON inside ``<tools>``; assistant tool calls
    become ``<tool_call>`` JSON; tool results are user turns wrapped in ``<tool_response>``.
    The last part is the generation prompt. Parts are stable across calls of a growing
    conversation, so earlier parts tokenize (and hash) the same way every time.
    """
    parts: list[str] = []
    msgs = list(messages)
    system_text = ""
    if msgs and msgs[0].get("role") in ("system", "developer"):
        system_text = _text_of(msgs[0].get("content"))
        msgs = msgs[1:]
    if tools:
        schemas = "\n".join(_dumps(t) for t in tools)
        system_text = (
            f"{system_text}\n\n# Tools\n\nYou may call one or more functions to assist with "
            "the user query.\n\nYou are provided with function signatures within <tools></tools> "
            f"XML tags:\n<tools>\n{schemas}\n</tools>\n\nFor each function call, return a json "
            "object with function name and arguments within <tool_call></tool_call> XML tags:\n"
            '<tool_call>\n{"name": <function-name>, "arguments": <args-json-object>}\n</tool_call>'
        ).lstrip("\n")
    if system_text:
        parts.append(f"{IM_START}system\n{system_text}{IM_END}\n")
    for msg in msgs:
        role = str(msg.get("role", "user"))
        text = _text_of(msg.get("content"))
        if role == "assistant":
            reasoning = msg.get("reasoning_content") or msg.get("reasoning")
            body = f"<think>\n{reasoning}\n</think>\n\n{text}" if reasoning else text
            for call in msg.get("tool_calls") or []:
                fn = call.get("function", {}) if isinstance(call, dict) else {}
                args = fn.get("arguments", "{}")
                body += (
                    f'\n<tool_call>\n{{"name": "{fn.get("name", "")}", "arguments": {args}}}'
                    "\n</tool_call>"
                )
            parts.append(f"{IM_START}assistant\n{body}{IM_END}\n")
        elif role == "tool":
            parts.append(f"{IM_START}user\n<tool_response>\n{text}\n</tool_response>{IM_END}\n")
        else:
            parts.append(f"{IM_START}{role}\n{text}{IM_END}\n")
    parts.append(f"{IM_START}assistant\n" + ("<think>\n" if thinking else ""))
    return parts
