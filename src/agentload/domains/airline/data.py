"""Deterministic generation of the airline database (Skyline Air).

Everything is a pure function of the seed: `random.Random(seed)` drives every choice, and
nothing reads the wall clock (the world's "now" is NOW below). Money is integer dollars so
that hashes never depend on float rounding order.
"""

from __future__ import annotations

import hashlib
import random
from dataclasses import dataclass
from datetime import date, datetime, timedelta

NOW = "2025-06-12T10:00:00"  # the frozen clock, US Eastern Time, as in the policy
FIRST_DATE = date(2025, 6, 1)
LAST_DATE = date(2025, 6, 28)
CABINS = ("basic_economy", "economy", "business")
BAG_FEE = 50
INSURANCE_PER_PASSENGER = 30
# Free checked bags per passenger, by membership then cabin.
FREE_BAGS = {
    "regular": {"basic_economy": 0, "economy": 1, "business": 2},
    "silver": {"basic_economy": 1, "economy": 2, "business": 3},
    "gold": {"basic_economy": 2, "economy": 3, "business": 3},
}

# IATA code -> (city, airport name): public facts.
AIRPORTS = {
    "ATL": ("Atlanta", "Hartsfield-Jackson Atlanta International"),
    "BOS": ("Boston", "Logan International"),
    "ORD": ("Chicago", "O'Hare International"),
    "DFW": ("Dallas", "Dallas/Fort Worth International"),
    "DEN": ("Denver", "Denver International"),
    "DTW": ("Detroit", "Detroit Metropolitan Wayne County"),
    "IAH": ("Houston", "George Bush Intercontinental"),
    "LAS": ("Las Vegas", "Harry Reid International"),
    "LAX": ("Los Angeles", "Los Angeles International"),
    "MIA": ("Miami", "Miami International"),
    "MSP": ("Minneapolis", "Minneapolis-Saint Paul International"),
    "JFK": ("New York", "John F. Kennedy International"),
    "EWR": ("Newark", "Newark Liberty International"),
    "MCO": ("Orlando", "Orlando International"),
    "PHL": ("Philadelphia", "Philadelphia International"),
    "PHX": ("Phoenix", "Phoenix Sky Harbor International"),
    "PDX": ("Portland", "Portland International"),
    "SFO": ("San Francisco", "San Francisco International"),
    "SEA": ("Seattle", "Seattle-Tacoma International"),
    "SLC": ("Salt Lake City", "Salt Lake City International"),
}

FIRST_NAMES = [
    "Ava",
    "Liam",
    "Noah",
    "Emma",
    "Olivia",
    "Mateo",
    "Sofia",
    "Ethan",
    "Mia",
    "Lucas",
    "Amara",
    "Kenji",
    "Priya",
    "Omar",
    "Chloe",
    "Diego",
    "Hannah",
    "Yusuf",
    "Leah",
    "Ivan",
    "Grace",
    "Tomas",
    "Nora",
    "Ravi",
    "Isla",
    "Felix",
    "Zara",
    "Hugo",
    "Maya",
    "Elias",
    "Ines",
    "Jonah",
    "Lena",
    "Arjun",
    "Clara",
    "Malik",
    "Rosa",
    "Theo",
    "Aisha",
    "Owen",
    "Mei",
    "Samir",
    "Julia",
    "Marco",
    "Naomi",
    "Pablo",
    "Freya",
    "Kofi",
]
LAST_NAMES = [
    "Lopez",
    "Chen",
    "Patel",
    "Okafor",
    "Schmidt",
    "Rossi",
    "Kim",
    "Nguyen",
    "Garcia",
    "Silva",
    "Novak",
    "Haddad",
    "Johansson",
    "Moreau",
    "Tanaka",
    "Mensah",
    "Kowalski",
    "Ibrahim",
    "Fischer",
    "Costa",
    "Murphy",
    "Larsen",
    "Sato",
    "Reyes",
    "Dubois",
    "Hughes",
    "Park",
    "Alvarez",
    "Becker",
    "Khan",
    "Ortiz",
    "Wright",
    "Meyer",
    "Ferreira",
    "Yilmaz",
    "Lindqvist",
]
STREETS = [
    "Maple",
    "Oak",
    "Cedar",
    "Pine",
    "Elm",
    "Willow",
    "Birch",
    "Lake",
    "Hill",
    "River",
    "Park",
    "Sunset",
]
CITIES = (
    ("Austin", "TX", "787"),
    ("Columbus", "OH", "432"),
    ("Denver", "CO", "802"),
    ("Raleigh", "NC", "276"),
    ("Tucson", "AZ", "857"),
    ("Madison", "WI", "537"),
    ("Boise", "ID", "837"),
    ("Richmond", "VA", "232"),
)

