"""The retail domain: an online store's customer service.

Users with addresses and payment methods (credit card, gift card with a balance, PayPal),
products with variants (options, per-variant price and stock) and orders moving through
pending -> processed -> delivered, with cancellations, item / address / payment changes,
returns and exchanges. Tasks are generated from templates against the seed-0 database; their
gold actions and required outputs are computed from that database.
"""

from __future__ import annotations

import functools

from agentload.domains.base import Domain, Task
from agentload.domains.retail import data
from agentload.domains.retail.policy import POLICY, REASON_KEYWORDS
from agentload.domains.retail.tools import TOOLS, TRANSFER_TOOL

__all__ = ["DOMAIN", "REASON_KEYWORDS", "TRANSFER_TOOL", "RetailDomain", "make_domain"]


class RetailDomain(Domain):
    name = "retail"
    data_version = "retail-2"
    policy = POLICY
    # Write tools replace a record by a private copy (`own`) before changing it, so episodes
    # share the records of one parsed base database and hashing reuses their bytes.
    copy_on_write = True

    def __init__(self) -> None:
        self.tools = list(TOOLS)

    def make_db(self, seed: int = 0) -> dict:
        """A fully private copy of the database for `seed`."""
        return data.make_db(seed)

    def tasks(self) -> list[Task]:
        return list(_tasks())


@functools.lru_cache(maxsize=1)
def _tasks() -> tuple[Task, ...]:
    from agentload.domains.retail.tasks import build_tasks  # lazy: start-up (built on use)

    return tuple(build_tasks())


def make_domain() -> RetailDomain:
    return RetailDomain()


DOMAIN = RetailDomain()
