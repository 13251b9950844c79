"""τ²-bench's airline domain: the agent's tools over the flight database.

The database is a plain dict in the shape τ²'s `FlightDB` model dumps to (`normalize_db`).
Tools follow τ²'s airline tools step for step, so that a call leaves the same database, and
answers with the same text, as it would there, including on bad arguments: τ² passes the
model's arguments through unchecked and builds its pydantic models from them where it needs
them. Exactly typed arguments take a plain-dict path; anything else is checked by small
pydantic models of the same names and fields (`_models`), which coerce as τ²'s do and word the
same validation errors.

A world's tables are copy-on-write views of the database parsed once per process
(`load_json_db`): tools that change a record take it with `write=True` (the episode's own
copy), reads and searches look at records where they are.
"""

from __future__ import annotations

import copy
import functools
import math
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from types import SimpleNamespace
from typing import Any, Literal

from agentload.domains.tau2.toolkit import (
    Record,
    ToolError,
    ToolKit,
    World,
    calculate,
    load_json_db,
    read_policy,
    tool,
)

__all__ = ["AGENT_KIT", "USER_KIT", "AirlineTools", "make_world", "normalize_db", "policy"]

# τ²'s airline tools live at a fixed "now" (its _get_datetime).
NOW = "2024-05-15T15:00:00"
# The ids τ² hands out, in order: at most three new reservations and three certificates.
NEW_RESERVATION_IDS = ("HATHAT", "HATHAU", "HATHAV")
NEW_CERTIFICATE_IDS = ("certificate_3221322", "certificate_3221323", "certificate_3221324")
CABINS = ("business", "economy", "basic_economy")
FLIGHT_TYPES = ("round_trip", "one_way")
INSURANCE = ("yes", "no")
BAG_FEE = 50
INSURANCE_FEE = 30
AIRPORTS = (
    ("SFO", "San Francisco"),
    ("JFK", "New York"),
    ("LAX", "Los Angeles"),
    ("ORD", "Chicago"),
    ("DFW", "Dallas"),
    ("DEN", "Denver"),
    ("SEA", "Seattle"),
    ("ATL", "Atlanta"),
    ("MIA", "Miami"),
    ("BOS", "Boston"),
    ("PHX", "Phoenix"),
    ("IAH", "Houston"),
    ("LAS", "Las Vegas"),
    ("MCO", "Orlando"),
    ("EWR", "Newark"),
    ("CLT", "Charlotte"),
    ("MSP", "Minneapolis"),
    ("DTW", "Detroit"),
    ("PHL", "Philadelphia"),
    ("LGA", "LaGuardia"),
)

# --- tool schemas, as τ² generates them from its signatures and docstrings ------------------


def _title(name: str) -> str:
    return name.title().replace("_", " ")  # pydantic's default field title


def _object(title: str, props: dict[str, dict[str, Any]], **head: Any) -> dict[str, Any]:
    """A JSON-schema object in pydantic's key order; each prop gets its title before its
    type, as pydantic writes them."""
    out: dict[str, Any] = dict(head)
    properties = {}
    for name, prop in props.items():
        p = dict(prop)
        kind = p.pop("type")
        properties[name] = {**p, "title": _title(name), "type": kind}
    out["properties"] = properties
    if props:
        out["required"] = list(props)
    out["title"] = title
    out["type"] = "object"
    return out


def _str(description: str, **extra: Any) -> dict[str, Any]:
    return {"description": description, **extra, "type": "string"}


def _int(description: str) -> dict[str, Any]:
    return {"description": description, "type": "integer"}


def _array_of(model: str, description: str) -> dict[str, Any]:
    items = {
        "anyOf": [{"$ref": f"#/$defs/{model}"}, {"additionalProperties": True, "type": "object"}]
    }
    return {"description": description, "items": items, "type": "array"}


def _flight_info_def() -> dict[str, Any]:
    return _object(
        "FlightInfo",
        {
            "flight_number": _str("Flight number, such as 'HAT001'."),
            "date": _str(
                "The date for the flight in the format 'YYYY-MM-DD', such as '2024-05-01'."
            ),
        },
    )


def _passenger_def() -> dict[str, Any]:
    return _object(
        "Passenger",
        {
            "first_name": _str("Passenger's first name"),
            "last_name": _str("Passenger's last name"),
            "dob": _str("Date of birth in YYYY-MM-DD format"),
        },
    )


def _payment_def() -> dict[str, Any]:
    return _object(
        "Payment",
        {
            "payment_id": _str("Unique identifier for the payment"),
            "amount": _int("Payment amount in dollars"),
        },
    )


