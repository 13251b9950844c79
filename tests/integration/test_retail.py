"""The retail domain: tasks grade as designed, tools refuse bad input, data is reproducible."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time

import jsonschema
import orjson
import pytest

from agentload.domains import Action, Environment, get_domain, get_task, grade
from agentload.domains.base import TASK_CATEGORIES, check_tasks, hash_db
from agentload.domains.retail import REASON_KEYWORDS, RetailDomain, data

DOMAIN = get_domain("retail")
TASKS = DOMAIN.tasks()
WRITES = {t.name for t in DOMAIN.tools if t.writes}


def _writes(task) -> list[Action]:
    return [a for a in task.gold_actions if a.name in WRITES]


def _said(task) -> list[str]:
    return [f"Done. For the record: {', '.join(task.required_outputs)}."]


# --- the task set ----------------------------------------------------------------------


def test_registry_and_ids() -> None:
    assert isinstance(DOMAIN, RetailDomain)
    assert len(TASKS) >= 50
    assert [t.id for t in TASKS] == [f"retail/{i:03d}" for i in range(len(TASKS))]
    assert get_task("retail/007") == TASKS[7]
    assert DOMAIN.tasks() == TASKS  # cached and deterministic
    assert {t.category for t in TASKS} == set(TASK_CATEGORIES)
    for cat in TASK_CATEGORIES:
        assert sum(t.category == cat for t in TASKS) >= 10, cat
    assert check_tasks(DOMAIN) == []


@pytest.mark.parametrize("task", TASKS, ids=lambda t: t.id)
def test_gold_scores_one_and_nothing_scores_zero(task) -> None:
    gold = grade(DOMAIN, task, task.gold_actions, _said(task))
    assert gold.reward == 1.0, gold
    noop = grade(DOMAIN, task, [], [])
    assert noop.reward == 0.0
    if task.category in ("single_write", "multi_write"):
        assert _writes(task) and not noop.db_match
    else:
        assert not _writes(task)
        assert task.required_outputs and noop.db_match and not noop.outputs_ok
    if task.category == "refusal":
        assert task.refusal_reason in REASON_KEYWORDS
        assert task.required_outputs == (task.refusal_reason,)
        assert "refusal" in task.flags
        # The policy tells the agent to state this exact keyword.
        assert f"`{task.refusal_reason}`" in DOMAIN.policy


def _vary(action: Action) -> dict | None:
    """The action's arguments with one of them changed to another plausible value."""
    db = DOMAIN.fresh_db()
    args = dict(action.arguments)
    if "reason" in args:
        args["reason"] = next(
            r for r in ("no longer needed", "ordered by mistake") if r != args["reason"]
        )
        return args
    if "zip" in args:
        return {**args, "zip": "00001"}
    order = db["orders"][args["order_id"]]
    if action.name == "request_return":
        extra = [i["item_id"] for i in order["items"] if i["item_id"] not in args["item_ids"]]
        if extra:
            return {**args, "item_ids": [*args["item_ids"], extra[0]]}
    others = sorted(
        set(db["users"][order["user_id"]]["payment_methods"]) - {args["payment_method_id"]}
    )
    if others:
        return {**args, "payment_method_id": others[0]}
    if "new_item_ids" in args:
        old = args["item_ids"][0]
        product = next(p for p in db["products"].values() if old in p["variants"])
        alt = [
            v
            for v, r in sorted(product["variants"].items())
            if r["stock"] > 0 and v not in (old, args["new_item_ids"][0])
        ]
        if alt:
            return {**args, "new_item_ids": [alt[0]]}
    return None


@pytest.mark.parametrize(
    "task", [t for t in TASKS if t.category.endswith("write")], ids=lambda t: t.id
)
def test_wrong_or_partial_writes_score_zero(task) -> None:
    writes = _writes(task)
    # Stopping short of the last write.
    partial = [a for a in task.gold_actions if a is not writes[-1]]
    assert grade(DOMAIN, task, partial, _said(task)).reward == 0.0
    # The right tool with one argument wrong.
    last = writes[-1]
    args = _vary(last)
    if args is None:
        pytest.skip("no argument to vary")
    wrong = [*partial, Action(last.name, args)]
    assert grade(DOMAIN, task, wrong, _said(task)).reward == 0.0


