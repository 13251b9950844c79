"""agentload's τ²-bench airline domain against facts recorded from τ²-bench 1.0.1 itself
(tests/data/tau2/airline.json): the tool schemas, the database hashes, every task's gold
replay, and probes: lists of odd or failing calls, with the text of every answer and the
state they leave behind."""

from __future__ import annotations

import hashlib
import json
from functools import cache
from pathlib import Path
from typing import Any

import pytest

import agentload.domains.tau2.airline as tau2_airline
from agentload.domains.tau2.toolkit import World

REF: dict[str, Any] = json.loads(
    (Path(__file__).resolve().parents[1] / "data" / "tau2" / "airline.json").read_text()
)
MEI = "mei_hernandez_8984"
GIFT = "gift_card_5309492"
CERT = "certificate_7502997"
CARD = "credit_card_2140654"


@cache
def _tasks(folder: Path) -> dict[str, dict[str, Any]]:
    return {str(t["id"]): t for t in json.loads((folder / "tasks.json").read_text())}


def _world(tau2_data: Path) -> World:
    return tau2_airline.make_world(tau2_data / "airline")


def _run(world: World, calls: list[tuple[str, str, dict[str, Any]]]) -> tuple[list[str], int]:
    texts, errors = [], 0
    for requestor, name, args in calls:
        text, error = world.call(requestor, name, args)
        texts.append(text)
        errors += error
    return texts, errors


def _sha(texts: list[str]) -> str:
    return hashlib.sha256("\n\x00".join(texts).encode()).hexdigest()


def _booking(**changes: Any) -> dict[str, Any]:
    """A valid one-way booking for Mei (HAT014 JFK-MIA, economy $143), with `changes`."""
    args: dict[str, Any] = {
        "user_id": MEI,
        "origin": "JFK",
        "destination": "MIA",
        "flight_type": "one_way",
        "cabin": "economy",
        "flights": [{"flight_number": "HAT014", "date": "2024-05-20"}],
        "passengers": [{"first_name": "Mei", "last_name": "Hernandez", "dob": "1981-01-11"}],
        "payment_methods": [{"payment_id": CARD, "amount": 143}],
        "total_baggages": 0,
        "nonfree_baggages": 0,
        "insurance": "no",
    }
    return {**args, **changes}


def test_tool_schemas_are_tau2s() -> None:
    # Byte for byte, key order included: the agent sees this text.
    assert json.dumps(tau2_airline.AirlineTools.schemas()) == json.dumps(REF["agent_tools"])
    assert tau2_airline.AGENT_KIT is tau2_airline.AirlineTools
    assert tau2_airline.USER_KIT is None


def test_tool_kinds_are_tau2s() -> None:
    kinds = {n: (s.kind, s.mutates) for n, s in tau2_airline.AirlineTools.SPECS.items()}
    assert kinds == {
        "book_reservation": ("write", True),
        "calculate": ("generic", False),
        "cancel_reservation": ("write", True),
        "get_reservation_details": ("read", False),
        "get_user_details": ("read", False),
        "list_all_airports": ("read", False),
        "search_direct_flight": ("read", False),
        "search_onestop_flight": ("read", False),
        "send_certificate": ("write", True),
        "transfer_to_human_agents": ("generic", False),
        "update_reservation_baggages": ("write", True),
        "update_reservation_flights": ("write", True),
        "update_reservation_passengers": ("write", True),
        "get_flight_status": ("read", False),
    }


def test_initial_database_and_policy(tau2_data: Path) -> None:
    world = _world(tau2_data)
    assert world.db_hash() == REF["initial_db_hash"]
    assert world.user_db_hash() is None
    text = tau2_airline.policy(tau2_data / "airline")
    assert hashlib.sha256(text.encode()).hexdigest() == REF["policy_sha256"]
    # Loading again is normalized already (the kit's normalize is what merges re-run).
    assert world.agent.normalize(world.agent.db) == world.agent.db


