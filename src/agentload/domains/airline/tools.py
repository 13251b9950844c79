"""Skyline Air tools.

Tools keep the data consistent (seats, balances, ownership of payment methods, the shape of
an itinerary) and refuse with ToolError otherwise; the policy's judgement calls (may this
booking be cancelled? is compensation due?) are the agent's to make, as a human agent's would
be. Every write tool checks everything before it changes anything, and changes a record only
after replacing it by a private copy (`own`): episodes share the records of one base
database (copy-on-write).
"""

from __future__ import annotations

import itertools
from typing import Any

from agentload.domains.airline.data import (
    BAG_FEE,
    CABINS,
    INSURANCE_PER_PASSENGER,
    payment_id,
    reservation_id,
)
from agentload.domains.base import Tool, ToolError, evaluate_arithmetic, own

BOOKABLE = ("scheduled", "delayed")
MAX_PASSENGERS = 5
MIN_CONNECTION_MINUTES = 60

# --- lookups ---------------------------------------------------------------------------------


def _user(db: dict, user_id: str) -> dict:
    user = db["users"].get(user_id)
    if user is None:
        raise ToolError(f"user {user_id} not found")
    return user


def _reservation(db: dict, rid: str, active: bool = False) -> dict:
    res = db["reservations"].get(rid)
    if res is None:
        raise ToolError(f"reservation {rid} not found")
    if active and res["status"] != "active":
        raise ToolError(f"reservation {rid} is {res['status']}")
    return res


def _instance(db: dict, number: str, day: str) -> tuple[dict, dict]:
    flight = db["flights"].get(number)
    if flight is None:
        raise ToolError(f"flight {number} not found")
    inst = flight["dates"].get(day)
    if inst is None:
        raise ToolError(f"flight {number} does not operate on {day}")
    return flight, inst


def _payment(db: dict, user: dict, pid: str, allowed: tuple[str, ...]) -> dict:
    method = user["payment_methods"].get(pid)
    if method is None:
        raise ToolError(f"payment method {pid} not found in the profile of {user['user_id']}")
    if method["source"] not in allowed:
        raise ToolError(f"a {method['source']} cannot be used for this payment")
    return method


def _check_funds(method: dict, amount: int) -> None:
    if method["source"] == "gift_card" and method["balance"] < amount:
        raise ToolError(f"gift card balance {method['balance']} is less than {amount}")
    if method["source"] == "certificate" and method["amount"] < amount:
        raise ToolError(f"certificate amount {method['amount']} is less than {amount}")


def _charge(db: dict, user_id: str, pid: str, amount: int) -> None:
    """Apply a charge (or, negative, a refund) to a payment method already checked."""
    source = db["users"][user_id]["payment_methods"][pid]["source"]
    if source == "gift_card":
        own(db, "users", user_id)["payment_methods"][pid]["balance"] -= amount
    elif source == "certificate":
        del own(db, "users", user_id)["payment_methods"][pid]  # single use; remainder forfeited


def _own_reservation(db: dict, rid: str, pid: str, amount: int) -> dict:
    """The reservation, made private, with a charge (or refund) recorded if there is one."""
    res = own(db, "reservations", rid)
    if amount:
        res["payment_history"].append({"payment_id": pid, "amount": amount})
    return res


def _minutes(hhmm: str) -> int:
    h, m = hhmm.split(":")
    return int(h) * 60 + int(m)


def _segments(db: dict, flights: list[dict], cabin: str) -> list[dict]:
    segs = []
    for leg in flights:
        flight, inst = _instance(db, leg["flight_number"], leg["date"])
        segs.append(
            {
                "flight_number": flight["flight_number"],
                "origin": flight["origin"],
                "destination": flight["destination"],
                "date": leg["date"],
                "price": inst["prices"][cabin],
            }
        )
    return segs