def _params(props: dict[str, dict[str, Any]], **defs: dict[str, Any]) -> dict[str, Any]:
    return _object("parameters", props, **({"$defs": defs} if defs else {}))


_PAYMENT_ID = (
    "The payment id stored in user profile, such as 'credit_card_7815826', "
    "'gift_card_7815826', 'certificate_7815826'."
)
_ORIGIN = "The origin city airport in three letters, such as 'JFK'."
_DESTINATION = "The destination city airport in three letters, such as 'LAX'."
_DATE = "The date of the flight in the format 'YYYY-MM-DD', such as '{}'."

_BOOK_RESERVATION = _params(
    {
        "user_id": _str("The ID of the user to book the reservation such as 'sara_doe_496'`."),
        "origin": _str("The IATA code for the origin city such as 'SFO'."),
        "destination": _str("The IATA code for the destination city such as 'JFK'."),
        "flight_type": _str(
            "The type of flight such as 'one_way' or 'round_trip'.", enum=list(FLIGHT_TYPES)
        ),
        "cabin": _str(
            "The cabin class such as 'basic_economy', 'economy', or 'business'.",
            enum=list(CABINS),
        ),
        "flights": _array_of(
            "FlightInfo", "An array of objects containing details about each piece of flight."
        ),
        "passengers": _array_of(
            "Passenger", "An array of objects containing details about each passenger."
        ),
        "payment_methods": _array_of(
            "Payment", "An array of objects containing details about each payment method."
        ),
        "total_baggages": _int("The total number of baggage items to book the reservation."),
        "nonfree_baggages": _int("The number of non-free baggage items to book the reservation."),
        "insurance": _str("Whether the reservation has insurance.", enum=list(INSURANCE)),
    },
    FlightInfo=_flight_info_def(),
    Passenger=_passenger_def(),
    Payment=_payment_def(),
)
_CALCULATE = _params(
    {
        "expression": _str(
            "The mathematical expression to calculate, such as '2 + 2'. The expression can "
            "contain numbers, operators (+, -, *, /), parentheses, and spaces."
        )
    }
)
_CANCEL_RESERVATION = _params({"reservation_id": _str("The reservation ID, such as 'ZFA04Y'.")})
_GET_RESERVATION_DETAILS = _params(
    {"reservation_id": _str("The reservation ID, such as '8JX2WO'.")}
)
_GET_USER_DETAILS = _params({"user_id": _str("The user ID, such as 'sara_doe_496'.")})
_LIST_ALL_AIRPORTS = _params({})
_SEARCH_DIRECT_FLIGHT = _params(
    {
        "origin": _str(_ORIGIN),
        "destination": _str(_DESTINATION),
        "date": _str(_DATE.format("2024-01-01")),
    }
)
_SEARCH_ONESTOP_FLIGHT = _params(
    {
        "origin": _str(_ORIGIN),
        "destination": _str(_DESTINATION),
        "date": _str(_DATE.format("2024-05-01")),
    }
)
_SEND_CERTIFICATE = _params(
    {
        "user_id": _str("The ID of the user to book the reservation, such as 'sara_doe_496'."),
        "amount": _int("The amount of the certificate to send."),
    }
)
_TRANSFER_TO_HUMAN_AGENTS = _params({"summary": _str("A summary of the user's issue.")})
_UPDATE_RESERVATION_BAGGAGES = _params(
    {
        "reservation_id": _str("The reservation ID, such as 'ZFA04Y'"),
        "total_baggages": _int(
            "The updated total number of baggage items included in the reservation."
        ),
        "nonfree_baggages": _int(
            "The updated number of non-free baggage items included in the reservation."
        ),
        "payment_id": _str(_PAYMENT_ID),
    }
)
_UPDATE_RESERVATION_FLIGHTS = _params(
    {
        "reservation_id": _str("The reservation ID, such as 'ZFA04Y'."),
        "cabin": _str("The cabin class of the reservation", enum=list(CABINS)),
        "flights": _array_of(
            "FlightInfo",
            "An array of objects containing details about each piece of flight in the ENTIRE "
            "new reservation. Even if the a flight segment is not changed, it should still be "
            "included in the array.",
        ),
        "payment_id": _str(_PAYMENT_ID),
    },
    FlightInfo=_flight_info_def(),
)
_UPDATE_RESERVATION_PASSENGERS = _params(
    {
        "reservation_id": _str("The reservation ID, such as 'ZFA04Y'."),
        "passengers": _array_of(
            "Passenger", "An array of objects containing details about each passenger."
        ),
    },
    Passenger=_passenger_def(),
)
_GET_FLIGHT_STATUS = _params(
    {"flight_number": _str("The flight number."), "date": _str("The date of the flight.")}
)
_TRANSFER_DESCRIPTION = (
    "Transfer the user to a human agent, with a summary of the user's issue.\n\n"
    "Only transfer if\n"
    " -  the user explicitly asks for a human agent\n"
    " -  given the policy and the available tools, you cannot solve the user's issue."
)

