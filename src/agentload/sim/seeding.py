"""Seeds the simulator derives from what a request carries: the same in every process (hashlib,
not Python's salted `hash`), so a seeded run repeats whichever process or order serves it."""

from __future__ import annotations

import hashlib
import random


def stable_int(*parts: object) -> int:
    """A 64-bit integer from the parts (the roles' plans and players)."""
    digest = hashlib.sha256("\x1f".join(str(p) for p in parts).encode()).digest()
    return int.from_bytes(digest[:8], "big")


def stable_rng(*parts: object) -> random.Random:
    return random.Random(stable_int(*parts))


def stable_digest(*parts: str) -> int:
    """A 64-bit integer from the parts (a generated answer's token plan)."""
    h = hashlib.blake2b(digest_size=8)
    for part in parts:
        h.update(part.encode("utf-8", "surrogatepass"))
        h.update(b"\x00")
    return int.from_bytes(h.digest(), "big")