def _check_itinerary(db: dict, segs: list[dict], origin: str, dest: str, trip: str) -> None:
    if not segs:
        raise ToolError("an itinerary needs at least one flight")
    if segs[0]["origin"] != origin:
        raise ToolError(f"the first flight leaves from {segs[0]['origin']}, not {origin}")
    for prev, nxt in itertools.pairwise(segs):
        if prev["destination"] != nxt["origin"]:
            raise ToolError(
                f"flight {nxt['flight_number']} leaves from {nxt['origin']}, but the previous "
                f"flight arrives at {prev['destination']}"
            )
        if nxt["date"] < prev["date"]:
            raise ToolError("flights must be in date order")
        if nxt["date"] == prev["date"]:
            arr = _minutes(db["flights"][prev["flight_number"]]["arrival_time"])
            dep = _minutes(db["flights"][nxt["flight_number"]]["departure_time"])
            if dep - arr < MIN_CONNECTION_MINUTES:
                raise ToolError(
                    f"connection to {nxt['flight_number']} is shorter than "
                    f"{MIN_CONNECTION_MINUTES} minutes"
                )
    end = segs[-1]["destination"]
    if trip == "one_way" and end != dest:
        raise ToolError(f"a one-way itinerary must end at {dest}, not {end}")
    if trip == "round_trip" and (end != origin or dest not in [s["destination"] for s in segs]):
        raise ToolError(f"a round trip must go to {dest} and come back to {origin}")


def _seat_delta(db: dict, deltas: dict[tuple[str, str, str], int]) -> None:
    """Check then apply seat changes: key (flight, date, cabin) -> seats taken (+) or freed."""
    for (number, day, cabin), n in deltas.items():
        _, inst = _instance(db, number, day)
        if n > 0 and inst["status"] not in BOOKABLE:
            raise ToolError(f"flight {number} on {day} is {inst['status']} and cannot be booked")
        if n > inst["available_seats"][cabin]:
            raise ToolError(
                f"flight {number} on {day} has {inst['available_seats'][cabin]} {cabin} seats "
                f"left, {n} needed"
            )
    owned: dict[str, dict] = {}
    for (number, day, cabin), n in deltas.items():
        if n > 0 or db["flights"][number]["dates"][day]["status"] in BOOKABLE:
            # (seats on flown or cancelled flights stay as they are)
            if number not in owned:
                owned[number] = own(db, "flights", number)
            owned[number]["dates"][day]["available_seats"][cabin] -= n


def _seats(segs: list[dict], cabin: str, pax: int, sign: int) -> dict:
    out: dict[tuple[str, str, str], int] = {}
    for s in segs:
        key = (s["flight_number"], s["date"], cabin)
        out[key] = out.get(key, 0) + sign * pax
    return out


def _merge(a: dict, b: dict) -> dict:
    out = dict(a)
    for k, v in b.items():
        out[k] = out.get(k, 0) + v
    return {k: v for k, v in out.items() if v != 0}


def _passengers(passengers: list[dict]) -> list[dict]:
    if not 1 <= len(passengers) <= MAX_PASSENGERS:
        raise ToolError(f"a reservation has 1 to {MAX_PASSENGERS} passengers")
    return [
        {"first_name": p["first_name"], "last_name": p["last_name"], "dob": p["dob"]}
        for p in passengers
    ]


# --- read tools ------------------------------------------------------------------------------


def get_customer_profile(db: dict, user_id: str) -> dict:
    return _user(db, user_id)


def get_booking(db: dict, reservation_id: str) -> dict:
    return _reservation(db, reservation_id)


def check_flight_status(db: dict, flight_number: str, date: str) -> dict:
    flight, inst = _instance(db, flight_number, date)
    out = {
        "flight_number": flight_number,
        "date": date,
        "origin": flight["origin"],
        "destination": flight["destination"],
        "scheduled_departure": f"{date}T{flight['departure_time']}:00",
        "status": inst["status"],
    }
    if "estimated_departure" in inst:
        out["estimated_departure"] = inst["estimated_departure"]
    return out


def _offer(flight: dict, day: str, inst: dict) -> dict:
    return {
        "flight_number": flight["flight_number"],
        "origin": flight["origin"],
        "destination": flight["destination"],
        "date": day,
        "departure_time": flight["departure_time"],
        "arrival_time": flight["arrival_time"],
        "status": inst["status"],
        "available_seats": inst["available_seats"],
        "prices": inst["prices"],
    }


def _bookable_from(db: dict, origin: str, day: str) -> list[tuple[dict, dict]]:
    out = []
    for flight in db["flights"].values():
        if flight["origin"] != origin:
            continue
        inst = flight["dates"].get(day)
        if inst is not None and inst["status"] in BOOKABLE:
            out.append((flight, inst))
    return out


def _check_airports(db: dict, *codes: str) -> None:
    for c in codes:
        if c not in db["airports"]:
            raise ToolError(f"unknown airport code {c}")


def find_nonstop_flights(db: dict, origin: str, destination: str, date: str) -> list[dict]:
    _check_airports(db, origin, destination)
    return [
        _offer(f, date, inst)
        for f, inst in _bookable_from(db, origin, date)
        if f["destination"] == destination
    ]


