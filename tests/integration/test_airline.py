"""The airline domain: deterministic data, tool semantics, and every task replayed and graded."""

from __future__ import annotations

import subprocess
import sys

import jsonschema
import orjson
import pytest

from agentload.domains import get_domain
from agentload.domains.airline import tasks as airline_tasks
from agentload.domains.airline.data import NOW, make_db
from agentload.domains.base import (
    TASK_CATEGORIES,
    WRITE_CATEGORIES,
    Action,
    Domain,
    Environment,
    check_tasks,
    grade,
    hash_db,
)


@pytest.fixture(scope="module")
def airline() -> Domain:
    return get_domain("airline")


@pytest.fixture
def env(airline: Domain) -> Environment:
    return Environment(airline)


def _json(content: str) -> object:
    return orjson.loads(content)


def test_db_is_deterministic_json_and_seed_dependent() -> None:
    db = make_db(0)
    assert orjson.loads(orjson.dumps(db)) == db  # JSON types only
    assert hash_db(make_db(0)) == hash_db(db)
    assert hash_db(make_db(1)) != hash_db(db)
    assert db["meta"]["now"] == NOW
    assert len(db["users"]) >= 100 and len(db["reservations"]) >= 300


def test_db_hash_is_the_same_in_a_fresh_process(airline: Domain) -> None:
    code = (
        "from agentload.domains import get_domain, Environment;"
        "print(Environment(get_domain('airline')).db_hash())"
    )
    out = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        check=True,
        env={"PYTHONHASHSEED": "7", "PATH": ""},
    )
    assert out.stdout.strip() == Environment(airline).db_hash()


def test_policy_and_schemas(airline: Domain) -> None:
    assert "2025-06-12 10:00" in airline.policy
    assert len(airline.policy) > 6000  # a realistic static prefix
    names = [s["function"]["name"] for s in airline.tool_schemas()]
    assert len(names) == len(set(names)) == 14
    for s in airline.tool_schemas():
        params = s["function"]["parameters"]
        jsonschema.Draft202012Validator.check_schema(params)
        assert params["type"] == "object" and params["additionalProperties"] is False
        assert s["function"]["description"]
    assert {t.name for t in airline.tools if t.writes} == {
        "create_booking",
        "cancel_booking",
        "change_booking_flights",
        "change_booking_passengers",
        "set_booking_bags",
        "issue_travel_certificate",
    }


def test_tasks_shape(airline: Domain) -> None:
    tasks = airline.tasks()
    assert len(tasks) >= 50
    assert [t.id for t in tasks] == [f"airline/{i:03d}" for i in range(len(tasks))]
    assert {t.category for t in tasks} == set(TASK_CATEGORIES)
    for t in tasks:
        assert t.domain == "airline"
        assert t.scenario.instructions and t.scenario.opening and t.scenario.persona
        assert all(isinstance(v, str) for v in t.scenario.known_info.values())
        writes = [a for a in t.gold_actions if airline.tool(a.name).writes]  # type: ignore[union-attr]
        if t.category == "refusal":
            assert not writes and t.flags == {"refusal"} and t.refusal_reason
            assert t.required_outputs
        elif t.category == "read_only":
            assert not writes and t.required_outputs
        elif t.category == "single_write":
            assert len(writes) == 1
        else:
            assert len(writes) >= 2
    # Tasks are a pure function of the code: a rebuild gives the same tasks.
    assert airline_tasks.build_tasks() == tasks


def test_every_task_is_self_consistent(airline: Domain) -> None:
    assert check_tasks(airline) == []


def test_required_outputs_and_idle_agent(airline: Domain) -> None:
    for t in airline.tasks():
        # An agent that does nothing matches the gold db only where the task writes nothing,
        # and saying nothing fails wherever outputs are required.
        idle = grade(airline, t, [], ["I cannot help with that."])
        assert idle.db_match == (t.category not in WRITE_CATEGORIES), t.id
        assert idle.outputs_ok == (not t.required_outputs), t.id
        assert idle.reward == (1.0 if idle.db_match and idle.outputs_ok else 0.0)
    # Numbers are found however an agent formats them.
    t = next(
        t for t in airline.tasks() if any(len(o) >= 4 and o.isdigit() for o in t.required_outputs)
    )
    n = next(o for o in t.required_outputs if len(o) >= 4 and o.isdigit())
    said = [o for o in t.required_outputs if o != n] + [f"That comes to ${n[:-3]},{n[-3:]}.00."]
    assert grade(airline, t, list(t.gold_actions), said).reward == 1.0


