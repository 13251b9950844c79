"""Global load settings split over workers, deterministically.

A closed loop's concurrency and an open loop's cap on active sessions are whole numbers split
as evenly as they go (the first workers take the remainder); an open loop's rate is split in
equal parts. Independent Poisson arrival processes add up to one Poisson process of the total
rate, so `--rate` keeps its meaning; with `--burstiness` other than 1 the sum of gamma
processes is smoother than one gamma process of the total rate.
"""

from __future__ import annotations


def split_evenly(total: int, parts: int) -> list[int]:
    """`total` as `parts` whole shares that differ by at most one, larger shares first."""
    if parts < 1:
        raise ValueError("parts must be at least 1")
    base, extra = divmod(total, parts)
    return [base + (1 if i < extra else 0) for i in range(parts)]


def split_rate(rate: float, parts: int) -> list[float]:
    if parts < 1:
        raise ValueError("parts must be at least 1")
    return [rate / parts] * parts


def arrival_seed(seed: int, worker: int) -> int:
    """A distinct, fixed seed for each worker's arrival process."""
    return seed * 1_000_003 + worker + 1