@pytest.mark.parametrize("task", [t for t in TASKS if t.required_outputs], ids=lambda t: t.id)
def test_missing_required_output_scores_zero(task) -> None:
    g = grade(DOMAIN, task, task.gold_actions, ["I have taken care of it."])
    assert g.db_match and g.reward == 0.0 and g.missing_outputs


def test_refusal_tasks_punish_the_forbidden_write() -> None:
    """Doing what the user asks in a refusal task changes nothing when the tool refuses it,
    and scores 0 when the tool cannot tell (an order of another account)."""
    task = next(t for t in TASKS if t.refusal_reason == "another account")
    order_id = task.scenario.known_info["order_id"]
    cancel = Action("cancel_order", {"order_id": order_id, "reason": "no longer needed"})
    g = grade(DOMAIN, task, [*task.gold_actions, cancel], _said(task))
    assert not g.db_match and g.reward == 0.0


def test_scenarios_let_the_user_answer() -> None:
    for t in TASKS:
        k = t.scenario.known_info
        assert "email" in k or {"name", "zip"} <= set(k), t.id
        assert t.scenario.opening and "you" in t.scenario.instructions.lower(), t.id
        assert t.scenario.persona
        known = " ".join(k.values())
        for a in t.gold_actions:
            oid = a.arguments.get("order_id")
            if oid:
                assert oid in known and oid in t.scenario.instructions, (t.id, oid)
                assert oid not in t.scenario.opening, t.id
            if a.name == "lookup_customer_by_email":
                assert a.arguments["email"] == k["email"]
            if a.name == "lookup_customer_by_name_and_zip":
                assert a.arguments["zip"] == k["zip"]
        if any(a.name.endswith("payment") or a.name.endswith("_items") for a in _writes(t)):
            assert any(key in k for key in ("payment_method", "refund_to")), t.id


# --- tools -----------------------------------------------------------------------------


def test_tool_schemas_are_valid() -> None:
    names = [t.name for t in DOMAIN.tools]
    assert 14 <= len(names) <= 16 and len(set(names)) == len(names)
    assert "handoff_to_human" in names
    assert {"cancel_order", "request_return"} <= WRITES
    for tool in DOMAIN.tools:
        jsonschema.Draft202012Validator.check_schema(tool.parameters)
        p = tool.parameters
        assert p["type"] == "object" and p["additionalProperties"] is False
        assert set(p["required"]) <= set(p["properties"])
        s = tool.schema()
        assert s["type"] == "function" and s["function"]["name"] == tool.name
        assert s["function"]["description"]


def _sample_ids() -> dict[str, str]:
    db = DOMAIN.fresh_db()
    by_status = {}
    for o in db["orders"].values():
        by_status.setdefault(o["status"], o)
    return {
        "pending": by_status["pending"]["order_id"],
        "processed": by_status["processed"]["order_id"],
        "delivered": by_status["delivered"]["order_id"],
        "cancelled": by_status["cancelled"]["order_id"],
    }


def _valid_args(name: str) -> dict:
    """Well-formed arguments that reach the tool (ids may or may not exist)."""
    tool = DOMAIN.tool(name)
    assert tool is not None
    args: dict = {}
    for key, prop in tool.parameters["properties"].items():
        if "enum" in prop:
            args[key] = prop["enum"][0]
        elif prop["type"] == "array":
            args[key] = ["1234567890"]
        else:
            args[key] = "1 + 2" if key == "expression" else "x-unknown"
    return args