def test_reference_covers_every_task(tau2_data: Path) -> None:
    assert set(_tasks(tau2_data / "airline")) == set(REF["tasks"])


@pytest.mark.parametrize("task_id", sorted(REF["tasks"]))
def test_gold_replay_matches_tau2(tau2_data: Path, task_id: str) -> None:
    task = _tasks(tau2_data / "airline")[task_id]
    assert task.get("initial_state") is None  # no airline task sets an initial state
    world = _world(tau2_data)
    actions = task["evaluation_criteria"].get("actions") or []
    calls = [(a.get("requestor") or "assistant", a["name"], a["arguments"]) for a in actions]
    texts, errors = _run(world, calls)
    want = REF["tasks"][task_id]
    assert (_sha(texts), errors) == (want["outputs_sha256"], want["errors"])
    assert world.db_hash() == want["db_hash"]
    assert world.user_db_hash() is want["user_db_hash"] is None


def _watched(db: dict[str, Any]) -> str:
    """The records the probes touch, as the reference digests them."""

    def pick(table: dict[str, Any], ids: list[str]) -> dict[str, Any]:
        return {i: table.get(i) for i in ids}

    state = {
        "users": pick(db["users"], [MEI]),
        "reservations": pick(
            db["reservations"], ["R9QDGB", "07S7FC", "HATHAT", "HATHAU", "HATHAV"]
        ),
        "flights": pick(db["flights"], ["HAT014"]),
    }
    return hashlib.sha256(json.dumps(state, sort_keys=True, default=str).encode()).hexdigest()


@pytest.mark.parametrize("n", range(len(REF["probes"])))
def test_probe_matches_tau2(tau2_data: Path, n: int) -> None:
    """Odd arguments (strings for numbers, mixed lists, missing fields, unknown ids), failed
    checks and partial effects: each answer's text and the records left behind as τ²'s."""
    probe = REF["probes"][n]
    world = _world(tau2_data)
    texts, errors = _run(world, [("assistant", name, args) for name, args in probe["calls"]])
    assert (_sha(texts), errors) == (probe["outputs_sha256"], probe["errors"])
    assert _watched(world.agent.db) == probe["state_sha256"]


def test_refused_booking_changes_nothing(tau2_data: Path) -> None:
    world = _world(tau2_data)
    before = json.dumps(world.agent.db["users"][MEI])
    seats = dict(world.agent.db["flights"]["HAT014"]["dates"]["2024-05-20"]["available_seats"])
    text, error = world.call("assistant", "book_reservation", _booking(cabin="first"))
    assert error
    # pydantic's wording, as τ²'s model words it (the link names pydantic's version).
    assert text.startswith(
        "Error: 1 validation error for Reservation\ncabin\n  Input should be 'business', "
        "'economy' or 'basic_economy' [type=literal_error, input_value='first', input_type=str]"
        "\n    For further information visit https://errors.pydantic.dev/"
    )
    assert text.endswith("/v/literal_error")
    text, error = world.call(
        "assistant",
        "book_reservation",
        _booking(payment_methods=[{"payment_id": CARD, "amount": 144}]),
    )
    assert (text, error) == (
        "Error: Payment amount does not add up, total price is 143, but paid 144",
        True,
    )
    assert json.dumps(world.agent.db["users"][MEI]) == before
    assert world.agent.db["flights"]["HAT014"]["dates"]["2024-05-20"]["available_seats"] == seats
    assert "HATHAT" not in world.agent.db["reservations"]


