"""Fault injection: which request gets which fault, decided deterministically.

The n-th generation request a server accepts (0-based, counting chat and text completions
that passed validation) gets a fault when ``u(seed, n) < fault_rate``, where ``u`` is the
first 32 bits of ``blake2b(f"{seed}:{n}")`` over 2**32; the kind is the next 32 bits modulo
the number of configured kinds. :func:`predict_fault` gives a test the same answer. A request
header ``X-Agentload-Fault: KIND`` forces a fault (``none`` forces none) whatever the rate.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence

from agentload.wire import FAULT_HEADER

HTTP_FAULTS = {"http_500": 500, "http_429": 429, "http_503": 503}
STREAM_FAULTS = ("reset", "truncate", "malformed", "stall", "stall_first_token", "error_event")
ALL_FAULTS = (*HTTP_FAULTS, *STREAM_FAULTS)


def predict_fault(seed: int, counter: int, rate: float, kinds: Sequence[str]) -> str | None:
    """The fault the ``counter``-th request gets under ``seed``, ``rate`` and ``kinds``."""
    if rate <= 0 or not kinds:
        return None
    digest = hashlib.blake2b(f"{seed}:{counter}".encode(), digest_size=8).digest()
    u = int.from_bytes(digest[:4], "big") / 2**32
    if u >= rate:
        return None
    return kinds[int.from_bytes(digest[4:], "big") % len(kinds)]


def choose_fault(
    seed: int, counter: int, rate: float, kinds: Sequence[str], header: str | None
) -> str | None:
    if header:
        value = header.strip().lower()
        if value == "none":
            return None
        if value not in ALL_FAULTS:
            raise ValueError(
                f"{FAULT_HEADER}: unknown fault {header!r}; one of {', '.join(ALL_FAULTS)} or none"
            )
        return value
    return predict_fault(seed, counter, rate, kinds)


HTTP_FAULT_BODIES = {
    500: {
        "error": {
            "message": "Internal server error (injected by agentload sim)",
            "type": "InternalServerError",
            "param": None,
            "code": 500,
        }
    },
    429: {
        "error": {
            "message": "Too many requests (injected by agentload sim)",
            "type": "RateLimitError",
            "param": None,
            "code": 429,
        }
    },
    503: {
        "error": {
            "message": "Service unavailable (injected by agentload sim)",
            "type": "ServiceUnavailableError",
            "param": None,
            "code": 503,
        }
    },
}