N_USERS = 150
# Directed routes drawn from the full graph; each gets one or two flights a day.
N_ROUTE_PAIRS = 45
_ALPHABET = "ABCDEFGHJKLMNPQRSTUVWXYZ23456789"


def reservation_id(n: int) -> str:
    """The n-th reservation id: six characters, a fixed function of n (unique in practice
    and checked at generation time)."""
    digest = hashlib.sha256(f"skyline-reservation-{n}".encode()).digest()
    return "".join(_ALPHABET[b % len(_ALPHABET)] for b in digest[:6])


def payment_id(kind: str, n: int, namespace: str = "skyline") -> str:
    digest = hashlib.sha256(f"{namespace}-{kind}-{n}".encode()).hexdigest()
    return f"{kind}_{int(digest[:10], 16) % 9_000_000 + 1_000_000}"


def dates() -> list[str]:
    days = (LAST_DATE - FIRST_DATE).days + 1
    return [(FIRST_DATE + timedelta(days=i)).isoformat() for i in range(days)]


def _hhmm(minutes: int) -> str:
    return f"{minutes // 60:02d}:{minutes % 60:02d}"


def departure_datetime(day: str, hhmm: str) -> str:
    return f"{day}T{hhmm}:00"


def _make_flights(rng: random.Random) -> dict:
    codes = sorted(AIRPORTS)
    pairs: set[tuple[str, str]] = set()
    # A connected backbone through three hubs, then random extra pairs.
    for hub in ("ORD", "DFW", "DEN"):
        for c in codes:
            if c != hub and rng.random() < 0.45:
                pairs.add(tuple(sorted((hub, c))))  # type: ignore[arg-type]
    while len(pairs) < N_ROUTE_PAIRS:
        a, b = rng.sample(codes, 2)
        pairs.add(tuple(sorted((a, b))))  # type: ignore[arg-type]

    flights: dict = {}
    numbers = rng.sample(range(100, 1000), 4 * N_ROUTE_PAIRS + 40)
    now = datetime.fromisoformat(NOW)
    all_days = dates()
    for a, b in sorted(pairs):
        duration = rng.randrange(70, 330, 5)
        base = {c: 0 for c in CABINS}
        base["economy"] = 80 + duration // 2 + rng.randrange(0, 80)
        base["basic_economy"] = int(base["economy"] * 0.7)
        base["business"] = base["economy"] * 3 + rng.randrange(0, 120)
        for origin, dest in ((a, b), (b, a)):
            for _ in range(rng.choice((1, 1, 2))):
                dep = rng.randrange(6 * 60, 18 * 60, 5)
                number = f"SK{numbers.pop()}"
                per_day = {}
                for day in all_days:
                    dep_at = datetime.fromisoformat(departure_datetime(day, _hhmm(dep)))
                    arr_at = dep_at + timedelta(minutes=duration)
                    roll = rng.random()
                    if arr_at <= now:
                        status = "cancelled" if roll < 0.03 else "landed"
                    elif dep_at <= now:
                        status = "departed"
                    elif roll < 0.05:
                        status = "cancelled"
                    elif roll < 0.13:
                        status = "delayed"
                    else:
                        status = "scheduled"
                    inst = {
                        "status": status,
                        "available_seats": {
                            "basic_economy": rng.randrange(0, 12),
                            "economy": rng.randrange(0, 30),
                            "business": rng.randrange(0, 8),
                        },
                        "prices": {c: base[c] + rng.randrange(0, base[c] // 3 + 1) for c in CABINS},
                    }
                    if status == "delayed":
                        inst["estimated_departure"] = departure_datetime(
                            day, _hhmm(dep + rng.randrange(30, 240, 5))
                        )
                    per_day[day] = inst
                flights[number] = {
                    "flight_number": number,
                    "origin": origin,
                    "destination": dest,
                    "departure_time": _hhmm(dep),
                    "arrival_time": _hhmm(dep + duration),
                    "dates": per_day,
                }
    return dict(sorted(flights.items()))


def _routes(flights: dict) -> dict[tuple[str, str], list[str]]:
    routes: dict[tuple[str, str], list[str]] = {}
    for f in flights.values():
        routes.setdefault((f["origin"], f["destination"]), []).append(f["flight_number"])
    return routes


def _make_users(rng: random.Random) -> dict:
    users: dict = {}
    pay_n = 0
    while len(users) < N_USERS:
        first, last = rng.choice(FIRST_NAMES), rng.choice(LAST_NAMES)
        uid = f"{first.lower()}_{last.lower()}_{rng.randrange(1000, 10000)}"
        if uid in users:
            continue
        city, state, zip3 = rng.choice(CITIES)
        methods: dict = {}
        for _ in range(rng.choice((1, 1, 2))):
            pay_n += 1
            pid = payment_id("credit_card", pay_n)
            methods[pid] = {
                "id": pid,
                "source": "credit_card",
                "brand": rng.choice(("visa", "mastercard", "amex")),
                "last_four": f"{rng.randrange(0, 10000):04d}",
            }
        if rng.random() < 0.5:
            pay_n += 1
            pid = payment_id("gift_card", pay_n)
            methods[pid] = {"id": pid, "source": "gift_card", "balance": rng.randrange(20, 400)}
        for _ in range(rng.choice((0, 0, 1, 2))):
            pay_n += 1
            pid = payment_id("certificate", pay_n)
            methods[pid] = {
                "id": pid,
                "source": "certificate",
                "amount": rng.choice((50, 100, 150, 250, 500)),
            }
        saved = []
        for _ in range(rng.choice((0, 1, 1, 2))):
            saved.append(
                {
                    "first_name": rng.choice(FIRST_NAMES),
                    "last_name": rng.choice((last, rng.choice(LAST_NAMES))),
                    "dob": f"{rng.randrange(1950, 2015)}-{rng.randrange(1, 13):02d}-"
                    f"{rng.randrange(1, 29):02d}",
                }
            )
        users[uid] = {
            "user_id": uid,
            "name": {"first_name": first, "last_name": last},
            "email": f"{first.lower()}.{last.lower()}{rng.randrange(10, 100)}@example.com",
            "dob": f"{rng.randrange(1950, 2005)}-{rng.randrange(1, 13):02d}-"
            f"{rng.randrange(1, 29):02d}",
            "address": {
                "street": f"{rng.randrange(10, 9999)} {rng.choice(STREETS)} St",
                "city": city,
                "state": state,
                "zip": f"{zip3}{rng.randrange(0, 100):02d}",
                "country": "USA",
            },
            "membership": rng.choices(("regular", "silver", "gold"), (6, 3, 2))[0],
            "payment_methods": methods,
            "saved_passengers": saved,
            "reservations": [],
        }
    return users


@dataclass(frozen=True)
class _Network:
    """What every booking draws from: the routes, their flights and the bookable days."""

    flights: dict
    routes: dict[tuple[str, str], list[str]]
    route_keys: list[tuple[str, str]]
    days: list[str]
    now: datetime


def _make_reservations(rng: random.Random, users: dict, flights: dict) -> tuple[dict, int]:
    routes = _routes(flights)
    net = _Network(flights, routes, sorted(routes), dates(), datetime.fromisoformat(NOW))
    reservations: dict = {}
    n = 0
    for uid in sorted(users):
        user = users[uid]
        for _ in range(rng.choice((1, 2, 2, 3, 4))):
            n += 1
            rid = reservation_id(n)
            assert rid not in reservations, rid
            reservations[rid] = _reservation(rng, net, rid, user)
            user["reservations"].append(rid)
    return reservations, n


def _reservation(rng: random.Random, net: _Network, rid: str, user: dict) -> dict:
    # The order of the draws below is part of the database: changing it changes every
    # generated reservation (and data_version must then change).
    origin, dest, trip, legs = _itinerary(rng, net)
    cabin = rng.choices(CABINS, (3, 5, 2))[0]
    pax = _passengers(rng, user)
    first_dep = datetime.fromisoformat(
        departure_datetime(legs[0][1], net.flights[legs[0][0]]["departure_time"])
    )
    created = _booking_time(rng, first_dep, net.now)
    segs = [_segment(net.flights[number], number, day, cabin) for number, day in legs]
    insurance = rng.random() < 0.3
    free = FREE_BAGS[user["membership"]][cabin] * len(pax)
    total_bags = rng.randrange(0, len(pax) * 2 + 1)
    nonfree = max(0, total_bags - free)
    amount = (
        sum(s["price"] for s in segs) * len(pax)
        + (INSURANCE_PER_PASSENGER * len(pax) if insurance else 0)
        + nonfree * BAG_FEE
    )
    cards = [m for m in user["payment_methods"].values() if m["source"] == "credit_card"]
    return {
        "reservation_id": rid,
        "user_id": user["user_id"],
        "origin": origin,
        "destination": dest,
        "trip_type": trip,
        "cabin": cabin,
        "flights": segs,
        "passengers": pax,
        "payment_history": [{"payment_id": rng.choice(cards)["id"], "amount": amount}],
        "created_at": created.replace(microsecond=0).isoformat(),
        "total_baggages": total_bags,
        "nonfree_baggages": nonfree,
        "insurance": insurance,
        "status": "cancelled" if rng.random() < 0.05 else "active",
    }


def _itinerary(rng: random.Random, net: _Network) -> tuple[str, str, str, list[tuple[str, str]]]:
    """(origin, destination, trip type, [(flight number, day)]) of one booking."""
    origin, dest = rng.choice(net.route_keys)
    routes, days = net.routes, net.days
    trip = "round_trip" if rng.random() < 0.5 and (dest, origin) in routes else "one_way"
    out_i = rng.randrange(0, len(days) - 3)
    legs = [(rng.choice(routes[(origin, dest)]), days[out_i])]
    if trip == "round_trip":
        back_i = min(len(days) - 1, out_i + rng.randrange(1, 6))
        legs.append((rng.choice(routes[(dest, origin)]), days[back_i]))
    return origin, dest, trip, legs


def _passengers(rng: random.Random, user: dict) -> list[dict]:
    """The user, and each saved passenger with probability 0.4."""
    pax = [
        {
            "first_name": user["name"]["first_name"],
            "last_name": user["name"]["last_name"],
            "dob": user["dob"],
        }
    ]
    for p in user["saved_passengers"]:
        if rng.random() < 0.4:
            pax.append(dict(p))
    return pax


def _booking_time(rng: random.Random, first_dep: datetime, now: datetime) -> datetime:
    # Booked 1-40 days before the first flight, never after "now"; about one in
    # twelve booked within the last day (the 24-hour cancellation window).
    if rng.random() < 0.08 and first_dep > now:
        return now - timedelta(hours=rng.randrange(1, 20))
    return min(first_dep, now) - timedelta(days=rng.randrange(1, 41), hours=rng.randrange(0, 24))


def _segment(flight: dict, number: str, day: str, cabin: str) -> dict:
    return {
        "flight_number": number,
        "origin": flight["origin"],
        "destination": flight["destination"],
        "date": day,
        "price": flight["dates"][day]["prices"][cabin],
    }


def make_db(seed: int = 0) -> dict:
    rng = random.Random(seed)
    flights = _make_flights(rng)
    users = _make_users(rng)
    reservations, n = _make_reservations(rng, users, flights)
    return {
        "meta": {
            "airline": "Skyline Air",
            "now": NOW,
            "timezone": "US Eastern Time",
            "reservations_issued": n,
            "certificates_issued": 0,
        },
        "airports": {
            code: {"code": code, "city": city, "name": name}
            for code, (city, name) in AIRPORTS.items()
        },
        "flights": flights,
        "users": users,
        "reservations": reservations,
    }