# --- the database in FlightDB's dump shape -------------------------------------------------

# Fields of each flight-date status, in the order of τ²'s model for that status.
_STATUS_FIELDS: dict[str, tuple[str, ...]] = {
    "available": ("available_seats", "prices"),
    "landed": ("actual_departure_time_est", "actual_arrival_time_est"),
    "cancelled": (),
    "delayed": ("estimated_departure_time_est", "estimated_arrival_time_est"),
    "flying": ("actual_departure_time_est", "estimated_arrival_time_est"),
    "on time": ("estimated_departure_time_est", "estimated_arrival_time_est"),
}
_METHOD_FIELDS: dict[str, tuple[str, ...]] = {
    "credit_card": ("brand", "last_four"),
    "gift_card": ("amount",),
    "certificate": ("amount",),
}


def _as_int(v: Any) -> int:
    """A number as pydantic's lax `int` takes it (integral floats, numeric strings)."""
    if type(v) is int:
        return v
    if isinstance(v, float):
        if not v.is_integer():
            raise ValueError(f"{v!r} is not an integer")
        return int(v)
    if isinstance(v, bool | str):
        return int(v)
    raise ValueError(f"{v!r} is not an integer")


def _as_float(v: Any) -> float:
    if isinstance(v, bool | int | float | str):
        return float(v)
    raise ValueError(f"{v!r} is not a number")


def _cabin_table(table: dict[str, Any]) -> dict[str, int]:
    for cabin in table:
        if cabin not in CABINS:
            raise ValueError(f"unknown cabin {cabin!r}")
    return {cabin: _as_int(n) for cabin, n in table.items()}


def _flight_date(status: dict[str, Any]) -> dict[str, Any]:
    fields = _STATUS_FIELDS[status["status"]]
    out: dict[str, Any] = {"status": status["status"]}
    for f in fields:
        v = status[f]
        out[f] = _cabin_table(v) if f in ("available_seats", "prices") else v
    return out


def _norm_flight(f: dict[str, Any]) -> dict[str, Any]:
    return {
        "flight_number": f["flight_number"],
        "origin": f["origin"],
        "destination": f["destination"],
        "scheduled_departure_time_est": f["scheduled_departure_time_est"],
        "scheduled_arrival_time_est": f["scheduled_arrival_time_est"],
        "dates": {d: _flight_date(s) for d, s in f["dates"].items()},
    }


def _norm_passenger(p: dict[str, Any]) -> dict[str, Any]:
    return {"first_name": p["first_name"], "last_name": p["last_name"], "dob": p["dob"]}


def _norm_method(m: dict[str, Any]) -> dict[str, Any]:
    source = m["source"]
    out = {"source": source, "id": m["id"]}
    for f in _METHOD_FIELDS[source]:
        out[f] = _as_float(m[f]) if f == "amount" else m[f]
    return out


def _norm_user(u: dict[str, Any]) -> dict[str, Any]:
    a = u["address"]
    return {
        "user_id": u["user_id"],
        "name": {"first_name": u["name"]["first_name"], "last_name": u["name"]["last_name"]},
        "address": {
            "address1": a["address1"],
            "address2": a.get("address2"),
            "city": a["city"],
            "country": a["country"],
            "state": a["state"],
            "zip": a["zip"],
        },
        "email": u["email"],
        "dob": u["dob"],
        "payment_methods": {k: _norm_method(m) for k, m in u["payment_methods"].items()},
        "saved_passengers": [_norm_passenger(p) for p in u["saved_passengers"]],
        "membership": u["membership"],
        "reservations": list(u["reservations"]),
    }