def find_connecting_flights(db: dict, origin: str, destination: str, date: str) -> list[list[dict]]:
    _check_airports(db, origin, destination)
    out = []
    for f1, i1 in _bookable_from(db, origin, date):
        if f1["destination"] == destination:
            continue
        for f2, i2 in _bookable_from(db, f1["destination"], date):
            gap = _minutes(f2["departure_time"]) - _minutes(f1["arrival_time"])
            if f2["destination"] == destination and gap >= MIN_CONNECTION_MINUTES:
                out.append([_offer(f1, date, i1), _offer(f2, date, i2)])
    return out


def list_airports(db: dict) -> dict:
    return {code: a["city"] for code, a in db["airports"].items()}


def calculate(db: dict, expression: str) -> str:
    return f"{round(evaluate_arithmetic(expression), 2):g}"


def handoff_to_human(db: dict, summary: str) -> str:
    return "Transfer successful: a human agent will continue this conversation."


# --- write tools -----------------------------------------------------------------------------


def create_booking(
    db: dict,
    user_id: str,
    origin: str,
    destination: str,
    trip_type: str,
    cabin: str,
    flights: list[dict],
    passengers: list[dict],
    payment_method_id: str,
    total_baggages: int,
    nonfree_baggages: int,
    insurance: bool,
) -> dict:
    user = _user(db, user_id)
    total_baggages, nonfree_baggages = int(total_baggages), int(nonfree_baggages)
    if nonfree_baggages > total_baggages:
        raise ToolError("nonfree_baggages cannot exceed total_baggages")
    pax = _passengers(passengers)
    segs = _segments(db, flights, cabin)
    _check_itinerary(db, segs, origin, destination, trip_type)
    amount = (
        sum(s["price"] for s in segs) * len(pax)
        + (INSURANCE_PER_PASSENGER * len(pax) if insurance else 0)
        + nonfree_baggages * BAG_FEE
    )
    method = _payment(db, user, payment_method_id, ("credit_card", "gift_card", "certificate"))
    _check_funds(method, amount)
    n = db["meta"]["reservations_issued"] + 1
    while reservation_id(n) in db["reservations"]:
        n += 1
    _seat_delta(db, _seats(segs, cabin, len(pax), +1))
    # From here on nothing can fail.
    _charge(db, user_id, payment_method_id, amount)
    db["meta"]["reservations_issued"] = n
    rid = reservation_id(n)
    res = {
        "reservation_id": rid,
        "user_id": user_id,
        "origin": origin,
        "destination": destination,
        "trip_type": trip_type,
        "cabin": cabin,
        "flights": segs,
        "passengers": pax,
        "payment_history": [{"payment_id": payment_method_id, "amount": amount}],
        "created_at": db["meta"]["now"],
        "total_baggages": total_baggages,
        "nonfree_baggages": nonfree_baggages,
        "insurance": bool(insurance),
        "status": "active",
    }
    db["reservations"][rid] = res
    own(db, "users", user_id)["reservations"].append(rid)
    return res


def cancel_booking(db: dict, reservation_id: str) -> dict:
    res = _reservation(db, reservation_id, active=True)
    user = db["users"][res["user_id"]]
    net: dict[str, int] = {}
    for p in res["payment_history"]:
        net[p["payment_id"]] = net.get(p["payment_id"], 0) + p["amount"]
    _seat_delta(db, _seats(res["flights"], res["cabin"], len(res["passengers"]), -1))
    res = own(db, "reservations", reservation_id)
    for pid, amount in net.items():
        method = user["payment_methods"].get(pid)
        # Certificates are not refunded (and are gone once used).
        if amount <= 0 or method is None or method["source"] == "certificate":
            continue
        _charge(db, user["user_id"], pid, -amount)
        res["payment_history"].append({"payment_id": pid, "amount": -amount})
    res["status"] = "cancelled"
    return res