def test_grading_is_order_sensitive_only_where_it_matters(airline: Domain) -> None:
    t = next(
        t for t in airline.tasks() if t.category == "multi_write" and "bags" in t.scenario.opening
    )
    writes = [a for a in t.gold_actions if airline.tool(a.name).writes]  # type: ignore[union-attr]
    # Two bag updates on different reservations commute.
    assert grade(airline, t, list(reversed(writes)), list(t.required_outputs)).reward == 1.0
    # Doing only one of them fails.
    assert grade(airline, t, writes[:1], list(t.required_outputs)).reward == 0.0


# --- tool semantics ---------------------------------------------------------------------------


def _res(env: Environment, pred) -> dict:
    for r in sorted(env.db["reservations"].values(), key=lambda r: r["reservation_id"]):
        if r["status"] == "active" and pred(r):
            return r
    raise AssertionError("no reservation fits")


def _future_bookable(env: Environment, r: dict) -> bool:
    return all(
        env.db["flights"][s["flight_number"]]["dates"][s["date"]]["status"]
        in ("scheduled", "delayed")
        for s in r["flights"]
    )


def test_failed_writes_leave_db_untouched(env: Environment) -> None:
    r = _res(env, lambda r: _future_bookable(env, r))
    user = env.db["users"][r["user_id"]]
    other_user_card = next(
        pid
        for u in env.db["users"].values()
        if u["user_id"] != r["user_id"]
        for pid in u["payment_methods"]
        if pid.startswith("credit_card")
    )
    before = env.db_hash()
    bad = [
        ("cancel_booking", {"reservation_id": "NOPE00"}),
        (
            "change_booking_passengers",
            {"reservation_id": r["reservation_id"], "passengers": r["passengers"] * 2},
        ),
        (
            "set_booking_bags",
            {
                "reservation_id": r["reservation_id"],
                "total_baggages": 1,
                "nonfree_baggages": 2,
                "payment_method_id": next(iter(user["payment_methods"])),
            },
        ),
        (
            "set_booking_bags",
            {
                "reservation_id": r["reservation_id"],
                "total_baggages": 9,
                "nonfree_baggages": 9,
                "payment_method_id": other_user_card,
            },
        ),
        (
            "change_booking_flights",
            {
                "reservation_id": r["reservation_id"],
                "cabin": r["cabin"],
                "flights": [{"flight_number": "SK000", "date": "2025-06-20"}],
                "payment_method_id": next(iter(user["payment_methods"])),
            },
        ),
        ("issue_travel_certificate", {"user_id": "nobody", "amount": 100}),
        ("create_booking", {"user_id": r["user_id"]}),
    ]
    for name, args in bad:
        result = env.execute(name, args)
        assert not result.ok, (name, result.content)
        assert env.db_hash() == before, name


def test_cancel_refunds_and_frees_seats(env: Environment) -> None:
    r = _res(env, lambda r: _future_bookable(env, r))
    seg = r["flights"][0]
    inst = env.db["flights"][seg["flight_number"]]["dates"][seg["date"]]
    seats = inst["available_seats"][r["cabin"]]
    out = _json(env.execute("cancel_booking", {"reservation_id": r["reservation_id"]}).content)
    assert out["status"] == "cancelled"  # type: ignore[index]
    paid = r["payment_history"][0]["amount"]
    assert out["payment_history"][-1]["amount"] == -paid  # type: ignore[index]
    inst_now = env.db["flights"][seg["flight_number"]]["dates"][seg["date"]]
    assert inst_now["available_seats"][r["cabin"]] == seats + len(r["passengers"])
    assert inst["available_seats"][r["cabin"]] == seats  # the shared record is untouched
    again = env.execute("cancel_booking", {"reservation_id": r["reservation_id"]})
    assert not again.ok and "cancelled" in again.content


def test_booking_charges_gift_card_and_ids_are_deterministic(airline: Domain) -> None:
    def book() -> tuple[Environment, dict, dict]:
        env = Environment(airline)
        user = next(
            u
            for _, u in sorted(env.db["users"].items())
            if any(
                m["source"] == "gift_card" and m["balance"] >= 300
                for m in u["payment_methods"].values()
            )
        )
        gift = next(m for m in user["payment_methods"].values() if m["source"] == "gift_card")
        offers = _json(
            env.execute(
                "find_nonstop_flights",
                {"origin": "ORD", "destination": "DEN", "date": "2025-06-20"},
            ).content
        )
        if not offers:
            pytest.skip("no ORD-DEN flight on that date for this seed")
        o = min(offers, key=lambda o: o["prices"]["basic_economy"])  # type: ignore[union-attr]
        me = {"first_name": "Test", "last_name": "Person", "dob": "1990-01-01"}
        res = env.execute(
            "create_booking",
            {
                "user_id": user["user_id"],
                "origin": "ORD",
                "destination": "DEN",
                "trip_type": "one_way",
                "cabin": "basic_economy",
                "flights": [{"flight_number": o["flight_number"], "date": "2025-06-20"}],
                "passengers": [me],
                "payment_method_id": gift["id"],
                "total_baggages": 1,
                "nonfree_baggages": 1,
                "insurance": True,
            },
        )
        assert res.ok, res.content
        return env, _json(res.content), {"gift": gift, "price": o["prices"]["basic_economy"]}  # type: ignore[return-value]

    env1, res1, info = book()
    env2, res2, _ = book()
    assert res1["reservation_id"] == res2["reservation_id"]
    assert env1.db_hash() == env2.db_hash()
    expected = info["price"] + 30 + 50
    assert res1["payment_history"] == [{"payment_id": info["gift"]["id"], "amount": expected}]
    assert res1["created_at"] == NOW
    assert env1.db["users"][res1["user_id"]]["reservations"][-1] == res1["reservation_id"]