def _norm_reservation(r: dict[str, Any]) -> dict[str, Any]:
    return {
        "reservation_id": r["reservation_id"],
        "user_id": r["user_id"],
        "origin": r["origin"],
        "destination": r["destination"],
        "flight_type": r["flight_type"],
        "cabin": r["cabin"],
        "flights": [
            {
                "flight_number": f["flight_number"],
                "origin": f["origin"],
                "destination": f["destination"],
                "date": f["date"],
                "price": _as_int(f["price"]),
            }
            for f in r["flights"]
        ],
        "passengers": [_norm_passenger(p) for p in r["passengers"]],
        "payment_history": [
            {"payment_id": p["payment_id"], "amount": _as_int(p["amount"])}
            for p in r["payment_history"]
        ],
        "created_at": r["created_at"],
        "total_baggages": _as_int(r["total_baggages"]),
        "nonfree_baggages": _as_int(r["nonfree_baggages"]),
        "insurance": r["insurance"],
        "status": r.get("status"),
    }


def normalize_db(db: dict[str, Any]) -> dict[str, Any]:
    """The database as τ²'s FlightDB dumps it: fields in model order, defaults filled
    (address2, a reservation's status), payment and price amounts as ints, gift-card and
    certificate balances as floats, unknown nested keys dropped. Reads only, and builds new
    records (so a copy-on-write table's records are read where they are)."""
    extra = set(db) - {"flights", "users", "reservations"}
    if extra:
        raise ValueError(f"unexpected database keys: {sorted(extra)}")
    return {
        "flights": {k: _norm_flight(f) for k, f in dict.items(db["flights"])},
        "users": {k: _norm_user(u) for k, u in dict.items(db["users"])},
        "reservations": {k: _norm_reservation(r) for k, r in dict.items(db["reservations"])},
    }


# --- argument models (only for arguments that are not exactly typed) -------------------------


@functools.cache
def _models() -> SimpleNamespace:
    """pydantic models named and shaped like τ²'s, for the arguments the plain path does not
    take: they coerce (e.g. "2" or 2.0 to 2) and word validation errors exactly as τ²'s."""
    from pydantic import BaseModel

    class FlightInfo(BaseModel):
        flight_number: str
        date: str

    class Passenger(BaseModel):
        first_name: str
        last_name: str
        dob: str

    class Payment(BaseModel):
        payment_id: str
        amount: int

    class Certificate(BaseModel):
        source: Literal["certificate"]
        id: str
        amount: float

    class ReservationFlight(BaseModel):
        flight_number: str
        origin: str
        destination: str
        date: str
        price: int

    class Reservation(BaseModel):
        reservation_id: str
        user_id: str
        origin: str
        destination: str
        flight_type: Literal["round_trip", "one_way"]
        cabin: Literal["business", "economy", "basic_economy"]
        flights: list[ReservationFlight]
        passengers: list[Passenger]
        payment_history: list[Payment]
        created_at: str
        total_baggages: int
        nonfree_baggages: int
        insurance: Literal["yes", "no"]
        status: Literal["cancelled"] | None = None

    return SimpleNamespace(
        FlightInfo=FlightInfo,
        Passenger=Passenger,
        Payment=Payment,
        Certificate=Certificate,
        Reservation=Reservation,
    )


def _flight_info(d: dict[str, Any]) -> dict[str, Any]:
    n, day = d.get("flight_number"), d.get("date")
    if type(n) is str and type(day) is str:
        return {"flight_number": n, "date": day}
    return _models().FlightInfo(**d).model_dump()


def _passenger(d: dict[str, Any]) -> dict[str, Any]:
    first, last, dob = d.get("first_name"), d.get("last_name"), d.get("dob")
    if type(first) is str and type(last) is str and type(dob) is str:
        return {"first_name": first, "last_name": last, "dob": dob}
    return _models().Passenger(**d).model_dump()


def _payment(d: dict[str, Any]) -> dict[str, Any]:
    pid, amount = d.get("payment_id"), d.get("amount")
    if type(pid) is str and type(amount) is int:
        return {"payment_id": pid, "amount": amount}
    return _models().Payment(**d).model_dump()


def _new_payment(payment_id: str, amount: Any) -> dict[str, Any]:
    if type(amount) is int:
        return {"payment_id": payment_id, "amount": amount}
    return _models().Payment(payment_id=payment_id, amount=amount).model_dump()


def _as_models(items: Any, build: Callable[[dict[str, Any]], dict[str, Any]]) -> tuple[Any, bool]:
    """τ² turns a list argument into its models only when every item is a dict; otherwise the
    raw value stays, to fail wherever it is first used. (converted value, whether converted)"""
    if all(isinstance(x, dict) for x in items):
        return [build(x) for x in items], True
    return items, False


