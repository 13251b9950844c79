"""The retail domain: an online store's customer service.

Users with addresses and payment methods (credit card, gift card with a balance, PayPal),
products with variants (options, per-variant price and stock) and orders moving through
pending -> processed -> delivered, with cancellations, item / address / payment changes,
returns and exchanges. Tasks are generated from templates against the seed-0 database; their
gold actions and required outputs are computed from that database.
"""

from __future__ import annotations

import functools

import orjson

from agentload.domains.base import Domain, Task
from agentload.domains.retail import data
from agentload.domains.retail.policy import POLICY, REASON_KEYWORDS
from agentload.domains.retail.tools import TOOLS, TRANSFER_TOOL

__all__ = ["DOMAIN", "REASON_KEYWORDS", "TRANSFER_TOOL", "RetailDomain", "make_domain"]


@functools.lru_cache(maxsize=8)
def _base_db(seed: int) -> dict:
    # Parsed once and never mutated: fresh databases share its records (copy-on-write).
    return orjson.loads(data.base_db_blob(seed))


class RetailDomain(Domain):
    name = "retail"
    data_version = "retail-1"
    policy = POLICY

    def __init__(self) -> None:
        self.tools = list(TOOLS)

    def make_db(self, seed: int = 0) -> dict:
        """A fully private copy of the database for `seed`."""
        return data.make_db(seed)

    def fresh_db(self, seed: int = 0) -> dict:
        """A new database for one episode in microseconds: new top-level tables whose
        records are shared with the cached base. Retail write tools replace a record by a
        private copy before changing it, so the base is never mutated; code outside the
        tools that wants to edit records in place should use `make_db` instead."""
        base = _base_db(seed)
        return {k: dict(v) if isinstance(v, dict) else v for k, v in base.items()}

    def tasks(self) -> list[Task]:
        return list(_tasks())


@functools.lru_cache(maxsize=1)
def _tasks() -> tuple[Task, ...]:
    from agentload.domains.retail.tasks import build_tasks

    return tuple(build_tasks())


def make_domain() -> RetailDomain:
    return RetailDomain()


DOMAIN = RetailDomain()