def test_booking_files_reservation_and_takes_seats(tau2_data: Path) -> None:
    world = _world(tau2_data)
    db = world.agent.db
    text, error = world.call(
        "assistant",
        "book_reservation",
        _booking(
            payment_methods=[
                {"payment_id": CERT, "amount": 100},
                {"payment_id": CARD, "amount": "43"},  # coerced as τ²'s model does
            ]
        ),
    )
    assert not error
    res = json.loads(text)
    assert list(res) == [
        "reservation_id",
        "user_id",
        "origin",
        "destination",
        "flight_type",
        "cabin",
        "flights",
        "passengers",
        "payment_history",
        "created_at",
        "total_baggages",
        "nonfree_baggages",
        "insurance",
        "status",
    ]
    assert res["reservation_id"] == "HATHAT"
    assert res["created_at"] == "2024-05-15T15:00:00"
    assert res["flights"] == [
        {
            "flight_number": "HAT014",
            "origin": "JFK",
            "destination": "MIA",
            "date": "2024-05-20",
            "price": 143,
        }
    ]
    assert res["payment_history"] == [
        {"payment_id": CERT, "amount": 100},
        {"payment_id": CARD, "amount": 43},
    ]
    assert CERT not in db["users"][MEI]["payment_methods"]  # a certificate is used once
    assert db["users"][MEI]["reservations"][-1] == "HATHAT"
    assert db["flights"]["HAT014"]["dates"]["2024-05-20"]["available_seats"]["economy"] == 8


def test_same_certificate_twice_fails_after_spending_it(tau2_data: Path) -> None:
    # τ² checks each payment on its own, then fails on the second deduction: the
    # certificate is gone though nothing was booked.
    world = _world(tau2_data)
    payments = [{"payment_id": CERT, "amount": 71}, {"payment_id": CERT, "amount": 72}]
    text, error = world.call("assistant", "book_reservation", _booking(payment_methods=payments))
    assert (text, error) == (f"Error: '{CERT}'", True)
    assert CERT not in world.agent.db["users"][MEI]["payment_methods"]
    assert "HATHAT" not in world.agent.db["reservations"]


def test_baggage_update_charges_gift_card(tau2_data: Path) -> None:
    world = _world(tau2_data)
    db = world.agent.db
    assert db["users"][MEI]["payment_methods"][GIFT]["amount"] == 98.0
    args = {"reservation_id": "R9QDGB", "total_baggages": 3, "nonfree_baggages": 1}
    text, error = world.call(
        "assistant", "update_reservation_baggages", {**args, "payment_id": CERT}
    )
    assert (text, error) == ("Error: Certificate cannot be used to update reservation", True)
    text, error = world.call(
        "assistant", "update_reservation_baggages", {**args, "payment_id": GIFT}
    )
    assert not error
    assert json.loads(text)["payment_history"][-1] == {"payment_id": GIFT, "amount": 50}
    amount = db["users"][MEI]["payment_methods"][GIFT]["amount"]
    assert (amount, type(amount)) == (48.0, float)
    text, error = world.call(
        "assistant", "update_reservation_baggages", {**args, "payment_id": "nope"}
    )
    assert (text, error) == ("Error: Payment method not found", True)


def test_send_certificate_stores_a_float(tau2_data: Path) -> None:
    world = _world(tau2_data)
    for n, amount in enumerate(["100", 50, 25.5]):
        text, error = world.call(
            "assistant", "send_certificate", {"user_id": MEI, "amount": amount}
        )
        cid = f"certificate_{3221322 + n}"
        assert (text, error) == (
            f"Certificate {cid} added to user {MEI} with amount {amount}.",
            False,
        )
        stored = world.agent.db["users"][MEI]["payment_methods"][cid]
        assert stored == {"source": "certificate", "id": cid, "amount": float(str(amount))}
    text, error = world.call("assistant", "send_certificate", {"user_id": MEI, "amount": 1})
    assert (text, error) == ("Error: Too many certificates", True)