def change_booking_flights(
    db: dict, reservation_id: str, cabin: str, flights: list[dict], payment_method_id: str
) -> dict:
    res = _reservation(db, reservation_id, active=True)
    user = db["users"][res["user_id"]]
    pax = len(res["passengers"])
    kept = {(s["flight_number"], s["date"]): s for s in res["flights"]}
    segs = []
    for leg in flights:
        old = kept.get((leg["flight_number"], leg["date"]))
        # A segment the customer keeps in the same cabin keeps the price paid.
        segs.append(dict(old) if old and cabin == res["cabin"] else _segments(db, [leg], cabin)[0])
    _check_itinerary(db, segs, res["origin"], res["destination"], res["trip_type"])
    diff = (sum(s["price"] for s in segs) - sum(s["price"] for s in res["flights"])) * pax
    method = _payment(db, user, payment_method_id, ("credit_card", "gift_card"))
    _check_funds(method, diff)
    _seat_delta(
        db,
        _merge(_seats(res["flights"], res["cabin"], pax, -1), _seats(segs, cabin, pax, +1)),
    )
    _charge(db, user["user_id"], payment_method_id, diff)
    res = _own_reservation(db, reservation_id, payment_method_id, diff)
    res["flights"] = segs
    res["cabin"] = cabin
    return res


def change_booking_passengers(db: dict, reservation_id: str, passengers: list[dict]) -> dict:
    res = _reservation(db, reservation_id, active=True)
    if len(passengers) != len(res["passengers"]):
        raise ToolError(
            f"the reservation has {len(res['passengers'])} passengers; the number of "
            "passengers cannot change"
        )
    pax = _passengers(passengers)
    res = own(db, "reservations", reservation_id)
    res["passengers"] = pax
    return res


def set_booking_bags(
    db: dict,
    reservation_id: str,
    total_baggages: int,
    nonfree_baggages: int,
    payment_method_id: str,
) -> dict:
    res = _reservation(db, reservation_id, active=True)
    user = db["users"][res["user_id"]]
    total_baggages, nonfree_baggages = int(total_baggages), int(nonfree_baggages)
    if nonfree_baggages > total_baggages:
        raise ToolError("nonfree_baggages cannot exceed total_baggages")
    cost = max(0, nonfree_baggages - res["nonfree_baggages"]) * BAG_FEE
    method = _payment(db, user, payment_method_id, ("credit_card", "gift_card"))
    _check_funds(method, cost)
    _charge(db, user["user_id"], payment_method_id, cost)
    res = _own_reservation(db, reservation_id, payment_method_id, cost)
    res["total_baggages"] = total_baggages
    res["nonfree_baggages"] = nonfree_baggages
    return res


def issue_travel_certificate(db: dict, user_id: str, amount: int) -> str:
    _user(db, user_id)
    amount = int(amount)
    n = db["meta"]["certificates_issued"] + 1
    pid = payment_id("certificate", n, namespace="skyline-issued")
    db["meta"]["certificates_issued"] = n
    own(db, "users", user_id)["payment_methods"][pid] = {
        "id": pid,
        "source": "certificate",
        "amount": amount,
    }
    return f"Certificate {pid} of {amount} dollars added to the profile of {user_id}."


# --- schemas ---------------------------------------------------------------------------------

_DATE = {"type": "string", "pattern": r"^\d{4}-\d{2}-\d{2}$", "description": "YYYY-MM-DD"}
_AIRPORT = {"type": "string", "pattern": "^[A-Z]{3}$", "description": "IATA code, e.g. JFK"}
_CABIN = {"type": "string", "enum": list(CABINS)}
_STR = {"type": "string"}
_PASSENGER = {
    "type": "object",
    "properties": {
        "first_name": _STR,
        "last_name": _STR,
        "dob": {**_DATE, "description": "date of birth, YYYY-MM-DD"},
    },
    "required": ["first_name", "last_name", "dob"],
    "additionalProperties": False,
}
_LEG = {
    "type": "object",
    "properties": {"flight_number": {**_STR, "description": "e.g. SK123"}, "date": _DATE},
    "required": ["flight_number", "date"],
    "additionalProperties": False,
}
_LEGS = {"type": "array", "items": _LEG, "minItems": 1}
_COUNT = {"type": "integer", "minimum": 0}


def _params(required: list[str] | None = None, **props: Any) -> dict:
    return {
        "type": "object",
        "properties": props,
        "required": list(props) if required is None else required,
        "additionalProperties": False,
    }


def _desc(schema: dict, text: str) -> dict:
    return {**schema, "description": text}