def test_update_flights_keeps_price_of_kept_segments(env: Environment) -> None:
    r = _res(
        env,
        lambda r: (
            r["trip_type"] == "round_trip"
            and r["cabin"] != "basic_economy"
            and _future_bookable(env, r)
        ),
    )
    card = next(
        p for p in env.db["users"][r["user_id"]]["payment_methods"] if p.startswith("credit_card")
    )
    legs = [{"flight_number": s["flight_number"], "date": s["date"]} for s in r["flights"]]
    same = env.execute(
        "change_booking_flights",
        {
            "reservation_id": r["reservation_id"],
            "cabin": r["cabin"],
            "flights": legs,
            "payment_method_id": card,
        },
    )
    assert same.ok, same.content
    assert len(_json(same.content)["payment_history"]) == 1  # type: ignore[index]  # no charge
    bad_route = env.execute(
        "change_booking_flights",
        {
            "reservation_id": r["reservation_id"],
            "cabin": r["cabin"],
            "flights": legs[:1],
            "payment_method_id": card,
        },
    )
    assert not bad_route.ok and "round trip" in bad_route.content


def test_read_tools(env: Environment) -> None:
    assert _json(env.execute("list_airports", {}).content)["JFK"] == "New York"  # type: ignore[index]
    assert env.execute("calculate", {"expression": "(320 + 185) * 2 + 50"}).content == "1060"
    assert env.execute("calculate", {"expression": "10 / 4"}).content == "2.5"
    assert not env.execute("calculate", {"expression": "__import__('os')"}).ok
    assert not env.execute("calculate", {"expression": "1/0"}).ok
    onestop = _json(
        env.execute(
            "find_connecting_flights", {"origin": "BOS", "destination": "SEA", "date": "2025-06-20"}
        ).content
    )
    for first, second in onestop:  # type: ignore[misc]
        assert first["destination"] == second["origin"]
        assert first["origin"] == "BOS" and second["destination"] == "SEA"
    flown = env.execute(
        "check_flight_status",
        {"flight_number": next(iter(env.db["flights"])), "date": "2025-06-02"},
    )
    assert _json(flown.content)["status"] in ("landed", "cancelled")  # type: ignore[index]
    assert not env.execute(
        "find_nonstop_flights", {"origin": "XXX", "destination": "JFK", "date": "2025-06-20"}
    ).ok


def test_episodes_never_touch_the_shared_base(airline: Domain) -> None:
    """Copy-on-write: whatever episodes do, the base stays as generated, each episode sees
    only its own changes, and the fast hash equals the plain one."""
    pristine = hash_db(make_db(0))
    envs = []
    for t in airline.tasks():
        env = Environment(airline)
        env.replay(t.gold_actions)
        assert env.db_hash() == hash_db(env.db), t.id
        envs.append(env)
    fresh = Environment(airline)
    assert fresh.db_hash() == hash_db(fresh.db) == pristine
    assert hash_db(airline._base(0).parsed()) == pristine  # type: ignore[attr-defined]
    # Each write task ends in its own state; the others all end where they started.
    writes = sum(1 for t in airline.tasks() if t.category in WRITE_CATEGORIES)
    assert len({e.db_hash() for e in envs}) == writes + 1


def test_new_episode_and_hash_are_fast(airline: Domain) -> None:
    import time

    env = Environment(airline)
    env.db_hash()
    t0 = time.perf_counter()
    for _ in range(20):
        Environment(airline)
    per_env = (time.perf_counter() - t0) / 20
    t0 = time.perf_counter()
    for _ in range(20):
        env.db_hash()
    per_hash = (time.perf_counter() - t0) / 20
    # Generous bounds for a slow CI machine; measured ~0.02 ms and ~2 ms.
    assert per_env < 0.002, per_env
    assert per_hash < 0.02, per_hash


def test_action_to_dict() -> None:
    assert Action("x", {"a": 1}).to_dict() == {"name": "x", "arguments": {"a": 1}}
