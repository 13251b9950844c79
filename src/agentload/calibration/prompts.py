"""Prompts of a given length in tokens, random enough that no two share a cached block."""

from __future__ import annotations

import random
import string
from typing import Any

from agentload.sim.tokenizer import split_pieces


class PromptMaker:
    """Random lower-case words, cut to a token count with the model's tokenizer when given
    (a ``tokenizer.json``), else with the simulator's approximation."""

    def __init__(self, tokenizer: str | None = None, seed: int = 0) -> None:
        self.rng = random.Random(seed)
        self.tok: Any = None
        if tokenizer:
            try:
                from tokenizers import Tokenizer
            except ImportError:  # pragma: no cover - the dev and tokenizer extras have it
                raise ValueError(
                    "--tokenizer needs the 'tokenizers' package: pip install 'agentload[tokenizer]'"
                ) from None
            try:
                self.tok = Tokenizer.from_file(tokenizer)
            except Exception as exc:
                raise ValueError(f"{tokenizer}: cannot load the tokenizer: {exc}") from None

    def _words(self, n: int) -> str:
        letters = string.ascii_lowercase
        rng = self.rng
        return " ".join(
            "".join(rng.choice(letters) for _ in range(rng.randint(2, 7))) for _ in range(n)
        )

    def text(self, tokens: int) -> str:
        """About ``tokens`` tokens of fresh text (the server reports the exact count)."""
        raw = self._words(tokens)
        if self.tok is not None:
            enc = self.tok.encode(raw, add_special_tokens=False)
            ids = enc.ids[:tokens]
            return str(self.tok.decode(ids)) if ids else "x"
        return "".join(split_pieces(raw)[:tokens])

    def prompt(self, tokens: int, prefix: str = "") -> str:
        """A prompt of about ``tokens`` tokens; after ``prefix`` when given (a shared prefix)."""
        if not prefix:
            return self.text(tokens)
        rest = max(1, tokens - self.count(prefix))
        return prefix + " " + self.text(rest)

    def count(self, text: str) -> int:
        if self.tok is not None:
            return len(self.tok.encode(text, add_special_tokens=False).ids)
        return len(split_pieces(text))