TOOLS: list[Tool] = [
    Tool(
        "get_customer_profile",
        "Get a customer's profile: name, contact details, membership level, payment methods "
        "(with gift card balances and certificate amounts), saved passengers and reservation ids.",
        _params(user_id=_desc(_STR, "the user id, e.g. ava_lopez_1234")),
        False,
        get_customer_profile,
    ),
    Tool(
        "get_booking",
        "Get a reservation: itinerary with the price paid per passenger for each flight, "
        "passengers, cabin, baggage, insurance, payment history and status.",
        _params(reservation_id=_desc(_STR, "six characters, e.g. 8JQ4ZK")),
        False,
        get_booking,
    ),
    Tool(
        "check_flight_status",
        "Get the status of a flight on a date: scheduled, delayed (with the estimated "
        "departure), cancelled, departed or landed.",
        _params(flight_number=_desc(_STR, "e.g. SK123"), date=_DATE),
        False,
        check_flight_status,
    ),
    Tool(
        "find_nonstop_flights",
        "Search nonstop flights between two airports on a date that can still be booked, with "
        "seats left and the current price per passenger for each cabin.",
        _params(origin=_AIRPORT, destination=_AIRPORT, date=_DATE),
        False,
        find_nonstop_flights,
    ),
    Tool(
        "find_connecting_flights",
        "Search itineraries with exactly one connection (same day, at least 60 minutes) between "
        "two airports on a date. Each result is a pair of flights.",
        _params(origin=_AIRPORT, destination=_AIRPORT, date=_DATE),
        False,
        find_connecting_flights,
    ),
    Tool(
        "list_airports",
        "List the airports Skyline Air serves: IATA code and city.",
        _params(),
        False,
        list_airports,
    ),
    Tool(
        "calculate",
        "Evaluate an arithmetic expression with numbers, + - * / and parentheses; the result "
        "is rounded to two decimals.",
        _params(expression=_desc(_STR, "e.g. (320 + 185) * 2 + 50")),
        False,
        calculate,
    ),
    Tool(
        "handoff_to_human",
        "Hand the conversation to a human agent, with a summary of the customer's issue. Only "
        "when the request cannot be handled within the policy by the available tools.",
        _params(summary=_STR),
        False,
        handoff_to_human,
    ),
    Tool(
        "create_booking",
        "Book a new reservation for a customer and charge one payment method from their "
        "profile: flight prices times passengers, plus travel insurance and non-free bags.",
        _params(
            user_id=_STR,
            origin=_AIRPORT,
            destination=_AIRPORT,
            trip_type={"type": "string", "enum": ["one_way", "round_trip"]},
            cabin=_CABIN,
            flights=_desc(_LEGS, "every flight of the itinerary, in order"),
            passengers={"type": "array", "items": _PASSENGER, "minItems": 1},
            payment_method_id=_desc(_STR, "an id from the customer's payment methods"),
            total_baggages=_COUNT,
            nonfree_baggages=_COUNT,
            insurance={"type": "boolean"},
        ),
        True,
        create_booking,
    ),
    Tool(
        "cancel_booking",
        "Cancel a whole reservation and refund the original payment methods (certificates are "
        "not refunded).",
        _params(reservation_id=_STR),
        True,
        cancel_booking,
    ),
    Tool(
        "change_booking_flights",
        "Change the flights and/or cabin of a reservation. Give the complete new itinerary, "
        "including flights that do not change. The fare difference for all passengers is "
        "charged to, or refunded to, the given credit card or gift card.",
        _params(
            reservation_id=_STR,
            cabin=_CABIN,
            flights=_desc(_LEGS, "every flight of the new itinerary, in order"),
            payment_method_id=_desc(_STR, "a credit card or gift card from the profile"),
        ),
        True,
        change_booking_flights,
    ),
    Tool(
        "change_booking_passengers",
        "Replace the passenger details of a reservation; the number of passengers must stay "
        "the same.",
        _params(
            reservation_id=_STR, passengers={"type": "array", "items": _PASSENGER, "minItems": 1}
        ),
        True,
        change_booking_passengers,
    ),
    Tool(
        "set_booking_bags",
        "Set the number of checked bags of a reservation. Non-free bags added are charged "
        f"{BAG_FEE} dollars each to the given credit card or gift card.",
        _params(
            reservation_id=_STR,
            total_baggages=_COUNT,
            nonfree_baggages=_COUNT,
            payment_method_id=_STR,
        ),
        True,
        set_booking_bags,
    ),
    Tool(
        "issue_travel_certificate",
        "Add a travel certificate of the given amount in dollars to a customer's profile, as "
        "compensation allowed by the policy.",
        _params(user_id=_STR, amount={"type": "integer", "minimum": 1, "maximum": 1000}),
        True,
        issue_travel_certificate,
    ),
]