def test_flight_change_errors_and_search(tau2_data: Path) -> None:
    world = _world(tau2_data)
    flights = [{"flight_number": "HAT014", "date": "2024-05-20"}]
    call = world.call
    assert call(
        "assistant",
        "update_reservation_flights",
        {"reservation_id": "R9QDGB", "cabin": "first", "flights": flights, "payment_id": CARD},
    ) == ("Error: 'first'", True)
    assert call(
        "assistant",
        "update_reservation_flights",
        {"reservation_id": "R9QDGB", "cabin": "economy", "flights": ["x"], "payment_id": CARD},
    ) == ("Error: 'str' object has no attribute 'flight_number'", True)
    assert call(
        "assistant", "get_flight_status", {"flight_number": "HAT001", "date": "2024-05-03"}
    ) == (
        "cancelled",
        False,
    )
    text, _ = call(
        "assistant",
        "search_onestop_flight",
        {"origin": "LGA", "destination": "SEA", "date": "2024-05-20"},
    )
    pairs = json.loads(text)
    # An overnight first leg ("+1") connects on the next day's flights.
    assert ["HAT002", "2024-05-20", "HAT156", "2024-05-21"] in [
        [a["flight_number"], a["date"], b["flight_number"], b["date"]] for a, b in pairs
    ]
    assert all(a["status"] == "available" and b["date"] for a, b in pairs)


def test_calculate_and_call_errors(tau2_data: Path) -> None:
    world = _world(tau2_data)
    assert world.call("assistant", "calculate", {"expression": "10 / 3"}) == ("3.33", False)
    assert world.call("assistant", "calculate", {"expression": "2 + x"}) == (
        "Error: Invalid characters in expression",
        True,
    )
    assert world.call("assistant", "calculate", {"expression": "1/0"}) == (
        "Error: division by zero",
        True,
    )
    assert world.call("assistant", "cancel_flight", {}) == (
        "Error: Tool 'cancel_flight' not found.",
        True,
    )
    assert world.call("assistant", "get_user_details", {}) == (
        "Error: AirlineTools.get_user_details() missing 1 required positional argument: 'user_id'",
        True,
    )
    assert world.call("user", "get_user_details", {"user_id": MEI})[1]  # no user tools


def test_worlds_are_independent(tau2_data: Path) -> None:
    """Worlds share one parsed database (copy-on-write): whatever one episode's tools
    change, another episode, and a later one, see the database as loaded."""
    a, b = _world(tau2_data), _world(tau2_data)
    search = {"origin": "JFK", "destination": "MIA", "date": "2024-05-20"}

    def economy_seats(world: World) -> int:
        found = json.loads(world.call("assistant", "search_direct_flight", search)[0])
        return int(
            next(f for f in found if f["flight_number"] == "HAT014")["available_seats"]["economy"]
        )

    assert economy_seats(a) == 9  # a search first: it must not keep stale records
    calls = [
        ("book_reservation", _booking()),
        ("cancel_reservation", {"reservation_id": "R9QDGB"}),
        ("send_certificate", {"user_id": MEI, "amount": 10}),
        (
            "update_reservation_baggages",
            {
                "reservation_id": "07S7FC",
                "total_baggages": 4,
                "nonfree_baggages": 1,
                "payment_id": GIFT,
            },
        ),
    ]
    for name, args in calls:
        assert a.call("assistant", name, args)[1] is False, name
    assert economy_seats(a) == 8
    assert a.agent.db["reservations"]["R9QDGB"]["status"] == "cancelled"
    assert economy_seats(b) == 9
    assert a.agent.db["users"][MEI]["payment_methods"][GIFT]["amount"] == 48.0
    assert a.agent.db["users"][MEI]["payment_methods"][GIFT]["amount"] == 48.0
    assert b.agent.db["reservations"]["R9QDGB"]["status"] is None
    assert b.agent.db["users"][MEI]["payment_methods"][GIFT]["amount"] == 98.0
    assert b.agent.db["users"][MEI]["payment_methods"][GIFT]["amount"] == 98.0
    fresh = tau2_airline.normalize_db(json.loads((tau2_data / "airline" / "db.json").read_text()))
    assert _world(tau2_data).agent.db == fresh