@pytest.mark.parametrize("tool", DOMAIN.tools, ids=lambda t: t.name)
def test_bad_arguments_give_errors_and_change_nothing(tool) -> None:
    env = Environment(DOMAIN)
    before = env.db_hash()
    props = tool.parameters["properties"]
    bad_calls: list[dict | str] = ["{not json", "[1, 2]", {**_valid_args(tool.name), "bogus": 1}]
    for key in tool.parameters["required"]:
        missing = _valid_args(tool.name)
        del missing[key]
        bad_calls.append(missing)
        wrong_type = _valid_args(tool.name)
        wrong_type[key] = 42 if props[key]["type"] != "integer" else "x"
        bad_calls.append(wrong_type)
    if tool.parameters["required"] and tool.name not in ("calculate", "handoff_to_human"):
        bad_calls.append(_valid_args(tool.name))  # unknown ids
    for args in bad_calls:
        r = env.execute(tool.name, args)
        assert not r.ok and r.content.startswith("Error: "), (tool.name, args, r)
    assert env.db_hash() == before
    assert env.execute("no_such_tool", {}).content.startswith("Error: ")


def test_rule_violations_give_errors_and_change_nothing() -> None:
    ids = _sample_ids()
    env = Environment(DOMAIN)
    db = env.db
    delivered = db["orders"][ids["delivered"]]
    pending = db["orders"][ids["pending"]]
    addr = {
        "address1": "1 Test Road",
        "address2": "",
        "city": "Boise",
        "state": "ID",
        "country": "USA",
        "zip": "83701",
    }
    calls = [
        ("cancel_order", {"order_id": ids["delivered"], "reason": "no longer needed"}),
        ("cancel_order", {"order_id": ids["cancelled"], "reason": "no longer needed"}),
        ("change_order_address", {"order_id": ids["processed"], **addr}),
        ("change_order_address", {"order_id": ids["pending"], **addr, "city": "  "}),
        (
            "change_order_payment",
            {"order_id": ids["pending"], "payment_method_id": pending["payment_method_id"]},
        ),
        (
            "change_order_payment",
            {"order_id": ids["pending"], "payment_method_id": "paypal_0000000"},
        ),
        (
            "request_return",
            {
                "order_id": ids["pending"],
                "item_ids": [pending["items"][0]["item_id"]],
                "payment_method_id": pending["payment_method_id"],
            },
        ),
        (
            "request_return",
            {
                "order_id": ids["delivered"],
                "item_ids": ["0000000000"],
                "payment_method_id": delivered["payment_method_id"],
            },
        ),
        (
            "change_order_items",
            {
                "order_id": ids["pending"],
                "item_ids": [pending["items"][0]["item_id"]],
                "new_item_ids": [pending["items"][0]["item_id"]],
                "payment_method_id": pending["payment_method_id"],
            },
        ),
        (
            "change_order_items",
            {
                "order_id": ids["pending"],
                "item_ids": [pending["items"][0]["item_id"]],
                "new_item_ids": [],
                "payment_method_id": pending["payment_method_id"],
            },
        ),
        (
            "request_exchange",
            {
                "order_id": ids["processed"],
                "item_ids": ["1"],
                "new_item_ids": ["2"],
                "payment_method_id": "x",
            },
        ),
        ("change_default_address", {"user_id": "nobody_0000", **addr}),
        ("calculate", {"expression": "__import__('os')"}),
        ("calculate", {"expression": "1 / 0"}),
    ]
    before = env.db_hash()
    for name, args in calls:
        r = env.execute(name, args)
        assert not r.ok and r.content.startswith("Error: "), (name, args, r)
    assert env.db_hash() == before
    assert "not pending" in env.execute(*calls[0]).content
    assert "not delivered" in env.execute(*calls[6]).content


