"""The built-in domains' generated databases are pinned byte for byte: a change to a generator
that alters a single value must come with a new `data_version` (and new hashes here)."""

from __future__ import annotations

import hashlib

import orjson
import pytest

from agentload.domains import get_domain
from agentload.domains.airline.data import make_db
from agentload.domains.retail.data import generate

PINNED = {
    ("airline", 0): "7a5fc3bf3a0654fc28250b9f1126573fe4832182decb940b7f7b24c52e4bcc67",
    ("airline", 42): "9d39cc6e926f1166b9a06dc477cdb7be5f20bae8d37d9a94eae70c1a8e2d216d",
    ("retail", 0): "7ccaea7bf012317e5ee7c2eaa9db9cced554726289a3bb3457f35cfb6b36cb89",
    ("retail", 42): "25a258870634dea1c579e538b415438e59edb43616122bdc386cdf0a6cda823d",
}
VERSIONS = {"airline": "airline-2", "retail": "retail-2"}
GENERATORS = {"airline": make_db, "retail": generate}


@pytest.mark.parametrize(("domain", "seed"), sorted(PINNED))
def test_generated_database_is_byte_identical(domain: str, seed: int) -> None:
    db = GENERATORS[domain](seed)
    # orjson keeps insertion order, so key order is pinned too, not only the content.
    digest = hashlib.sha256(orjson.dumps(db)).hexdigest()
    assert get_domain(domain).data_version == VERSIONS[domain]
    assert digest == PINNED[(domain, seed)]


def test_seeds_give_different_databases() -> None:
    assert orjson.dumps(make_db(0)) != orjson.dumps(make_db(1))
    assert orjson.dumps(generate(0)) != orjson.dumps(generate(1))