def _no_attribute(items: Iterable[Any], attr: str) -> None:
    """What τ² hits reading a field of an unconverted item: an AttributeError on the first."""
    for x in items:
        raise AttributeError(f"'{type(x).__name__}' object has no attribute '{attr}'")


def _record(table: dict[str, Any], key: Any, write: bool) -> Any:
    """table[key]; a read bypasses a copy-on-write table's copying (dict's own lookup)."""
    return table[key] if write else dict.__getitem__(table, key)


def _exact_fields(reservation: dict[str, Any]) -> bool:
    """The new reservation's scalar fields are already what τ²'s model would make of them."""
    return (
        type(reservation["origin"]) is str
        and type(reservation["destination"]) is str
        and type(reservation["flight_type"]) is str
        and reservation["flight_type"] in FLIGHT_TYPES
        and type(reservation["cabin"]) is str
        and reservation["cabin"] in CABINS
        and type(reservation["total_baggages"]) is int
        and type(reservation["nonfree_baggages"]) is int
        and type(reservation["insurance"]) is str
        and reservation["insurance"] in INSURANCE
    )


def _coerce_fields(
    reservation: dict[str, Any], passengers: Any, payment_methods: Any, payments_ok: bool
) -> None:
    """Let τ²'s model coerce the new reservation's fields, or word the error."""
    fields = {**reservation, "passengers": copy.deepcopy(passengers)}
    if not payments_ok:
        fields["payment_history"] = copy.deepcopy(payment_methods)
    checked = _models().Reservation(**fields).model_dump()
    for k in ("total_baggages", "nonfree_baggages"):
        reservation[k] = checked[k]


def _check_payments(methods: dict[str, Any], payment_methods: Any, total_price: Any) -> None:
    """Every payment names a method of the user's, within its balance, and they add up."""
    for p in payment_methods:
        pid, amount = p["payment_id"], p["amount"]
        if pid not in methods:
            raise ToolError(f"Payment method {pid} not found")
        m = methods[pid]
        if m["source"] in ("gift_card", "certificate") and m["amount"] < amount:
            raise ToolError(f"Not enough balance in payment method {pid}")
    total_payment = sum(p["amount"] for p in payment_methods)
    if total_payment != total_price:
        raise ToolError(
            f"Payment amount does not add up, total price is {total_price}, "
            f"but paid {total_payment}"
        )


def _charge(methods: dict[str, Any], payment_methods: Any) -> None:
    """Take the payments: off a gift card's balance; a certificate is used up."""
    for p in payment_methods:
        pid = p["payment_id"]
        m = methods[pid]
        if m["source"] == "gift_card":
            m["amount"] -= p["amount"]
        elif m["source"] == "certificate":
            methods.pop(pid)  # single use


# --- the tools -------------------------------------------------------------------------------