def test_write_semantics() -> None:
    env = Environment(DOMAIN)
    db = env.db
    # Cancelling an order paid by gift card refunds the card at once.
    order = next(
        o
        for o in db["orders"].values()
        if o["status"] == "pending" and o["payment_method_id"].startswith("gift_card")
    )
    uid, pm = order["user_id"], order["payment_method_id"]
    before = db["users"][uid]["payment_methods"][pm]["balance"]
    r = env.execute("cancel_order", {"order_id": order["order_id"], "reason": "ordered by mistake"})
    assert r.ok, r
    after = env.db["users"][uid]["payment_methods"][pm]["balance"]
    total = sum(i["price"] for i in order["items"])
    assert after == pytest.approx(before + total, abs=0.006)
    assert env.db["orders"][order["order_id"]]["status"] == "cancelled"
    again = env.execute(
        "cancel_order", {"order_id": order["order_id"], "reason": "ordered by mistake"}
    )
    assert "not pending" in again.content
    assert env.execute("calculate", {"expression": "(10.5 + 2.25) * 2"}).content == "25.50"
    found = env.execute("lookup_customer_by_email", {"email": db["users"][uid]["email"].upper()})
    assert found.ok and found.content == uid


# --- data ------------------------------------------------------------------------------


def test_database_scale_and_determinism() -> None:
    db = DOMAIN.make_db(0)
    assert len(db["users"]) >= 300
    assert len(db["orders"]) >= 1000
    assert sum(len(p["variants"]) for p in db["products"].values()) >= 600
    statuses = {o["status"] for o in db["orders"].values()}
    assert statuses == {
        "pending",
        "processed",
        "delivered",
        "cancelled",
        "return requested",
        "exchange requested",
    }
    sources = {pm["source"] for u in db["users"].values() for pm in u["payment_methods"].values()}
    assert sources == {"credit_card", "gift_card", "paypal"}
    assert hash_db(db) == hash_db(DOMAIN.make_db(0)) == Environment(DOMAIN).db_hash()
    assert hash_db(DOMAIN.make_db(1)) != hash_db(db)
    assert db["now"] == data.NOW_ISO and data.NOW_ISO[:10] in DOMAIN.policy


def test_db_hash_identical_across_processes() -> None:
    code = (
        "from agentload.domains import Environment, get_domain;"
        "print(Environment(get_domain('retail'), 3).db_hash())"
    )
    hashes = set()
    for hash_seed in ("1", "12345"):
        out = subprocess.run(
            [sys.executable, "-c", code],
            capture_output=True,
            text=True,
            check=True,
            env={**os.environ, "PYTHONHASHSEED": hash_seed},
        )
        hashes.add(out.stdout.strip())
    assert hashes == {Environment(DOMAIN, 3).db_hash()}


def test_static_prefix_size() -> None:
    chars = len(DOMAIN.policy) + len(json.dumps(DOMAIN.tool_schemas()))
    assert 3000 <= chars / 4 <= 5000


def test_environment_is_cheap_and_isolated() -> None:
    Environment(DOMAIN)
    t0 = time.perf_counter()
    for _ in range(200):
        Environment(DOMAIN)
    assert (time.perf_counter() - t0) / 200 < 0.005
    # Episodes share records with the cached base (copy-on-write): writes in one episode
    # must never leak into the base or another episode.
    base_blob = orjson.dumps(DOMAIN._base(0).parsed())
    a, b = Environment(DOMAIN), Environment(DOMAIN)
    h = b.db_hash()
    for task in TASKS:
        a.replay(task.gold_actions)
    assert b.db_hash() == h == Environment(DOMAIN).db_hash()
    assert orjson.dumps(DOMAIN._base(0).parsed()) == base_blob
    assert orjson.loads(base_blob) == data.make_db(0)


def test_listing_items_in_another_order_grades_the_same() -> None:
    """Returns and exchanges store items in the order's own sequence, so an agent that lists
    them the other way round still matches the gold database."""
    checked = 0
    for task in TASKS:
        actions = []
        for a in task.gold_actions:
            if len(a.arguments.get("item_ids", ())) > 1:
                args = {**a.arguments, "item_ids": a.arguments["item_ids"][::-1]}
                if "new_item_ids" in args:
                    args["new_item_ids"] = args["new_item_ids"][::-1]
                a = Action(a.name, args)
                checked += 1
            actions.append(a)
        assert grade(DOMAIN, task, actions, _said(task)).reward == 1.0, task.id
    assert checked >= 6
