"""A generation request's checks, in the order vLLM's OpenAI server makes them, with its error
messages: the body, the model and the sampling options, the prompt as the chat template
renders it, and the output length against the context and the KV cache.

Each check raises `RequestError` with the status and message the client sees."""

from __future__ import annotations

from typing import Any, NamedTuple

import orjson

from agentload.sim.frames import RequestError
from agentload.sim.tokenizer import render_chat_parts


class Prompt(NamedTuple):
    """A request's prompt as the chat template renders it, with its tool settings."""

    parts: list[str]
    tools: list[dict[str, Any]]
    tool_choice: Any
    thinking: bool


class Admitted(NamedTuple):
    """A request that passed validation: what the later phases of generation need."""

    body: dict[str, Any]
    prompt: Prompt
    prompt_len: int
    hashes: list[int]
    max_tokens: int
    counter: int
    fault: str | None


def parse_body(raw: bytes) -> dict[str, Any]:
    try:
        body = orjson.loads(raw)
    except orjson.JSONDecodeError as exc:
        raise RequestError(400, f"Invalid JSON body: {exc}") from exc
    if not isinstance(body, dict):
        raise RequestError(400, "The request body must be a JSON object.")
    return body


def check_options(body: dict[str, Any], model: str) -> None:
    """The model and the sampling options the simulator serves (one choice, no beams)."""
    asked = body.get("model")
    if asked is not None and asked != model:
        raise RequestError(404, f"The model `{asked}` does not exist.", "NotFoundError", "model")
    n = body.get("n", 1)
    if n is not None and n != 1:
        raise RequestError(
            400,
            f"n={n} is not supported: the agentload simulator "
            "generates one choice per request (n must be 1).",
            param="n",
        )
    if body.get("use_beam_search") or (body.get("best_of") or 1) > 1:
        raise RequestError(
            400,
            "best_of and beam search are not supported by the agentload simulator.",
            param="best_of",
        )


def render_prompt(body: dict[str, Any], chat: bool) -> Prompt:
    """The prompt's parts as the chat template renders them, with the request's tools,
    tool choice and thinking switch."""
    if chat:
        return _chat_prompt(body)
    prompt = body.get("prompt")
    if isinstance(prompt, list):
        if prompt and all(isinstance(x, int) for x in prompt):
            prompt = " ".join(str(x) for x in prompt)
        else:
            prompt = "".join(str(x) for x in prompt)
    if not isinstance(prompt, str) or not prompt:
        raise RequestError(400, "prompt must be a non-empty string.", param="prompt")
    return Prompt([prompt], [], "none", False)


def _chat_prompt(body: dict[str, Any]) -> Prompt:
    messages = body.get("messages")
    if (
        not isinstance(messages, list)
        or not messages
        or not all(isinstance(m, dict) for m in messages)
    ):
        raise RequestError(
            400, "messages must be a non-empty list of message objects.", param="messages"
        )
    tools = body.get("tools") or []
    if not isinstance(tools, list):
        raise RequestError(400, "tools must be a list.", param="tools")
    tool_choice = _tool_choice(body.get("tool_choice"), tools)
    kwargs = body.get("chat_template_kwargs") or {}
    thinking = bool(kwargs.get("enable_thinking") or kwargs.get("thinking"))
    return Prompt(
        render_chat_parts(messages, tools, thinking=thinking), tools, tool_choice, thinking
    )


def _tool_choice(tool_choice: Any, tools: list[Any]) -> Any:
    """The request's tool choice (its default: `auto` with tools, else `none`), checked."""
    if tool_choice is None:
        tool_choice = "auto" if tools else "none"
    if tool_choice not in ("none", "auto", "required") and not isinstance(tool_choice, dict):
        raise RequestError(400, f"Invalid tool_choice {tool_choice!r}.", param="tool_choice")
    if tool_choice != "none" and tool_choice != "auto" and not tools:
        raise RequestError(
            400, "When using `tool_choice`, `tools` must be set.", param="tool_choice"
        )
    if isinstance(tool_choice, dict):
        wanted = (tool_choice.get("function") or {}).get("name")
        names = [(t.get("function") or {}).get("name") for t in tools if isinstance(t, dict)]
        if wanted not in names:
            raise RequestError(
                400, f"Tool '{wanted}' has not been passed in `tools`.", param="tool_choice"
            )
    return tool_choice


def max_tokens(body: dict[str, Any], prompt_len: int, max_len: int) -> int:
    """The output length: the request's `max_completion_tokens` or `max_tokens`, else what
    the context leaves."""
    if prompt_len >= max_len:
        raise RequestError(
            400,
            f"This model's maximum context length is {max_len} tokens. However, your "
            f"request has {prompt_len} input tokens. Please reduce the length of the input "
            "messages.",
        )
    requested = body.get("max_completion_tokens")
    if requested is None:
        requested = body.get("max_tokens")
    if requested is None:
        return max_len - prompt_len
    if not isinstance(requested, int) or requested < 1:
        raise RequestError(
            400, f"max_tokens must be at least 1, got {requested}.", param="max_tokens"
        )
    if requested > max_len - prompt_len:
        raise RequestError(
            400,
            f"'max_tokens' or 'max_completion_tokens' is too large: {requested}. This "
            f"model's maximum context length is {max_len} tokens and your request has "
            f"{prompt_len} input tokens ({requested} > {max_len} - {prompt_len}). "
            f"(parameter=max_tokens, value={requested})",
            param="max_tokens",
        )
    return requested


def check_capacity(needed: int, capacity: int) -> None:
    """The request fits the simulated engine's KV cache at all."""
    if needed > capacity:
        raise RequestError(
            400,
            f"The request needs {needed} tokens of "
            f"KV cache but the simulated engine holds only "
            f"{capacity}.",
        )