class AirlineTools(ToolKit):
    """τ²'s airline agent tools (named so, as τ²'s Python errors name the class)."""

    def __init__(self, db: dict[str, Any]) -> None:
        super().__init__(db)
        # (flights table, origin -> flight numbers in table order), built on the first search
        self._by_origin: tuple[dict[str, Any], dict[str, list[str]]] | None = None

    def normalize(self, db: dict[str, Any]) -> dict[str, Any]:
        return normalize_db(db)

    # Lookups, with τ²'s messages. A write takes the episode's own copy of a record (the
    # tables may be copy-on-write views of a database shared by episodes, see toolkit.py);
    # a read looks at the record where it is, which leaves it shared.

    def _user(self, user_id: Any, write: bool = False) -> dict[str, Any]:
        users = self.db["users"]
        if user_id not in users:
            raise ToolError(f"User {user_id} not found")
        return _record(users, user_id, write)

    def _reservation(self, reservation_id: Any, write: bool = False) -> dict[str, Any]:
        reservations = self.db["reservations"]
        if reservation_id not in reservations:
            raise ToolError(f"Reservation {reservation_id} not found")
        return _record(reservations, reservation_id, write)

    def _flight(self, flight_number: Any, write: bool = False) -> dict[str, Any]:
        flights = self.db["flights"]
        if flight_number not in flights:
            raise ToolError(f"Flight {flight_number} not found")
        return _record(flights, flight_number, write)

    def _flight_date(self, flight_number: Any, date: Any, write: bool = False) -> dict[str, Any]:
        dates = self._flight(flight_number, write)["dates"]
        if date not in dates:
            raise ToolError(f"Flight {flight_number} not found on date {date}")
        return dates[date]

    def _flights_from(self, origin: Any) -> Iterator[dict[str, Any]]:
        """The flights a search from `origin` must look at, in table order: those leaving
        `origin` (tools never change a flight's route, so the index lives as long as the
        table), or all of them when `origin` is not a string (τ² compares every flight).
        Read where they are: a search copies nothing."""
        flights: dict[str, Any] = self.db["flights"]
        if type(origin) is not str:
            yield from dict.values(flights)
            return
        if self._by_origin is None or self._by_origin[0] is not flights:
            index: dict[str, list[str]] = {}
            for number, f in dict.items(flights):
                index.setdefault(f["origin"], []).append(number)
            self._by_origin = (flights, index)
        for number in self._by_origin[1].get(origin, ()):
            yield dict.__getitem__(flights, number)

    def _direct(
        self, date: Any, origin: Any = None, destination: Any = None, leave_after: Any = None
    ) -> list[Record]:
        found = []
        for f in self._flights_from(origin):
            dates = f["dates"]
            if (
                (origin is None or f["origin"] == origin)
                and (destination is None or f["destination"] == destination)
                and date in dates
                and dates[date]["status"] == "available"
                and (leave_after is None or f["scheduled_departure_time_est"] >= leave_after)
            ):
                inst = dates[date]
                found.append(
                    Record(
                        flight_number=f["flight_number"],
                        origin=f["origin"],
                        destination=f["destination"],
                        status="available",
                        scheduled_departure_time_est=f["scheduled_departure_time_est"],
                        scheduled_arrival_time_est=f["scheduled_arrival_time_est"],
                        date=None,
                        available_seats=dict(inst["available_seats"]),
                        prices=dict(inst["prices"]),
                    )
                )
        return found

    def _charge_for_update(
        self, user: dict[str, Any], payment_id: Any, total_price: Any
    ) -> dict[str, Any] | None:
        """Charge (or, negative, refund) a change of a reservation; the payment record, or
        None when nothing is due. Certificates are refused; a gift card must cover it."""
        methods = user["payment_methods"]
        if payment_id not in methods:
            raise ToolError("Payment method not found")
        method = methods[payment_id]
        if method["source"] == "certificate":
            raise ToolError("Certificate cannot be used to update reservation")
        if method["source"] == "gift_card" and method["amount"] < total_price:
            raise ToolError("Gift card balance is not enough")
        if method["source"] == "gift_card":
            method["amount"] -= total_price
        return _new_payment(payment_id, total_price) if total_price != 0 else None

    @tool("write", description="Book a reservation.", parameters=_BOOK_RESERVATION)
    def book_reservation(
        self,
        user_id: Any,
        origin: Any,
        destination: Any,
        flight_type: Any,
        cabin: Any,
        flights: Any,
        passengers: Any,
        payment_methods: Any,
        total_baggages: Any,
        nonfree_baggages: Any,
        insurance: Any,
    ) -> Record:
        flights, flights_ok = _as_models(flights, _flight_info)
        passengers, passengers_ok = _as_models(passengers, _passenger)
        payment_methods, payments_ok = _as_models(payment_methods, _payment)
        user = self._user(user_id, write=True)
        reservation_id = self._new_reservation_id()
        reservation: dict[str, Any] = {
            "reservation_id": reservation_id,
            "user_id": user_id,
            "origin": origin,
            "destination": destination,
            "flight_type": flight_type,
            "cabin": cabin,
            "flights": [],
            "passengers": passengers,
            "payment_history": [dict(p) for p in payment_methods] if payments_ok else [],
            "created_at": NOW,
            "total_baggages": total_baggages,
            "nonfree_baggages": nonfree_baggages,
            "insurance": insurance,
            "status": None,
        }
        if not (passengers_ok and payments_ok and _exact_fields(reservation)):
            _coerce_fields(reservation, passengers, payment_methods, payments_ok)
        total_price, to_book = self._price_flights(reservation, flights, flights_ok, passengers)
        if insurance == "yes":
            total_price += INSURANCE_FEE * len(passengers)
        total_price += BAG_FEE * nonfree_baggages  # τ² uses the argument as given here
        methods = user["payment_methods"]
        _check_payments(methods, payment_methods, total_price)

        # Every check passed: charge, take the seats, file the reservation.
        _charge(methods, payment_methods)
        for inst in to_book:
            inst["available_seats"][cabin] -= len(passengers)
        self.db["reservations"][reservation_id] = reservation
        user["reservations"].append(reservation_id)
        return Record(reservation)

    def _new_reservation_id(self) -> str:
        reservation_id = next(
            (r for r in NEW_RESERVATION_IDS if r not in self.db["reservations"]), None
        )
        if reservation_id is None:
            raise ToolError("Too many reservations")
        return reservation_id

    def _price_flights(
        self, reservation: dict[str, Any], flights: Any, flights_ok: bool, passengers: Any
    ) -> tuple[Any, list[dict[str, Any]]]:
        """Add each flight to the reservation, checking it has the seats: the price of the
        flights for every passenger, and the flight dates whose seats to take."""
        cabin = reservation["cabin"]
        total_price: Any = 0
        to_book: list[dict[str, Any]] = []
        if not flights_ok:
            _no_attribute(flights, "flight_number")
        for info in flights:
            number = info["flight_number"]
            flight = self._flight(number, write=True)
            inst = self._flight_date(number, info["date"], write=True)
            if inst["status"] != "available":
                raise ToolError(f"Flight {number} not available on date {info['date']}")
            if inst["available_seats"][cabin] < len(passengers):
                raise ToolError(f"Not enough seats on flight {number}")
            price = inst["prices"][cabin]
            reservation["flights"].append(
                {
                    "flight_number": number,
                    "origin": flight["origin"],
                    "destination": flight["destination"],
                    "date": info["date"],
                    "price": price,
                }
            )
            to_book.append(inst)
            total_price += price * len(passengers)
        return total_price, to_book

    @tool(
        "generic",
        description="Calculate the result of a mathematical expression.",
        parameters=_CALCULATE,
    )
    def calculate(self, expression: Any) -> str:
        return calculate(expression)

    @tool("write", description="Cancel the whole reservation.", parameters=_CANCEL_RESERVATION)
    def cancel_reservation(self, reservation_id: Any) -> Record:
        reservation = self._reservation(reservation_id, write=True)
        history = reservation["payment_history"]
        history.extend([{"payment_id": p["payment_id"], "amount": -p["amount"]} for p in history])
        reservation["status"] = "cancelled"
        # τ² releases no seats on cancellation.
        return Record(reservation)

    @tool(
        "read",
        description="Get the details of a reservation.",
        parameters=_GET_RESERVATION_DETAILS,
    )
    def get_reservation_details(self, reservation_id: Any) -> Record:
        return Record(self._reservation(reservation_id))

    @tool(
        "read",
        description="Get the details of a user, including their reservations.",
        parameters=_GET_USER_DETAILS,
    )
    def get_user_details(self, user_id: Any) -> Record:
        return Record(self._user(user_id))

    @tool(
        "read",
        description="Returns a list of all available airports.",
        parameters=_LIST_ALL_AIRPORTS,
    )
    def list_all_airports(self) -> list[Record]:
        return [Record(iata=code, city=city) for code, city in AIRPORTS]

    @tool(
        "read",
        description="Search for direct flights between two cities on a specific date.",
        parameters=_SEARCH_DIRECT_FLIGHT,
    )
    def search_direct_flight(self, origin: Any, destination: Any, date: Any) -> list[Record]:
        return self._direct(date=date, origin=origin, destination=destination)

    @tool(
        "read",
        description="Search for one-stop flights between two cities on a specific date.",
        parameters=_SEARCH_ONESTOP_FLIGHT,
    )
    def search_onestop_flight(self, origin: Any, destination: Any, date: Any) -> list[list[Record]]:
        pairs = []
        for first in self._direct(date=date, origin=origin):
            first["date"] = date
            # τ²'s next day: no zero padding ("2024-05-2"), so an overnight first leg before
            # the 9th finds no connection, as there.
            arrival = first["scheduled_arrival_time_est"]
            date2 = f"2024-05-{int(date[-2:]) + 1}" if "+1" in arrival else date
            for second in self._direct(
                date=date2,
                origin=first["destination"],
                destination=destination,
                leave_after=arrival,
            ):
                second["date"] = date2
                pairs.append([first, second])
        return pairs

    @tool(
        "write",
        description="Send a certificate to a user. Be careful!",
        parameters=_SEND_CERTIFICATE,
    )
    def send_certificate(self, user_id: Any, amount: Any) -> str:
        user = self._user(user_id, write=True)
        methods = user["payment_methods"]
        for payment_id in NEW_CERTIFICATE_IDS:
            if payment_id not in methods:
                if (type(amount) is int and abs(amount) < 2**53) or (
                    type(amount) is float and math.isfinite(amount)
                ):
                    value = float(amount)
                else:
                    value = (
                        _models()
                        .Certificate(id=payment_id, amount=amount, source="certificate")
                        .amount
                    )
                methods[payment_id] = {"source": "certificate", "id": payment_id, "amount": value}
                return f"Certificate {payment_id} added to user {user_id} with amount {amount}."
        raise ToolError("Too many certificates")

    @tool(
        "generic",
        description=_TRANSFER_DESCRIPTION,
        parameters=_TRANSFER_TO_HUMAN_AGENTS,
    )
    def transfer_to_human_agents(self, summary: Any) -> str:
        return "Transfer successful"

    @tool(
        "write",
        description="Update the baggage information of a reservation.",
        parameters=_UPDATE_RESERVATION_BAGGAGES,
    )
    def update_reservation_baggages(
        self, reservation_id: Any, total_baggages: Any, nonfree_baggages: Any, payment_id: Any
    ) -> Record:
        reservation = self._reservation(reservation_id, write=True)
        user = self._user(reservation["user_id"], write=True)
        total_price = BAG_FEE * max(0, nonfree_baggages - reservation["nonfree_baggages"])
        payment = self._charge_for_update(user, payment_id, total_price)
        if payment is not None:
            reservation["payment_history"].append(payment)
        # Stored as given: τ² assigns the arguments without validating them.
        reservation["total_baggages"] = total_baggages
        reservation["nonfree_baggages"] = nonfree_baggages
        return Record(reservation)

    @tool(
        "write",
        description="Update the flight information of a reservation.",
        parameters=_UPDATE_RESERVATION_FLIGHTS,
    )
    def update_reservation_flights(
        self, reservation_id: Any, cabin: Any, flights: Any, payment_id: Any
    ) -> Record:
        flights, flights_ok = _as_models(flights, _flight_info)
        reservation = self._reservation(reservation_id, write=True)
        user = self._user(reservation["user_id"], write=True)
        n_passengers = len(reservation["passengers"])
        if not flights_ok:
            _no_attribute(flights, "flight_number")

        total_price = 0
        new_flights = []
        for info in flights:
            number, date = info["flight_number"], info["date"]
            # A segment kept as it is keeps the price paid for it.
            kept = next(
                (
                    f
                    for f in reservation["flights"]
                    if f["flight_number"] == number
                    and f["date"] == date
                    and cabin == reservation["cabin"]
                ),
                None,
            )
            if kept:
                total_price += kept["price"] * n_passengers
                new_flights.append(kept)
                continue
            flight = self._flight(number)
            inst = self._flight_date(number, date)
            if inst["status"] != "available":
                raise ToolError(f"Flight {number} not available on date {date}")
            if inst["available_seats"][cabin] < n_passengers:
                raise ToolError(f"Not enough seats on flight {number}")
            price = inst["prices"][cabin]
            new_flights.append(
                {
                    "flight_number": number,
                    "origin": flight["origin"],
                    "destination": flight["destination"],
                    "date": date,
                    "price": price,
                }
            )
            total_price += price * n_passengers
        total_price -= sum(f["price"] for f in reservation["flights"]) * n_passengers

        payment = self._charge_for_update(user, payment_id, total_price)
        if payment is not None:
            reservation["payment_history"].append(payment)
        reservation["flights"] = new_flights
        reservation["cabin"] = cabin
        # Like τ², no seats are taken or released on a change of flights.
        return Record(reservation)

    @tool(
        "write",
        description="Update the passenger information of a reservation.",
        parameters=_UPDATE_RESERVATION_PASSENGERS,
    )
    def update_reservation_passengers(self, reservation_id: Any, passengers: Any) -> Record:
        passengers, ok = _as_models(passengers, _passenger)
        reservation = self._reservation(reservation_id, write=True)
        if len(passengers) != len(reservation["passengers"]):
            raise ToolError("Number of passengers does not match")
        reservation["passengers"] = passengers if ok else copy.deepcopy(passengers)
        return Record(reservation)

    @tool("read", description="Get the status of a flight.", parameters=_GET_FLIGHT_STATUS)
    def get_flight_status(self, flight_number: Any, date: Any) -> str:
        return self._flight_date(flight_number, date)["status"]


AGENT_KIT: type[ToolKit] = AirlineTools
USER_KIT: type[ToolKit] | None = None


def make_world(domain_dir: Path) -> World:
    """A fresh episode world over the domain folder's db.json (parsed once per process)."""
    return World(AirlineTools(load_json_db(Path(domain_dir) / "db.json", normalize_db)))


policy = read_policy  # policy.md as it stands
